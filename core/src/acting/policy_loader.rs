//! Loading the acting policy out of any checkpoint, whichever algorithm wrote it: an
//! actor-critic for the on-policy algorithms, an [`OffPolicyModel`] for DQN, SAC, TD3, DDPG
//! and BC. `fleetrl eval`, `fleetrl record` and BC's expert actors all go through here.

use std::path::Path;

use crate::algos::registry::build_model;
use crate::checkpoint::{self, CheckpointError};
use crate::config::RunConfig;
use crate::envs::{self, EnvError};
use crate::models::{ActorCritic, ModelError, PearlModel, Policy};

/// Why a checkpoint's policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadPolicyError {
    /// The checkpoint could not be read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Its env is unknown to this build.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// Its weights do not fit the model its config describes.
    #[error("loading the policy from {path}: {source}")]
    Model {
        /// The checkpoint.
        path: String,
        /// What did not fit.
        source: ModelError,
    },
}

/// The policy saved in checkpoint `path`, on the CPU, and the run config it was trained with.
pub fn load_policy(path: &Path) -> Result<(Box<dyn Policy>, RunConfig), LoadPolicyError> {
    let ckpt = checkpoint::load(path)?;
    let config = ckpt.config;
    let env = envs::make_configured(&config.env)?;
    let (obs, action) = (env.observation_space(), env.action_space());
    let fit = |source| LoadPolicyError::Model {
        path: path.display().to_string(),
        source,
    };
    let policy: Box<dyn Policy> = if let Some(pearl) = config.algo.as_pearl() {
        // Unadapted (z at the prior's mean); PEARL's meta-test is [`load_pearl`]'s.
        let mut model =
            PearlModel::new(&config.model, pearl, &obs, &action, tch::Device::Cpu).map_err(fit)?;
        model.load_named(&ckpt.model).map_err(fit)?;
        Box::new(model)
    } else if config.algo.is_off_policy() {
        let mut model = build_model(&config, &obs, &action, tch::Device::Cpu).map_err(fit)?;
        model.load_named(&ckpt.model).map_err(fit)?;
        Box::new(model)
    } else {
        let mut model =
            ActorCritic::new(&config.model, &obs, &action, tch::Device::Cpu).map_err(fit)?;
        model.load_named(&ckpt.model).map_err(fit)?;
        Box::new(model)
    };
    Ok((policy, config))
}

/// The actor-critic saved in on-policy checkpoint `path` (what MAML's meta-evaluation
/// adapts), on the CPU, and its run config.
pub fn load_actor_critic(path: &Path) -> Result<(ActorCritic, RunConfig), LoadPolicyError> {
    let ckpt = checkpoint::load(path)?;
    let config = ckpt.config;
    let env = envs::make_configured(&config.env)?;
    let fit = |source| LoadPolicyError::Model {
        path: path.display().to_string(),
        source,
    };
    let mut model = ActorCritic::new(
        &config.model,
        &env.observation_space(),
        &env.action_space(),
        tch::Device::Cpu,
    )
    .map_err(fit)?;
    model.load_named(&ckpt.model).map_err(fit)?;
    Ok((model, config))
}

/// The PEARL model saved in checkpoint `path` (what its meta-test adapts), on the CPU, and its
/// run config; an error naming the algorithm when the checkpoint is not PEARL's.
pub fn load_pearl(path: &Path) -> Result<(PearlModel, RunConfig), LoadPolicyError> {
    let ckpt = checkpoint::load(path)?;
    let config = ckpt.config;
    let fit = |source| LoadPolicyError::Model {
        path: path.display().to_string(),
        source,
    };
    let Some(pearl) = config.algo.as_pearl() else {
        return Err(fit(ModelError::Config {
            key: "algo.name",
            message: format!(
                "the checkpoint was trained by {}, not pearl",
                config.algo.name()
            ),
        }));
    };
    let env = envs::make_configured(&config.env)?;
    let mut model = PearlModel::new(
        &config.model,
        pearl,
        &env.observation_space(),
        &env.action_space(),
        tch::Device::Cpu,
    )
    .map_err(fit)?;
    model.load_named(&ckpt.model).map_err(fit)?;
    Ok((model, config))
}
