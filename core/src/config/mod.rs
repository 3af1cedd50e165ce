//! The run configuration: one TOML file with a section per component, read by every binary.
//!
//! Layers, lowest first: each field's default, the file (a path, or a preset name from
//! `configs/`), then `--set dotted.key=value` overrides. Unknown keys are errors everywhere.

mod devices;
pub(crate) mod error;
mod overrides;
mod ppod;
#[cfg(test)]
mod reference;
mod validate;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::envs::config::{EnvConfig, Vectorization};
pub use crate::models::config::{Activation, ModelConfig};
pub use crate::tasks::TasksConfig;

pub use devices::{
    check_available, parse_device, BroadcastDtype, DeviceList, UnavailableDevice, UnknownDevice,
};
pub(crate) use error::check;
pub use error::{ConfigError, CONFIG_VERSION};
pub use overrides::apply_override;
pub use ppod::PpodConfig;

// Each algorithm's section lives beside the algorithm; these names are where the rest of the
// system (and older imports) find them.
pub use crate::algos::a2c::A2cConfig;
pub use crate::algos::bc::{BcConfig, BcLoss, BcPolicy};
pub use crate::algos::config::{AlgoConfig, ALGO_NAMES};
pub use crate::algos::dqn::DqnConfig;
pub use crate::algos::impala::ImpalaConfig;
pub use crate::algos::intrinsic::IntrinsicConfig;
pub use crate::algos::maml::{MamlConfig, MetaOptimizer};
pub use crate::algos::offpolicy::{CapsOptions, Exploration, NoiseKind, ReplayOptions};
pub use crate::algos::pearl::PearlConfig;
pub use crate::algos::pg::{EntropyMethod, PgOptions};
pub use crate::algos::ppo::PpoConfig;
pub use crate::algos::sac::SacConfig;
pub use crate::algos::target::TargetUpdate;
pub use crate::algos::td3::Td3Config;
pub use crate::algos::trpo::TrpoConfig;
pub use crate::algos::vpg::VpgConfig;
pub use crate::algos::vtrace::VtraceClips;

/// The `[algo]` keys a running learner can change (`fleetrl set RUN algo.KEY=VALUE`), where
/// the run's algorithm has them and can take the change ([`RunConfig::with_live_change`]).
pub const LIVE_ALGO_KEYS: &[&str] = &[
    "learning_rate",
    "entropy_loss_coeff",
    "value_loss_coeff",
    "clip_grad_norm",
    "ratio_clip",
    "epochs",
    "normalize_advantage",
    "discount",
    "gae_lambda",
    "vtrace_lambda",
    "rho_bar",
    "pg_rho_bar",
    "c_bar",
];

/// A whole run: what to learn, with what, on how many actors, until when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Config file format version; must be 1.
    pub version: u32,
    /// Seed for everything random: env starts, initial weights, sampling.
    pub seed: u64,
    /// The environment.
    pub env: EnvConfig,
    /// The policy network.
    pub model: ModelConfig,
    /// The algorithm (`name`, one of [`ALGO_NAMES`]) and its hyperparameters.
    pub algo: AlgoConfig,
    /// The actors.
    pub actors: ActorsConfig,
    /// The replay server's tables.
    pub replay: ReplayConfig,
    /// The learner.
    pub learner: LearnerConfig,
    /// When the run stops.
    pub stop: StopConfig,
    /// Evaluation of the deterministic policy.
    pub eval: EvalConfig,
    /// PPO+D demo replay (off by default).
    pub ppod: PpodConfig,
    /// Training and held-out test tasks (meta-RL).
    pub tasks: TasksConfig,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            version: CONFIG_VERSION,
            seed: 0,
            env: EnvConfig::default(),
            model: ModelConfig::default(),
            algo: AlgoConfig::default(),
            actors: ActorsConfig::default(),
            replay: ReplayConfig::default(),
            learner: LearnerConfig::default(),
            stop: StopConfig::default(),
            eval: EvalConfig::default(),
            ppod: PpodConfig::default(),
            tasks: TasksConfig::default(),
        }
    }
}

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
    /// (0: the newest). Makes the policy lag deliberate, to exercise off-policy correction
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
    /// This learner's index among `world_size` learner processes (rlpyt's `rank`).
    pub rank: u32,
    /// Learner processes training one policy together (rlpyt's `world_size`); only 1 yet.
    pub world_size: u32,
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
    /// algorithms.
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
            broadcast_dtype: BroadcastDtype::default(),
            subscriber_timeout_s: 60.0,
            update_threads: 2,
            torch_threads: 1,
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
    /// Stop once an evaluation's mean return reaches this (none: train for the whole budget).
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
    /// Env steps of training between evaluations.
    pub interval_env_steps: u64,
    /// Evaluate early once the recent training return reaches the target.
    pub on_target_training_return: bool,
    /// Act with the policy's mode (argmax, or the Gaussian mean); false samples actions from
    /// a stochastic policy (PPO, A2C, VPG, TRPO, IMPALA, MAML, SAC, PEARL, Gaussian BC), as
    /// garage's `deterministic_eval`. DQN, TD3, DDPG and deterministic BC act greedily either
    /// way: their exploration noise (epsilon, Gaussian action noise) is a training choice that
    /// evaluation never adds.
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
            interval_env_steps: 10_000,
            on_target_training_return: true,
            deterministic: true,
            max_episode_length: 0,
            env: None,
        }
    }
}

