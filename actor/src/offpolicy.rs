//! The off-policy acting loop, on its own OS thread: step M envs with the current policy plus
//! exploration, turn each env's steps into n-step transitions, and hand them to the inserter
//! one transition per item. Weights are taken whenever a new version is published (checked
//! every step: off-policy actors never wait for the learner; the replay server's rate limiter
//! paces them). BC with an expert checkpoint plays the expert instead and labels each
//! transition with the expert's action.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use fleetrl_core::acting::exploration::Explorer;
use fleetrl_core::acting::policy_loader::load_policy;
use fleetrl_core::algos::registry::build_model;
use fleetrl_core::broadcast::Received;
use fleetrl_core::config::{AlgoConfig, Exploration, RunConfig};
use fleetrl_core::envs::VecEnv;
use fleetrl_core::items::rollout::Actions;
use fleetrl_core::items::transition::{NStep, StepIn};
use fleetrl_core::models::{OffPolicyModel, Policy};
use fleetrl_proto::TensorMap;
use tokio::sync::{mpsc, watch};

use crate::metrics::ActorMetrics;
use crate::runner::Progress;

mod recurrent;

/// Transitions stacked into one insert request.
pub(crate) const TRANSITIONS_PER_REQUEST: usize = 64;

/// What the off-policy acting thread needs.
pub(crate) struct OffPolicyRunner {
    pub(crate) actor_id: u32,
    pub(crate) config: RunConfig,
    pub(crate) weights: watch::Receiver<Option<Arc<Received>>>,
    pub(crate) items: mpsc::Sender<TensorMap>,
    pub(crate) progress: Arc<Mutex<Progress>>,
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) metrics: Arc<ActorMetrics>,
}

/// The algorithm's actor-side settings: exploration, n-step horizon, discount, reward clip,
/// whether transitions are inserted at all, and an expert to imitate.
struct ActorSide {
    explore: Exploration,
    n_step: usize,
    discount: f64,
    reward_clip: f64,
    inserts: bool,
    expert: Option<String>,
}

fn actor_side(algo: &AlgoConfig) -> ActorSide {
    let side = |explore: &Exploration, n: u32, discount: f64| ActorSide {
        explore: explore.clone(),
        n_step: n as usize,
        discount,
        reward_clip: 0.0,
        inserts: true,
        expert: None,
    };
    match algo {
        AlgoConfig::Dqn(c) => ActorSide {
            reward_clip: c.reward_clip,
            ..side(&c.explore, c.replay.n_step, c.discount)
        },
        AlgoConfig::Sac(c) => side(&c.explore, c.replay.n_step, c.discount),
        AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => side(&c.explore, c.replay.n_step, c.discount),
        AlgoConfig::Bc(c) => {
            // BC actors act greedily with the learner's policy (for the training returns); with
            // an expert they play the expert, whose steps are the labels.
            let explore = Exploration {
                deterministic: true,
                epsilon_start: 0.0,
                epsilon_end: 0.0,
                ..Exploration::default()
            };
            ActorSide {
                inserts: c.expert().is_some(),
                expert: c.expert().map(String::from),
                ..side(&explore, 1, c.discount)
            }
        }
        _ => unreachable!("the off-policy runner is started for off-policy algorithms only"),
    }
}

