//! Envs as `[env]` configures them: the id (native, `gym:` for gymnasium, `envpool:` for
//! EnvPool) and its wrappers.
//!
//! Wrapper order, innermost first: Atari preprocessing, previous action and reward, frame
//! stack, reward scale, normalisation and clip. A
//! `gym:` or `envpool:` id with no wrapper is hosted as one vector env (one EnvPool) stepped per
//! batch; with wrappers, as one env per row so the Rust wrappers see each env.

use super::config::EnvConfig;
#[cfg(feature = "python")]
use super::AtariPreprocessing;
use super::{make_limited, Env, EnvError, FrameStack, PrevActionReward, RewardTransform, VecEnv};

/// Frames an Atari run stacks when `frame_stack` is not set.
const ATARI_STACK: u32 = 4;

/// Builds one env as `config` describes it, wrappers included.
pub fn make_configured(config: &EnvConfig) -> Result<Box<dyn Env>, EnvError> {
    let env = if config.atari {
        make_atari(config)?
    } else {
        make_base(config)?
    };
    let env: Box<dyn Env> = if config.prev_action_reward {
        Box::new(PrevActionReward::new(env)?)
    } else {
        env
    };
    let stack = match config.frame_stack {
        0 if config.atari => ATARI_STACK,
        k => k,
    };
    let env: Box<dyn Env> = if stack > 1 {
        Box::new(FrameStack::new(env, stack as usize))
    } else {
        env
    };
    if config.reward_scale != 1.0 || config.reward_clip > 0.0 || config.normalize_reward {
        let transform = RewardTransform::new(env, config.reward_scale, config.reward_clip);
        return Ok(Box::new(if config.normalize_reward {
            transform.normalizing(config.normalize_reward_discount)
        } else {
            transform
        }));
    }
    Ok(env)
}

/// `n` envs as `config` describes them (see the module docs for how gymnasium ids are hosted).
pub fn make_vec(config: &EnvConfig, n: usize) -> Result<VecEnv, EnvError> {
    #[cfg(feature = "python")]
    if let Some((library, id)) = super::python::hosted_id(&config.id) {
        if !config.has_wrappers() {
            let kwargs = gym_kwargs(config)?;
            let batch =
                super::python::GymVecEnv::hosted(library, id, n, &kwargs, config.vectorization)?;
            return VecEnv::from_batch(Box::new(batch));
        }
    }
    make_vec_per_row(config, n)
}

/// `n` envs as `config` describes them, one [`Env`] per row even for a gymnasium id (which
/// [`make_vec`] hosts as one vector env): what holding finished envs
/// ([`VecEnv::hold_finished`]) needs.
pub fn make_vec_per_row(config: &EnvConfig, n: usize) -> Result<VecEnv, EnvError> {
    let envs = (0..n)
        .map(|_| make_configured(config))
        .collect::<Result<Vec<_>, _>>()?;
    VecEnv::new(envs)
}

/// The unwrapped env: a native one (no kwargs allowed) or a gymnasium one.
fn make_base(config: &EnvConfig) -> Result<Box<dyn Env>, EnvError> {
    #[cfg(feature = "python")]
    if let Some((library, id)) = super::python::hosted_id(&config.id) {
        return Ok(Box::new(super::python::GymEnv::hosted(
            library,
            id,
            &gym_kwargs(config)?,
        )?));
    }
    if !config.kwargs.is_empty() {
        return Err(EnvError::VecMismatch(format!(
            "[env] kwargs are for gymnasium (gym:) ids; native env `{}` takes none",
            config.id
        )));
    }
    make_limited(&config.id, config.max_episode_steps)
}

/// `[env] kwargs`, with `max_episode_steps` for gymnasium when `[env] max_episode_steps` sets it.
#[cfg(feature = "python")]
fn gym_kwargs(config: &EnvConfig) -> Result<toml::Table, EnvError> {
    let mut kwargs = config.kwargs.clone();
    if config.max_episode_steps > 0 {
        if kwargs.contains_key("max_episode_steps") {
            return Err(EnvError::VecMismatch(
                "set the episode length once: [env] max_episode_steps or kwargs.max_episode_steps"
                    .to_string(),
            ));
        }
        kwargs.insert(
            "max_episode_steps".into(),
            toml::Value::Integer(i64::from(config.max_episode_steps)),
        );
    }
    Ok(kwargs)
}

/// A gymnasium ALE env (frameskip 1) under [`AtariPreprocessing`], with FIRE pressed after
/// each reset when the game's action 1 is FIRE.
fn make_atari(config: &EnvConfig) -> Result<Box<dyn Env>, EnvError> {
    #[cfg(feature = "python")]
    if let Some((super::python::Host::Gymnasium, id)) = super::python::hosted_id(&config.id) {
        let mut kwargs = gym_kwargs(config)?;
        if !kwargs.contains_key("frameskip") {
            // The preprocessing skips frames itself.
            kwargs.insert("frameskip".into(), toml::Value::Integer(1));
        }
        let env = super::python::GymEnv::new(id, &kwargs)?;
        let meanings = env.action_meanings()?;
        let fire = meanings.get(1).is_some_and(|m| m == "FIRE") && meanings.len() >= 3;
        return Ok(Box::new(AtariPreprocessing::new(env, fire)?));
    }
    Err(EnvError::VecMismatch(format!(
        "[env] atari = true needs a gymnasium ALE id (e.g. gym:ALE/Pong-v5), got `{}`",
        config.id
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;

    #[test]
    fn native_env_with_wrappers_keeps_the_contract() {
        let config = EnvConfig {
            id: "Pendulum-v1".into(),
            reward_scale: 0.1,
            reward_clip: 0.5,
            frame_stack: 3,
            ..EnvConfig::default()
        };
        let mut env = make_configured(&config).unwrap();
        assert_eq!(env.observation_space().flat_dim(), 9);
        check_env_contract(env.as_mut());
        let mut venv = make_vec(&config, 2).unwrap();
        venv.reset(0);
        let step = venv
            .step(&vec![
                fleetrl_proto::space::Action::Continuous(vec![0.0]);
                2
            ])
            .unwrap();
        assert!(step.reward.iter().all(|r| (-0.5..=0.0).contains(r)));
    }

    #[test]
    fn kwargs_on_a_native_env_are_an_error() {
        let mut config = EnvConfig::default();
        config.kwargs.insert("g".into(), toml::Value::Float(9.8));
        let err = make_configured(&config).err().expect("rejected");
        assert!(err.to_string().contains("kwargs"), "{err}");
    }
}
