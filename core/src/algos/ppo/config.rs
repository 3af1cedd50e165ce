//! PPO's `[algo]` keys (Schulman et al. 2017; SB3's and rlpyt's names where they differ).

use crate::algos::config::AlgoSection;
use crate::algos::intrinsic::IntrinsicConfig;
use crate::algos::pg::check_lambda;
use crate::algos::pg::EntropyMethod;
use crate::algos::pg::PgOptions;
use crate::algos::vtrace::VtraceClips;
use crate::optim::check_rule;
use crate::optim::rule;
use crate::optim::Rule;
use crate::optim::Stepping;
use serde::{Deserialize, Serialize};

use crate::config::error::{check, ConfigError};

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

impl AlgoSection for PpoConfig {
    fn discount(&self) -> f64 {
        self.discount
    }

    fn validate(&self, batch: u64) -> Result<(), ConfigError> {
        PpoConfig::validate(self, batch)
    }
}

impl PpoConfig {
    /// The optimiser's rule and its coefficients.
    pub fn rule(&self) -> Stepping {
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

    pub(crate) fn validate(&self, batch: u64) -> Result<(), ConfigError> {
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