impl OffPolicyRunner {
    /// Acts until `stop` is set or the inserter goes away.
    pub(crate) fn run(mut self) -> anyhow::Result<()> {
        if self.config.recurrent_dqn().is_some() {
            return self.run_recurrent();
        }
        let m = self.config.actors.envs_per_actor as usize;
        let mut envs = fleetrl_core::envs::make_vec(&self.config.env, m)?;
        let space = envs.action_space().clone();
        let obs_dim = envs.obs_dim();
        let side = actor_side(&self.config.algo);
        let mut model = build_model(
            &self.config,
            envs.observation_space(),
            &space,
            tch::Device::Cpu,
        )?;
        let expert: Option<Box<dyn Policy>> = match &side.expert {
            Some(path) => Some(
                load_policy(std::path::Path::new(path))
                    .with_context(|| format!("loading the BC expert {path}"))?
                    .0,
            ),
            None => None,
        };
        let seed = self.config.seed + 1000 * self.actor_id as u64;
        tch::manual_seed((self.config.seed + 7919 * self.actor_id as u64) as i64);
        let mut explorer = Explorer::new(&side.explore, &space, m, seed ^ 0x9e37_79b9)
            .shared_by(self.config.actors.count);
        let mut nsteps: Vec<NStep> = (0..m)
            .map(|_| NStep::new(side.n_step, side.discount))
            .collect();
        let mut version = self.wait_for_weights(&mut model)?;
        let mut obs = envs.reset(seed).to_vec();
        let mut unreported = 0u64;
        tracing::info!(
            actor_id = self.actor_id,
            version,
            envs = m,
            "acting off-policy"
        );
        while !*self.stop.borrow() {
            let batch = tch::Tensor::from_slice(&obs).view([m as i64, obs_dim as i64]);
            let actor: &dyn Policy = expert.as_deref().unwrap_or(&model);
            let actions = if explorer.needs_policy() || expert.is_some() {
                let step = actor.act(&batch, side.explore.deterministic || expert.is_some());
                match Actions::from_tensor(&step.action)? {
                    Actions::Discrete(a) => explorer.actions(&a, &[], m),
                    Actions::Continuous { values, .. } => explorer.actions(&[], &values, m),
                }
            } else {
                explorer.actions(&[], &[], m)
            };
            let out = envs.step(&actions)?;
            let mut items = Vec::new();
            for i in 0..m {
                let next = &out.obs[i * obs_dim..(i + 1) * obs_dim];
                let ended = out.terminated[i] || out.truncated[i];
                let step = StepIn {
                    obs: obs[i * obs_dim..(i + 1) * obs_dim].to_vec(),
                    action: actions[i].clone(),
                    reward: clip(out.reward[i], side.reward_clip),
                    terminated: out.terminated[i],
                    truncated: out.truncated[i],
                    next_obs: out.final_obs[i].clone().unwrap_or_else(|| next.to_vec()),
                };
                if ended {
                    explorer.reset(i);
                }
                if side.inserts {
                    items.extend(nsteps[i].push(step).into_iter().map(|t| t.to_item(version)));
                }
            }
            obs.copy_from_slice(&out.obs);
            let next = self.finish_step(items, &mut envs, &mut unreported, &mut model, version)?;
            let Some(next) = next else {
                return Ok(());
            };
            version = next;
        }
        Ok(())
    }

    /// The end of one step of every env, shared by both acting loops: hands the step's items
    /// to the inserter, reports progress once `actors.rollout_length` env steps are
    /// unreported, and takes newer weights. `None`: the inserter is gone (the run is stopping).
    fn finish_step(
        &mut self,
        items: Vec<TensorMap>,
        envs: &mut VecEnv,
        unreported: &mut u64,
        model: &mut OffPolicyModel,
        version: i64,
    ) -> anyhow::Result<Option<i64>> {
        for item in items {
            if self.items.blocking_send(item).is_err() {
                return Ok(None);
            }
        }
        *unreported += envs.num_envs() as u64;
        if *unreported >= self.config.actors.rollout_length.max(1) as u64 {
            self.report(envs.drain_episodes(), *unreported, version);
            *unreported = 0;
        }
        self.refresh_weights(model, version).map(Some)
    }

    fn report(&self, episodes: Vec<fleetrl_core::envs::Episode>, env_steps: u64, acted: i64) {
        let newest = self.weights.borrow().as_ref().map_or(acted, |w| w.version);
        self.metrics
            .record_rollout(env_steps, &episodes, acted, newest);
        let mut progress = self.progress.lock().expect("progress lock poisoned");
        progress.episodes.extend(episodes);
        progress.env_steps += env_steps;
    }

    fn wait_for_weights(&mut self, model: &mut OffPolicyModel) -> anyhow::Result<i64> {
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

    /// Loads newer weights if the learner published any since the last step.
    fn refresh_weights(&mut self, model: &mut OffPolicyModel, version: i64) -> anyhow::Result<i64> {
        if !self.weights.has_changed().unwrap_or(false) {
            return Ok(version);
        }
        let Some(w) = self.weights.borrow_and_update().clone() else {
            return Ok(version);
        };
        if w.version <= version {
            return Ok(version);
        }
        self.metrics
            .apply_weights(&w, |tensors| model.load_named(tensors))
    }
}

/// `reward` clipped to +-`limit` (0: unclipped).
fn clip(reward: f32, limit: f64) -> f32 {
    if limit > 0.0 {
        reward.clamp(-limit as f32, limit as f32)
    } else {
        reward
    }
}
