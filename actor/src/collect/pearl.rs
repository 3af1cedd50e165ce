//! PEARL items: per call, one round on a training task drawn from the run's task set
//! ([`fleetrl_core::acting::pearl::PearlActing::collect_round`]), written as one item carrying
//! its task id. As with MAML, tasks are drawn per item: an actor that dies loses only the
//! round it was playing, and the table fills from the other actors' rounds.

use fleetrl_core::acting::pearl::PearlActing;
use fleetrl_core::algos::registry::check_observations;
use fleetrl_core::config::{PearlConfig, RunConfig};
use fleetrl_core::envs::Episode;
use fleetrl_core::models::{ModelError, PearlModel};
use fleetrl_core::tasks::TaskSet;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{ActError, Collected, Collector, Pacing};

/// Collects one round per call.
pub(super) struct PearlCollector {
    env_id: String,
    pearl: PearlConfig,
    model: PearlModel,
    acting: PearlActing,
    tasks: TaskSet,
    rng: SmallRng,
    seed: u64,
    calls: u64,
}

impl PearlCollector {
    /// The env and model for `config`, tasks drawn from a generator seeded with `seed`.
    pub(super) fn new(
        config: &RunConfig,
        pearl: &PearlConfig,
        seed: u64,
    ) -> Result<PearlCollector, ActError> {
        let envs = fleetrl_core::envs::make_vec(&config.env, 1)?;
        check_observations(config, envs.observation_space())?;
        let model = PearlModel::new(
            &config.model,
            pearl,
            envs.observation_space(),
            envs.action_space(),
            tch::Device::Cpu,
        )?;
        Ok(PearlCollector {
            env_id: config.env.id.clone(),
            pearl: pearl.clone(),
            model,
            acting: PearlActing::new(envs, seed),
            tasks: TaskSet::new(&config.tasks, config.seed),
            rng: SmallRng::seed_from_u64(seed),
            seed,
            calls: 0,
        })
    }
}

impl Collector for PearlCollector {
    fn load(&mut self, weights: &[(String, tch::Tensor)]) -> Result<(), ModelError> {
        self.model.load_named(weights)
    }

    fn collect(&mut self, version: i64) -> Result<Collected, ActError> {
        let task = self.tasks.sample_train(&mut self.rng);
        self.calls += 1;
        let seed = self.seed.wrapping_add(self.calls.wrapping_mul(1 << 20));
        let item = self.acting.collect_round(
            &self.model,
            &self.pearl,
            &task,
            &self.env_id,
            version,
            seed,
            &mut self.rng,
        )?;
        Ok(Collected {
            items: vec![item],
            env_steps: self.pearl.round_steps(),
        })
    }

    fn drain_episodes(&mut self) -> Vec<Episode> {
        self.acting.envs_mut().drain_episodes()
    }

    fn pacing(&self) -> Pacing {
        Pacing::Free
    }

    fn byte_observations(&self) -> bool {
        false
    }
}
