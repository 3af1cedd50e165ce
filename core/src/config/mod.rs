//! The run configuration: one TOML file with a section per component, read by every binary.
//!
//! Layers, lowest first: each field's default, the file (a path, or a preset name from
//! `configs/`), then `--set dotted.key=value` overrides. Unknown keys are errors everywhere.

mod devices;
pub(crate) mod error;
mod load;
mod overrides;
mod ppod;
#[cfg(test)]
mod reference;
mod sections;
mod validate;

use std::borrow::Cow;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::algos::registry::{self, Recurrence};

pub use crate::envs::config::{EnvConfig, Vectorization};
pub use crate::models::config::{Activation, ModelConfig};
pub use crate::tasks::TasksConfig;

pub use devices::{
    check_available, parse_device, BroadcastDtype, CollectiveBackend, DeviceList,
    UnavailableDevice, UnknownDevice,
};
pub(crate) use error::check;
pub use error::{ConfigError, CONFIG_VERSION};
pub use load::resolve_preset;
pub use overrides::apply_override;
pub use ppod::PpodConfig;
pub use sections::{ActorsConfig, EvalConfig, LearnerConfig, ReplayConfig, StopConfig};

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

/// What a run replaying stored sequences (R2D2, recurrent SAC and TD3) stores and samples.
#[derive(Debug, Clone, Copy)]
pub struct SequenceReplay<'a> {
    /// The replay options, with the sequence keys (`sequence_length`, `sequence_overlap`,
    /// `burn_in`).
    pub replay: &'a ReplayOptions,
    /// Width of the recurrent state stored with each sequence: every recurrent network's
    /// `model.lstm_size` units side by side.
    pub state_size: i64,
}

impl RunConfig {
    /// The stored sequences this run replays when it trains a recurrent off-policy model
    /// (`model.lstm_size > 0` with an algorithm whose registry entry replays sequences: R2D2,
    /// recurrent SAC, TD3 and DDPG), whose replay items are sequences rather than transitions.
    pub fn sequence_replay(&self) -> Option<SequenceReplay<'_>> {
        let spec = registry::spec(self);
        let (Some(Recurrence::Sequences { cores }), Some(Cow::Borrowed(replay))) =
            (spec.recurrence, spec.replay)
        else {
            return None;
        };
        let size = i64::from(self.model.lstm_size);
        (size > 0).then_some(SequenceReplay {
            replay,
            state_size: size * i64::from(cores),
        })
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

#[cfg(test)]
mod tests;
