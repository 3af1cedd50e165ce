//! Learning algorithms. Each file reads top to bottom: paper, config, loss, update. The math
//! is pure (slices or tensors in, tensors out) and unit-tested without an environment.
//!
//! Every algorithm, on- or off-policy, implements the one [`Algorithm`] trait: it says what it
//! trains on ([`TrainsOn`]), updates from a [`Batch`] and exposes its [`Model`] for weight
//! publication and checkpoints. [`registry`] maps an algorithm's name to its builder, family,
//! model and tables.

pub mod a2c;
pub mod bc;
pub mod config;
pub mod data_parallel;
pub mod dqn;
pub mod impala;
pub mod intrinsic;
pub mod maml;
pub mod offpolicy;
pub mod pearl;
pub mod pg;
pub mod ppo;
pub mod r2d2;
pub mod recurrent_sac;
pub mod recurrent_td3;
pub mod registry;
pub mod replicas;
pub mod returns;
pub mod sac;
pub mod sequence_critics;
pub mod target;
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

use tch::{Device, Tensor};

use crate::checkpoint::state::{StateError, StatePart};
use crate::items::rollout::RolloutBatch;
use crate::items::round::RoundBatch;
use crate::items::sequence::SequenceBatch;
use crate::items::transition::TransitionBatch;
use crate::models::{ActorCritic, ModelError, OffPolicyModel};
use fleetrl_proto::{TensorError, TensorMap};

pub use registry::build;

/// One training step as the learner runs it: a batch of rollouts first updates the model's
/// running normalisation statistics (if it has them), then `algo` updates on the batch.
pub fn train_on(algo: &mut dyn Algorithm, batch: &Batch) -> Result<Update, BatchError> {
    if let Batch::Rollouts(rollouts) = batch {
        let obs = (rollouts.obs.to_tensor(tch::Device::Cpu)).view([-1, rollouts.obs_dim as i64]);
        algo.trained().model().observe(&obs);
    }
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

/// The result of one update.
#[derive(Debug, Default)]
pub struct Update {
    /// Named scalars (losses, Q means, alpha, ...).
    pub metrics: Metrics,
    /// |TD error| per batch row, for prioritized replay; `None` where there is no TD error.
    pub td_errors: Option<Vec<f64>>,
}

impl From<Metrics> for Update {
    fn from(metrics: Metrics) -> Update {
        Update {
            metrics,
            td_errors: None,
        }
    }
}

/// What an algorithm trains on, which is what its actors collect and its table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainsOn {
    /// Fixed-length on-policy rollouts from a queue table (PPO, A2C, VPG, TRPO, IMPALA; PPO+D
    /// mixes demo replays into the same rollouts).
    Rollouts,
    /// n-step transitions from a replay table (DQN, SAC, TD3, DDPG; BC's demo steps).
    Transitions,
    /// Stored sequences with burn-in from a replay table (recurrent DQN, R2D2).
    Sequences,
    /// Rounds of acting on one task each, from a replay table (PEARL).
    Rounds,
}

/// One batch for an update, of the kind the algorithm [trains on](Algorithm::trains_on).
#[derive(Debug)]
pub enum Batch {
    /// On-policy rollouts, `[T, B]` (boxed: they are large beside the tensor batches).
    Rollouts(Box<RolloutBatch>),
    /// Sampled transitions with their importance weights.
    Transitions(TransitionBatch),
    /// Sampled sequences with their importance weights.
    Sequences(SequenceBatch),
    /// Sampled rounds, one task each.
    Rounds(RoundBatch),
}

