//! The acting loop, on its own OS thread: step M envs with the local policy, record rollouts,
//! hand them to the inserter, and take new weights at rollout boundaries.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetrl_core::broadcast::Received;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::Episode;
use fleetrl_core::items::rollout::RolloutBuilder;
use fleetrl_core::models::ActorCritic;
use fleetrl_proto::TensorMap;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::demo_replay::{Collector, DemoLink};
use crate::metrics::ActorMetrics;

/// Episodes and steps since the last report, filled here and drained by the reporter.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) episodes: Vec<Episode>,
    pub(crate) env_steps: u64,
}

/// What the acting thread needs.
pub(crate) struct Runner {
    pub(crate) actor_id: u32,
    pub(crate) config: RunConfig,
    pub(crate) weights: watch::Receiver<Option<Arc<Received>>>,
    pub(crate) rollouts: mpsc::Sender<TensorMap>,
    pub(crate) progress: Arc<Mutex<Progress>>,
    /// Turns true when the actor should finish its rollout and stop.
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) metrics: Arc<ActorMetrics>,
    /// Weights received but not yet acted with (`actors.lag_versions`), oldest first.
    pub(crate) held: VecDeque<Arc<Received>>,
    /// The demo buffers to replay from (PPO+D), when `[ppod] enabled`.
    pub(crate) demos: Option<DemoLink>,
}

impl Runner {
    /// Acts until `stop` is set or the inserter goes away.
    pub(crate) fn run(mut self) -> anyhow::Result<()> {
        let actors = &self.config.actors;
        let (t, m) = (
            actors.rollout_length as usize,
            actors.envs_per_actor as usize,
        );
        let envs = fleetrl_core::envs::make_vec(&self.config.env, m)?;
        let obs_dim = envs.obs_dim();
        let mut model = ActorCritic::new(
            &self.config.model,
            envs.observation_space(),
            envs.action_space(),
            tch::Device::Cpu,
        )?;
        tch::manual_seed((self.config.seed + 7919 * self.actor_id as u64) as i64);
        let seed = self.config.seed + 1000 * self.actor_id as u64;
        let link = self.demos.take();
        let mut acting = Collector::new(envs, &self.config.env.id, seed, link);
        let mut builder = RolloutBuilder::new(t, m, obs_dim);
        let mut version = self.wait_for_weights(&mut model)?;
        // Versions that acted in this actor's recent rollouts (its share of the last
        // `max_policy_lag + 1` batches), oldest first.
        let mut recent = VecDeque::new();
        tracing::info!(actor_id = self.actor_id, version, envs = m, "acting");
        while !*self.stop.borrow() {
            let span = tracing::debug_span!(
                "rollout",
                actor_id = self.actor_id,
                policy_version = version
            );
            let bootstrap = span.in_scope(|| acting.collect(&model, &mut builder))?;
            let item = builder.finish(&bootstrap, version);
            self.report(acting.envs_mut().drain_episodes(), (t * m) as u64, version);
            if self.rollouts.blocking_send(item).is_err() {
                break;
            }
            recent.push_back(version);
            let window =
                self.rollouts_per_version() * (self.config.actors.max_policy_lag as usize + 1);
            while recent.len() > window {
                recent.pop_front();
            }
            if recent.len() == window {
                self.wait_for_newer(recent[0]);
            }
            version = self.refresh_weights(&mut model, version)?;
        }
        Ok(())
    }

    fn report(&self, episodes: Vec<Episode>, env_steps: u64, acted: i64) {
        let newest = self.weights.borrow().as_ref().map_or(acted, |w| w.version);
        self.metrics
            .record_rollout(env_steps, &episodes, acted, newest);
        let mut progress = self.progress.lock().expect("progress lock poisoned");
        progress.episodes.extend(episodes);
        progress.env_steps += env_steps;
    }

    /// This actor's share of a batch: the learner needs `batch_rollouts` rollouts per version
    /// and the connected actors split them, so a lone actor fills whole batches by itself.
    fn rollouts_per_version(&self) -> usize {
        let actors = self
            .weights
            .borrow()
            .as_ref()
            .map_or(1, |w| w.subscribers.max(1));
        self.config.learner.batch_rollouts.div_ceil(actors) as usize
    }

    /// Blocks until the first weights arrive.
    fn wait_for_weights(&mut self, model: &mut ActorCritic) -> anyhow::Result<i64> {
        loop {
            if let Some(w) = self.weights.borrow_and_update().clone() {
                return self
                    .metrics
                    .apply_weights(&w, |tensors| model.load_named(tensors));
            }
            if *self.stop.borrow() {
                anyhow::bail!("stopped before the first weights arrived");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Blocks until weights newer than `version` are published, or the sync timeout passes.
    fn wait_for_newer(&mut self, version: i64) {
        let timeout = Duration::from_secs_f64(self.config.actors.sync_timeout_s.max(0.0));
        let mut stop = self.stop.clone();
        let weights = &mut self.weights;
        let waited = Handle::current().block_on(async move {
            let newer = weights.wait_for(|w| w.as_ref().is_some_and(|w| w.version > version));
            tokio::select! {
                result = tokio::time::timeout(timeout, newer) => result.is_ok(),
                _ = stop.wait_for(|stop| *stop) => true,
            }
        });
        if !waited {
            tracing::debug!(
                actor_id = self.actor_id,
                version,
                "no new weights in time; acting with the old ones"
            );
        }
    }

    /// Loads the newest published weights that are at least `actors.lag_versions` versions
    /// older than the newest received (the oldest held while none is that old yet), if newer
    /// than `version`.
    fn refresh_weights(&mut self, model: &mut ActorCritic, version: i64) -> anyhow::Result<i64> {
        if let Some(w) = self.weights.borrow_and_update().clone() {
            if self.held.back().is_none_or(|h| w.version > h.version) {
                self.held.push_back(w);
            }
        }
        let Some(newest) = self.held.back().map(|w| w.version) else {
            return Ok(version);
        };
        let old_enough = newest - self.config.actors.lag_versions as i64;
        while self.held.len() > 1 && self.held[1].version <= old_enough {
            self.held.pop_front();
        }
        let w = self.held.front().expect("at least one held").clone();
        if w.version <= version {
            return Ok(version);
        }
        self.metrics
            .apply_weights(&w, |tensors| model.load_named(tensors))
    }
}
