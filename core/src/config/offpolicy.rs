//! The off-policy algorithms' `[algo]` keys: DQN, SAC, TD3/DDPG and BC. Each owns a
//! `[algo.replay]` table (how transitions are stored and sampled) and, where actors explore,
//! an `[algo.explore]` table (what the actors add to the policy's action).

use serde::{Deserialize, Serialize};

use super::{check, ConfigError};
use crate::optim::Rule;

/// The checks SAC and TD3 share: positive learning rates, at least one critic.
fn check_actor_critic(policy_lr: f64, qf_lr: f64, num_critics: u32) -> Result<(), ConfigError> {
    check(
        policy_lr > 0.0 && qf_lr > 0.0,
        "algo.policy_lr",
        "learning rates must be > 0",
    )?;
    check(num_critics >= 1, "algo.num_critics", "must be >= 1")
}

/// The replay table of transitions and how the learner samples it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayOptions {
    /// Transitions the table holds; the oldest is evicted beyond it.
    pub capacity: u64,
    /// Transitions per gradient update.
    pub batch_size: u32,
    /// Sampled transitions per inserted transition, enforced by the replay server's rate
    /// limiter (so gradient updates per env step = samples_per_insert / batch_size).
    pub samples_per_insert: f64,
    /// Transitions in the table before the first sample (SB3's `learning_starts`).
    pub min_size: u64,
    /// Slack of the rate limiter in sampled transitions (0: the larger of two batches and
    /// 100 inserts' worth, `100 * samples_per_insert`).
    pub error_buffer: f64,
    /// Prioritized experience replay (Schaul et al. 2016): sample by TD error.
    pub prioritized: bool,
    /// Priority exponent alpha (0 uniform, 1 proportional).
    pub priority_exponent: f64,
    /// Importance-sampling exponent beta at the start, annealed linearly to 1 over the run.
    pub importance_exponent: f64,
    /// Added to |TD error| so no transition's priority is 0.
    pub priority_eps: f64,
    /// Steps summed into one transition's return (Ape-X style, computed on the actors; for a
    /// recurrent DQN, computed by the learner inside each stored sequence).
    pub n_step: u32,
    /// Recurrent DQN (R2D2): env steps per stored sequence, burn-in included. An item of the
    /// table is then one sequence, so `capacity`, `batch_size`, `min_size` and
    /// `samples_per_insert` count sequences.
    pub sequence_length: u32,
    /// Recurrent DQN: steps consecutive sequences of one env share (R2D2 uses half the length).
    pub sequence_overlap: u32,
    /// Recurrent DQN: leading steps of each sequence unrolled without gradient from the stored
    /// recurrent state, to warm the state up before the loss (R2D2's burn-in).
    pub burn_in: u32,
    /// Recurrent DQN: a sequence's priority is `eta * max |td| + (1 - eta) * mean |td|` over
    /// its trained steps (R2D2: 0.9).
    pub priority_eta: f64,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            capacity: 100_000,
            batch_size: 64,
            samples_per_insert: 16.0,
            min_size: 1_000,
            error_buffer: 0.0,
            prioritized: false,
            priority_exponent: 0.6,
            importance_exponent: 0.4,
            priority_eps: 1e-6,
            n_step: 1,
            sequence_length: 40,
            sequence_overlap: 20,
            burn_in: 10,
            priority_eta: 0.9,
        }
    }
}

impl ReplayOptions {
    /// The rate limiter's slack in sampled transitions.
    pub fn effective_error_buffer(&self) -> f64 {
        if self.error_buffer > 0.0 {
            return self.error_buffer;
        }
        let two_batches = 2.0 * self.batch_size as f64;
        two_batches.max(100.0 * self.samples_per_insert.max(1.0))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check(self.capacity >= 1, "algo.replay.capacity", "must be >= 1")?;
        check(
            self.batch_size >= 1,
            "algo.replay.batch_size",
            "must be >= 1",
        )?;
        check(
            self.samples_per_insert > 0.0,
            "algo.replay.samples_per_insert",
            "must be > 0",
        )?;
        check(
            self.min_size >= 1 && self.min_size <= self.capacity,
            "algo.replay.min_size",
            "must be in [1, capacity]",
        )?;
        check(
            (0.0..=1.0).contains(&self.importance_exponent),
            "algo.replay.importance_exponent",
            "must be in [0, 1]",
        )?;
        check(
            self.priority_exponent >= 0.0,
            "algo.replay.priority_exponent",
            "must be >= 0",
        )?;
        check(self.n_step >= 1, "algo.replay.n_step", "must be >= 1")
    }

