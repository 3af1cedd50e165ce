//! The `[algo]` section: `name` picks the algorithm ("ppo" when absent, so older PPO presets
//! keep loading unchanged) and the other keys are that algorithm's own config, each with its
//! defaults; a key another algorithm owns is an unknown key.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::meta::{MamlConfig, MetaOptimizer, PearlConfig};
use super::offpolicy::{BcConfig, DqnConfig, SacConfig, Td3Config, DDPG_DEFAULTS};
use super::{check, ConfigError};
use crate::optim::Rule;

/// Which algorithm trains, with its hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub enum AlgoConfig {
    /// Proximal Policy Optimization.
    Ppo(PpoConfig),
    /// Advantage actor-critic.
    A2c(A2cConfig),
    /// Vanilla policy gradient (REINFORCE with a baseline), garage's options.
    Vpg(VpgConfig),
    /// Trust Region Policy Optimization.
    Trpo(TrpoConfig),
    /// IMPALA's V-trace actor-critic.
    Impala(ImpalaConfig),
    /// Deep Q-learning (off-policy, replay).
    Dqn(DqnConfig),
    /// Soft actor-critic (off-policy, replay).
    Sac(SacConfig),
    /// Twin delayed DDPG (off-policy, replay).
    Td3(Td3Config),
    /// Deep deterministic policy gradient: TD3's config with DDPG's defaults.
    Ddpg(Td3Config),
    /// Behaviour cloning from demos or an expert checkpoint.
    Bc(BcConfig),
    /// MAML meta-RL with a VPG, PPO or TRPO outer step (on tasks).
    Maml(MetaOptimizer, MamlConfig),
    /// PEARL meta-RL: a context encoder and a latent-conditioned SAC (off-policy, on tasks).
    Pearl(PearlConfig),
}

impl Default for AlgoConfig {
    fn default() -> Self {
        AlgoConfig::Ppo(PpoConfig::default())
    }
}

/// The `name` values, in the order of [`AlgoConfig`]'s variants.
pub const ALGO_NAMES: [&str; 14] = [
    "ppo",
    "a2c",
    "vpg",
    "trpo",
    "impala",
    "dqn",
    "sac",
    "td3",
    "ddpg",
    "bc",
    "maml_vpg",
    "maml_ppo",
    "maml_trpo",
    "pearl",
];

