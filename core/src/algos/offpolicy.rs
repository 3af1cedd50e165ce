//! What the off-policy learner asks of DQN, SAC, TD3/DDPG and BC: a batch of transitions in,
//! metrics and new priorities out. Shared pieces (the model they build, target networks in
//! checkpoints) live here too.

use tch::{Device, Tensor};

use super::bc::Bc;
use super::dqn::Dqn;
use super::sac::Sac;
use super::td3::Td3;
use super::Metrics;
use crate::config::{AlgoConfig, ReplayOptions, RunConfig};
use crate::items::transition::TransitionBatch;
use crate::models::{ModelError, OffPolicyModel, PolicyKind};
use fleetrl_proto::space::Space;
use fleetrl_proto::{TensorError, TensorMap};

/// The result of one gradient update.
#[derive(Debug, Default)]
pub struct Update {
    /// Named scalars (losses, Q means, alpha, ...).
    pub metrics: Metrics,
    /// |TD error| per batch row, for prioritized replay; `None` where there is no TD error.
    pub td_errors: Option<Vec<f64>>,
}

/// A learner-side off-policy algorithm.
///
/// Runs on the learner's update thread (tch work blocks); not `Sync`.
pub trait OffPolicyAlgorithm: Send {
    /// One gradient update on a batch (its `weights` are the importance weights).
    fn update(&mut self, batch: &TransitionBatch) -> Update;
    /// One gradient update on a batch as the replay server stacked it, with prioritized
    /// replay's importance weights (`None`: uniform), on `device`. The default reads
    /// transitions; a recurrent DQN reads sequences. Errors when the batch has other fields.
    fn update_sampled(
        &mut self,
        stacked: &TensorMap,
        weights: Option<&[f32]>,
        device: Device,
    ) -> Result<Update, TensorError> {
        let batch = transition_batch(stacked, weights, device)?;
        Ok(self.update(&batch))
    }
    /// The online model (what actors act with and checkpoints hold).
    fn model(&self) -> &OffPolicyModel;
    /// Mutable access, to restore weights from a checkpoint.
    fn model_mut(&mut self) -> &mut OffPolicyModel;
    /// Updates done so far.
    fn updates(&self) -> u64;
    /// Optimiser state, target networks and counters, for checkpoints.
    fn state(&self) -> Vec<(String, Tensor)>;
    /// Restores what [`OffPolicyAlgorithm::state`] returned; the error names what is missing.
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<(), String>;
}

/// A stacked sample of transitions on `device`, with `weights` (else ones).
pub(crate) fn transition_batch(
    stacked: &TensorMap,
    weights: Option<&[f32]>,
    device: Device,
) -> Result<TransitionBatch, TensorError> {
    let mut batch = TransitionBatch::from_stacked(stacked, device)?;
    if let Some(w) = weights {
        batch.weights = Tensor::from_slice(w).to_device(device);
    }
    Ok(batch)
}

/// The policy kind and critic count `algo` trains.
pub fn model_shape(algo: &AlgoConfig) -> Option<(PolicyKind, u32)> {
    match algo {
        AlgoConfig::Dqn(_) => Some((PolicyKind::QValues, 1)),
        AlgoConfig::Sac(c) => Some((PolicyKind::SquashedGaussian, c.num_critics)),
        AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => {
            Some((PolicyKind::Deterministic, c.num_critics))
        }
        AlgoConfig::Bc(_) => None,
        _ => None,
    }
}

/// The model an off-policy `config` trains and acts with (BC: Q-value logits for discrete
/// actions, a deterministic policy for continuous ones).
pub fn build_model(
    config: &RunConfig,
    obs_space: &Space,
    action_space: &Space,
    device: Device,
) -> Result<OffPolicyModel, ModelError> {
    let (kind, critics) = model_shape(&config.algo).unwrap_or(match action_space {
        Space::Discrete { .. } => (PolicyKind::QValues, 1),
        Space::Box { .. } => (PolicyKind::Deterministic, 1),
    });
    OffPolicyModel::new(
        &config.model,
        kind,
        critics,
        obs_space,
        action_space,
        device,
    )
}

/// The replay options of an off-policy algorithm.
pub fn replay_options(algo: &AlgoConfig) -> Option<&ReplayOptions> {
    match algo {
        AlgoConfig::Dqn(c) => Some(&c.replay),
        AlgoConfig::Sac(c) => Some(&c.replay),
        AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => Some(&c.replay),
        AlgoConfig::Bc(c) => Some(&c.replay),
        _ => None,
    }
}

/// Updates between weight publications.
pub fn publish_interval(algo: &AlgoConfig) -> u64 {
    let interval = match algo {
        AlgoConfig::Dqn(c) => c.publish_interval,
        AlgoConfig::Sac(c) => c.publish_interval,
        AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => c.publish_interval,
        AlgoConfig::Bc(c) => c.publish_interval,
        _ => 1,
    };
    interval.max(1)
}

/// The algorithm `config.algo` names, training `model`; `target` is a second model of the
/// same shape (ignored by BC). Panics for an on-policy algorithm (use [`super::build`]).
pub fn build(
    config: &RunConfig,
    model: OffPolicyModel,
    target: OffPolicyModel,
) -> Box<dyn OffPolicyAlgorithm> {
    match &config.algo {
        AlgoConfig::Dqn(c) => Box::new(Dqn::new(c, model, target)),
        AlgoConfig::Sac(c) => Box::new(Sac::new(c, model, target)),
        AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => Box::new(Td3::new(c, model, target)),
        AlgoConfig::Bc(c) => Box::new(Bc::new(c, model)),
        other => panic!("{} is on-policy: build it with algos::build", other.name()),
    }
}

/// A target model's parameters, named `target.<path>` for checkpoints.
pub(crate) fn target_state(target: &OffPolicyModel) -> Vec<(String, Tensor)> {
    target
        .named_parameters()
        .into_iter()
        .map(|(n, t)| (format!("target.{n}"), t))
        .collect()
}

/// Restores what [`target_state`] wrote.
pub(crate) fn load_target(
    target: &mut OffPolicyModel,
    state: &[(String, Tensor)],
) -> Result<(), String> {
    let named: Vec<(String, Tensor)> = state
        .iter()
        .filter_map(|(n, t)| {
            n.strip_prefix("target.")
                .map(|p| (p.to_string(), t.shallow_clone()))
        })
        .collect();
    target.load_named(&named).map_err(|e| e.to_string())
}

/// The scalar named `name` in a checkpoint state.
pub(crate) fn state_scalar(state: &[(String, Tensor)], name: &str) -> Result<i64, String> {
    state
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t.int64_value(&[]))
        .ok_or(format!("missing `{name}`"))
}

/// Mean of a tensor as f64.
pub(crate) fn mean(t: &Tensor) -> f64 {
    t.mean(tch::Kind::Float).double_value(&[])
}