impl RunConfig {
    /// The DQN settings when this run trains a recurrent DQN (R2D2: `model.lstm_size > 0` with
    /// `algo.name = "dqn"`), whose replay items are sequences rather than transitions.
    pub fn recurrent_dqn(&self) -> Option<&DqnConfig> {
        match &self.algo {
            AlgoConfig::Dqn(c) if self.model.lstm_size > 0 => Some(c),
            _ => None,
        }
    }

    /// Parses TOML text, checking version and ranges.
    pub fn from_toml(text: &str, origin: &str) -> Result<RunConfig, ConfigError> {
        let value: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        RunConfig::from_table(value, origin)
    }

    /// Loads a file or preset, then applies `key=value` overrides in order.
    pub fn load(spec: &str, overrides: &[String]) -> Result<RunConfig, ConfigError> {
        let path = resolve_preset(spec);
        let text = std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound && is_bare_name(spec) {
                ConfigError::UnknownPreset {
                    name: spec.to_string(),
                    presets: presets(),
                }
            } else {
                ConfigError::Read {
                    path: path.clone(),
                    cause: source,
                }
            }
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            origin: path.display().to_string(),
            message: e.to_string(),
        })?;
        RunConfig::from_table_with(table, &path.display().to_string(), overrides)
    }

    /// This config with `--set` style `overrides` applied (an error names the first one
    /// that breaks it), e.g. a checkpoint's config changed for one evaluation.
    pub fn with_overrides(&self, overrides: &[String]) -> Result<RunConfig, ConfigError> {
        let origin = "the effective config";
        let table = toml::from_str(&self.to_toml()).map_err(|e| ConfigError::Parse {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        RunConfig::from_table_with(table, origin, overrides)
    }

    /// The config of `file` (read from `origin`) with `overrides` applied. When the file alone
    /// is fine and the result is not, the error is the first `--set` that breaks it.
    fn from_table_with(
        file: toml::Table,
        origin: &str,
        overrides: &[String],
    ) -> Result<RunConfig, ConfigError> {
        let mut table = file.clone();
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        RunConfig::from_table(table, origin).map_err(|error| {
            if overrides.is_empty() || RunConfig::from_table(file.clone(), origin).is_err() {
                return error;
            }
            let mut table = file;
            for o in overrides {
                if apply_override(&mut table, o).is_ok() {
                    if let Err(blamed) = RunConfig::from_table(table.clone(), &format!("--set {o}"))
                    {
                        return blamed;
                    }
                }
            }
            error
        })
    }

    fn from_table(table: toml::Table, origin: &str) -> Result<RunConfig, ConfigError> {
        check_finite(&table, "", origin)?;
        let batch_set = table
            .get("learner")
            .and_then(|l| l.get("batch_rollouts"))
            .is_some();
        let mut config: RunConfig = serde_path_to_error::deserialize(toml::Value::Table(table))
            .map_err(|e| ConfigError::Parse {
                origin: origin.to_string(),
                message: typed_key_message(&e),
            })?;
        // MAML's meta-batch is the learner's batch: one rollout item per task.
        if let Some(maml) = config.algo.as_maml() {
            check(
                !batch_set || config.learner.batch_rollouts == maml.meta_batch_size,
                "learner.batch_rollouts",
                &format!(
                    "MAML's batch is algo.meta_batch_size ({}) tasks, one rollout each; leave \
                     learner.batch_rollouts unset",
                    maml.meta_batch_size
                ),
            )?;
            config.learner.batch_rollouts = maml.meta_batch_size;
        }
        config.validate()?;
        Ok(config)
    }

    /// The effective config as TOML, every default filled in.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("RunConfig always serialises")
    }

    /// Whether this config can resume `checkpoint`, saved with `trained`: the same algorithm
    /// and network (other ones have other weights and state); everything else may change.
    pub fn check_resumes(&self, trained: &RunConfig, checkpoint: &Path) -> Result<(), ConfigError> {
        let differences = self.resume_differences(trained);
        if differences.is_empty() {
            return Ok(());
        }
        Err(ConfigError::NotResumable {
            checkpoint: checkpoint.to_path_buf(),
            differences,
        })
    }

    /// The keys that shape what a checkpoint holds, `algo.name` and every `model` key, where
    /// this config differs from `trained`'s, as
    /// ``"`model.hidden_sizes`: [64, 64] in the checkpoint, [128] here"``.
    fn resume_differences(&self, trained: &RunConfig) -> Vec<String> {
        fn flat(prefix: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
            match value {
                toml::Value::Table(table) => {
                    for (key, value) in table {
                        flat(&format!("{prefix}.{key}"), value, out);
                    }
                }
                other => out.push((prefix.to_string(), other.to_string())),
            }
        }
        let keys = |config: &RunConfig| {
            let mut out = vec![("algo.name".to_string(), format!("{:?}", config.algo.name()))];
            let model = toml::Value::try_from(&config.model).expect("ModelConfig serialises");
            flat("model", &model, &mut out);
            out
        };
        let here: std::collections::BTreeMap<_, _> = keys(self).into_iter().collect();
        let there: std::collections::BTreeMap<_, _> = keys(trained).into_iter().collect();
        let mut all: Vec<&String> = here.keys().chain(there.keys()).collect();
        all.sort();
        all.dedup();
        let unset = String::from("(unset)");
        all.into_iter()
            .filter_map(|key| {
                let (old, new) = (
                    there.get(key).unwrap_or(&unset),
                    here.get(key).unwrap_or(&unset),
                );
                (old != new).then(|| format!("`{key}`: {old} in the checkpoint, {new} here"))
            })
            .collect()
    }

    /// This config with `key` set to `value` (a TOML value) while the run goes on (`fleetrl
    /// set`), validated as a whole, and the key's value before and after (as TOML). Only the
    /// [`LIVE_ALGO_KEYS`] of the run's algorithm can change: the learner reads them afresh on
    /// every update and they reshape nothing.
    pub fn with_live_change(
        &self,
        key: &str,
        value: &str,
    ) -> Result<(RunConfig, String, String), ConfigError> {
        let fixed = |message: String| ConfigError::Fixed {
            key: key.to_string(),
            message,
        };
        let live = || {
            format!(
                "the keys that can are algo.{}",
                LIVE_ALGO_KEYS.join(", algo.")
            )
        };
        let field = key
            .strip_prefix("algo.")
            .filter(|f| LIVE_ALGO_KEYS.contains(f))
            .ok_or_else(|| fixed(format!("it is set when the run starts; {}", live())))?;
        if self.learner.world_size > 1 {
            return Err(fixed(format!(
                "this run has {} learners (learner.world_size), which would each need the change \
                 at the same update; restart the run with it instead",
                self.learner.world_size
            )));
        }
        let mut table = toml::Table::try_from(self).map_err(|e| fixed(e.to_string()))?;
        let read = |table: &toml::Table| {
            table
                .get("algo")
                .and_then(|algo| algo.get(field))
                .map(ToString::to_string)
        };
        let previous = read(&table).ok_or_else(|| {
            fixed(format!(
                "algo.name = \"{}\" has no such key; {}",
                self.algo.name(),
                live()
            ))
        })?;
        apply_override(&mut table, &format!("{key}={value}"))?;
        let changed = RunConfig::from_table(table, &format!("set {key}"))?;
        let table = toml::Table::try_from(&changed).map_err(|e| fixed(e.to_string()))?;
        let now = read(&table).unwrap_or_default();
        Ok((changed, previous, now))
    }

    /// Env steps of training between `fleetrl train`'s evaluations: MAML's
    /// `evaluate_every_n_epochs` meta-batches when set, else `eval.interval_env_steps`.
    pub fn eval_interval_env_steps(&self) -> u64 {
        match self.algo.as_maml() {
            Some(m) if m.evaluate_every_n_epochs > 0 => {
                u64::from(m.evaluate_every_n_epochs) * self.batch_env_steps()
            }
            _ => self.eval.interval_env_steps,
        }
    }

    /// The run's task set when its items carry task ids (meta-RL), which the learner checks.
    pub fn item_tasks(&self) -> Option<crate::tasks::TaskSet> {
        (self.algo.as_maml().is_some() || self.algo.as_pearl().is_some())
            .then(|| crate::tasks::TaskSet::new(&self.tasks, self.seed))
    }

    /// Env steps in one training batch.
    pub fn batch_env_steps(&self) -> u64 {
        u64::from(self.algo.stages())
            * self.learner.batch_rollouts as u64
            * self.actors.rollout_length as u64
            * self.actors.envs_per_actor as u64
    }
}

