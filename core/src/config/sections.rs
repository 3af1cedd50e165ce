//! The binary-level sections: the actors, the replay tables, the learner, when to stop, evaluation.

use serde::{Deserialize, Serialize};

use super::{BroadcastDtype, CollectiveBackend, DeviceList, EnvConfig};

/// The actor fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActorsConfig {
    /// Actor processes the launcher starts.
    pub count: u32,
    /// Environments each actor steps in lockstep.
    pub envs_per_actor: u32,
    /// Env steps per rollout (T); a rollout is T x envs_per_actor steps.
    pub rollout_length: u32,
    /// Rollouts an actor may have sent but not yet seen acknowledged.
    pub max_in_flight: u32,
    /// Seconds between episode reports to the learner.
    pub report_interval_s: f64,
    /// Updates a rollout may lag the policy it trains. Each active actor sends its share of a
    /// batch (`learner.batch_rollouts` / active actors) per version, then waits until the
    /// learner publishes a version newer than the one that acted `max_policy_lag + 1` shares
    /// ago. 0 is synchronous, on-policy PPO (as SB3); 1 overlaps acting with the update; a
    /// large value lets actors run free (IMPALA-style).
    pub max_policy_lag: u32,
    /// Longest wait for new weights, in seconds; then act with the old ones (so a lost actor
    /// or a slow update cannot stall the fleet).
    pub sync_timeout_s: f64,
    /// Act with the newest weights at least this many versions older than the newest received
    /// (0: the newest), never with any more than `max_policy_lag` behind it (versions the actor
    /// missed are skipped). Makes the policy lag deliberate, to exercise off-policy correction
    /// (V-trace); must not exceed `max_policy_lag`, or the learner drops every rollout.
    pub lag_versions: u32,
    /// rlpyt's `mid_batch_reset`. True: an env whose episode ends is reset at once and the
    /// rollout goes on in its next episode. False: it waits, unstepped, until the rollout ends
    /// and is reset before the next one; the steps it sat out are padding that PPO and A2C
    /// mask out of their losses (rlpyt's `valid_from_done`), so every rollout starts fresh
    /// episodes (what rlpyt's recurrent agents are run with).
    pub mid_batch_reset: bool,
    /// rlpyt's alternating sampler: the actor's envs form two groups, and while one group
    /// steps (on a second thread) the policy computes the other's actions, so env time and
    /// inference overlap. Needs an even `envs_per_actor`; the rollouts are the same.
    pub alternating: bool,
}

impl Default for ActorsConfig {
    fn default() -> Self {
        ActorsConfig {
            count: 2,
            envs_per_actor: 4,
            rollout_length: 32,
            max_in_flight: 1,
            report_interval_s: 0.5,
            max_policy_lag: 0,
            sync_timeout_s: 1.0,
            lag_versions: 0,
            mid_batch_reset: true,
            alternating: false,
        }
    }
}

/// The replay server's on-policy queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayConfig {
    /// Name of the rollout table.
    pub table: String,
    /// Rollouts the queue holds before inserts wait.
    pub max_size: u64,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            table: "rollouts".into(),
            max_size: 4,
        }
    }
}

