//! The `fleetrl.v1.DemoService` handlers: PPO+D's demo buffers (`crate::buffers::demos`)
//! behind one lock, configured by the first actor that joins, saved with every checkpoint
//! into `<checkpoint-dir>/demos` and restored from there.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::buffers::demos::{self, DemoStore, DemoStoreConfig};
use fleetrl_proto::space::Space;
use fleetrl_proto::v1::demo_service_server::DemoService;
use fleetrl_proto::v1::{
    self as pb, ConfigureDemosRequest, DemoState, DemoStateRequest, OfferDemosRequest,
    SyncDemosRequest, SyncDemosResponse,
};
use fleetrl_runtime::confine::{ConfineError, Root};
use fleetrl_runtime::demo::{self, Demo, DemoError, DemoKind};
use tonic::{Request, Response, Status};

use crate::error::ServiceError;
use tracing::{error, info, warn};

/// A configured store and what it was configured with.
#[derive(Debug)]
struct Active {
    store: DemoStore,
    ppod: pb::DemoBuffersSpec,
    env_id: String,
    obs: Space,
    action: Space,
}

impl Active {
    fn check(&self, demo: &Demo) -> Result<(), DemoError> {
        demo.check_env(&self.env_id, &self.obs, &self.action)
    }

    fn state(&self) -> DemoState {
        let s = self.store.stats();
        DemoState {
            rho: s.rho,
            phi: s.phi,
            reward_threshold: s.reward_threshold,
            initial_demos: s.initial as u32,
            agent_demos: s.agent as u32,
            value_demos: s.value as u32,
            successes: s.successes,
            generation: s.generation,
            alpha: self.ppod.alpha,
        }
    }
}

/// The demo buffers of one server, shared by the service and the checkpointer.
#[derive(Debug, Default)]
pub(crate) struct DemoHub {
    active: Mutex<Option<Active>>,
    checkpoint_dir: Option<PathBuf>,
    demos_root: Option<Root>,
}

/// The client's `ppod.<field>` directory under the demos root, looked up by `how`
/// ([`Root::resolve`] or [`Root::create`]); `None` for an empty name (no such directory).
fn demo_dir(
    root: Option<&Root>,
    field: &'static str,
    requested: &str,
    how: fn(&Root, &str) -> Result<PathBuf, ConfineError>,
) -> Result<Option<PathBuf>, ServiceError> {
    if requested.is_empty() {
        return Ok(None);
    }
    let root = root.ok_or(ServiceError::NoDemosRoot)?;
    how(root, requested)
        .map(Some)
        .map_err(|source| ServiceError::DemoDir { field, source })
}

/// Refuses a spec naming a directory outside the demos root before anything is read.
fn check_dirs(root: Option<&Root>, ppod: &pb::DemoBuffersSpec) -> Result<(), ServiceError> {
    let dirs = [
        ("demos_dir", &ppod.demos_dir),
        ("initial_agent_demos_dir", &ppod.initial_agent_demos_dir),
        ("supplementary_dir", &ppod.supplementary_dir),
        ("target_dir", &ppod.target_dir),
    ];
    for (field, requested) in dirs {
        demo_dir(root, field, requested, Root::resolve)?;
    }
    Ok(())
}

/// Every demo file in the client's `ppod.<field>` directory (none for an empty name).
fn read_demos(
    root: Option<&Root>,
    field: &'static str,
    requested: &str,
) -> Result<Vec<Demo>, ServiceError> {
    match demo_dir(root, field, requested, Root::resolve)? {
        Some(dir) => Ok(demo::read_dir(&dir)?),
        None => Ok(Vec::new()),
    }
}

fn invalid(why: impl Into<String>) -> ServiceError {
    ServiceError::InvalidRequest(why.into())
}

impl DemoHub {
    /// Buffers that restore from and save to `<checkpoint_dir>/demos`, if given, and read
    /// and write the demo directories clients name under `demos_root` only.
    pub(crate) fn new(checkpoint_dir: Option<PathBuf>, demos_root: Option<Root>) -> DemoHub {
        DemoHub {
            active: Mutex::default(),
            checkpoint_dir,
            demos_root,
        }
    }

