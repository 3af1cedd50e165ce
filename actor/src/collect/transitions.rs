//! n-step transitions for the feed-forward off-policy algorithms (DQN, SAC, TD3, DDPG, BC):
//! one step of every env per call with the current policy plus exploration, each env's steps
//! turned into n-step transitions, one item each. BC with an expert checkpoint plays the
//! expert instead and labels each transition with the expert's action.

use std::path::Path;

use fleetrl_core::acting::exploration::Explorer;
use fleetrl_core::acting::policy_loader::load_policy;
use fleetrl_core::algos::registry::{self, StepActing};
use fleetrl_core::config::{Exploration, RunConfig};
use fleetrl_core::envs::{Episode, VecEnv};
use fleetrl_core::items::rollout::Actions;
use fleetrl_core::items::transition::{NStep, StepIn};
use fleetrl_core::models::{ModelError, OffPolicyModel, Policy};
use fleetrl_core::tasks::TaskSet;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{model, ActError, Collected, Collector, Pacing};

/// The algorithm's actor-side settings, from its registry entry.
pub(super) fn actor_side(config: &RunConfig) -> Result<StepActing, ActError> {
    registry::spec(config).acting.ok_or(ActError::Unsupported(
        "transitions are collected for off-policy algorithms only",
    ))
}

/// What both step-wise (off-policy) collectors act with: the envs, the off-policy model, the
/// exploration and the observations to act on next.
pub(super) struct Stepping {
    pub(super) envs: VecEnv,
    pub(super) model: OffPolicyModel,
    pub(super) explorer: Explorer,
    pub(super) obs: Vec<f32>,
}

impl Stepping {
    /// Envs and model for `config` exploring with `explore`, env i reset with seed `seed + i`.
    pub(super) fn new(
        config: &RunConfig,
        explore: &Exploration,
        seed: u64,
    ) -> Result<Stepping, ActError> {
        let m = config.actors.envs_per_actor as usize;
        let mut envs = fleetrl_core::envs::make_vec(&config.env, m)?;
        let model = model::off_policy(config, &envs)?;
        let explorer = Explorer::new(explore, envs.action_space(), m, seed ^ 0x9e37_79b9)
            .shared_by(config.actors.count);
        let obs = envs.reset(seed).to_vec();
        Ok(Stepping {
            envs,
            model,
            explorer,
            obs,
        })
    }

    /// The observations as an `[M, obs_dim]` batch.
    pub(super) fn batch(&self) -> tch::Tensor {
        let (m, obs_dim) = (self.envs.num_envs(), self.envs.obs_dim());
        tch::Tensor::from_slice(&self.obs).view([m as i64, obs_dim as i64])
    }
}

/// Collects one step of every env per call.
pub(super) struct TransitionCollector {
    on: Stepping,
    expert: Option<Box<dyn Policy>>,
    side: StepActing,
    nsteps: Vec<NStep>,
    /// `tasks.multi_task`: the run's tasks, a random training one per episode of each env,
    /// and the env id (for errors).
    tasks: Option<(TaskSet, SmallRng, String)>,
}

impl TransitionCollector {
    /// Envs, model (and expert) for `config`, env i reset with seed `seed + i`.
    pub(super) fn new(config: &RunConfig, seed: u64) -> Result<TransitionCollector, ActError> {
        let side = actor_side(config)?;
        let mut on = Stepping::new(config, &side.explore, seed)?;
        let mut tasks = config.tasks.multi_task.then(|| {
            (
                TaskSet::new(&config.tasks, config.seed),
                SmallRng::seed_from_u64(seed),
                config.env.id.clone(),
            )
        });
        if let Some((set, rng, env_id)) = &mut tasks {
            // Every env's first episode gets a task too: set them all, then start again.
            for i in 0..on.envs.num_envs() {
                on.envs.set_task_of(i, &set.sample_train(rng), env_id)?;
            }
            on.obs = on.envs.reset(seed).to_vec();
        }
        let expert = match &side.expert {
            Some(path) => Some(
                load_policy(Path::new(path))
                    .map_err(|source| ActError::Expert {
                        path: path.clone(),
                        cause: Box::new(source),
                    })?
                    .0,
            ),
            None => None,
        };
        let nsteps = (0..on.envs.num_envs())
            .map(|_| NStep::new(side.n_step, side.discount))
            .collect();
        Ok(TransitionCollector {
            on,
            expert,
            side,
            nsteps,
            tasks,
        })
    }
}

impl Collector for TransitionCollector {
    fn load(&mut self, weights: &[(String, tch::Tensor)]) -> Result<(), ModelError> {
        self.on.model.load_named(weights)
    }

    fn collect(&mut self, version: i64) -> Result<Collected, ActError> {
        let on = &mut self.on;
        let (m, obs_dim) = (on.envs.num_envs(), on.envs.obs_dim());
        let batch = on.batch();
        let expert = self.expert.as_deref();
        let actor: &dyn Policy = expert.unwrap_or(&on.model);
        let actions = if on.explorer.needs_policy() || expert.is_some() {
            let step = actor.act(&batch, self.side.explore.deterministic || expert.is_some());
            match Actions::from_tensor(&step.action)? {
                Actions::Discrete(a) => on.explorer.actions(&a, &[], m),
                Actions::Continuous { values, .. } => on.explorer.actions(&[], &values, m),
            }
        } else {
            on.explorer.actions(&[], &[], m)
        };
        let out = on.envs.step(&actions)?;
        let mut items = Vec::new();
        let mut finished = Vec::new();
        for (i, action) in actions.iter().enumerate() {
            let next = &out.obs[i * obs_dim..(i + 1) * obs_dim];
            let ended = out.terminated[i] || out.truncated[i];
            let step = StepIn {
                obs: on.obs[i * obs_dim..(i + 1) * obs_dim].to_vec(),
                action: action.clone(),
                reward: clip(out.reward[i], self.side.reward_clip),
                terminated: out.terminated[i],
                truncated: out.truncated[i],
                next_obs: out.final_obs[i].clone().unwrap_or_else(|| next.to_vec()),
            };
            if ended {
                on.explorer.reset(i);
                finished.push(i);
            }
            if self.side.inserts {
                let done = self.nsteps[i].push(step);
                items.extend(done.into_iter().map(|t| t.to_item(version)));
            }
        }
        on.obs.copy_from_slice(&out.obs);
        // A finished env has begun its next episode and not stepped it yet; its new task holds
        // from that episode (envs that switch at a reset: the one after), so every episode
        // plays one task.
        if let Some((set, rng, env_id)) = &mut self.tasks {
            for i in finished {
                on.envs.set_task_of(i, &set.sample_train(rng), env_id)?;
            }
        }
        Ok(Collected {
            items,
            env_steps: m as u64,
        })
    }

    fn drain_episodes(&mut self) -> Vec<Episode> {
        self.on.envs.drain_episodes()
    }

    fn pacing(&self) -> Pacing {
        Pacing::Free
    }

    fn byte_observations(&self) -> bool {
        self.on.envs.byte_observations()
    }
}

/// `reward` clipped to +-`limit` (0: unclipped).
pub(super) fn clip(reward: f32, limit: f64) -> f32 {
    if limit > 0.0 {
        reward.clamp(-limit as f32, limit as f32)
    } else {
        reward
    }
}