/// The learner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LearnerConfig {
    /// Rollouts per training batch (the batch is this x rollout_length x envs_per_actor steps)
    /// at least: with more actors than this, each of the `S` actors sends
    /// `ceil(batch_rollouts / S)` rollouts per version and the batch is all of them, so it grows
    /// with the fleet rather than leaving the extra rollouts to go stale (on-policy).
    pub batch_rollouts: u32,
    /// Device for the update: "cpu", "cuda" or "cuda:N" (with `devices` set: left as is, or
    /// the first of `devices`).
    pub device: String,
    /// Data-parallel devices, e.g. ["cuda:0", "cuda:1"] or ["cpu", "cpu"], or "auto" (all
    /// GPUs, else cpu); the first holds the optimiser. Empty: `device` alone. PPO only.
    pub devices: DeviceList,
    /// This learner's index among `world_size` learner processes (rlpyt's `rank`), or a
    /// StatefulSet pod's name (`fleetrl-learner-1`), whose ordinal is the rank.
    #[serde(deserialize_with = "super::devices::rank_or_pod_name")]
    pub rank: u32,
    /// Learner processes training one policy together (rlpyt's `world_size`): each samples
    /// its own batches, their gradients are summed through libtorch's c10d before one
    /// identical step on every rank; rank 0 publishes weights and writes checkpoints. See
    /// docs/multi-node-learner.md.
    pub world_size: u32,
    /// `host:port` of rank 0's rendezvous store (rank 0 listens on its port), with
    /// `world_size > 1`.
    pub rendezvous: String,
    /// The collectives' process group: "gloo" (CPU tensors), "nccl" (CUDA devices), or
    /// "auto" (nccl on a CUDA device, else gloo).
    pub collective_backend: CollectiveBackend,
    /// Seconds the rendezvous, and then any one collective, may take before the run stops
    /// naming the rank that did not answer. More than 0.
    pub collective_timeout_s: f64,
    /// Element type of the weights streamed to actors: "f32", or "f16" (half the bytes).
    pub broadcast_dtype: BroadcastDtype,
    /// Seconds a weight subscriber may leave the next message untaken (its HTTP/2 window
    /// full: it reads nothing) before the learner drops it: it no longer counts in
    /// `actors_connected`, `weight_subscribers_dropped_total` counts it, and its stream ends
    /// (an actor subscribes again). More than 0.
    pub subscriber_timeout_s: f64,
    /// Threads each minibatch is split over (data parallel over one set of parameters; the
    /// update is identical, only faster where cores are free). With several `devices`, one
    /// thread per device instead.
    pub update_threads: u32,
    /// Torch intra-op threads per update thread (1 is fastest for small networks).
    pub torch_threads: u32,
    /// The run stops at this many updates in a row whose weights come out NaN or infinite;
    /// each one before is undone (the learner restores the parameters and optimiser state of
    /// its last finite weights and goes on). 1 stops at the first.
    pub max_nonfinite_updates: u32,
    /// Write a checkpoint every this many updates (0: only on request and at shutdown).
    pub checkpoint_interval: u64,
    /// Checkpoints kept on disk; older ones are deleted.
    pub keep_checkpoints: u32,
    /// Write TensorBoard event files.
    pub tensorboard: bool,
    /// A checkpoint directory whose model weights a new run starts from (optimiser, counters
    /// and schedules start fresh; rlpyt's `initial_model_state_dict`). Empty: random init. A
    /// run that has checkpoints of its own resumes from those instead. On-policy algorithms.
    pub init_from: String,
    /// On a CUDA device, capture each off-policy update (dqn, sac, td3, ddpg; R2D2's
    /// sequence updates excepted) once as a CUDA graph and replay it, rather than launching
    /// its few hundred small kernels one by one. No effect on the CPU or for other
    /// algorithms, nor with `world_size > 1`.
    pub cuda_graph: bool,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        LearnerConfig {
            batch_rollouts: 2,
            device: "cpu".into(),
            devices: DeviceList::default(),
            rank: 0,
            world_size: 1,
            rendezvous: "127.0.0.1:29500".into(),
            collective_backend: CollectiveBackend::default(),
            collective_timeout_s: 60.0,
            broadcast_dtype: BroadcastDtype::default(),
            subscriber_timeout_s: 60.0,
            update_threads: 2,
            torch_threads: 1,
            max_nonfinite_updates: 5,
            checkpoint_interval: 0,
            keep_checkpoints: 3,
            tensorboard: true,
            init_from: String::new(),
            cuda_graph: true,
        }
    }
}

/// When the run stops: whichever comes first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StopConfig {
    /// Env steps of training budget.
    pub total_env_steps: u64,
    /// Stop once an evaluation's mean return reaches this, confirmed on
    /// `eval.confirm_episodes` fresh episodes (none: train for the whole budget).
    pub target_return: Option<f64>,
    /// Give up after this many seconds of wall time (0: no limit).
    pub max_wall_seconds: f64,
}

impl Default for StopConfig {
    fn default() -> Self {
        StopConfig {
            total_env_steps: 100_000,
            target_return: None,
            max_wall_seconds: 0.0,
        }
    }
}

/// Evaluation of the deterministic (greedy) policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// Episodes per evaluation.
    pub episodes: u32,
    /// Episodes of the confirming evaluation: an evaluation at or above `stop.target_return`
    /// counts as solved only once the same checkpoint also reaches it on this many start
    /// states no evaluation played before (a run whose evaluation plays held-out tasks plays
    /// them again from fresh starts, whatever the number). Otherwise training goes on.
    pub confirm_episodes: u32,
    /// Env steps of training between evaluations.
    pub interval_env_steps: u64,
    /// Evaluate early once the recent training return reaches the target (each early
    /// evaluation after the run has trained for as long as the last evaluation took).
    pub on_target_training_return: bool,
    /// Act with the policy's mode (argmax, or the Gaussian mean); false samples actions from
    /// a stochastic policy (PPO, A2C, VPG, TRPO, IMPALA, MAML, SAC, PEARL, Gaussian BC), as
    /// garage's `deterministic_eval`, and plays DQN, TD3 and DDPG with their exploration noise
    /// as garage evaluates them: epsilon-greedy at `algo.explore.epsilon_end`, Gaussian noise
    /// of `algo.explore.noise_std` (also for Ornstein-Uhlenbeck exploration), no warm-up.
    /// Deterministic BC acts greedily either way.
    pub deterministic: bool,
    /// Ends an evaluation episode after this many steps, as a time limit (0: the env's own
    /// limit only; garage's `max_episode_length_eval`).
    pub max_episode_length: u64,
    /// `[eval.env]`: the env evaluation plays instead of `[env]` (same spaces), e.g. without
    /// reward scaling or with another episode length; absent: `[env]`.
    pub env: Option<EnvConfig>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            episodes: 20,
            confirm_episodes: 100,
            interval_env_steps: 10_000,
            on_target_training_return: true,
            deterministic: true,
            max_episode_length: 0,
            env: None,
        }
    }
}