    /// The buffers, also after a panic while they were held: a panic here is a server bug,
    /// and one bad request must not leave every later demo call and checkpoint panicking on
    /// a poisoned lock (requests parse their input before they take it). The store may then
    /// hold a half-applied offer, which costs sampling weight, not a run.
    fn lock(&self) -> MutexGuard<'_, Option<Active>> {
        self.active.lock().unwrap_or_else(|poisoned| {
            error!("a demo request panicked while it held the demo buffers; continuing");
            self.active.clear_poison();
            poisoned.into_inner()
        })
    }

    fn saved_dir(root: &Path) -> PathBuf {
        root.join("demos")
    }

    /// Writes the buffers into `<root>/demos` (nothing before Configure).
    pub(crate) fn save(&self, root: &Path) -> anyhow::Result<()> {
        let active = self.lock();
        if let Some(active) = active.as_ref() {
            demos::save(&active.store, &Self::saved_dir(root))?;
        }
        Ok(())
    }

    fn configure(&self, ppod: pb::DemoBuffersSpec) -> Result<DemoState, ServiceError> {
        let mut active = self.lock();
        if let Some(a) = active.as_ref() {
            if a.env_id != ppod.env_id {
                return Err(ServiceError::DemosConfiguredFor {
                    configured: a.env_id.clone(),
                    requested: ppod.env_id,
                });
            }
            return Ok(a.state());
        }
        let root = self.demos_root.as_ref();
        check_dirs(root, &ppod)?;
        let space = |which: &str, space: &Option<pb::Space>| {
            space
                .as_ref()
                .ok_or_else(|| invalid(format!("the {which} space is missing")))
                .and_then(|s| Space::try_from(s).map_err(|e| invalid(format!("{which}: {e}"))))
        };
        let obs = space("observation", &ppod.observation_space)?;
        let action = space("action", &ppod.action_space)?;
        let store_config = DemoStoreConfig {
            capacity: ppod.capacity as usize,
            rho: ppod.rho,
            phi: ppod.phi,
            anneal_steps: ppod.anneal_steps as usize,
            reward_threshold: ppod.reward_threshold,
        };
        let restored = match &self.checkpoint_dir {
            Some(root) => demos::load(&Self::saved_dir(root), store_config.clone())
                .map_err(|e| ServiceError::Internal(format!("restoring demo buffers: {e}")))?,
            None => None,
        };
        let mut next = Active {
            store: DemoStore::new(store_config.clone(), Vec::new())?,
            env_id: ppod.env_id.clone(),
            ppod,
            obs,
            action,
        };
        next.store = match restored {
            Some(store) => {
                info!(stats = ?store.stats(), "restored demo buffers from checkpoint");
                store
            }
            None => {
                let initial = read_demos(root, "demos_dir", &next.ppod.demos_dir)?;
                let agent = read_demos(
                    root,
                    "initial_agent_demos_dir",
                    &next.ppod.initial_agent_demos_dir,
                )?;
                for d in initial.iter().chain(&agent) {
                    next.check(d)?;
                }
                DemoStore::new(store_config, initial)?.with_agent_demos(agent)?
            }
        };
        info!(env = %next.env_id, stats = ?next.store.stats(), "demo buffers configured");
        let state = next.state();
        *active = Some(next);
        Ok(state)
    }

    fn with_active<T>(
        &self,
        f: impl FnOnce(&mut Active) -> Result<T, ServiceError>,
    ) -> Result<T, ServiceError> {
        let mut active = self.lock();
        let active = active.as_mut().ok_or(ServiceError::DemosNotConfigured)?;
        f(active)
    }
}

/// Saves the top agent reward demos (`top-NN`) and value demos (`value-NN`) to
/// `ppod.target_dir`, and reads new supplementary demos. Both directories are looked up
/// under the demos root again each time: a link made since Configure leads nowhere else.
fn housekeeping(a: &mut Active, root: Option<&Root>) {
    let target = demo_dir(root, "target_dir", &a.ppod.target_dir, Root::create);
    if let Err(error) = &target {
        warn!(%error, "the top demos are not saved");
    }
    if let Ok(Some(dir)) = target {
        if let Err(error) = save_top(a, &dir) {
            warn!(%error, dir = %dir.display(), "saving the top demos failed");
        }
    }
    let files = match demo_dir(
        root,
        "supplementary_dir",
        &a.ppod.supplementary_dir,
        Root::resolve,
    ) {
        Ok(None) => return,
        Ok(Some(dir)) => demo::list(&dir).map_err(ServiceError::from),
        Err(error) => Err(error),
    };
    let files = match files {
        Ok(files) => files,
        Err(error) => {
            warn!(%error, "reading the supplementary demo directory failed");
            return;
        }
    };
    for path in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name.filter(|n| !a.store.has_seen(n)) else {
            continue;
        };
        let read = demo::read(&path).and_then(|d| {
            a.check(&d)?;
            Ok(d)
        });
        let outcome = match read {
            Ok(d) => a.store.offer_supplementary(&name, d),
            Err(e) => {
                // Remember it anyway: a bad file is reported once, not every scan.
                a.store.mark_seen(&name);
                Err(e)
            }
        };
        match outcome {
            Ok(admission) => info!(file = %path.display(), ?admission, "supplementary demo read"),
            Err(error) => warn!(file = %path.display(), %error, "supplementary demo refused"),
        }
    }
}

