//! The one place that knows every algorithm: its family (what it trains on, so what actors
//! collect and which table holds it), its model, its replay options and publish interval,
//! and how to build it. Adding an algorithm adds one arm to [`spec`] and one to [`build`].

use std::borrow::Cow;

use tch::Device;

use super::bc::Bc;
use super::bc::BcPolicy;
use super::config::AlgoConfig;
use super::dqn::Dqn;
use super::maml::Maml;
use super::offpolicy::{Exploration, ReplayOptions};
use super::pearl::Pearl;
use super::sac::Sac;
use super::td3::Td3;
use super::{A2c, Algorithm, Impala, Ppo, Trpo, Vpg};
use crate::config::RunConfig;
use crate::models::{ActorCritic, ModelError, OffPolicyModel, PearlModel, PolicyKind};
use fleetrl_proto::space::Space;

/// How an algorithm gets its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Actors stream rollouts of the current policy into a queue table; every rollout is
    /// trained on once, and weights are published after every update.
    OnPolicy,
    /// Actors stream transitions (or sequences) into a replay table the learner samples at
    /// the rate limiter's pace; weights are published every `publish_interval` updates.
    OffPolicy,
}

/// How an algorithm trains a recurrent model (`model.lstm_size > 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recurrence {
    /// Unrolls the LSTM over each rollout from the state the actor stored with it (and takes
    /// `model.pre_lstm_sizes`).
    Rollouts,
    /// Replays stored sequences with burn-in (R2D2, recurrent SAC, TD3 and DDPG), each stored
    /// with the states of its `cores` recurrent cores side by side (R2D2's Q network's; the
    /// policy's, then every critic's): `cores x model.lstm_size` wide.
    Sequences {
        /// The model's recurrent cores.
        cores: u32,
    },
}

impl Recurrence {
    /// Stored sequences for a recurrent actor-critic: a core for the policy and one for each
    /// of its `num_critics` critics (models/offpolicy/recurrent.rs).
    fn actor_critic(num_critics: u32) -> Recurrence {
        Recurrence::Sequences {
            cores: 1 + num_critics.max(1),
        }
    }
}

/// A directory of demos the learner inserts into an off-policy table before it samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demos<'a> {
    /// The directory of demo files (`fleetrl record`'s, or a converted Minari dataset).
    pub dir: &'a str,
    /// What they are to the algorithm.
    pub role: DemoRole,
}

/// What an algorithm's demos are to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoRole {
    /// The data it learns from (BC's `algo.demos`): sampled as often as the learner likes
    /// once inserted, and counted as the run's env steps.
    Dataset,
    /// Transitions the table starts with (`algo.replay.initial_demos`): sampled at the
    /// actors' pace from the start, and not env steps.
    Prefill,
}

impl<'a> Demos<'a> {
    /// `algo.replay.initial_demos`, when set.
    fn prefill(dir: Option<&'a str>) -> Option<Demos<'a>> {
        dir.map(|dir| Demos {
            dir,
            role: DemoRole::Prefill,
        })
    }
}

/// How a task-agnostic run (`tasks.multi_task`) of an algorithm is evaluated on the held-out
/// tasks: as the meta-RL algorithm it is the baseline for plays them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskAgnostic {
    /// MAML's baseline: rollouts of sampled actions, as MAML's meta-evaluation, unadapted.
    AsMaml,
    /// PEARL's baseline: whole episodes with the evaluation's actions, as PEARL's adapted one.
    AsPearl,
}

/// Which of the user's TorchScript modules an algorithm trains (docs/torchscript.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scripted {
    /// `model.torchscript` is the actor-critic: `forward(obs) -> (policy, value)`.
    ActorCritic,
    /// `model.torchscript` is the Q-network: `forward(obs) -> q`.
    QNetwork,
    /// `model.torchscript` is the actor and `model.torchscript_critic` every critic (each
    /// optional: the other networks are fleetrl's).
    ActorAndCritics,
}