impl AlgoConfig {
    /// The `name` this config is written with.
    pub fn name(&self) -> &'static str {
        match self {
            AlgoConfig::Ppo(_) => "ppo",
            AlgoConfig::A2c(_) => "a2c",
            AlgoConfig::Vpg(_) => "vpg",
            AlgoConfig::Trpo(_) => "trpo",
            AlgoConfig::Impala(_) => "impala",
            AlgoConfig::Dqn(_) => "dqn",
            AlgoConfig::Sac(_) => "sac",
            AlgoConfig::Td3(_) => "td3",
            AlgoConfig::Ddpg(_) => "ddpg",
            AlgoConfig::Bc(_) => "bc",
            AlgoConfig::Maml(MetaOptimizer::Vpg, _) => "maml_vpg",
            AlgoConfig::Maml(MetaOptimizer::Ppo, _) => "maml_ppo",
            AlgoConfig::Maml(MetaOptimizer::Trpo, _) => "maml_trpo",
            AlgoConfig::Pearl(_) => "pearl",
        }
    }

    /// Stages of acting per item: `num_grad_updates + 1` for MAML (each stage acts with the
    /// policy the last one adapted), 1 for every other algorithm.
    pub fn stages(&self) -> u32 {
        self.as_maml().map_or(1, |maml| maml.num_grad_updates + 1)
    }

    /// The MAML config, if the algorithm is meta-RL on tasks.
    pub fn as_maml(&self) -> Option<&MamlConfig> {
        match self {
            AlgoConfig::Maml(_, c) => Some(c),
            _ => None,
        }
    }

    /// The PEARL config, if PEARL is the algorithm.
    pub fn as_pearl(&self) -> Option<&PearlConfig> {
        match self {
            AlgoConfig::Pearl(c) => Some(c),
            _ => None,
        }
    }

    /// Discount gamma, whichever algorithm.
    pub fn discount(&self) -> f64 {
        match self {
            AlgoConfig::Ppo(c) => c.discount,
            AlgoConfig::A2c(c) => c.discount,
            AlgoConfig::Vpg(c) => c.discount,
            AlgoConfig::Trpo(c) => c.discount,
            AlgoConfig::Impala(c) => c.discount,
            AlgoConfig::Dqn(c) => c.discount,
            AlgoConfig::Sac(c) => c.discount,
            AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => c.discount,
            AlgoConfig::Bc(c) => c.discount,
            AlgoConfig::Maml(_, c) => c.discount,
            AlgoConfig::Pearl(c) => c.discount,
        }
    }

    /// V-trace's clips when the algorithm takes V-trace targets in place of GAE (PPO and A2C
    /// with `[algo.vtrace]`; IMPALA always uses V-trace, with its own keys).
    pub fn vtrace(&self) -> Option<&VtraceClips> {
        match self {
            AlgoConfig::Ppo(c) => c.vtrace.as_ref(),
            AlgoConfig::A2c(c) => c.vtrace.as_ref(),
            _ => None,
        }
    }

    /// Whether the algorithm learns from a replay table of transitions (the off-policy
    /// actor and learner loops) rather than from on-policy rollouts.
    pub fn is_off_policy(&self) -> bool {
        matches!(
            self,
            AlgoConfig::Dqn(_)
                | AlgoConfig::Sac(_)
                | AlgoConfig::Td3(_)
                | AlgoConfig::Ddpg(_)
                | AlgoConfig::Bc(_)
        )
    }

    /// The PPO config, if PPO is the algorithm.
    pub fn as_ppo(&self) -> Option<&PpoConfig> {
        match self {
            AlgoConfig::Ppo(c) => Some(c),
            _ => None,
        }
    }

    /// Checks ranges serde cannot; `batch` is the env steps of one training batch.
    pub fn validate(&self, batch: u64) -> Result<(), ConfigError> {
        check(
            (0.0..=1.0).contains(&self.discount()),
            "algo.discount",
            "must be in [0, 1]",
        )?;
        match self {
            AlgoConfig::Ppo(c) => c.validate(batch),
            AlgoConfig::A2c(c) => {
                check_lambda(c.gae_lambda)?;
                check_rule(c.rmsprop_alpha, c.sgd_momentum)?;
                c.vtrace.as_ref().map_or(Ok(()), VtraceClips::validate)?;
                c.intrinsic
                    .as_ref()
                    .map_or(Ok(()), IntrinsicConfig::validate)?;
                check(c.learning_rate > 0.0, "algo.learning_rate", "must be > 0")
            }
            AlgoConfig::Vpg(c) => {
                check_lambda(c.gae_lambda)?;
                check(c.learning_rate > 0.0, "algo.learning_rate", "must be > 0")?;
                c.options().validate()
            }
            AlgoConfig::Trpo(c) => c.validate(),
            AlgoConfig::Impala(c) => c.validate(),
            AlgoConfig::Dqn(c) => c.validate(),
            AlgoConfig::Sac(c) => c.validate(),
            AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => c.validate(),
            AlgoConfig::Bc(c) => c.validate(),
            AlgoConfig::Maml(outer, c) => c.validate(*outer),
            AlgoConfig::Pearl(c) => c.validate(),
        }
    }
}

fn check_lambda(lambda: f64) -> Result<(), ConfigError> {
    check(
        (0.0..=1.0).contains(&lambda),
        "algo.gae_lambda",
        "must be in [0, 1]",
    )
}