/// Writes the `save_top_k` best agent reward and value demos into `dir`.
fn save_top(a: &Active, dir: &Path) -> Result<(), DemoError> {
    let k = a.ppod.save_top_k as usize;
    let ranked = [
        ("top", a.store.top_agent_demos(k)),
        ("value", a.store.top_value_demos(k)),
    ];
    for (prefix, top) in ranked {
        for (rank, d) in top.iter().enumerate() {
            let path = dir.join(format!("{prefix}-{rank:02}{}", demo::EXTENSION));
            demo::write(&d.demo, &path)?;
        }
    }
    Ok(())
}

/// The `DemoService` implementation.
#[derive(Debug, Clone)]
pub(crate) struct Demos {
    pub(crate) hub: Arc<DemoHub>,
}

#[tonic::async_trait]
impl DemoService for Demos {
    async fn configure(
        &self,
        request: Request<ConfigureDemosRequest>,
    ) -> Result<Response<DemoState>, Status> {
        let spec = request
            .into_inner()
            .spec
            .ok_or_else(|| invalid("the Configure request has no spec"))?;
        let hub = self.hub.clone();
        let state = tokio::task::spawn_blocking(move || hub.configure(spec))
            .await
            .map_err(crate::error::task_failed)??;
        Ok(Response::new(state))
    }

    async fn state(
        &self,
        _request: Request<DemoStateRequest>,
    ) -> Result<Response<DemoState>, Status> {
        Ok(self.hub.with_active(|a| Ok(Response::new(a.state())))?)
    }

    async fn sync(
        &self,
        request: Request<SyncDemosRequest>,
    ) -> Result<Response<SyncDemosResponse>, Status> {
        let known = request.into_inner().known_generation;
        let response = self.hub.with_active(|a| {
            let state = a.state();
            let changed = known != state.generation;
            let mut demos = Vec::new();
            if changed {
                for d in a.store.demos() {
                    demos.push(pb::StoredDemo {
                        id: d.id,
                        kind: match d.kind {
                            DemoKind::Initial => pb::DemoKind::Initial,
                            DemoKind::Agent => pb::DemoKind::Agent,
                            DemoKind::Value => pb::DemoKind::Value,
                        } as i32,
                        max_value: d.max_value,
                        demo: d
                            .demo
                            .to_bytes()
                            .map_err(|e| ServiceError::Internal(e.to_string()))?,
                    });
                }
            }
            Ok(Response::new(SyncDemosResponse {
                state: Some(state),
                changed,
                demos,
            }))
        })?;
        Ok(response)
    }