    /// The sequence keys a recurrent DQN reads: at least one trained step after the burn-in
    /// (the last step of a sequence only bootstraps), and an overlap shorter than a sequence.
    pub(crate) fn validate_sequences(&self) -> Result<(), ConfigError> {
        check(
            self.sequence_length >= 2,
            "algo.replay.sequence_length",
            "must be >= 2 (the last step of a sequence is only bootstrapped from)",
        )?;
        check(
            self.burn_in + 2 <= self.sequence_length,
            "algo.replay.burn_in",
            "must be <= sequence_length - 2, leaving at least one trained step",
        )?;
        check(
            self.sequence_overlap < self.sequence_length,
            "algo.replay.sequence_overlap",
            "must be smaller than sequence_length",
        )?;
        check(
            (0.0..=1.0).contains(&self.priority_eta),
            "algo.replay.priority_eta",
            "must be in [0, 1]",
        )
    }
}

/// Exploration noise on continuous actions, applied on the actors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseKind {
    /// No noise (SAC samples its own Gaussian policy instead).
    None,
    /// Independent Gaussian noise each step.
    Gaussian,
    /// Ornstein-Uhlenbeck process noise, reset at episode starts.
    OrnsteinUhlenbeck,
}

/// What the actors do besides following the current policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Exploration {
    /// Env steps of the run (all actors, estimated as each actor's own steps times
    /// `actors.count`) of uniformly random actions at the start, before the policy acts.
    pub random_steps: u64,
    /// Epsilon-greedy (discrete actions): epsilon at the start.
    pub epsilon_start: f64,
    /// Epsilon-greedy: epsilon after the decay.
    pub epsilon_end: f64,
    /// Epsilon-greedy: env steps of the run (counted as `random_steps` is) of linear decay.
    pub epsilon_decay_steps: u64,
    /// Continuous actions: the noise added to the policy's action.
    pub noise: NoiseKind,
    /// Noise scale, as a fraction of the action range's half-width.
    pub noise_std: f64,
    /// Ornstein-Uhlenbeck mean-reversion rate theta.
    pub ou_theta: f64,
    /// Act with the policy's deterministic action (no sampling, no noise, no epsilon).
    pub deterministic: bool,
}

impl Default for Exploration {
    fn default() -> Self {
        Exploration {
            random_steps: 0,
            epsilon_start: 1.0,
            epsilon_end: 0.05,
            epsilon_decay_steps: 10_000,
            noise: NoiseKind::Gaussian,
            noise_std: 0.1,
            ou_theta: 0.15,
            deterministic: false,
        }
    }
}

impl Exploration {
    /// Epsilon after `steps` env steps of this actor.
    pub fn epsilon(&self, steps: u64) -> f64 {
        if steps >= self.epsilon_decay_steps {
            return self.epsilon_end;
        }
        let frac = (steps as f64 / self.epsilon_decay_steps as f64).min(1.0);
        self.epsilon_start + frac * (self.epsilon_end - self.epsilon_start)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let unit = |e: f64| (0.0..=1.0).contains(&e);
        check(
            unit(self.epsilon_start) && unit(self.epsilon_end),
            "algo.explore.epsilon_start",
            "epsilons must be in [0, 1]",
        )?;
        check(
            self.noise_std >= 0.0,
            "algo.explore.noise_std",
            "must be >= 0",
        )
    }
}