impl Serialize for AlgoConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let inner = match self {
            AlgoConfig::Ppo(c) => toml::Table::try_from(c),
            AlgoConfig::A2c(c) => toml::Table::try_from(c),
            AlgoConfig::Vpg(c) => toml::Table::try_from(c),
            AlgoConfig::Trpo(c) => toml::Table::try_from(c),
            AlgoConfig::Impala(c) => toml::Table::try_from(c),
            AlgoConfig::Dqn(c) => toml::Table::try_from(c),
            AlgoConfig::Sac(c) => toml::Table::try_from(c),
            AlgoConfig::Td3(c) | AlgoConfig::Ddpg(c) => toml::Table::try_from(c),
            AlgoConfig::Bc(c) => toml::Table::try_from(c),
            AlgoConfig::Maml(_, c) => toml::Table::try_from(c),
            AlgoConfig::Pearl(c) => toml::Table::try_from(c),
        };
        let mut table = inner.map_err(serde::ser::Error::custom)?;
        table.insert("name".into(), toml::Value::String(self.name().into()));
        table.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AlgoConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(deserializer)?;
        let name = match table.remove("name") {
            None => "ppo".to_string(),
            Some(toml::Value::String(name)) => name,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "algo.name must be a string, got {other}"
                )))
            }
        };
        if name == "ddpg" {
            for (key, value) in DDPG_DEFAULTS {
                let value = match key {
                    "target_noise" => toml::Value::Float(value as f64),
                    _ => toml::Value::Integer(value),
                };
                table.entry(key).or_insert(value);
            }
        }
        let rest = toml::Value::Table(table);
        let err = |e: serde_path_to_error::Error<toml::de::Error>| {
            let message = e.inner().to_string();
            let path = e.path().to_string();
            let key = match path.as_str() {
                "" | "." => "algo".to_string(),
                inner => format!("algo.{inner}"),
            };
            let message = message
                .split("\nin `")
                .next()
                .unwrap_or_default()
                .trim_end();
            D::Error::custom(format!("{key}: {message} (algo.name = \"{name}\")"))
        };
        Ok(match name.as_str() {
            "ppo" => AlgoConfig::Ppo(serde_path_to_error::deserialize(rest).map_err(err)?),
            "a2c" => AlgoConfig::A2c(serde_path_to_error::deserialize(rest).map_err(err)?),
            "vpg" => AlgoConfig::Vpg(serde_path_to_error::deserialize(rest).map_err(err)?),
            "trpo" => AlgoConfig::Trpo(serde_path_to_error::deserialize(rest).map_err(err)?),
            "impala" => AlgoConfig::Impala(serde_path_to_error::deserialize(rest).map_err(err)?),
            "dqn" => AlgoConfig::Dqn(serde_path_to_error::deserialize(rest).map_err(err)?),
            "sac" => AlgoConfig::Sac(serde_path_to_error::deserialize(rest).map_err(err)?),
            "td3" => AlgoConfig::Td3(serde_path_to_error::deserialize(rest).map_err(err)?),
            "ddpg" => AlgoConfig::Ddpg(serde_path_to_error::deserialize(rest).map_err(err)?),
            "bc" => AlgoConfig::Bc(serde_path_to_error::deserialize(rest).map_err(err)?),
            "maml_vpg" => AlgoConfig::Maml(
                MetaOptimizer::Vpg,
                serde_path_to_error::deserialize(rest).map_err(err)?,
            ),
            "maml_ppo" => AlgoConfig::Maml(
                MetaOptimizer::Ppo,
                serde_path_to_error::deserialize(rest).map_err(err)?,
            ),
            "maml_trpo" => AlgoConfig::Maml(
                MetaOptimizer::Trpo,
                serde_path_to_error::deserialize(rest).map_err(err)?,
            ),
            "pearl" => AlgoConfig::Pearl(serde_path_to_error::deserialize(rest).map_err(err)?),
            other => {
                return Err(D::Error::custom(format!(
                    "unknown algo.name `{other}`{}; expected one of {}",
                    crate::suggest::did_you_mean(other, ALGO_NAMES.iter().copied()),
                    ALGO_NAMES.join(", ")
                )))
            }
        })
    }
}

/// PPO hyperparameters (names follow rlpyt's `PPO`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PpoConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda; 1.0 gives discounted returns minus values.
    pub gae_lambda: f64,
    /// Adam learning rate at the start of training.
    pub learning_rate: f64,
    /// Decay the learning rate linearly to 0 over `stop.total_env_steps`.
    pub linear_lr_schedule: bool,
    /// PPO ratio clip epsilon at the start of training.
    pub ratio_clip: f64,
    /// Decay the ratio clip linearly to 0 over `stop.total_env_steps`.
    pub linear_clip_schedule: bool,
    /// Weight of the value loss (mean squared error against the GAE return).
    pub value_loss_coeff: f64,
    /// Clip the value loss like the ratio (pytorchrl, CleanRL `clip_vloss`): the larger of
    /// `(V - R)^2` and `(V_old + clip(V - V_old, -e, e) - R)^2`, with `e` the ratio clip.
    pub clip_value_loss: bool,
    /// Weight of the entropy bonus.
    pub entropy_loss_coeff: f64,
    /// Global gradient-norm clip; 0 disables clipping.
    pub clip_grad_norm: f64,
    /// Passes over each batch.
    pub epochs: u32,
    /// Minibatches per epoch (the batch is shuffled, then split).
    pub minibatches: u32,
    /// Steps per minibatch instead of a count (SB3's `batch_size`, pytorchrl's
    /// `mini_batch_size`): each batch splits into `round(steps / minibatch_size)` minibatches,
    /// so a batch that grows with the fleet keeps minibatches of about this size. Absent:
    /// `minibatches` decides. Feed-forward models only.
    pub minibatch_size: Option<u64>,
    /// Shuffle the batch before each epoch's split into minibatches (pytorchrl's
    /// `generate_batches(shuffle)`); false takes the minibatches in order: contiguous
    /// time-major steps, or contiguous env columns for a recurrent model.
    pub shuffle: bool,
    /// Normalise advantages per minibatch (mean 0, std 1).
    pub normalize_advantage: bool,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// How entropy enters (garage's keys, `entropy_loss_coeff` its coefficient):
    /// "regularized" (a bonus in the loss, the default), "max" (added to the rewards) or
    /// "no_entropy".
    pub entropy_method: EntropyMethod,
    /// Shift advantages to be positive (after normalisation).
    pub positive_adv: bool,
    /// Pass the entropy through softplus (keeps the term positive for Gaussians).
    pub use_softplus_entropy: bool,
    /// Take no gradient through the entropy term.
    pub stop_entropy_gradient: bool,
    /// The value function's own learning rate (garage's separate `vf_optimizer` rate; the
    /// linear schedule scales it too); absent: `learning_rate` for every parameter.
    pub vf_learning_rate: Option<f64>,
    /// The update rule: "adam" (default), "rmsprop" (rlpyt's A2C choice) or "sgd"; `adam_eps`
    /// is RMSprop's epsilon too.
    pub optimizer: Rule,
    /// RMSprop's smoothing constant (PyTorch's `alpha`).
    pub rmsprop_alpha: f64,
    /// SGD's momentum.
    pub sgd_momentum: f64,
    /// V-trace targets instead of GAE (`[algo.vtrace]`, present: on), with `gae_lambda` as
    /// the trace's lambda.
    pub vtrace: Option<VtraceClips>,
    /// Intrinsic rewards by random network distillation (`[algo.intrinsic]`, present: on).
    pub intrinsic: Option<IntrinsicConfig>,
}

