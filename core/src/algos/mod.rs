//! Learning algorithms. Each file reads top to bottom: paper, config, loss, update. The math
//! is pure (slices or tensors in, tensors out) and unit-tested without an environment.

pub mod a2c;
pub mod bc;
pub mod data_parallel;
pub mod dqn;
pub mod impala;
pub mod offpolicy;
pub mod pg;
pub mod ppo;
pub mod r2d2;
pub mod replicas;
pub mod returns;
pub mod sac;
pub mod td3;
pub mod trpo;
pub mod vpg;
pub mod vtrace;

#[cfg(test)]
pub(crate) mod testing;

pub use a2c::A2c;
pub use impala::Impala;
pub use ppo::Ppo;
pub use trpo::Trpo;
pub use vpg::Vpg;

use crate::config::{AlgoConfig, RunConfig};
use crate::items::rollout::RolloutBatch;
use crate::models::ActorCritic;

/// The algorithm `config.algo` names, training `model`. Linear schedules span the run's step
/// budget; PPO splits its minibatches over `learner.update_threads` threads.
///
/// Panics for an off-policy algorithm: the learner builds those with [`offpolicy::build`].
pub fn build(config: &RunConfig, model: ActorCritic) -> Box<dyn Algorithm> {
    let total = config.total_updates();
    match &config.algo {
        AlgoConfig::Ppo(c) => {
            Box::new(Ppo::new(c, model, total).with_threads(config.learner.update_threads as usize))
        }
        AlgoConfig::A2c(c) => Box::new(A2c::new(c, model, total)),
        AlgoConfig::Vpg(c) => Box::new(Vpg::new(c, model)),
        AlgoConfig::Trpo(c) => Box::new(Trpo::new(c, model)),
        AlgoConfig::Impala(c) => Box::new(Impala::new(c, model, total)),
        other => panic!(
            "{} is off-policy: build it with algos::offpolicy::build",
            other.name()
        ),
    }
}

/// [`build`] with one replica of the model per device of `devices` (the first is `model`'s own;
/// see [`replicas`]), each made by `make`. A single device is plain [`build`]; several need an
/// algorithm that splits its update (PPO; config validation refuses the others).
pub fn build_on_devices(
    config: &RunConfig,
    model: ActorCritic,
    devices: &[tch::Device],
    make: impl FnMut(tch::Device) -> ActorCritic,
) -> Box<dyn Algorithm> {
    match &config.algo {
        AlgoConfig::Ppo(c) if devices.len() > 1 => {
            Box::new(Ppo::new(c, model, config.total_updates()).on_devices(devices, make))
        }
        _ => build(config, model),
    }
}

/// One training step as the learner runs it: the batch's observations first update the
/// model's running normalisation statistics (if it has them), then `algo` updates on it.
pub fn train_on(algo: &mut dyn Algorithm, batch: &RolloutBatch) -> Metrics {
    let obs = tch::Tensor::from_slice(&batch.obs).view([-1, batch.obs_dim as i64]);
    algo.model().observe(&obs);
    algo.update(batch)
}

/// Named scalar results of one update (losses, KL, clip fraction, ...).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(pub Vec<(&'static str, f64)>);

impl Metrics {
    /// The value named `name`, if present.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// A learner-side algorithm: batches in, metrics out.
///
/// Runs on the learner's dedicated update thread (tch work blocks); not `Sync`.
pub trait Algorithm: Send {
    /// One update on a batch of rollouts.
    fn update(&mut self, batch: &RolloutBatch) -> Metrics;
    /// The network being trained (what gets published and checkpointed).
    fn model(&self) -> &ActorCritic;
    /// Mutable access, to restore weights from a checkpoint.
    fn model_mut(&mut self) -> &mut ActorCritic;
    /// Updates done so far (restored from checkpoints).
    fn updates(&self) -> u64;
    /// Optimiser state and counters as named tensors, for checkpoints.
    fn state(&self) -> Vec<(String, tch::Tensor)>;
    /// Restores what [`Algorithm::state`] returned; the error names what is missing.
    fn load_state(&mut self, state: &[(String, tch::Tensor)]) -> Result<(), String>;
}