impl Batch {
    /// A batch the replay server stacked, read as `kind` on `device`, with prioritized
    /// replay's importance `weights` (`None`: ones). Rollouts are assembled by the learner
    /// from single rollouts instead ([`RolloutBatch::from_parts`]).
    pub fn from_stacked(
        kind: TrainsOn,
        stacked: &TensorMap,
        weights: Option<&[f32]>,
        device: Device,
    ) -> Result<Batch, TensorError> {
        let weights = weights.map(|w| Tensor::from_slice(w).to_device(device));
        Ok(match kind {
            TrainsOn::Rollouts => Batch::Rollouts(Box::new(RolloutBatch::from_parts(
                std::slice::from_ref(stacked),
            )?)),
            TrainsOn::Transitions => {
                let mut batch = TransitionBatch::from_stacked(stacked, device)?;
                if let Some(w) = weights {
                    batch.weights = w;
                }
                Batch::Transitions(batch)
            }
            TrainsOn::Sequences => {
                let mut batch = SequenceBatch::from_stacked(stacked, device)?;
                if let Some(w) = weights {
                    batch.weights = w;
                }
                Batch::Sequences(batch)
            }
            TrainsOn::Rounds => Batch::Rounds(RoundBatch::from_stacked(stacked, device)?),
        })
    }

    /// The rows its loss averages over (steps counted, padding left out; sequences and rounds
    /// by their batch dimension): a learner rank's weight in the group's gradient sum
    /// ([`crate::collective::Group::weigh_rows`]).
    pub fn rows(&self) -> usize {
        match self {
            Batch::Rollouts(b) => b.valid.as_ref().map_or(b.t * b.b, |valid| {
                valid.iter().map(|&v| f64::from(v)).sum::<f64>().round() as usize
            }),
            Batch::Transitions(b) => b.obs.size()[0] as usize,
            Batch::Sequences(b) => b.obs.size().get(1).copied().unwrap_or(0) as usize,
            Batch::Rounds(b) => b.obs.size()[0] as usize,
        }
    }

    /// What this batch holds.
    pub fn kind(&self) -> TrainsOn {
        match self {
            Batch::Rollouts(_) => TrainsOn::Rollouts,
            Batch::Transitions(_) => TrainsOn::Transitions,
            Batch::Sequences(_) => TrainsOn::Sequences,
            Batch::Rounds(_) => TrainsOn::Rounds,
        }
    }

    /// The rollouts, or [`BatchError::Kind`].
    pub fn rollouts(&self) -> Result<&RolloutBatch, BatchError> {
        match self {
            Batch::Rollouts(b) => Ok(b),
            other => Err(other.wrong(TrainsOn::Rollouts)),
        }
    }

    /// The transitions, or [`BatchError::Kind`].
    pub fn transitions(&self) -> Result<&TransitionBatch, BatchError> {
        match self {
            Batch::Transitions(b) => Ok(b),
            other => Err(other.wrong(TrainsOn::Transitions)),
        }
    }

    /// The sequences, or [`BatchError::Kind`].
    pub fn sequences(&self) -> Result<&SequenceBatch, BatchError> {
        match self {
            Batch::Sequences(b) => Ok(b),
            other => Err(other.wrong(TrainsOn::Sequences)),
        }
    }

    /// The rounds, or [`BatchError::Kind`].
    pub fn rounds(&self) -> Result<&RoundBatch, BatchError> {
        match self {
            Batch::Rounds(b) => Ok(b),
            other => Err(other.wrong(TrainsOn::Rounds)),
        }
    }

    fn wrong(&self, expected: TrainsOn) -> BatchError {
        BatchError::Kind {
            expected,
            found: self.kind(),
        }
    }
}