/// Intrinsic rewards by random network distillation for PPO (and PPO+D) and A2C
/// (`[algo.intrinsic]`, present: on; pytorchrl's intrinsic-reward storage, Burda et al. 2018):
/// the learner computes them from each batch's observations (see `algos/intrinsic.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntrinsicConfig {
    /// Weight of the extrinsic advantages in the policy's advantage (RND: 2).
    pub ext_coeff: f64,
    /// Weight of the intrinsic advantages (RND: 1).
    pub int_coeff: f64,
    /// Discount of the intrinsic stream (non-episodic; RND: 0.99).
    pub discount: f64,
    /// Divide intrinsic rewards by a running standard deviation of their discounted returns.
    pub normalize_int_rewards: bool,
    /// Hidden widths of the target, predictor and intrinsic value networks (ReLU).
    pub hidden_sizes: Vec<i64>,
    /// Width of the target and predictor embeddings.
    pub features: i64,
}

impl Default for IntrinsicConfig {
    fn default() -> Self {
        IntrinsicConfig {
            ext_coeff: 2.0,
            int_coeff: 1.0,
            discount: 0.99,
            normalize_int_rewards: true,
            hidden_sizes: vec![64, 64],
            features: 64,
        }
    }
}

impl IntrinsicConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check(
            (0.0..=1.0).contains(&self.discount),
            "algo.intrinsic.discount",
            "must be in [0, 1]",
        )?;
        check(
            self.ext_coeff >= 0.0 && self.int_coeff >= 0.0,
            "algo.intrinsic.int_coeff",
            "the coefficients must be >= 0",
        )?;
        check(
            self.features >= 1 && self.hidden_sizes.iter().all(|&h| h >= 1),
            "algo.intrinsic.features",
            "widths must be >= 1",
        )
    }
}

/// V-trace's importance-weight clips for PPO and A2C (`[algo.vtrace]`; pytorchrl's
/// `VTraceBuffer`): the learner's current policy scores each batch once before the update,
/// and V-trace replaces GAE's advantages and value targets, correcting for the actors' lag.
/// The keys are IMPALA's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VtraceClips {
    /// Clip of the TD importance weight, rho-bar.
    pub rho_bar: f64,
    /// Clip of the policy-gradient importance weight.
    pub pg_rho_bar: f64,
    /// Clip of the trace coefficient, c-bar.
    pub c_bar: f64,
}

impl Default for VtraceClips {
    fn default() -> Self {
        VtraceClips {
            rho_bar: 1.0,
            pg_rho_bar: 1.0,
            c_bar: 1.0,
        }
    }
}

impl VtraceClips {
    fn validate(&self) -> Result<(), ConfigError> {
        for (ok, key) in [
            (self.rho_bar > 0.0, "algo.vtrace.rho_bar"),
            (self.pg_rho_bar > 0.0, "algo.vtrace.pg_rho_bar"),
            (self.c_bar > 0.0, "algo.vtrace.c_bar"),
        ] {
            check(ok, key, "must be > 0")?;
        }
        Ok(())
    }
}