/// How the target networks follow the online ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetUpdate {
    /// Polyak coefficient tau: target <- tau * online + (1 - tau) * target after every
    /// `period` updates (1.0 with a period is a hard copy).
    pub tau: f64,
    /// Updates between target updates.
    pub period: u64,
}

impl Default for TargetUpdate {
    fn default() -> Self {
        TargetUpdate {
            tau: 0.005,
            period: 1,
        }
    }
}

impl TargetUpdate {
    fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.tau > 0.0 && self.tau <= 1.0,
            "algo.target.tau",
            "must be in (0, 1]",
        )?;
        check(self.period >= 1, "algo.target.period", "must be >= 1")
    }
}

/// DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2016), n-step returns and
/// prioritized replay: the Rainbow ingredients SB3 and rlpyt offer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DqnConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// Pick the next action with the online network, value it with the target network.
    pub double_q: bool,
    /// Clip rewards to [-this, this] on the actors (0: no clipping).
    pub reward_clip: f64,
    /// Global gradient-norm clip (0: none).
    pub clip_grad_norm: f64,
    /// Huber loss on the TD error (else squared error).
    pub huber: bool,
    /// Target network updates.
    pub target: TargetUpdate,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// The replay table.
    pub replay: ReplayOptions,
    /// Epsilon-greedy exploration on the actors.
    pub explore: Exploration,
    /// The update rule: "adam" (default), "rmsprop" (the DQN and MinAtar papers') or "sgd".
    pub optimizer: Rule,
    /// The optimiser's epsilon (Adam's, or RMSprop's).
    pub optimizer_eps: f64,
    /// RMSprop's smoothing constant (PyTorch's `alpha`).
    pub rmsprop_alpha: f64,
    /// SGD's momentum.
    pub sgd_momentum: f64,
}

impl DqnConfig {
    /// The optimiser's rule and its coefficient.
    pub fn rule(&self) -> (Rule, f64) {
        super::algo::rule(self.optimizer, self.rmsprop_alpha, self.sgd_momentum)
    }
}

impl Default for DqnConfig {
    fn default() -> Self {
        DqnConfig {
            discount: 0.99,
            learning_rate: 1e-3,
            double_q: true,
            reward_clip: 0.0,
            clip_grad_norm: 10.0,
            huber: true,
            target: TargetUpdate {
                tau: 1.0,
                period: 250,
            },
            publish_interval: 1,
            replay: ReplayOptions::default(),
            explore: Exploration::default(),
            optimizer: Rule::Adam,
            optimizer_eps: 1e-8,
            rmsprop_alpha: 0.99,
            sgd_momentum: 0.0,
        }
    }
}

/// CAPS (Mysore et al. 2021) smoothness regularisation of the policy's actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CapsOptions {
    /// Weight of the temporal term ||pi(s) - pi(s')||^2 (0: off).
    pub temporal_weight: f64,
    /// Weight of the spatial term ||pi(s) - pi(s~)||^2, s~ ~ N(s, sigma) (0: off).
    pub spatial_weight: f64,
    /// Standard deviation sigma of the spatial perturbation of observations.
    pub spatial_std: f64,
}

impl Default for CapsOptions {
    fn default() -> Self {
        CapsOptions {
            temporal_weight: 0.0,
            spatial_weight: 0.0,
            spatial_std: 0.05,
        }
    }
}

/// SAC (Haarnoja et al. 2018) with automatic temperature (the v2 paper) or a fixed one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SacConfig {
    /// Discount factor gamma.
    pub discount: f64,
    /// Adam learning rate of the policy.
    pub policy_lr: f64,
    /// Adam learning rate of the critics.
    pub qf_lr: f64,
    /// Tune the temperature alpha towards `target_entropy` (else keep `initial_alpha`).
    pub auto_alpha: bool,
    /// Temperature at the start (and forever without `auto_alpha`).
    pub initial_alpha: f64,
    /// Target entropy (none: minus the action dimension).
    pub target_entropy: Option<f64>,
    /// Number of Q networks; the target takes their minimum (2: clipped double Q).
    pub num_critics: u32,
    /// Target network updates.
    pub target: TargetUpdate,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// Smoothness regularisation of the policy.
    pub caps: CapsOptions,
    /// The replay table.
    pub replay: ReplayOptions,
    /// Actor-side exploration (SAC samples its policy; `noise` is ignored).
    pub explore: Exploration,
}