/// A bare name like `cartpole-ppo` means `configs/cartpole-ppo.toml`, looked up in the current
/// directory, then beside the running binary's workspace (`<repo>/target/release/..`).
pub fn resolve_preset(spec: &str) -> PathBuf {
    let direct = PathBuf::from(spec);
    if direct.exists() || !is_bare_name(spec) {
        return direct;
    }
    let file = format!("{spec}.toml");
    preset_dirs()
        .into_iter()
        .map(|dir| dir.join(&file))
        .find(|p| p.exists())
        .unwrap_or(direct)
}

/// The keys where an infinite value means "no limit": TD3's target clipping, and a stop
/// target that is never reached.
const INFINITE_OK: [&str; 2] = ["algo.clip_return", "stop.target_return"];

/// Refuses NaN anywhere in `table` (under the dotted `prefix`), and infinities outside
/// [`INFINITE_OK`]: `> 0` and range checks let `inf` through, and a learning rate of `inf`
/// (from a file, `--set`, or `fleetrl set` on a running learner) makes every weight NaN.
fn check_finite(table: &toml::Table, prefix: &str, origin: &str) -> Result<(), ConfigError> {
    fn value(key: &str, v: &toml::Value, origin: &str) -> Result<(), ConfigError> {
        let refuse = |message: String| ConfigError::Parse {
            origin: origin.to_string(),
            message,
        };
        match v {
            toml::Value::Float(x) if x.is_nan() => {
                Err(refuse(format!("`{key}` = nan is not a number")))
            }
            toml::Value::Float(x) if x.is_infinite() && !INFINITE_OK.contains(&key) => {
                Err(refuse(format!(
                    "`{key}` = {x} must be a finite number (infinity means no limit only for {})",
                    INFINITE_OK.join(" and ")
                )))
            }
            toml::Value::Table(t) => check_finite(t, key, origin),
            toml::Value::Array(items) => items.iter().try_for_each(|item| value(key, item, origin)),
            _ => Ok(()),
        }
    }
    table.iter().try_for_each(|(k, v)| {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        value(&key, v, origin)
    })
}