/// Why an update could not run on a batch.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The batch is of another kind than the algorithm trains on.
    #[error("the algorithm trains on {expected:?}, not {found:?}")]
    Kind {
        /// What the algorithm trains on.
        expected: TrainsOn,
        /// What it was given.
        found: TrainsOn,
    },
    /// The sampled tensors do not form a batch of that kind.
    #[error(transparent)]
    Tensors(#[from] TensorError),
    /// The update's CUDA graph could not be captured or replayed (`learner.cuda_graph`).
    #[error(transparent)]
    Graph(#[from] crate::optim::GraphError),
}

/// Why an algorithm refused a live change of its hyperparameters ([`Algorithm::reconfigure`]).
#[derive(Debug, thiserror::Error)]
pub enum ReconfigureError {
    /// The algorithm keeps its hyperparameters for the whole run.
    #[error(
        "algo.name = \"{algo}\" keeps its hyperparameters for the whole run (ppo, a2c and \
         impala can change theirs)"
    )]
    Fixed {
        /// The algorithm asked to change.
        algo: &'static str,
    },
    /// The new config names another algorithm than the one training.
    #[error("this learner trains {trains}, not {asked}")]
    OtherAlgorithm {
        /// The algorithm training.
        trains: &'static str,
        /// The one the new config names.
        asked: &'static str,
    },
    /// This key is fixed when the run starts, for the reason given.
    #[error("{key}: {why}")]
    FixedKey {
        /// The key, as `fleetrl set` names it.
        key: &'static str,
        /// Why it cannot change during the run.
        why: &'static str,
    },
}

/// What the learner publishes and checkpoints of a network, whatever its shape: the
/// actor-critic, the off-policy model (with or without its recurrent Q network).
pub trait Model: Send {
    /// Every parameter as a proto tensor, by path (the weights message).
    fn export(&self) -> Result<TensorMap, ModelError>;
    /// Every parameter, by path (for checkpoints).
    fn named_parameters(&self) -> Vec<(String, Tensor)>;
    /// Copies named weights in; every parameter must be present with its exact shape.
    fn load_named(&mut self, weights: &[(String, Tensor)]) -> Result<(), ModelError>;
    /// Merges a training batch's observations `[N, D]` into running normalisation statistics;
    /// nothing for a model without them.
    fn observe(&self, _obs: &Tensor) {}
}

impl Model for ActorCritic {
    fn export(&self) -> Result<TensorMap, ModelError> {
        ActorCritic::export(self)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        ActorCritic::named_parameters(self)
    }

    fn load_named(&mut self, weights: &[(String, Tensor)]) -> Result<(), ModelError> {
        ActorCritic::load_named(self, weights)
    }

    fn observe(&self, obs: &Tensor) {
        ActorCritic::observe(self, obs)
    }
}

impl Model for OffPolicyModel {
    fn export(&self) -> Result<TensorMap, ModelError> {
        OffPolicyModel::export(self)
    }

    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        OffPolicyModel::named_parameters(self)
    }

    fn load_named(&mut self, weights: &[(String, Tensor)]) -> Result<(), ModelError> {
        OffPolicyModel::load_named(self, weights)
    }

    fn observe(&self, obs: &Tensor) {
        OffPolicyModel::observe(self, obs)
    }
}

/// What an algorithm holds besides its losses: the model it trains and how many updates it
/// has done, checkpointed under one counter name. Every algorithm owns one.
#[derive(Debug)]
pub struct Trained<M> {
    /// The online model (what actors act with and checkpoints hold).
    pub model: M,
    /// Updates done so far.
    pub updates: u64,
    /// Env steps in the batches trained on so far: linear schedules decay with these, as a
    /// share of the run's step budget, so a batch that grows with the fleet moves them as far
    /// as the steps it holds.
    pub env_steps: u64,
    /// The name the update count is checkpointed under.
    counter: &'static str,
}

impl<M: Model> Trained<M> {
    /// `model`, no updates yet; the count is checkpointed as `counter`.
    pub fn new(model: M, counter: &'static str) -> Trained<M> {
        Trained {
            model,
            updates: 0,
            env_steps: 0,
            counter,
        }
    }

    fn env_steps_name(&self) -> String {
        format!("{}.env_steps", self.counter)
    }
}

/// The update and env-step counters.
impl<M: Model> StatePart for Trained<M> {
    fn save(&self) -> Vec<(String, Tensor)> {
        vec![
            (self.counter.to_string(), Tensor::from(self.updates as i64)),
            (self.env_steps_name(), Tensor::from(self.env_steps as i64)),
        ]
    }