impl Default for SacConfig {
    fn default() -> Self {
        SacConfig {
            discount: 0.99,
            policy_lr: 3e-4,
            qf_lr: 3e-4,
            auto_alpha: true,
            initial_alpha: 1.0,
            target_entropy: None,
            num_critics: 2,
            target: TargetUpdate {
                tau: 0.005,
                period: 1,
            },
            publish_interval: 1,
            caps: CapsOptions::default(),
            replay: ReplayOptions {
                batch_size: 256,
                samples_per_insert: 256.0,
                ..ReplayOptions::default()
            },
            explore: Exploration {
                noise: NoiseKind::None,
                ..Exploration::default()
            },
        }
    }
}

/// TD3 (Fujimoto et al. 2018); with `policy_delay = 1`, `target_noise = 0` and one critic it
/// is DDPG (Lillicrap et al. 2016), which `name = "ddpg"` selects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Td3Config {
    /// Discount factor gamma.
    pub discount: f64,
    /// Adam learning rate of the policy.
    pub policy_lr: f64,
    /// Adam learning rate of the critics.
    pub qf_lr: f64,
    /// Number of Q networks; the target takes their minimum.
    pub num_critics: u32,
    /// Critic updates per policy (and target) update.
    pub policy_delay: u32,
    /// Target policy smoothing: std of the Gaussian noise on the target action (fraction of
    /// the action half-range; 0 disables).
    pub target_noise: f64,
    /// Target policy smoothing: the noise is clipped to +-this.
    pub target_noise_clip: f64,
    /// Target network updates (Polyak tau each policy update).
    pub target: TargetUpdate,
    /// L2 weight decay of the policy's Adam (added to the gradient, as PyTorch's
    /// `weight_decay`; garage's `policy_weight_decay`).
    pub policy_weight_decay: f64,
    /// L2 weight decay of the critics' Adam (garage's `qf_weight_decay`).
    pub qf_weight_decay: f64,
    /// Critic targets are clipped to `[-clip_return, clip_return]` (garage's `clip_return`;
    /// `inf` leaves them alone).
    pub clip_return: f64,
    /// Clip positive targets to 0 instead of `clip_return`, for tasks whose returns are never
    /// positive (garage's `clip_pos_returns`).
    pub clip_pos_returns: bool,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// The replay table.
    pub replay: ReplayOptions,
    /// Action noise on the actors.
    pub explore: Exploration,
}

impl Default for Td3Config {
    fn default() -> Self {
        Td3Config {
            discount: 0.99,
            policy_lr: 1e-3,
            qf_lr: 1e-3,
            num_critics: 2,
            policy_delay: 2,
            target_noise: 0.2,
            target_noise_clip: 0.5,
            target: TargetUpdate {
                tau: 0.005,
                period: 1,
            },
            policy_weight_decay: 0.0,
            qf_weight_decay: 0.0,
            clip_return: f64::INFINITY,
            clip_pos_returns: false,
            publish_interval: 1,
            replay: ReplayOptions {
                batch_size: 256,
                samples_per_insert: 256.0,
                ..ReplayOptions::default()
            },
            explore: Exploration::default(),
        }
    }
}

/// Keys `name = "ddpg"` sets when the file does not: DDPG is TD3 without its three tricks.
pub(crate) const DDPG_DEFAULTS: [(&str, i64); 3] =
    [("policy_delay", 1), ("target_noise", 0), ("num_critics", 1)];

/// The behaviour cloning loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BcLoss {
    /// Negative log-likelihood of the expert's action under the policy.
    LogProb,
    /// Squared error between the policy's mode (or its action probabilities' one-hot) and the
    /// expert's action.
    Mse,
}

