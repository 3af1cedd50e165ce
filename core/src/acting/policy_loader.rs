//! Loading the acting policy out of any checkpoint, whichever algorithm wrote it: an
//! actor-critic for the on-policy algorithms, an [`OffPolicyModel`] for DQN, SAC, TD3, DDPG
//! and BC. `fleetrl eval`, `fleetrl record` and BC's expert actors all go through here.

use std::path::Path;

use crate::algos::registry::{build_model, spec, Family};
use crate::algos::Model;
use crate::checkpoint::{self, CheckpointError};
use crate::config::RunConfig;
use crate::envs::{self, EnvError};
use crate::models::{ActorCritic, ModelError, OffPolicyModel, PearlModel, Policy};
use fleetrl_proto::space::Space;

/// Why a checkpoint's policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadPolicyError {
    /// The checkpoint could not be read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Its env is unknown to this build.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// Its weights do not fit the model its config describes, or are not finite.
    #[error("loading the policy from {path}: {cause}")]
    Model {
        /// The checkpoint.
        path: String,
        /// What did not fit (in the message, not repeated as a source).
        cause: ModelError,
    },
}

/// A policy whose weights can be replaced: what `fleetrl eval` plays and the policy server
/// (`fleet-serve`) serves, from a checkpoint or from the learner's weight stream.
pub trait ActingPolicy: Policy + Model {}

impl<T: Policy + Model> ActingPolicy for T {}

/// The acting policy `config` trains on spaces `obs` and `action`, on the CPU, with its
/// initial weights: an actor-critic for the on-policy algorithms, an [`OffPolicyModel`] for
/// the off-policy ones (DQN, SAC, TD3, DDPG, BC), PEARL's model unadapted (z at the prior's
/// mean; PEARL's meta-test is [`load_pearl`]'s).
///
/// [`OffPolicyModel`]: crate::models::OffPolicyModel
pub fn build_policy(
    config: &RunConfig,
    obs: &Space,
    action: &Space,
) -> Result<Box<dyn ActingPolicy>, ModelError> {
    let cpu = tch::Device::Cpu;
    Ok(if let Some(pearl) = config.algo.as_pearl() {
        Box::new(PearlModel::new(&config.model, pearl, obs, action, cpu)?)
    } else if config.algo.is_off_policy() {
        Box::new(build_model(config, obs, action, cpu)?)
    } else {
        Box::new(ActorCritic::new(&config.model, obs, action, cpu)?)
    })
}

/// The policy saved in checkpoint `path`, on the CPU, and the run config it was trained with.
pub fn load_policy(path: &Path) -> Result<(Box<dyn Policy>, RunConfig), LoadPolicyError> {
    let ckpt = checkpoint::load(path)?;
    let env = envs::make_configured(&ckpt.config.env)?;
    let fit = |cause| LoadPolicyError::Model {
        path: path.display().to_string(),
        cause,
    };
    let (obs, action) = (env.observation_space(), env.action_space());
    let mut policy = build_policy(&ckpt.config, &obs, &action).map_err(fit)?;
    policy.load_named(&ckpt.model).map_err(fit)?;
    Ok((policy, ckpt.config))
}

/// The model `build` makes for checkpoint `path`'s config and env spaces, on the CPU, with the
/// saved weights in it; and the config.
fn load_model<M: Model>(
    path: &Path,
    build: impl FnOnce(&RunConfig, &Space, &Space) -> Result<M, ModelError>,
) -> Result<(M, RunConfig), LoadPolicyError> {
    let ckpt = checkpoint::load(path)?;
    let env = envs::make_configured(&ckpt.config.env)?;
    let fit = |cause| LoadPolicyError::Model {
        path: path.display().to_string(),
        cause,
    };
    let mut model =
        build(&ckpt.config, &env.observation_space(), &env.action_space()).map_err(fit)?;
    model.load_named(&ckpt.model).map_err(fit)?;
    Ok((model, ckpt.config))
}

/// The actor-critic saved in on-policy checkpoint `path` (what MAML's meta-evaluation
/// adapts, what `fleetrl export` writes), on the CPU, and its run config; an error naming the
/// algorithm when the checkpoint is not on-policy (its weights would not fit).
pub fn load_actor_critic(path: &Path) -> Result<(ActorCritic, RunConfig), LoadPolicyError> {
    load_model(path, |config, obs, action| {
        if spec(config).family != Family::OnPolicy {
            return Err(trained_by(
                config,
                "whose model is not an on-policy actor-critic (ppo, a2c, impala, vpg, trpo, maml)",
            ));
        }
        ActorCritic::new(&config.model, obs, action, tch::Device::Cpu)
    })
}

/// The off-policy model (DQN, SAC, TD3, DDPG, BC) saved in checkpoint `path`, on the CPU, and
/// its run config; an error naming the algorithm when the checkpoint is not one.
pub fn load_offpolicy(path: &Path) -> Result<(OffPolicyModel, RunConfig), LoadPolicyError> {
    load_model(path, |config, obs, action| {
        if spec(config).family != Family::OffPolicy || config.algo.as_pearl().is_some() {
            return Err(trained_by(
                config,
                "whose model is not an off-policy policy and critics (dqn, sac, td3, ddpg, bc)",
            ));
        }
        build_model(config, obs, action, tch::Device::Cpu)
    })
}

/// The PEARL model saved in checkpoint `path` (what its meta-test adapts), on the CPU, and its
/// run config; an error naming the algorithm when the checkpoint is not PEARL's.
pub fn load_pearl(path: &Path) -> Result<(PearlModel, RunConfig), LoadPolicyError> {
    load_model(path, |config, obs, action| match config.algo.as_pearl() {
        Some(pearl) => PearlModel::new(&config.model, pearl, obs, action, tch::Device::Cpu),
        None => Err(trained_by(config, "not pearl")),
    })
}

/// The refusal of a checkpoint whose algorithm (`config`'s) does not build the model asked
/// for: "the checkpoint was trained by <algo>, <why>".
fn trained_by(config: &RunConfig, why: &str) -> ModelError {
    ModelError::Config {
        key: "algo.name",
        message: format!(
            "the checkpoint was trained by {}, {why}",
            config.algo.name()
        ),
    }
}