/// What the rest of the system needs to know about an algorithm, without building it.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    /// Where its data comes from.
    pub family: Family,
    /// Replay table options (off-policy algorithms; PEARL's are derived from its keys).
    pub replay: Option<Cow<'a, ReplayOptions>>,
    /// Updates between weight publications (at least 1).
    pub publish_interval: u64,
    /// The off-policy model's policy kind and critic count; `None`: an actor-critic, or
    /// (BC) whatever the action space calls for.
    pub shape: Option<(PolicyKind, u32)>,
    /// Demos the learner inserts into the table before sampling (BC's `algo.demos`; DQN's,
    /// SAC's, TD3's and DDPG's `algo.replay.initial_demos`).
    pub demos: Option<Demos<'a>>,
    /// How it trains an LSTM model; `None`: feed-forward models only.
    pub recurrence: Option<Recurrence>,
    /// Whether its losses leave out the padding of `actors.mid_batch_reset = false`.
    pub masks_padding: bool,
    /// Whether its actors collect plain rollouts of one policy (not transitions, not meta-RL
    /// adaptations): what `actors.alternating` builds on.
    pub plain_rollouts: bool,
    /// Whether its actors play one policy, rollouts or transitions, so `tasks.multi_task` can
    /// hand them random training tasks, and how such a run is evaluated; `None` for meta-RL
    /// algorithms, which draw their own tasks.
    pub task_agnostic: Option<TaskAgnostic>,
    /// How its actors act step by step and what they insert: the n-step transition
    /// collectors' settings (`None`: the algorithm's actors collect rollouts or rounds).
    pub acting: Option<StepActing>,
    /// Which TorchScript modules it trains; `None`: only fleetrl's own networks.
    pub scripted: Option<Scripted>,
}

/// What an off-policy algorithm's actors add to its policy and insert: exploration, the
/// n-step horizon and discount, a reward clip, and an expert to imitate (BC).
#[derive(Debug, Clone, PartialEq)]
pub struct StepActing {
    /// Exploration on top of the policy's action.
    pub explore: Exploration,
    /// Steps per transition (n-step returns).
    pub n_step: usize,
    /// Discount of the n-step return.
    pub discount: f64,
    /// Rewards clipped to +-this on the actors (0: none).
    pub reward_clip: f64,
    /// Whether the actors insert their transitions (BC learns from demos unless it has an
    /// expert to play).
    pub inserts: bool,
    /// An expert checkpoint the actors play, labelling each step with its action (BC).
    pub expert: Option<String>,
}

impl StepActing {
    fn new(explore: &Exploration, n_step: u32, discount: f64) -> StepActing {
        StepActing {
            explore: explore.clone(),
            n_step: n_step as usize,
            discount,
            reward_clip: 0.0,
            inserts: true,
            expert: None,
        }
    }

    /// BC's actors act greedily with the learner's policy (for the training returns); with an
    /// expert they play the expert, whose steps are the labels.
    fn imitating(expert: Option<&str>, discount: f64) -> StepActing {
        let greedy = Exploration {
            deterministic: true,
            epsilon_start: 0.0,
            epsilon_end: 0.0,
            ..Exploration::default()
        };
        StepActing {
            inserts: expert.is_some(),
            expert: expert.map(String::from),
            ..StepActing::new(&greedy, 1, discount)
        }
    }
}

