//! The option groups the off-policy algorithms' `[algo]` sections share (DQN, SAC, TD3/DDPG,
//! BC): the `[algo.replay]` table (how transitions are stored and sampled), the
//! `[algo.explore]` table (what the actors add to the policy's action) and CAPS smoothing;
//! each algorithm's own keys are at the top of its file.

use serde::{Deserialize, Serialize};

use crate::config::error::{check, ConfigError};

/// The checks SAC and TD3 share: positive learning rates, at least one critic.
pub(crate) fn check_actor_critic(
    policy_lr: f64,
    qf_lr: f64,
    num_critics: u32,
) -> Result<(), ConfigError> {
    check(
        policy_lr > 0.0 && qf_lr > 0.0,
        "algo.policy_lr",
        "learning rates must be > 0",
    )?;
    check(num_critics >= 1, "algo.num_critics", "must be >= 1")
}

/// The most items one insert request may stack (`algo.replay.items_per_request`).
const MAX_ITEMS_PER_REQUEST: u32 = 1024;

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
    /// Items (transitions, or sequences for a recurrent model) an actor stacks into one
    /// insert request. An actor also queues at most this many and keeps this many times
    /// `actors.max_in_flight` unacknowledged, so its policy can act about twice this many
    /// env steps per env ahead of what the replay server took, and `error_buffer` more ahead
    /// of the learner. 1 (with `error_buffer` at two batches and `algo.publish_interval = 1`)
    /// acts about 15 updates behind the learner where 64 acts about 240 behind
    /// (`halfcheetah-td3`, bench/policy_lag.sh; SB3's step-then-update loop: 0 or 1), at one
    /// request per env step.
    pub items_per_request: u32,
    /// Prioritized experience replay (Schaul et al. 2016): sample by TD error.
    pub prioritized: bool,
    /// Priority exponent alpha (0 uniform, 1 proportional).
    pub priority_exponent: f64,
    /// Importance-sampling exponent beta at the start, annealed linearly to 1 over the run.
    pub importance_exponent: f64,
    /// Added to |TD error| so no transition's priority is 0.
    pub priority_eps: f64,
    /// Steps summed into one transition's return (Ape-X style, computed on the actors; for a
    /// recurrent model, computed by the learner inside each stored sequence).
    pub n_step: u32,
    /// Recurrent DQN (R2D2), SAC, TD3 and DDPG: env steps per stored sequence, burn-in
    /// included. An item of the table is then one sequence, so `capacity`, `batch_size`, `min_size` and
    /// `samples_per_insert` count sequences.
    pub sequence_length: u32,
    /// Recurrent off-policy models: steps consecutive sequences of one env share (R2D2 uses
    /// half the length).
    pub sequence_overlap: u32,
    /// Recurrent off-policy models: leading steps of each sequence unrolled without gradient
    /// from the stored recurrent state, to warm the state up before the loss (R2D2's burn-in).
    pub burn_in: u32,
    /// Recurrent off-policy models: a sequence's priority is
    /// `eta * max |td| + (1 - eta) * mean |td|` over its trained steps (R2D2: 0.9).
    pub priority_eta: f64,
    /// Transitions the table starts with: a directory of demo files (`fleetrl record`) or
    /// `minari:<dataset id or path>`, inserted by the learner before it samples (DQN, SAC,
    /// TD3, DDPG; BC reads `algo.demos`).
    pub initial_demos: Option<String>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            capacity: 100_000,
            batch_size: 64,
            samples_per_insert: 16.0,
            min_size: 1_000,
            error_buffer: 0.0,
            items_per_request: 64,
            prioritized: false,
            priority_exponent: 0.6,
            importance_exponent: 0.4,
            priority_eps: 1e-6,
            n_step: 1,
            sequence_length: 40,
            sequence_overlap: 20,
            burn_in: 10,
            priority_eta: 0.9,
            initial_demos: None,
        }
    }
}

impl ReplayOptions {
    /// The initial demos, if set (an empty string is none).
    pub fn initial_demo_dir(&self) -> Option<&str> {
        self.initial_demos.as_deref().filter(|d| !d.is_empty())
    }

    /// The rate limiter's slack in sampled transitions.
    pub fn effective_error_buffer(&self) -> f64 {
        if self.error_buffer > 0.0 {
            return self.error_buffer;
        }
        let two_batches = 2.0 * self.batch_size as f64;
        two_batches.max(100.0 * self.samples_per_insert.max(1.0))
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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
            (1..=MAX_ITEMS_PER_REQUEST).contains(&self.items_per_request),
            "algo.replay.items_per_request",
            "must be in [1, 1024]",
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

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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