/// A deserialisation error with the dotted key it happened at (`actors.count: invalid type:
/// floating point `2.5`, expected u32`); the message alone where the key is the whole file.
fn typed_key_message(error: &serde_path_to_error::Error<toml::de::Error>) -> String {
    let path = error.path().to_string();
    let message = error.inner().to_string();
    // toml ends a value's error with the key again (`\nin `actors.count``).
    let message = message
        .split("\nin `")
        .next()
        .unwrap_or_default()
        .trim_end();
    if path.is_empty() || path == "." || message.starts_with(&format!("{path}.")) {
        message.to_string()
    } else {
        format!("{path}: {message}")
    }
}

/// Whether `spec` names a preset rather than a file: no `/` and no `.toml`.
fn is_bare_name(spec: &str) -> bool {
    !spec.contains('/') && !spec.ends_with(".toml")
}

/// Where presets are looked up, in order: `configs/` in the current directory, then in each
/// of the four directories above the running binary.
fn preset_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("configs")];
    if let Ok(exe) = std::env::current_exe() {
        dirs.extend(exe.ancestors().skip(1).take(4).map(|d| d.join("configs")));
    }
    dirs
}

/// The names of every preset in [`preset_dirs`], sorted, without repeats.
fn presets() -> Vec<String> {
    let mut names: Vec<String> = preset_dirs()
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "toml").then(|| path.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A loaded config changed by `--set`s keeps everything else, and a bad value is
    /// refused naming the `--set` that brought it.
    #[test]
    fn overrides_apply_to_a_loaded_config_and_name_the_one_that_breaks_it() {
        let config = RunConfig::load("point-robot-sparse-pearl", &[]).unwrap();
        let changed = config
            .with_overrides(&["algo.n_posterior_eps=15".into()])
            .unwrap();
        assert_eq!(changed.algo.as_pearl().unwrap().n_posterior_eps, 15);
        let mut back = changed.clone();
        back.algo = config.algo.clone();
        assert_eq!(back, config, "only the key that was set changed");
        let err = config
            .with_overrides(&["algo.n_posterior_eps=-1".into()])
            .unwrap_err();
        assert!(
            err.to_string().contains("--set algo.n_posterior_eps=-1"),
            "{err}"
        );
    }

    #[test]
    fn nan_and_infinities_are_refused_naming_the_key_except_where_they_mean_no_limit() {
        for (set, says) in [
            (
                "algo.learning_rate=inf",
                "`algo.learning_rate` = inf must be a finite number",
            ),
            (
                "algo.learning_rate=nan",
                "`algo.learning_rate` = nan is not a number",
            ),
            (
                "algo.ratio_clip=-inf",
                "`algo.ratio_clip` = -inf must be a finite number",
            ),
        ] {
            let err = RunConfig::load("cartpole-ppo", &[set.into()]).unwrap_err();
            assert!(err.to_string().contains(says), "{set}: {err}");
        }
        let err = RunConfig::from_toml(
            "[model]\nhidden_sizes = [64, 64]\ninit_log_std = nan\n",
            "t",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("`model.init_log_std` = nan"),
            "{err}"
        );
        let never = RunConfig::load("cartpole-ppo", &["stop.target_return=inf".into()]).unwrap();
        assert_eq!(never.stop.target_return, Some(f64::INFINITY));
        // A live change (`fleetrl set`) re-reads the whole config: refused there too, while
        // TD3's default infinite clip_return (targets left unclipped) passes.
        let ppo = RunConfig::load("cartpole-ppo", &[]).unwrap();
        let err = ppo
            .with_live_change("algo.learning_rate", "inf")
            .unwrap_err();
        assert!(
            err.to_string().contains("`algo.learning_rate` = inf"),
            "{err}"
        );
        let td3 = RunConfig::load("pendulum-td3", &[]).unwrap();
        assert!(td3.with_live_change("algo.discount", "0.98").is_ok());
    }

    #[test]
    fn resume_differences_name_the_algorithm_and_network_keys_only() {
        let trained = RunConfig::load("cartpole-ppo", &[]).unwrap();
        let same = RunConfig::load(
            "cartpole-ppo",
            &[
                "stop.total_env_steps=1".into(),
                "algo.learning_rate=1e-5".into(),
            ],
        )
        .unwrap();
        assert_eq!(same.resume_differences(&trained), Vec::<String>::new());
        let wider = RunConfig::load("cartpole-ppo", &["model.hidden_sizes=[128]".into()]).unwrap();
        assert_eq!(
            wider.resume_differences(&trained),
            ["`model.hidden_sizes`: [64, 64] in the checkpoint, [128] here"]
        );
        let dqn = RunConfig::load("cartpole-dqn", &[]).unwrap();
        let err = dqn
            .check_resumes(&trained, Path::new("run/checkpoints/ckpt-00000001"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "run/checkpoints/ckpt-00000001 was trained with another algorithm or network \
                 than this config's (`algo.name`: \"ppo\" in the checkpoint, \"dqn\" here; "
            ),
            "{err}"
        );
        assert!(same.check_resumes(&trained, Path::new("x")).is_ok());
    }

    /// Each activation against its definition at -1, 0 and 2, and by its config name.
    #[test]
    fn activations_by_name_and_value() {
        let x = tch::Tensor::from_slice(&[-1.0f32, 0.0, 2.0]);
        let e = (-1.0f32).exp();
        let cases = [
            ("tanh", [(-1.0f32).tanh(), 0.0, 2.0f32.tanh()]),
            ("relu", [0.0, 0.0, 2.0]),
            ("elu", [e - 1.0, 0.0, 2.0]),
            // x * Phi(x): Phi(-1) = 0.158655, Phi(2) = 0.977250
            ("gelu", [-0.158_655, 0.0, 1.954_5]),
            ("leaky_relu", [-0.01, 0.0, 2.0]),
            (
                "sigmoid",
                [1.0 / (1.0 + 1.0 / e), 0.5, 1.0 / (1.0 + (-2.0f32).exp())],
            ),
        ];
        for (name, want) in cases {
            let toml = format!("[model]\nactivation = \"{name}\"\n");
            let config = RunConfig::from_toml(&toml, "test").unwrap();
            let got = Vec::<f32>::try_from(config.model.activation.apply(&x)).unwrap();
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-5, "{name}: {got:?} vs {want:?}");
            }
        }
        let err = RunConfig::from_toml("[model]\nactivation = \"swish\"\n", "test").unwrap_err();
        assert!(err.to_string().contains("swish"), "{err}");
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let c = RunConfig::default();
        assert_eq!(RunConfig::from_toml(&c.to_toml(), "test").unwrap(), c);
        // TD3's default clip_return is infinite: TOML writes and reads `inf`.
        let td3 = RunConfig::from_toml("[algo]\nname = \"td3\"\n", "test").unwrap();
        assert_eq!(RunConfig::from_toml(&td3.to_toml(), "test").unwrap(), td3);
        let clipped = "[algo]\nname = \"ddpg\"\nclip_return = 10.0\nclip_pos_returns = true\n";
        let ddpg = RunConfig::from_toml(clipped, "test").unwrap();
        assert_eq!(RunConfig::from_toml(&ddpg.to_toml(), "test").unwrap(), ddpg);
        let err = RunConfig::from_toml("[algo]\nname = \"td3\"\nqf_weight_decay = -1.0\n", "test")
            .unwrap_err();
        assert!(err.to_string().contains("algo.qf_weight_decay"), "{err}");
    }

    #[test]
    fn a_mistyped_value_names_its_dotted_key() {
        for (text, key) in [
            ("[actors]\ncount = 2.5\n", "actors.count"),
            (
                "[algo]\nname = \"ppo\"\nlearning_rate = \"fast\"\n",
                "algo.learning_rate",
            ),
            (
                "[model]\nhidden_sizes = [64, \"x\"]\n",
                "model.hidden_sizes",
            ),
        ] {
            let error = RunConfig::from_toml(text, "test").unwrap_err().to_string();
            assert!(error.contains(key), "{text}: {error}");
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err = RunConfig::from_toml("[algo]\nlearning_rat = 1.0\n", "test").unwrap_err();
        assert!(err.to_string().contains("learning_rat"), "{err}");
    }

    #[test]
    fn algo_name_selects_the_section_and_defaults_to_ppo() {
        let ppo = RunConfig::from_toml("[algo]\nratio_clip = 0.3\n", "test").unwrap();
        assert_eq!(ppo.algo.as_ppo().map(|c| c.ratio_clip), Some(0.3));
        let a2c = RunConfig::from_toml("[algo]\nname = \"a2c\"\n", "test").unwrap();
        assert_eq!(a2c.algo.name(), "a2c");
        assert_eq!(RunConfig::from_toml(&a2c.to_toml(), "test").unwrap(), a2c);
        // A key of another algorithm is unknown to this one.
        let err =
            RunConfig::from_toml("[algo]\nname = \"a2c\"\nratio_clip = 0.2\n", "test").unwrap_err();
        assert!(err.to_string().contains("ratio_clip"), "{err}");
        let err = RunConfig::from_toml("[algo]\nname = \"dqn2\"\n", "test").unwrap_err();
        assert!(err.to_string().contains("dqn2"), "{err}");
    }

    /// `tasks.multi_task` hands random training tasks to algorithms that play one policy,
    /// on-policy or off-policy; meta-RL algorithms, which draw their own, are refused by key.
    #[test]
    fn multi_task_is_for_algorithms_that_play_one_policy() {
        let load = |algo: &str| {
            let text = format!(
                "[env]\nid = \"PointGoal-v0\"\n[algo]\nname = \"{algo}\"\n\
                 [tasks]\nmulti_task = true\n[actors]\nenvs_per_actor = 1\n[replay]\n\
                 table = \"{}\"\n",
                if algo == "ppo" {
                    "rollouts"
                } else {
                    "transitions"
                }
            );
            RunConfig::from_toml(&text, "t")
        };
        for algo in ["ppo", "sac", "td3", "ddpg"] {
            assert!(load(algo).is_ok(), "{algo}: {:?}", load(algo).err());
        }
        for algo in ["pearl", "maml_trpo"] {
            let err = load(algo).unwrap_err().to_string();
            assert!(err.contains("tasks.multi_task"), "{algo}: {err}");
        }
    }

    /// PEARL's settings that cannot work are refused by key: several envs per actor, a context
    /// mini-batch that does not divide the context batch, a round without context, hindsight
    /// goals out of range or on a family without them, and the replay table counts in rounds.
    #[test]
    fn pearl_refuses_what_cannot_work_and_counts_its_table_in_rounds() {
        let load = |extra: &str| {
            let text = format!(
                "[env]\nid = \"PointGoal-v0\"\n[algo]\nname = \"pearl\"\n{extra}\n\
                 [actors]\nenvs_per_actor = 1\n"
            );
            RunConfig::from_toml(&text, "t")
        };
        let pearl = load("").unwrap();
        let replay = pearl.algo.as_pearl().unwrap().replay(&pearl.tasks);
        // Defaults: rounds of 200 steps, 1M steps held, 1000 updates per 100 rounds of 64 tasks,
        // 100 initial steps for each of 100 training tasks (50 rounds).
        assert_eq!(replay.capacity, 5000);
        assert_eq!(replay.batch_size, 64);
        assert_eq!(replay.samples_per_insert, 640.0);
        assert_eq!(replay.min_size, 50);
        let refused = |extra: &str, key: &str| {
            let err = load(extra).unwrap_err().to_string();
            assert!(err.contains(key), "{extra}: {err}");
        };
        refused(
            "embedding_mini_batch_size = 300",
            "algo.embedding_mini_batch_size",
        );
        refused(
            "num_steps_prior = 0\nnum_steps_posterior = 0",
            "algo.num_steps_prior",
        );
        refused("meta_batch_size = 0", "algo.meta_batch_size");
        refused("relabel_fraction = 1.5", "algo.relabel_fraction");
        refused("exploration_pool = 100000", "algo.exploration_pool");
        // Hindsight goals are the sparse robot's: PointGoal-v0's rounds cannot be relabelled.
        refused("relabel_fraction = 0.5", "env.id is \"PointGoal-v0\"");
        // The initial collection is per training task: 2,000 x 100 tasks outlasts the budget.
        refused(
            "num_initial_steps = 2000\n[stop]\ntotal_env_steps = 100000",
            "algo.num_initial_steps x tasks.num_train (200000 env steps)",
        );
        refused(
            "num_initial_steps = 2000\nreplay_buffer_size = 100000\n\
             [stop]\ntotal_env_steps = 1000000",
            "must fit in algo.replay_buffer_size (100000)",
        );
        let text = "[env]\nid = \"PointGoal-v0\"\n[algo]\nname = \"pearl\"\n\
                    [actors]\nenvs_per_actor = 4\n";
        let err = RunConfig::from_toml(text, "t").unwrap_err().to_string();
        assert!(err.contains("actors.envs_per_actor"), "{err}");
    }

    /// Every preset shipped in `configs/` parses and passes validation as it stands.
    #[test]
    fn every_preset_is_a_valid_config() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                let origin = path.display().to_string();
                if let Err(err) = RunConfig::from_toml(&text, &origin) {
                    panic!("{origin}: {err}");
                }
                checked += 1;
            }
        }
        assert!(checked >= 30, "only {checked} presets in {}", dir.display());
    }

    /// A mistyped preset name says which preset was probably meant and lists them all (the
    /// test binary finds `configs/` above `target/`); a path that does not exist stays a file
    /// error.
    #[test]
    fn a_mistyped_preset_names_the_nearest_and_lists_the_presets() {
        let err = RunConfig::load("cartpole-pp", &[]).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "no config file or preset named `cartpole-pp` (did you mean `cartpole-ppo`?); \
                 the presets: acrobot-ppo, "
            ),
            "{err}"
        );
        assert!(err.contains(", pendulum-sac, "), "{err}");
        let err = RunConfig::load("no/such.toml", &[])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot read config no/such.toml"), "{err}");
    }

    #[test]
    fn an_off_policy_budget_that_never_fills_the_table_is_refused() {
        let text = "[algo]\nname = \"sac\"\n[algo.replay]\nmin_size = 10000\n\
                    [stop]\ntotal_env_steps = 5000\n";
        let err = RunConfig::from_toml(text, "test").unwrap_err().to_string();
        assert!(
            err.contains("stop.total_env_steps") && err.contains("10000"),
            "{err}"
        );
        let text = text.replace("5000", "20000");
        assert!(RunConfig::from_toml(&text, "test").is_ok());
    }

    #[test]
    fn garage_entropy_checks_are_enforced() {
        let text = "[algo]\nname = \"vpg\"\nentropy_method = \"max\"\npolicy_ent_coeff = 0.1\n";
        let err = RunConfig::from_toml(text, "test").unwrap_err();
        assert!(err.to_string().contains("algo.center_adv"), "{err}");
    }

    #[test]
    fn off_policy_sections_parse_and_ddpg_gets_its_defaults() {
        let text = "[algo]\nname = \"ddpg\"\n[algo.replay]\nbatch_size = 32\n";
        let c = RunConfig::from_toml(text, "test").unwrap();
        let AlgoConfig::Ddpg(d) = &c.algo else {
            panic!("{:?}", c.algo)
        };
        assert_eq!((d.num_critics, d.policy_delay, d.target_noise), (1, 1, 0.0));
        assert_eq!(d.replay.batch_size, 32);
        assert!(c.algo.is_off_policy());
        assert_eq!(RunConfig::from_toml(&c.to_toml(), "test").unwrap(), c);
        let err = RunConfig::from_toml("[algo]\nname = \"sac\"\n[algo.replay]\nn_stp = 3\n", "t")
            .unwrap_err();
        assert!(err.to_string().contains("n_stp"), "{err}");
        let err = RunConfig::from_toml("[algo]\nname = \"bc\"\n", "t").unwrap_err();
        assert!(err.to_string().contains("algo.demos"), "{err}");
        let err = RunConfig::from_toml("[model]\nlstm_size = 8\n[algo]\nname = \"sac\"\n", "t")
            .unwrap_err();
        assert!(err.to_string().contains("model.lstm_size"), "{err}");
        let r2d2 = "[model]\nlstm_size = 8\n[algo]\nname = \"dqn\"\n";
        assert!(RunConfig::from_toml(r2d2, "t").is_ok());
        let text = format!("{r2d2}[algo.replay]\nsequence_length = 10\nburn_in = 9\n");
        let err = RunConfig::from_toml(&text, "t").unwrap_err();
        assert!(err.to_string().contains("algo.replay.burn_in"), "{err}");
        let text = "[algo]\nname = \"sac\"\n[ppod]\nenabled = true\ndemos_dir = \"d\"\n";
        let err = RunConfig::from_toml(text, "t").unwrap_err();
        assert!(err.to_string().contains("ppod.enabled"), "{err}");
    }

    #[test]
    fn vtrace_section_turns_vtrace_on_and_is_checked() {
        let config = RunConfig::from_toml("[algo]\nname = \"a2c\"\n[algo.vtrace]\n", "t").unwrap();
        let AlgoConfig::A2c(a2c) = &config.algo else {
            panic!("a2c")
        };
        assert_eq!(a2c.vtrace, Some(VtraceClips::default()));
        let err = RunConfig::from_toml("[algo.vtrace]\nc_bar = 0.0\n", "t").unwrap_err();
        assert!(err.to_string().contains("algo.vtrace.c_bar"), "{err}");
        // A live change is refused where learners would disagree.
        let mut several = RunConfig::default();
        several.learner.world_size = 2;
        let err = several
            .with_live_change("algo.learning_rate", "1e-4")
            .unwrap_err();
        assert!(err.to_string().contains("learner.world_size"), "{err}");
        let (_, before, after) = (RunConfig::default())
            .with_live_change("algo.learning_rate", "1e-4")
            .unwrap();
        assert_eq!((before.as_str(), after.as_str()), ("0.0003", "0.0001"));
        // Layers before the LSTM need one, and an on-policy algorithm.
        let err = RunConfig::from_toml("[model]\npre_lstm_sizes = [32]\n", "t").unwrap_err();
        assert!(err.to_string().contains("model.pre_lstm_sizes"), "{err}");
        let text = "[model]\nlstm_size = 8\npre_lstm_sizes = [32]\n[algo]\nname = \"dqn\"\n";
        let err = RunConfig::from_toml(text, "t").unwrap_err();
        assert!(err.to_string().contains("model.pre_lstm_sizes"), "{err}");
        let text = "[model]\nlstm_size = 8\npre_lstm_sizes = [32]\n[algo]\nname = \"impala\"\n";
        assert!(RunConfig::from_toml(text, "t").is_ok());
        // Padding after episode ends (mid_batch_reset = false) is masked by ppo and a2c only;
        // alternating acting needs two equal groups and plain on-policy rollouts. Each key
        // accepts its first case and refuses the others by name.
        let cases: [(&str, &str, &[&str]); 2] = [
            (
                "mid_batch_reset = false",
                "[algo]\nname = \"a2c\"\n",
                &[
                    "[algo]\nname = \"impala\"\n",
                    "[algo]\nname = \"dqn\"\n",
                    "[ppod]\nenabled = true\n",
                    "[env]\nid = \"gym:CartPole-v1\"\nvectorization = \"async\"\n",
                ],
            ),
            (
                "alternating = true",
                "",
                &[
                    "envs_per_actor = 3\n",
                    "[algo]\nname = \"dqn\"\n",
                    "[algo]\nname = \"maml_vpg\"\n",
                    "[ppod]\nenabled = true\n",
                ],
            ),
        ];
        for (setting, accepted, refused) in cases {
            let parse =
                |rest: &str| RunConfig::from_toml(&format!("[actors]\n{setting}\n{rest}"), "t");
            assert!(parse(accepted).is_ok(), "{setting}");
            let key = format!("actors.{}", setting.split(' ').next().unwrap_or_default());
            for rest in refused {
                let err = parse(rest).unwrap_err();
                assert!(err.to_string().contains(&key), "{rest}: {err}");
            }
        }
        // V-trace scores a recurrent batch by unrolling over its sequences.
        assert!(RunConfig::from_toml("[algo.vtrace]\n[model]\nlstm_size = 8\n", "t").is_ok());
        let err = RunConfig::from_toml("[algo]\nname = \"vpg\"\n[algo.vtrace]\n", "t");
        assert!(err.unwrap_err().to_string().contains("vtrace"));
        // Intrinsic rewards are for PPO and A2C; an off-policy algorithm names the key.
        let err = RunConfig::from_toml("[algo]\nname = \"dqn\"\n[algo.intrinsic]\n", "t");
        assert!(err.unwrap_err().to_string().contains("intrinsic"));
        let text = "[algo.intrinsic]\ndiscount = 1.5\n";
        let err = RunConfig::from_toml(text, "t").unwrap_err();
        assert!(err.to_string().contains("algo.intrinsic.discount"), "{err}");
    }

    #[test]
    fn minibatch_size_must_divide_the_batch() {
        // The default batch: 2 rollouts x 32 steps x 4 envs = 256 env steps.
        assert!(RunConfig::from_toml("[algo]\nminibatch_size = 64\n", "t").is_ok());
        let err = RunConfig::from_toml("[algo]\nminibatch_size = 100\n", "t").unwrap_err();
        assert!(err.to_string().contains("algo.minibatch_size"), "{err}");
        let text = "[algo]\nminibatch_size = 64\n[model]\nlstm_size = 8\n";
        let err = RunConfig::from_toml(text, "t").unwrap_err();
        assert!(err.to_string().contains("algo.minibatch_size"), "{err}");
    }

    #[test]
    fn convolution_keys_must_agree_in_length() {
        let text = "[model]\nchannels = [16, 32]\nkernel_sizes = [3]\n";
        let err = RunConfig::from_toml(text, "t").unwrap_err().to_string();
        assert!(
            err.contains("model.kernel_sizes") && err.contains("(2)"),
            "{err}"
        );
        let err = RunConfig::from_toml("[model]\nstrides = [2]\n", "t").unwrap_err();
        assert!(err.to_string().contains("model.strides"), "{err}");
        let text = "[model]\nchannels = [16]\nkernel_sizes = [3]\nfc_sizes = [0]\n";
        let err = RunConfig::from_toml(text, "t").unwrap_err();
        assert!(err.to_string().contains("model.fc_sizes"), "{err}");
        let text = "[model]\nchannels = [16]\nkernel_sizes = [3]\nfc_sizes = []\n";
        let config = RunConfig::from_toml(text, "t").unwrap();
        assert_eq!(config.model.fc_sizes, Some(vec![]));
    }

    #[test]
    fn out_of_range_is_named() {
        let err = RunConfig::from_toml("[algo]\ndiscount = 1.5\n", "test").unwrap_err();
        assert!(err.to_string().contains("algo.discount"), "{err}");
    }

    /// The presets' text, one string a preset: what the config fuzzing below mutates.
    fn preset_texts() -> Vec<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
        let mut texts: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
            .collect();
        texts.sort();
        texts
    }

    /// Values of every TOML type, and numbers at the edges of every range a key may have.
    fn any_value() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            prop::sample::select(vec![
                "0",
                "-1",
                "1",
                "2",
                "1e308",
                "-1e308",
                "nan",
                "inf",
                "-inf",
                "0.0",
                "1e-320",
                "9223372036854775807",
                "-9223372036854775808",
                "true",
                "\"\"",
                "[]",
                "{}",
                "[0]",
                "[-1, 0]",
                "\"cpu\"",
                "\"cuda:99\"",
                "\"é€\"",
                "[[1]]",
            ])
            .prop_map(str::to_string),
            any::<i64>().prop_map(|v| v.to_string()),
            any::<f64>().prop_map(|v| format!("{v:?}")),
            "\"[a-zA-Z0-9_.:-]{0,12}\"",
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// A preset with one `key = value` line given any value, or any text at all:
        /// parsing gives a config or a `ConfigError`, never a panic.
        #[test]
        fn any_config_text_is_a_config_or_an_error(
            preset in proptest::prelude::any::<proptest::sample::Index>(),
            line in proptest::prelude::any::<proptest::sample::Index>(),
            value in any_value(),
            noise in ".{0,64}",
        ) {
            let texts = preset_texts();
            let text = preset.get(&texts);
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            let keyed: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].contains(" = ")).collect();
            if !keyed.is_empty() {
                let at = *line.get(&keyed);
                let key = lines[at].split(" = ").next().unwrap_or_default().to_string();
                lines[at] = format!("{key} = {value}");
            }
            let _ = RunConfig::from_toml(&lines.join("\n"), "fuzz");
            let _ = RunConfig::from_toml(&noise, "fuzz");
            let _ = RunConfig::from_toml(&format!("{}\n{noise}", lines.join("\n")), "fuzz");
        }
    }
}