/// The registry entry of `config`'s algorithm.
pub fn spec(config: &RunConfig) -> Spec<'_> {
    let on_policy = Spec {
        family: Family::OnPolicy,
        replay: None,
        publish_interval: 1,
        shape: None,
        demos: None,
        recurrence: None,
        masks_padding: false,
        plain_rollouts: true,
        task_agnostic: Some(TaskAgnostic::AsMaml),
        acting: None,
        scripted: None,
    };
    let off_policy = |replay, interval: u64, shape, acting| Spec {
        family: Family::OffPolicy,
        replay: Some(Cow::Borrowed(replay)),
        publish_interval: interval.max(1),
        shape,
        demos: None,
        recurrence: None,
        masks_padding: false,
        plain_rollouts: false,
        task_agnostic: Some(TaskAgnostic::AsPearl),
        acting: Some(acting),
        scripted: None,
    };
    match &config.algo {
        AlgoConfig::Ppo(_) | AlgoConfig::A2c(_) => Spec {
            recurrence: Some(Recurrence::Rollouts),
            masks_padding: true,
            scripted: Some(Scripted::ActorCritic),
            ..on_policy
        },
        AlgoConfig::Impala(_) => Spec {
            recurrence: Some(Recurrence::Rollouts),
            ..on_policy
        },
        AlgoConfig::Vpg(_) | AlgoConfig::Trpo(_) => on_policy,
        AlgoConfig::MamlVpg(_) | AlgoConfig::MamlPpo(_) | AlgoConfig::MamlTrpo(_) => Spec {
            plain_rollouts: false,
            task_agnostic: None,
            ..on_policy
        },
        AlgoConfig::Dqn(c) => Spec {
            recurrence: Some(Recurrence::Sequences { cores: 1 }),
            demos: Demos::prefill(c.replay.initial_demo_dir()),
            scripted: Some(Scripted::QNetwork),
            ..off_policy(
                &c.replay,
                c.publish_interval,
                Some((PolicyKind::QValues, 1)),
                StepActing {
                    reward_clip: c.reward_clip,
                    ..StepActing::new(&c.explore, c.replay.n_step, c.discount)
                },
            )
        },
        // A categorical policy where the actions are discrete (see `build_model`); recurrent
        // SAC replays sequences as R2D2 does, with a core for the policy and each critic.
        AlgoConfig::Sac(c) => Spec {
            recurrence: Some(Recurrence::actor_critic(c.num_critics)),
            demos: Demos::prefill(c.replay.initial_demo_dir()),
            scripted: Some(Scripted::ActorAndCritics),
            ..off_policy(
                &c.replay,
                c.publish_interval,
                Some((PolicyKind::SquashedGaussian, c.num_critics)),
                StepActing::new(&c.explore, c.replay.n_step, c.discount),
            )
        },
        AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => Spec {
            recurrence: Some(Recurrence::actor_critic(c.num_critics)),
            demos: Demos::prefill(c.replay.initial_demo_dir()),
            scripted: Some(Scripted::ActorAndCritics),
            ..off_policy(
                &c.replay,
                c.publish_interval,
                Some((PolicyKind::Deterministic, c.num_critics)),
                StepActing::new(&c.explore, c.replay.n_step, c.discount),
            )
        },
        AlgoConfig::Bc(c) => Spec {
            demos: c.demo_dir().map(|dir| Demos {
                dir,
                role: DemoRole::Dataset,
            }),
            ..off_policy(
                &c.replay,
                c.publish_interval,
                None,
                StepActing::imitating(c.expert(), c.discount),
            )
        },
        AlgoConfig::Pearl(c) => Spec {
            family: Family::OffPolicy,
            replay: Some(Cow::Owned(c.replay(&config.tasks))),
            publish_interval: c.publish_interval.max(1),
            shape: None,
            demos: None,
            recurrence: None,
            masks_padding: false,
            plain_rollouts: false,
            task_agnostic: None,
            acting: None,
            scripted: None,
        },
    }
}

/// The off-policy model `config` trains and acts with (BC: Q-value logits for discrete
/// actions; for continuous ones a deterministic policy, or a squashed Gaussian with
/// `algo.policy = "gaussian"`; SAC: a squashed Gaussian, or a categorical policy for discrete
/// actions).
pub fn build_model(
    config: &RunConfig,
    obs_space: &Space,
    action_space: &Space,
    device: Device,
) -> Result<OffPolicyModel, ModelError> {
    let (kind, critics) = match (spec(config).shape, action_space, &config.algo) {
        (Some((_, critics)), Space::Discrete { .. }, AlgoConfig::Sac(c)) => {
            let caps = &c.caps;
            if caps.temporal_weight > 0.0 || caps.spatial_weight > 0.0 {
                return Err(ModelError::Config {
                    key: "algo.caps",
                    message: "CAPS smooths continuous actions; this env's are discrete (SAC \
                              trains a categorical policy there): set the caps weights to 0"
                        .into(),
                });
            }
            (PolicyKind::Categorical, critics)
        }
        (Some((PolicyKind::Deterministic, _)), Space::Discrete { .. }, _) => {
            return Err(ModelError::Config {
                key: "algo.name",
                message: format!(
                    "{} trains a deterministic policy of continuous actions, and this env's are \
                     discrete: use dqn (R2D2 with model.lstm_size > 0) or sac",
                    config.algo.name()
                ),
            });
        }
        (Some(shape), _, _) => shape,
        (None, Space::Box { .. }, AlgoConfig::Bc(c)) if c.policy == BcPolicy::Gaussian => {
            (PolicyKind::SquashedGaussian, 1)
        }
        (None, Space::Box { .. }, _) => (PolicyKind::Deterministic, 1),
        (None, Space::Discrete { .. }, AlgoConfig::Bc(c)) if c.policy == BcPolicy::Gaussian => {
            return Err(ModelError::Config {
                key: "algo.policy",
                message: "a Gaussian policy needs continuous actions; this env's are discrete \
                          (BC fits a categorical over the logits there)"
                    .into(),
            });
        }
        (None, Space::Discrete { .. }, _) => (PolicyKind::QValues, 1),
    };
    OffPolicyModel::new(
        &config.model,
        kind,
        critics,
        obs_space,
        action_space,
        device,
    )
}