    /// A checkpoint from before env steps were kept restores them as 0.
    fn restore(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError> {
        self.updates = crate::checkpoint::state::counter(state, self.counter)?;
        self.env_steps =
            crate::checkpoint::state::counter(state, &self.env_steps_name()).unwrap_or(0);
        Ok(())
    }
}

/// The model-facing side of a [`Trained`] whatever its model type, for the learner.
pub trait Learned: Send {
    /// The online model.
    fn model(&self) -> &dyn Model;
    /// Mutable access, to restore weights from a checkpoint.
    fn model_mut(&mut self) -> &mut dyn Model;
    /// Updates done so far (restored from checkpoints).
    fn updates(&self) -> u64;
}

impl<M: Model> Learned for Trained<M> {
    fn model(&self) -> &dyn Model {
        &self.model
    }

    fn model_mut(&mut self) -> &mut dyn Model {
        &mut self.model
    }

    fn updates(&self) -> u64 {
        self.updates
    }
}

/// What an algorithm's own `train` returns (metrics, an update with TD errors, or one that
/// a CUDA graph may fail), as [`Algorithm::update`]'s result.
pub trait IntoUpdate {
    /// The update, or why it could not run.
    fn into_update(self) -> Result<Update, BatchError>;
}

impl IntoUpdate for Metrics {
    fn into_update(self) -> Result<Update, BatchError> {
        Ok(self.into())
    }
}

impl IntoUpdate for Update {
    fn into_update(self) -> Result<Update, BatchError> {
        Ok(self)
    }
}

impl IntoUpdate for Result<Update, crate::optim::GraphError> {
    fn into_update(self) -> Result<Update, BatchError> {
        Ok(self?)
    }
}

/// Writes the [`Algorithm`] methods every algorithm has alike, inside its `impl Algorithm`:
/// `trained` and `trained_mut` (its `trained` field), and `state` and `load_state` from the
/// [`StatePart`] fields listed under `state` plus `trained`'s counters. With `trains_on:
/// Kind(batch)` also `trains_on` (`TrainsOn::Kind`) and `update`, which hands `Batch::batch()`
/// to the algorithm's own `train`.
///
/// ```ignore
/// impl Algorithm for Ppo {
///     algorithm_parts!(trains_on: Rollouts(rollouts), state: [optim, intrinsic]);
/// }
/// ```
macro_rules! algorithm_parts {
    // Transitions through `train`, or stored sequences through `update_sequences` when the
    // model is recurrent (R2D2, recurrent SAC and TD3).
    (trains_on: TransitionsOrSequences, state: [$($part:ident),* $(,)?]) => {
        fn trains_on(&self) -> $crate::algos::TrainsOn {
            match self.trained.model.recurrent() {
                Some(_) => $crate::algos::TrainsOn::Sequences,
                None => $crate::algos::TrainsOn::Transitions,
            }
        }

        fn update(
            &mut self,
            batch: &$crate::algos::Batch,
        ) -> Result<$crate::algos::Update, $crate::algos::BatchError> {
            match self.trains_on() {
                $crate::algos::TrainsOn::Sequences => {
                    Ok(self.update_sequences(batch.sequences()?))
                }
                _ => Ok(self.train(batch.transitions()?)?),
            }
        }

        $crate::algos::algorithm_parts!(state: [$($part),*]);
    };
    (trains_on: $kind:ident($batch:ident), state: [$($part:ident),* $(,)?]) => {
        fn trains_on(&self) -> $crate::algos::TrainsOn {
            $crate::algos::TrainsOn::$kind
        }

        fn update(
            &mut self,
            batch: &$crate::algos::Batch,
        ) -> Result<$crate::algos::Update, $crate::algos::BatchError> {
            $crate::algos::IntoUpdate::into_update(self.train(batch.$batch()?))
        }

        $crate::algos::algorithm_parts!(state: [$($part),*]);
    };
    (state: [$($part:ident),* $(,)?]) => {
        fn trained(&self) -> &dyn $crate::algos::Learned {
            &self.trained
        }

        fn trained_mut(&mut self) -> &mut dyn $crate::algos::Learned {
            &mut self.trained
        }

        fn state(&self) -> Vec<(String, tch::Tensor)> {
            let mut state = $crate::checkpoint::state::StatePart::save(&self.trained);
            $(state.extend($crate::checkpoint::state::StatePart::save(&self.$part));)*
            state
        }

        fn load_state(
            &mut self,
            state: &[(String, tch::Tensor)],
        ) -> Result<(), $crate::checkpoint::state::StateError> {
            $($crate::checkpoint::state::StatePart::restore(&mut self.$part, state)?;)*
            $crate::checkpoint::state::StatePart::restore(&mut self.trained, state)
        }
    };
}
pub(crate) use algorithm_parts;

/// Makes `algo` one of `group`'s ranks: rank 0's parameters and state (optimiser moments,
/// target networks, counters: on resume, its checkpoint's) overwrite every other rank's, then
/// every optimiser step sums its gradients over the group ([`Algorithm::join_group`]).
pub fn join_ranks(
    algo: &mut dyn Algorithm,
    group: &std::sync::Arc<crate::collective::Group>,
) -> Result<(), crate::collective::CollectiveError> {
    let params: Vec<Tensor> = (algo.trained().model().named_parameters().into_iter())
        .map(|(_, t)| t)
        .collect();
    group.broadcast(&params)?;
    let state: Vec<(String, Tensor)> = (algo.state().into_iter())
        .map(|(name, t)| (name, t.copy()))
        .collect();
    let tensors: Vec<Tensor> = state.iter().map(|(_, t)| t.shallow_clone()).collect();
    group.broadcast(&tensors)?;
    algo.load_state(&state).map_err(|e| {
        crate::collective::CollectiveError::Unavailable(format!(
            "rank 0's optimiser state does not load here: {e}"
        ))
    })?;
    algo.join_group(group)
}

/// A learner-side algorithm, on- or off-policy: batches in, named metrics (and new
/// priorities where it has TD errors) out.
///
/// Runs on the learner's dedicated update thread (tch work blocks); not `Sync`.
pub trait Algorithm: Send {
    /// What it trains on: the batch kind [`Algorithm::update`] accepts.
    fn trains_on(&self) -> TrainsOn;
    /// One update. Errors, without updating, when `batch` is not of the kind it trains on or
    /// its tensors do not fit.
    fn update(&mut self, batch: &Batch) -> Result<Update, BatchError>;
    /// The model and update count (what gets published and checkpointed).
    fn trained(&self) -> &dyn Learned;
    /// Mutable access, to restore weights from a checkpoint.
    fn trained_mut(&mut self) -> &mut dyn Learned;
    /// Optimiser state, target networks and counters as named tensors, for checkpoints.
    fn state(&self) -> Vec<(String, Tensor)>;
    /// Restores what [`Algorithm::state`] returned.
    fn load_state(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError>;
    /// Replays its updates from CUDA graphs when `enabled` and its model is on a CUDA device
    /// (`learner.cuda_graph`). By default an algorithm runs every update as written.
    fn use_cuda_graph(&mut self, _enabled: bool) -> Result<(), crate::optim::GraphError> {
        Ok(())
    }
    /// Trains with the other learner processes of `group` (`learner.world_size > 1`): every
    /// optimiser step sums its gradients over the group ([`crate::optim::Adam::join`]). By
    /// default an algorithm cannot; config validation refuses those by name first.
    fn join_group(
        &mut self,
        _group: &std::sync::Arc<crate::collective::Group>,
    ) -> Result<(), crate::collective::CollectiveError> {
        Err(crate::collective::CollectiveError::Unavailable(
            "this algorithm trains in one learner process only".into(),
        ))
    }
    /// Takes `algo` (this run's config with [`crate::config::LIVE_ALGO_KEYS`] changed, as
    /// `fleetrl set` asks) for the next updates, or says why it cannot. By default an
    /// algorithm keeps its hyperparameters for the whole run.
    fn reconfigure(&mut self, algo: &config::AlgoConfig) -> Result<(), ReconfigureError> {
        Err(ReconfigureError::Fixed { algo: algo.name() })
    }
}
