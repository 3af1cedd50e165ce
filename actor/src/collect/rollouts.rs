//! Rollouts for on-policy algorithms: T steps of every env with the actor-critic's sampled
//! actions, one item per rollout, bootstrapped with the values after the last step. With PPO+D
//! the episodes start by replaying demos ([`fleetrl_core::acting::ppod`]), synced with the
//! replay server's demo buffers before each rollout and offered to them after it.

use fleetrl_core::acting::alternating::Alternating;
use fleetrl_core::acting::ppod::DemoActing;
use fleetrl_core::acting::Acting;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::{EnvError, Episode};
use fleetrl_core::items::rollout::{Bootstrap, RolloutBuilder};
use fleetrl_core::models::{ActorCritic, ModelError};
use fleetrl_core::tasks::{Task, TaskSet};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{model, ActError, Collected, Collector, Pacing};
use crate::demo_replay::DemoLink;

/// Plain acting, alternating acting (`actors.alternating`), or PPO+D acting with its link to
/// the demo buffers.
enum Source {
    Plain(Box<Acting>),
    Alternating(Box<Alternating>),
    Demos(Box<DemoActing>, Box<DemoLink>),
}

impl Source {
    fn drain_episodes(&mut self) -> Vec<Episode> {
        match self {
            Source::Plain(a) => a.envs_mut().drain_episodes(),
            Source::Alternating(a) => a.drain_episodes(),
            Source::Demos(a, _) => a.envs_mut().drain_episodes(),
        }
    }

    fn set_task(&mut self, task: &Task, env_id: &str) -> Result<(), EnvError> {
        match self {
            Source::Plain(a) => a.envs_mut().set_task(task, env_id),
            Source::Alternating(a) => {
                (a.envs_mut()?.into_iter()).try_for_each(|envs| envs.set_task(task, env_id))
            }
            Source::Demos(a, _) => a.envs_mut().set_task(task, env_id),
        }
    }
}

/// Collects one rollout per call.
pub(super) struct RolloutCollector {
    model: ActorCritic,
    source: Source,
    builder: RolloutBuilder,
    steps: u64,
    /// `tasks.multi_task`: the run's tasks, a random training one per rollout.
    tasks: Option<(TaskSet, SmallRng)>,
    /// The env id, for errors.
    env_id: String,
    /// The envs' [`VecEnv::byte_observations`].
    byte_observations: bool,
}

impl RolloutCollector {
    /// Envs and model for `config`, env i reset with seed `seed + i`; replaying demos when
    /// `demos` is given.
    pub(super) fn new(
        config: &RunConfig,
        seed: u64,
        demos: Option<DemoLink>,
    ) -> Result<RolloutCollector, ActError> {
        let (t, m) = (
            config.actors.rollout_length as usize,
            config.actors.envs_per_actor as usize,
        );
        // Alternating acting steps two groups of M / 2; the others one vector of M.
        let mut envs = match (config.actors.alternating, config.actors.mid_batch_reset) {
            (true, _) => fleetrl_core::envs::make_vec(&config.env, m / 2)?,
            (false, true) => fleetrl_core::envs::make_vec(&config.env, m)?,
            // Holding finished envs needs one env per row.
            (false, false) => fleetrl_core::envs::make_vec_per_row(&config.env, m)?,
        };
        envs.hold_finished(!config.actors.mid_batch_reset)?;
        let (obs_dim, byte_observations) = (envs.obs_dim(), envs.byte_observations());
        let model = model::actor_critic(config, &envs)?;
        let source = match demos {
            _ if config.actors.alternating => {
                let second = fleetrl_core::envs::make_vec(&config.env, m / 2)?;
                Source::Alternating(Box::new(Alternating::new(envs, second, seed)?))
            }
            None => Source::Plain(Box::new(Acting::new(envs, seed))),
            Some(link) => Source::Demos(
                Box::new(DemoActing::new(envs, &config.env.id, seed)),
                Box::new(link),
            ),
        };
        Ok(RolloutCollector {
            model,
            source,
            builder: RolloutBuilder::new(t, m, obs_dim),
            steps: (t * m) as u64,
            tasks: config.tasks.multi_task.then(|| {
                (
                    TaskSet::new(&config.tasks, config.seed),
                    SmallRng::seed_from_u64(seed),
                )
            }),
            env_id: config.env.id.clone(),
            byte_observations,
        })
    }

    fn fill(&mut self) -> Result<Bootstrap, ActError> {
        let policy = &self.model;
        Ok(match &mut self.source {
            Source::Plain(a) => a.collect(policy, &mut self.builder)?,
            Source::Alternating(a) => a.collect(policy, &mut self.builder)?,
            Source::Demos(a, link) => {
                link.sync(a).map_err(Box::new)?;
                let bootstrap = a.collect(policy, &mut self.builder)?;
                link.offer(a).map_err(Box::new)?;
                bootstrap
            }
        })
    }
}

impl Collector for RolloutCollector {
    fn load(&mut self, weights: &[(String, tch::Tensor)]) -> Result<(), ModelError> {
        self.model.load_named(weights)
    }

    fn collect(&mut self, version: i64) -> Result<Collected, ActError> {
        if let Some((set, rng)) = &mut self.tasks {
            let task = set.sample_train(rng);
            self.source.set_task(&task, &self.env_id)?;
        }
        let bootstrap = self.fill()?;
        Ok(Collected {
            items: vec![self.builder.finish(&bootstrap, version)],
            env_steps: self.steps,
        })
    }

    fn drain_episodes(&mut self) -> Vec<Episode> {
        self.source.drain_episodes()
    }

    fn pacing(&self) -> Pacing {
        Pacing::PerBatch
    }

    fn byte_observations(&self) -> bool {
        self.byte_observations
    }
}