/// Refuses image observations (`[C, H, W]` boxes) for the algorithms whose networks read flat
/// ones: MAML adapts a plain MLP policy through its functional form and PEARL conditions MLPs
/// on its task variable, so neither runs the convolutional encoder. The learner and the actors
/// ask before they build a model.
pub fn check_observations(config: &RunConfig, obs_space: &Space) -> Result<(), ModelError> {
    let flat_only = config.algo.as_maml().is_some() || config.algo.as_pearl().is_some();
    match obs_space {
        Space::Box { shape, .. } if flat_only && shape.len() == 3 => Err(ModelError::Config {
            key: "algo.name",
            message: format!(
                "{} reads flat observations (MAML adapts a plain MLP policy, PEARL conditions \
                 MLPs on its task variable; neither runs the convolutional encoder), and this \
                 env's are images of shape {shape:?}: use an env with flat observations, or an \
                 algorithm that trains the encoder (ppo, a2c, impala, vpg, trpo, dqn, sac, td3)",
                config.algo.name()
            ),
        }),
        _ => Ok(()),
    }
}

/// The algorithm `config.algo` names, with a fresh model for `obs_space` and `action_space`
/// on `devices[0]` (off-policy algorithms also get a target model of the same shape). Linear
/// schedules span the run's step budget; PPO splits its minibatches over
/// `learner.update_threads` threads, or its update over several `devices` (config validation
/// refuses several devices for the others).
pub fn build(
    config: &RunConfig,
    obs_space: &Space,
    action_space: &Space,
    devices: &[Device],
) -> Result<Box<dyn Algorithm>, ModelError> {
    check_observations(config, obs_space)?;
    let device = devices.first().copied().unwrap_or(Device::Cpu);
    let total = config.stop.total_env_steps;
    let obs_dim = obs_space.flat_dim() as i64;
    let actor_critic = |device| ActorCritic::new(&config.model, obs_space, action_space, device);
    let off_policy = || build_model(config, obs_space, action_space, device);
    let mut algo: Box<dyn Algorithm> = match &config.algo {
        AlgoConfig::Ppo(c) if devices.len() > 1 => {
            let master = actor_critic(device)?;
            let mut replicas = Vec::with_capacity(devices.len() - 1);
            for &d in &devices[1..] {
                replicas.push(actor_critic(d)?);
            }
            let mut replicas = replicas.into_iter();
            let make = move |_| replicas.next().expect("one replica per further device");
            Box::new(
                Ppo::new(c, master, total)
                    .with_intrinsic(obs_dim)
                    .on_devices(devices, make),
            )
        }
        AlgoConfig::Ppo(c) => Box::new(
            Ppo::new(c, actor_critic(device)?, total)
                .with_intrinsic(obs_dim)
                .with_threads(config.learner.update_threads as usize),
        ),
        AlgoConfig::A2c(c) => {
            Box::new(A2c::new(c, actor_critic(device)?, total).with_intrinsic(obs_dim))
        }
        AlgoConfig::Vpg(c) => Box::new(Vpg::new(c, actor_critic(device)?)),
        AlgoConfig::Trpo(c) => Box::new(Trpo::new(c, actor_critic(device)?)),
        AlgoConfig::Impala(c) => Box::new(Impala::new(c, actor_critic(device)?, total)),
        AlgoConfig::Dqn(c) => Box::new(Dqn::new(c, off_policy()?, off_policy()?)),
        AlgoConfig::Sac(c) => Box::new(Sac::new(c, off_policy()?, off_policy()?)),
        AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => {
            Box::new(Td3::new(c, off_policy()?, off_policy()?))
        }
        AlgoConfig::Bc(c) => Box::new(Bc::new(c, off_policy()?)),
        AlgoConfig::Pearl(c) => Box::new(Pearl::new(
            c,
            PearlModel::new(&config.model, c, obs_space, action_space, device)?,
            &config.model,
        )),
        AlgoConfig::MamlVpg(c) | AlgoConfig::MamlPpo(c) | AlgoConfig::MamlTrpo(c) => {
            Box::new(Maml::new(
                c,
                c.outer,
                actor_critic(device)?,
                config.actors.envs_per_actor as usize,
            ))
        }
    };
    // A graph cannot hold the collectives of several learner processes.
    algo.use_cuda_graph(config.learner.cuda_graph && config.learner.world_size == 1)
        .map_err(|e| ModelError::Config {
            key: "learner.cuda_graph",
            message: e.to_string(),
        })?;
    Ok(algo)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PEARL publishes every update by default, and every `algo.publish_interval` when set.
    #[test]
    fn pearl_publishes_at_its_interval() {
        let interval = |extra: &str| {
            let text = format!(
                "[env]\nid = \"PointGoal-v0\"\n[algo]\nname = \"pearl\"\n{extra}\n\
                 [actors]\nenvs_per_actor = 1\n"
            );
            spec(&RunConfig::from_toml(&text, "t").unwrap()).publish_interval
        };
        assert_eq!(interval(""), 1);
        assert_eq!(interval("publish_interval = 25"), 25);
    }

    /// MAML and PEARL refuse image observations by name, before any model is built; PPO
    /// builds its encoder for them.
    #[test]
    fn meta_rl_refuses_image_observations() {
        let frames = Space::Box {
            shape: vec![4, 10, 10],
            low: vec![0.0; 400],
            high: vec![1.0; 400],
        };
        let action = Space::Box {
            shape: vec![2],
            low: vec![-1.0; 2],
            high: vec![1.0; 2],
        };
        let config = |algo: &str, extra: &str| {
            let text = format!(
                "[env]\nid = \"PointGoal-v0\"\n[model]\nchannels = [4]\nkernel_sizes = [3]\n\
                 [algo]\nname = \"{algo}\"\n{extra}"
            );
            RunConfig::from_toml(&text, "t").unwrap()
        };
        for (algo, extra) in [
            ("maml_trpo", ""),
            ("maml_vpg", ""),
            ("pearl", "[actors]\nenvs_per_actor = 1\n"),
        ] {
            let error = build(&config(algo, extra), &frames, &action, &[Device::Cpu])
                .err()
                .unwrap_or_else(|| panic!("{algo} built on images"))
                .to_string();
            assert!(
                error.starts_with(&format!("algo.name: {algo} reads flat observations")),
                "{error}"
            );
        }
        build(&config("ppo", ""), &frames, &action, &[Device::Cpu]).unwrap();
    }

    /// BC's `policy` picks the continuous model, and a Gaussian for discrete actions is
    /// refused by its key.
    #[test]
    fn bc_policy_picks_the_model_and_refuses_discrete_gaussians() {
        let build = |env: &str, policy: &str| {
            let text =
                format!("[env]\nid = \"{env}\"\n[algo]\nname = \"bc\"\npolicy = \"{policy}\"\ndemos = \"d\"\n");
            let config = RunConfig::from_toml(&text, "t").unwrap();
            let env = crate::envs::make(env).unwrap();
            build_model(
                &config,
                &env.observation_space(),
                &env.action_space(),
                Device::Cpu,
            )
        };
        let kind = |env: &str, policy: &str| build(env, policy).unwrap().kind();
        assert_eq!(
            kind("Pendulum-v1", "gaussian"),
            PolicyKind::SquashedGaussian
        );
        assert_eq!(
            kind("Pendulum-v1", "deterministic"),
            PolicyKind::Deterministic
        );
        assert_eq!(kind("CartPole-v1", "deterministic"), PolicyKind::QValues);
        let error = build("CartPole-v1", "gaussian").unwrap_err().to_string();
        assert!(error.starts_with("algo.policy: "), "{error}");
    }

    /// TD3 and DDPG, feed-forward or recurrent, refuse discrete actions by `algo.name`.
    #[test]
    fn td3_refuses_discrete_actions_by_name() {
        for (algo, lstm) in [("td3", 0), ("ddpg", 8), ("td3", 8)] {
            let text = format!(
                "[env]\nid = \"CartPole-v1\"\n[model]\nlstm_size = {lstm}\n[algo]\n\
                 name = \"{algo}\"\n"
            );
            let config = RunConfig::from_toml(&text, "t").unwrap();
            let env = crate::envs::make("CartPole-v1").unwrap();
            let (obs, action) = (env.observation_space(), env.action_space());
            let error = build_model(&config, &obs, &action, Device::Cpu)
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with(&format!("algo.name: {algo} trains")),
                "{error}"
            );
        }
    }

    /// SAC on discrete actions is the same algorithm with a categorical policy (two critics of
    /// one Q value per action); CAPS, which smooths continuous actions, is refused by its key.
    #[test]
    fn sac_on_discrete_actions_trains_a_categorical_policy() {
        let build = |extra: &str| {
            let text = format!("[env]\nid = \"CartPole-v1\"\n[algo]\nname = \"sac\"\n{extra}");
            let config = RunConfig::from_toml(&text, "t").unwrap();
            let env = crate::envs::make("CartPole-v1").unwrap();
            build_model(
                &config,
                &env.observation_space(),
                &env.action_space(),
                Device::Cpu,
            )
        };
        let model = build("").unwrap();
        assert_eq!(model.kind(), PolicyKind::Categorical);
        assert_eq!(
            (model.num_critics(), model.discrete_actions()),
            (2, Some(2))
        );
        let error = build("[algo.caps]\ntemporal_weight = 0.1\n")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("algo.caps: "), "{error}");
    }
}
