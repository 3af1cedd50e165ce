//! Meta-RL (MAML) items: per call, one training task drawn from the run's task set, adapted
//! on by this actor ([`fleetrl_core::acting::meta::adapt_on_task`]) and written as one item
//! carrying its task id. Tasks are drawn per item rather than assigned by the learner: an
//! actor that dies takes only its unfinished task with it, and the learner's meta-batch fills
//! from the other actors' tasks without a round trip.

use fleetrl_core::acting::meta::adapt_on_task;
use fleetrl_core::acting::Acting;
use fleetrl_core::config::{MamlConfig, RunConfig};
use fleetrl_core::envs::Episode;
use fleetrl_core::models::{ActorCritic, ModelError};
use fleetrl_core::tasks::TaskSet;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{model, ActError, Collected, Collector, Pacing};

/// Collects one task's adaptation per call.
pub(super) struct MetaCollector {
    config: RunConfig,
    maml: MamlConfig,
    model: ActorCritic,
    acting: Acting,
    tasks: TaskSet,
    rng: SmallRng,
    seed: u64,
    calls: u64,
}

impl MetaCollector {
    /// Envs and model for `config`, tasks drawn from a generator seeded with `seed`.
    pub(super) fn new(
        config: &RunConfig,
        maml: &MamlConfig,
        seed: u64,
    ) -> Result<MetaCollector, ActError> {
        let envs =
            fleetrl_core::envs::make_vec(&config.env, config.actors.envs_per_actor as usize)?;
        let model = model::actor_critic(config, &envs)?;
        Ok(MetaCollector {
            config: config.clone(),
            maml: maml.clone(),
            model,
            acting: Acting::new(envs, seed),
            tasks: TaskSet::new(&config.tasks, config.seed),
            rng: SmallRng::seed_from_u64(seed),
            seed,
            calls: 0,
        })
    }
}

impl Collector for MetaCollector {
    fn load(&mut self, weights: &[(String, tch::Tensor)]) -> Result<(), ModelError> {
        self.model.load_named(weights)
    }

    fn collect(&mut self, version: i64) -> Result<Collected, ActError> {
        let task = self.tasks.sample_train(&mut self.rng);
        let stages = u64::from(self.config.algo.stages());
        let per_stage = u64::from(self.config.actors.rollout_length)
            * u64::from(self.config.actors.envs_per_actor);
        self.calls += 1;
        let seed = self.seed.wrapping_add(self.calls.wrapping_mul(1 << 20));
        let adaptation = adapt_on_task(
            &mut self.acting,
            &self.model,
            &task,
            &self.config,
            &self.maml,
            version,
            seed,
        )?;
        Ok(Collected {
            items: vec![adaptation.item],
            env_steps: stages * per_stage,
        })
    }

    fn drain_episodes(&mut self) -> Vec<Episode> {
        self.acting.envs_mut().drain_episodes()
    }

    fn pacing(&self) -> Pacing {
        Pacing::PerBatch
    }

    fn byte_observations(&self) -> bool {
        self.acting.envs().byte_observations()
    }
}