impl Default for PpoConfig {
    fn default() -> Self {
        PpoConfig {
            discount: 0.99,
            gae_lambda: 0.95,
            learning_rate: 3e-4,
            linear_lr_schedule: false,
            ratio_clip: 0.2,
            linear_clip_schedule: false,
            value_loss_coeff: 0.5,
            clip_value_loss: false,
            entropy_loss_coeff: 0.0,
            clip_grad_norm: 0.5,
            epochs: 10,
            minibatches: 4,
            minibatch_size: None,
            shuffle: true,
            normalize_advantage: true,
            adam_eps: 1e-5,
            bootstrap_truncation: true,
            entropy_method: EntropyMethod::Regularized,
            positive_adv: false,
            use_softplus_entropy: false,
            stop_entropy_gradient: false,
            vf_learning_rate: None,
            optimizer: Rule::Adam,
            rmsprop_alpha: 0.99,
            sgd_momentum: 0.0,
            vtrace: None,
            intrinsic: None,
        }
    }
}

impl PpoConfig {
    /// The optimiser's rule and its coefficient.
    pub fn rule(&self) -> (Rule, f64) {
        rule(self.optimizer, self.rmsprop_alpha, self.sgd_momentum)
    }

    /// Garage's advantage and entropy options, as PPO's keys set them.
    pub fn options(&self) -> PgOptions {
        PgOptions {
            center_adv: self.normalize_advantage,
            positive_adv: self.positive_adv,
            entropy_method: self.entropy_method,
            policy_ent_coeff: self.entropy_loss_coeff,
            use_softplus_entropy: self.use_softplus_entropy,
            stop_entropy_gradient: self.stop_entropy_gradient,
        }
    }

    fn validate(&self, batch: u64) -> Result<(), ConfigError> {
        check_lambda(self.gae_lambda)?;
        check_rule(self.rmsprop_alpha, self.sgd_momentum)?;
        self.vtrace.as_ref().map_or(Ok(()), VtraceClips::validate)?;
        self.intrinsic
            .as_ref()
            .map_or(Ok(()), IntrinsicConfig::validate)?;
        check(
            self.vf_learning_rate.is_none_or(|lr| lr > 0.0),
            "algo.vf_learning_rate",
            "must be > 0",
        )?;
        self.options().validate().map_err(|e| match e {
            // PPO's name for garage's `center_adv` and `policy_ent_coeff`.
            ConfigError::Invalid {
                key: "algo.center_adv",
                message,
            } => ConfigError::Invalid {
                key: "algo.normalize_advantage",
                message,
            },
            ConfigError::Invalid {
                key: "algo.policy_ent_coeff",
                message,
            } => ConfigError::Invalid {
                key: "algo.entropy_loss_coeff",
                message,
            },
            other => other,
        })?;
        check(
            self.learning_rate > 0.0,
            "algo.learning_rate",
            "must be > 0",
        )?;
        check(self.ratio_clip > 0.0, "algo.ratio_clip", "must be > 0")?;
        check(self.epochs >= 1, "algo.epochs", "must be >= 1")?;
        check(self.minibatches >= 1, "algo.minibatches", "must be >= 1")?;
        check(
            self.clip_grad_norm >= 0.0,
            "algo.clip_grad_norm",
            "must be >= 0",
        )?;
        if let Some(size) = self.minibatch_size {
            return check(
                size >= 1 && size <= batch && batch.is_multiple_of(size),
                "algo.minibatch_size",
                &format!("must divide the batch of {batch} env steps"),
            );
        }
        check(
            batch.is_multiple_of(self.minibatches as u64),
            "algo.minibatches",
            &format!("must divide the batch of {batch} env steps"),
        )
    }

    /// Minibatches for a batch of `steps` env steps.
    pub fn minibatch_count(&self, steps: u64) -> u32 {
        match self.minibatch_size {
            Some(size) => ((steps as f64 / size as f64).round() as u32).max(1),
            None => self.minibatches,
        }
    }
}