/// The policy BC fits for continuous actions (garage's `BC` takes a deterministic or a
/// stochastic policy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BcPolicy {
    /// A `tanh` policy; `log_prob` reads it as a unit-variance Gaussian.
    #[default]
    Deterministic,
    /// A `tanh`-squashed Gaussian with a learned standard deviation (SAC's policy);
    /// `log_prob` is the exact negative log-likelihood of the expert's action.
    Gaussian,
}

/// Behaviour cloning (garage's `BC`): a policy fit to an expert's actions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BcConfig {
    /// Discount (unused by the loss; kept for reports).
    pub discount: f64,
    /// Adam learning rate.
    pub learning_rate: f64,
    /// `log_prob` or `mse`.
    pub loss: BcLoss,
    /// `deterministic` or `gaussian` (continuous actions; discrete actions are always a
    /// categorical over the network's logits).
    pub policy: BcPolicy,
    /// Directory of demo files (`fleetrl record`) to learn from (empty: none).
    pub demos: Option<String>,
    /// An expert checkpoint the actors play (its actions are the labels) instead of demos
    /// (empty: none).
    pub expert_checkpoint: Option<String>,
    /// Updates between weight publications to the actors.
    pub publish_interval: u64,
    /// The replay table (demo steps or expert-labelled steps).
    pub replay: ReplayOptions,
}

impl Default for BcConfig {
    fn default() -> Self {
        BcConfig {
            discount: 0.99,
            learning_rate: 1e-3,
            loss: BcLoss::LogProb,
            policy: BcPolicy::Deterministic,
            demos: None,
            expert_checkpoint: None,
            publish_interval: 1,
            replay: ReplayOptions {
                samples_per_insert: 8.0,
                min_size: 500,
                ..ReplayOptions::default()
            },
        }
    }
}

impl DqnConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.learning_rate > 0.0,
            "algo.learning_rate",
            "must be > 0",
        )?;
        check(self.reward_clip >= 0.0, "algo.reward_clip", "must be >= 0")?;
        check(
            self.optimizer_eps > 0.0,
            "algo.optimizer_eps",
            "must be > 0",
        )?;
        super::algo::check_rule(self.rmsprop_alpha, self.sgd_momentum)?;
        self.target.validate()?;
        self.replay.validate()?;
        self.explore.validate()
    }
}

impl SacConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_actor_critic(self.policy_lr, self.qf_lr, self.num_critics)?;
        check(
            self.initial_alpha > 0.0,
            "algo.initial_alpha",
            "must be > 0",
        )?;
        self.target.validate()?;
        self.replay.validate()?;
        self.explore.validate()
    }
}

impl Td3Config {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_actor_critic(self.policy_lr, self.qf_lr, self.num_critics)?;
        check(self.policy_delay >= 1, "algo.policy_delay", "must be >= 1")?;
        for (value, key) in [
            (self.policy_weight_decay, "algo.policy_weight_decay"),
            (self.qf_weight_decay, "algo.qf_weight_decay"),
        ] {
            check(
                value.is_finite() && value >= 0.0,
                key,
                "must be finite and >= 0",
            )?;
        }
        check(
            self.clip_return > 0.0,
            "algo.clip_return",
            "must be > 0 (inf: no clipping)",
        )?;
        self.target.validate()?;
        self.replay.validate()?;
        self.explore.validate()
    }
}

impl BcConfig {
    /// The demo directory, if one is set (an empty string is none).
    pub fn demo_dir(&self) -> Option<&str> {
        self.demos.as_deref().filter(|d| !d.is_empty())
    }

    /// The expert checkpoint, if one is set (an empty string is none).
    pub fn expert(&self) -> Option<&str> {
        self.expert_checkpoint.as_deref().filter(|d| !d.is_empty())
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            self.learning_rate > 0.0,
            "algo.learning_rate",
            "must be > 0",
        )?;
        check(
            self.demo_dir().is_some() != self.expert().is_some(),
            "algo.demos",
            "set exactly one of algo.demos (a directory of demo files) and algo.expert_checkpoint",
        )?;
        self.replay.validate()
    }
}
