//! Policy networks (tch): an MLP trunk per head, and the actor-critic the actors act with and
//! the learner trains. Every `VarStore` path is named (`pi.l0.weight`, `vf.out.bias`, ...) so
//! checkpoints and weight messages keep loading across versions.

mod actor_critic;
mod atari;
pub mod config;
mod conv;
mod dist;
pub mod export;
mod lstm;
mod mlp;
mod obs_norm;
mod offpolicy;
mod pearl;
pub(crate) mod recurrent_net;
mod script;
pub mod weights;

pub use actor_critic::{ActorCritic, Evaluation, Heads, PolicyStep, Sequence};
pub use atari::{AtariModel, AtariOutput, FrameShape};
pub use conv::{image_frame, ConvSpec};
pub(crate) use conv::{ConvEncoder, ConvInit};
pub use dist::Dist;
pub use lstm::{LstmCore, RnnState};
pub use mlp::Mlp;
pub use obs_norm::ObsNorm;
#[cfg(test)]
pub(crate) use offpolicy::recurrent::tiny as tiny_recurrent_actor_critic;
pub use offpolicy::{OffPolicyModel, PolicyKind};
pub use pearl::{kl_from_prior, product_of_gaussians, PearlModel};
pub use recurrent_net::{RecurrentNet, Unrolled};

use fleetrl_proto::space::Space;

/// Why a model could not be built or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The action space has no head yet.
    #[error("action space {0:?} is not supported by this model")]
    UnsupportedSpace(Space),
    /// Weights are missing a parameter or have the wrong shape.
    #[error("weights do not fit the model: {0}")]
    WeightsMismatch(String),
    /// Weights that hold NaN or infinity: a diverged update, or a corrupt checkpoint or
    /// broadcast.
    #[error("`{0}` holds NaN or infinity")]
    NonFinite(String),
    /// A config key does not fit the env (e.g. convolution keys for flat observations).
    #[error("{key}: {message}")]
    Config {
        /// The dotted key (`model.kernel_sizes`).
        key: &'static str,
        /// What is wrong, with the shapes involved.
        message: String,
    },
    /// A tensor conversion or torch call failed.
    #[error(transparent)]
    Tch(#[from] tch::TchError),
    /// A proto tensor could not be converted.
    #[error(transparent)]
    Tensor(#[from] fleetrl_proto::TensorError),
}

/// Observation in, action out: what an actor needs from a policy.
///
/// Implementations run on the calling thread (tch work is synchronous; never call from an
/// async task) and are not `Sync`; give each thread its own copy.
pub trait Policy {
    /// Picks actions for a batch of observations `[N, D]`: sampled, or the mode when
    /// `deterministic`. Also returns the log-probability and value estimate of each.
    fn act(&self, obs: &tch::Tensor, deterministic: bool) -> PolicyStep;
    /// Value estimates `[N]` for a batch of observations `[N, D]`.
    fn value(&self, obs: &tch::Tensor) -> tch::Tensor;
    /// Width H of the recurrent state; 0 for a feed-forward policy.
    fn state_size(&self) -> i64 {
        0
    }
    /// [`Policy::act`] from a recurrent state `[N, H]`; also returns the next state.
    fn act_recurrent(
        &self,
        obs: &tch::Tensor,
        state: &RnnState,
        deterministic: bool,
    ) -> (PolicyStep, RnnState) {
        (self.act(obs, deterministic), state.shallow_clone())
    }
    /// [`Policy::value`] from a recurrent state `[N, H]` (the state is not advanced).
    fn value_recurrent(&self, obs: &tch::Tensor, state: &RnnState) -> tch::Tensor {
        let _ = state;
        self.value(obs)
    }
}