/// A2C hyperparameters (rlpyt's `A2C`; SB3's defaults where rlpyt has none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct A2cConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda; 1.0 (the default) gives n-step discounted returns.
    pub gae_lambda: f64,
    /// Adam learning rate at the start of training.
    pub learning_rate: f64,
    /// Decay the learning rate linearly to 0 over `stop.total_env_steps`.
    pub linear_lr_schedule: bool,
    /// Weight of the value loss (mean squared error against the return).
    pub value_loss_coeff: f64,
    /// Weight of the entropy bonus.
    pub entropy_loss_coeff: f64,
    /// Global gradient-norm clip; 0 disables clipping.
    pub clip_grad_norm: f64,
    /// Normalise advantages over the batch (mean 0, std 1).
    pub normalize_advantage: bool,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// The update rule: "adam" (default), "rmsprop" (rlpyt's A2C choice) or "sgd"; `adam_eps`
    /// is RMSprop's epsilon too.
    pub optimizer: Rule,
    /// RMSprop's smoothing constant (PyTorch's `alpha`).
    pub rmsprop_alpha: f64,
    /// SGD's momentum.
    pub sgd_momentum: f64,
    /// V-trace targets instead of GAE (`[algo.vtrace]`, present: on), with `gae_lambda` as
    /// the trace's lambda.
    pub vtrace: Option<VtraceClips>,
    /// Intrinsic rewards by random network distillation (`[algo.intrinsic]`, present: on).
    pub intrinsic: Option<IntrinsicConfig>,
}

impl A2cConfig {
    /// The optimiser's rule and its coefficient.
    pub fn rule(&self) -> (Rule, f64) {
        rule(self.optimizer, self.rmsprop_alpha, self.sgd_momentum)
    }
}

/// `optimizer` with the coefficient it uses (RMSprop's alpha, SGD's momentum).
pub(crate) fn rule(optimizer: Rule, rmsprop_alpha: f64, sgd_momentum: f64) -> (Rule, f64) {
    match optimizer {
        Rule::Adam => (Rule::Adam, 0.0),
        Rule::Rmsprop => (Rule::Rmsprop, rmsprop_alpha),
        Rule::Sgd => (Rule::Sgd, sgd_momentum),
    }
}

/// Checks `rmsprop_alpha` and `sgd_momentum`.
pub(crate) fn check_rule(rmsprop_alpha: f64, sgd_momentum: f64) -> Result<(), ConfigError> {
    check(
        (0.0..1.0).contains(&rmsprop_alpha),
        "algo.rmsprop_alpha",
        "must be in [0, 1)",
    )?;
    check(
        (0.0..1.0).contains(&sgd_momentum),
        "algo.sgd_momentum",
        "must be in [0, 1)",
    )
}

impl Default for A2cConfig {
    fn default() -> Self {
        A2cConfig {
            discount: 0.99,
            gae_lambda: 1.0,
            learning_rate: 7e-4,
            linear_lr_schedule: false,
            value_loss_coeff: 0.5,
            entropy_loss_coeff: 0.01,
            clip_grad_norm: 0.5,
            normalize_advantage: false,
            adam_eps: 1e-5,
            bootstrap_truncation: true,
            optimizer: Rule::Adam,
            rmsprop_alpha: 0.99,
            sgd_momentum: 0.0,
            vtrace: None,
            intrinsic: None,
        }
    }
}

/// How the policy entropy enters the objective (garage's `entropy_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntropyMethod {
    /// No entropy term (`policy_ent_coeff` must be 0).
    NoEntropy,
    /// Maximum-entropy RL: `policy_ent_coeff x H` is added to every reward (needs
    /// `center_adv = false` and `stop_entropy_gradient = true`, as garage checks).
    Max,
    /// An entropy bonus `policy_ent_coeff x mean H` in the objective.
    Regularized,
}

/// Garage's advantage and entropy options, shared by VPG, TRPO, PPO and MAML (their configs
/// carry the same keys; each config's `options` gathers them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PgOptions {
    /// Normalise advantages to mean 0, std 1.
    pub center_adv: bool,
    /// Shift advantages to be positive (after centring).
    pub positive_adv: bool,
    /// How entropy enters the objective: "no_entropy", "max" or "regularized".
    pub entropy_method: EntropyMethod,
    /// Entropy coefficient.
    pub policy_ent_coeff: f64,
    /// Pass the entropy through softplus (keeps the term positive for Gaussians).
    pub use_softplus_entropy: bool,
    /// Take no gradient through the entropy term.
    pub stop_entropy_gradient: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            center_adv: true,
            positive_adv: false,
            entropy_method: EntropyMethod::NoEntropy,
            policy_ent_coeff: 0.0,
            use_softplus_entropy: false,
            stop_entropy_gradient: false,
        }
    }
}

impl PgOptions {
    /// Garage's consistency checks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.entropy_method {
            EntropyMethod::Max => {
                check(
                    !self.center_adv,
                    "algo.center_adv",
                    "must be false with entropy_method = \"max\"",
                )?;
                check(
                    self.stop_entropy_gradient,
                    "algo.stop_entropy_gradient",
                    "must be true with entropy_method = \"max\"",
                )
            }
            EntropyMethod::NoEntropy => check(
                self.policy_ent_coeff == 0.0,
                "algo.policy_ent_coeff",
                "must be 0 with entropy_method = \"no_entropy\"",
            ),
            EntropyMethod::Regularized => Ok(()),
        }
    }
}

