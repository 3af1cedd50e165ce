//! The acting models, built from the run config and the envs' spaces: the one place the
//! actor asks `fleetrl_core` how an algorithm's model is shaped.

use fleetrl_core::algos::registry::{build_model, check_observations};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::VecEnv;
use fleetrl_core::models::{ActorCritic, ModelError, OffPolicyModel};
use tch::Device;

/// The on-policy actor-critic `config` trains, on the CPU.
pub(super) fn actor_critic(config: &RunConfig, envs: &VecEnv) -> Result<ActorCritic, ModelError> {
    check_observations(config, envs.observation_space())?;
    ActorCritic::new(
        &config.model,
        envs.observation_space(),
        envs.action_space(),
        Device::Cpu,
    )
}

/// The off-policy model `config` trains (Q-values, deterministic or Gaussian policy,
/// recurrent for R2D2), on the CPU.
pub(super) fn off_policy(config: &RunConfig, envs: &VecEnv) -> Result<OffPolicyModel, ModelError> {
    build_model(
        config,
        envs.observation_space(),
        envs.action_space(),
        Device::Cpu,
    )
}