    async fn offer(
        &self,
        request: Request<OfferDemosRequest>,
    ) -> Result<Response<DemoState>, Status> {
        let request = request.into_inner();
        let hub = self.hub.clone();
        let state = tokio::task::spawn_blocking(move || {
            // Parsed before the lock is taken: the bytes come from the network.
            let mut episodes = Vec::with_capacity(request.candidates.len());
            for c in &request.candidates {
                let d = Demo::from_bytes(&c.demo, Path::new("<offered episode>"))?;
                episodes.push((d, c.max_value));
            }
            hub.with_active(|a| {
                for (d, _) in &episodes {
                    a.check(d)?;
                }
                for (d, max_value) in episodes {
                    a.store.offer(d, max_value)?;
                }
                for r in &request.refreshes {
                    a.store.refresh_value(r.id, r.max_value);
                }
                if a.store.tick_collection(u64::from(a.ppod.save_every)) {
                    housekeeping(a, hub.demos_root.as_ref());
                }
                Ok(a.state())
            })
        })
        .await
        .map_err(crate::error::task_failed)??;
        Ok(Response::new(state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetrl_runtime::demo::DemoSource;

    fn scripted(seed: u64, source: DemoSource) -> Demo {
        fleetrl_core::acting::scripted::play("SparseMountainCar-v0", seed, source).unwrap()
    }

    /// A panic while the buffers are held (a server bug) leaves no poisoned lock behind to
    /// fail every later demo call and the replay checkpoint's save.
    #[test]
    fn a_panic_holding_the_buffers_does_not_fail_later_calls() {
        let hub = Arc::new(DemoHub::new(None, None));
        let held = hub.clone();
        let panicked = std::thread::spawn(move || {
            let _buffers = held.lock();
            panic!("a bug while the demo buffers are held");
        })
        .join();
        assert!(panicked.is_err());
        let later = hub.with_active(|_| Ok(()));
        assert!(
            matches!(later, Err(ServiceError::DemosNotConfigured)),
            "{later:?}"
        );
        hub.save(&std::env::temp_dir()).unwrap();
    }

    /// Every `save_every` offers the server reads new supplementary demos (once each, a bad
    /// file included) and saves the top agent demos to the target directory.
    #[tokio::test]
    async fn housekeeping_reads_supplementary_demos_and_saves_the_top_ones() {
        let dir = std::env::temp_dir().join(format!("fleetrl-demo-hub-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (initial, extra, target) = (dir.join("initial"), dir.join("extra"), dir.join("top"));
        std::fs::create_dir_all(&initial).unwrap();
        std::fs::create_dir_all(&extra).unwrap();
        let name = |n: &str| format!("{n}{}", demo::EXTENSION);
        demo::write(&scripted(5, DemoSource::Human), &initial.join(name("h"))).unwrap();
        let mut ppod = fleetrl_core::config::PpodConfig {
            enabled: true,
            save_every: 2,
            save_top_k: 1,
            ..Default::default()
        };
        ppod.demos_dir = initial.display().to_string();
        ppod.supplementary_dir = extra.display().to_string();
        ppod.target_dir = target.display().to_string();
        let env = fleetrl_core::envs::make("SparseMountainCar-v0").unwrap();
        let spec = ppod.buffers_spec(
            "SparseMountainCar-v0",
            &env.observation_space(),
            &env.action_space(),
        );
        let demos = Demos {
            hub: Arc::new(DemoHub::new(
                None,
                Some(Root::new(&dir, "--demos-root").unwrap()),
            )),
        };
        let offer = || Request::new(OfferDemosRequest::default());
        assert!(demos.offer(offer()).await.is_err(), "not configured yet");
        let state = demos
            .configure(Request::new(ConfigureDemosRequest { spec: Some(spec) }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(state.initial_demos, 1);
        demo::write(&scripted(7, DemoSource::Human), &extra.join(name("a"))).unwrap();
        std::fs::write(extra.join(name("broken")), b"junk").unwrap();
        // An agent episode that missed the goal: a value demo, saved beside the reward demos.
        let mut missed = scripted(9, DemoSource::Agent);
        missed.rewards.fill(0.0);
        missed.terminated = false;
        let candidate = pb::CandidateDemo {
            demo: missed.to_bytes().unwrap(),
            max_value: 0.7,
        };
        let first = demos
            .offer(Request::new(OfferDemosRequest {
                candidates: vec![candidate],
                refreshes: Vec::new(),
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (first.agent_demos, first.value_demos),
            (0, 1),
            "not due yet"
        );
        let second = demos.offer(offer()).await.unwrap().into_inner();
        assert_eq!(second.agent_demos, 1, "{second:?}");
        assert_eq!(second.successes, 1);
        // Saved at the next due collection; files already read are not read again.
        demos.offer(offer()).await.unwrap();
        let fourth = demos.offer(offer()).await.unwrap().into_inner();
        assert_eq!(fourth.agent_demos, 1);
        let saved = demo::read_dir(&target).unwrap();
        assert_eq!(saved.len(), 2);
        let top = demo::read(&target.join(name("top-00"))).unwrap();
        assert_eq!(top, scripted(7, DemoSource::Human));
        let value = demo::read(&target.join(name("value-00"))).unwrap();
        assert_eq!(value, missed);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