/// VPG / REINFORCE hyperparameters (garage's `VPG`): the policy takes one Adam step per
/// batch on `-mean(log pi(a|s) A)`; the value baseline is fitted by its own Adam.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VpgConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda for the advantages (1.0: discounted return minus the baseline).
    pub gae_lambda: f64,
    /// Policy Adam learning rate.
    pub learning_rate: f64,
    /// Policy gradient steps per batch (garage's policy optimizer epochs).
    pub policy_epochs: u32,
    /// Value-function Adam learning rate.
    pub vf_learning_rate: f64,
    /// Value-function gradient steps per batch.
    pub vf_epochs: u32,
    /// Global gradient-norm clip for each optimizer; 0 disables clipping.
    pub clip_grad_norm: f64,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// Normalise advantages to mean 0, std 1.
    pub center_adv: bool,
    /// Shift advantages to be positive (after centring).
    pub positive_adv: bool,
    /// How entropy enters the objective: "no_entropy", "max" or "regularized".
    pub entropy_method: EntropyMethod,
    /// Entropy coefficient.
    pub policy_ent_coeff: f64,
    /// Pass the entropy through softplus (keeps the term positive for Gaussians).
    pub use_softplus_entropy: bool,
    /// Take no gradient through the entropy term.
    pub stop_entropy_gradient: bool,
}

impl Default for VpgConfig {
    fn default() -> Self {
        VpgConfig {
            discount: 0.99,
            gae_lambda: 1.0,
            learning_rate: 1e-2,
            policy_epochs: 1,
            vf_learning_rate: 1e-2,
            vf_epochs: 5,
            clip_grad_norm: 0.0,
            adam_eps: 1e-8,
            bootstrap_truncation: true,
            center_adv: true,
            positive_adv: false,
            entropy_method: EntropyMethod::NoEntropy,
            policy_ent_coeff: 0.0,
            use_softplus_entropy: false,
            stop_entropy_gradient: false,
        }
    }
}

impl VpgConfig {
    /// The advantage and entropy options.
    pub fn options(&self) -> PgOptions {
        PgOptions {
            center_adv: self.center_adv,
            positive_adv: self.positive_adv,
            entropy_method: self.entropy_method,
            policy_ent_coeff: self.policy_ent_coeff,
            use_softplus_entropy: self.use_softplus_entropy,
            stop_entropy_gradient: self.stop_entropy_gradient,
        }
    }
}

/// TRPO hyperparameters (Schulman et al. 2015; garage's `TRPO` and its
/// `ConjugateGradientOptimizer`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrpoConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// GAE lambda.
    pub gae_lambda: f64,
    /// KL(old || new) limit per update (garage's `max_constraint_value`).
    pub max_kl: f64,
    /// Conjugate-gradient iterations for the natural gradient.
    pub cg_iters: u32,
    /// Damping added to the Fisher-vector product (garage's `hvp_reg_coeff`).
    pub cg_damping: f64,
    /// Step shrink factor of the backtracking line search.
    pub backtrack_ratio: f64,
    /// Most line-search shrinks before the update is rejected.
    pub max_backtracks: u32,
    /// Value-function Adam learning rate.
    pub vf_learning_rate: f64,
    /// Value-function gradient steps per batch.
    pub vf_epochs: u32,
    /// Adam epsilon (value function).
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// Normalise advantages to mean 0, std 1.
    pub center_adv: bool,
    /// Shift advantages to be positive (after centring).
    pub positive_adv: bool,
    /// How entropy enters the objective: "no_entropy", "max" or "regularized".
    pub entropy_method: EntropyMethod,
    /// Entropy coefficient.
    pub policy_ent_coeff: f64,
    /// Pass the entropy through softplus (keeps the term positive for Gaussians).
    pub use_softplus_entropy: bool,
    /// Take no gradient through the entropy term.
    pub stop_entropy_gradient: bool,
}

impl Default for TrpoConfig {
    fn default() -> Self {
        TrpoConfig {
            discount: 0.99,
            gae_lambda: 0.98,
            max_kl: 0.01,
            cg_iters: 10,
            cg_damping: 1e-5,
            backtrack_ratio: 0.8,
            max_backtracks: 15,
            vf_learning_rate: 3e-3,
            vf_epochs: 5,
            adam_eps: 1e-8,
            bootstrap_truncation: true,
            center_adv: true,
            positive_adv: false,
            entropy_method: EntropyMethod::NoEntropy,
            policy_ent_coeff: 0.0,
            use_softplus_entropy: false,
            stop_entropy_gradient: false,
        }
    }
}

impl TrpoConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_lambda(self.gae_lambda)?;
        check(self.max_kl > 0.0, "algo.max_kl", "must be > 0")?;
        check(self.cg_iters >= 1, "algo.cg_iters", "must be >= 1")?;
        check(
            self.backtrack_ratio > 0.0 && self.backtrack_ratio < 1.0,
            "algo.backtrack_ratio",
            "must be in (0, 1)",
        )?;
        self.options().validate()
    }
}

impl TrpoConfig {
    /// The advantage and entropy options.
    pub fn options(&self) -> PgOptions {
        PgOptions {
            center_adv: self.center_adv,
            positive_adv: self.positive_adv,
            entropy_method: self.entropy_method,
            policy_ent_coeff: self.policy_ent_coeff,
            use_softplus_entropy: self.use_softplus_entropy,
            stop_entropy_gradient: self.stop_entropy_gradient,
        }
    }
}

/// IMPALA hyperparameters (Espeholt et al. 2018): V-trace targets against the behaviour
/// log-probabilities the actors recorded, one gradient step per batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImpalaConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// V-trace lambda (1 in the paper).
    pub vtrace_lambda: f64,
    /// Clip of the TD importance weight, rho-bar.
    pub rho_bar: f64,
    /// Clip of the policy-gradient importance weight.
    pub pg_rho_bar: f64,
    /// Clip of the trace coefficient, c-bar.
    pub c_bar: f64,
    /// Adam learning rate at the start of training.
    pub learning_rate: f64,
    /// Decay the learning rate linearly to 0 over `stop.total_env_steps`.
    pub linear_lr_schedule: bool,
    /// Weight of the value loss (mean squared error against v_s).
    pub value_loss_coeff: f64,
    /// Weight of the entropy bonus.
    pub entropy_loss_coeff: f64,
    /// Global gradient-norm clip; 0 disables clipping.
    pub clip_grad_norm: f64,
    /// Normalise the policy-gradient advantages over the batch.
    pub normalize_advantage: bool,
    /// Gradient steps per batch (1 in the paper).
    pub epochs: u32,
    /// Adam epsilon.
    pub adam_eps: f64,
    /// Bootstrap with the value of the final observation when an episode is truncated.
    pub bootstrap_truncation: bool,
    /// The update rule: "adam" (default), "rmsprop" (the IMPALA paper's) or "sgd"; `adam_eps`
    /// is RMSprop's epsilon too.
    pub optimizer: Rule,
    /// RMSprop's smoothing constant (PyTorch's `alpha`).
    pub rmsprop_alpha: f64,
    /// SGD's momentum.
    pub sgd_momentum: f64,
}

impl ImpalaConfig {
    /// The optimiser's rule and its coefficient.
    pub fn rule(&self) -> (Rule, f64) {
        rule(self.optimizer, self.rmsprop_alpha, self.sgd_momentum)
    }
}

impl Default for ImpalaConfig {
    fn default() -> Self {
        ImpalaConfig {
            discount: 0.99,
            vtrace_lambda: 1.0,
            rho_bar: 1.0,
            pg_rho_bar: 1.0,
            c_bar: 1.0,
            learning_rate: 6e-4,
            linear_lr_schedule: false,
            value_loss_coeff: 0.5,
            entropy_loss_coeff: 0.01,
            clip_grad_norm: 40.0,
            normalize_advantage: false,
            epochs: 1,
            adam_eps: 1e-5,
            bootstrap_truncation: true,
            optimizer: Rule::Adam,
            rmsprop_alpha: 0.99,
            sgd_momentum: 0.0,
        }
    }
}

impl ImpalaConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check(
            (0.0..=1.0).contains(&self.vtrace_lambda),
            "algo.vtrace_lambda",
            "must be in [0, 1]",
        )?;
        for (ok, key) in [
            (self.rho_bar > 0.0, "algo.rho_bar"),
            (self.pg_rho_bar > 0.0, "algo.pg_rho_bar"),
            (self.c_bar > 0.0, "algo.c_bar"),
            (self.learning_rate > 0.0, "algo.learning_rate"),
        ] {
            check(ok, key, "must be > 0")?;
        }
        check_rule(self.rmsprop_alpha, self.sgd_momentum)?;
        check(self.epochs >= 1, "algo.epochs", "must be >= 1")
    }
}
