//! Demonstrations: one recorded episode per file, the input of behaviour cloning and PPO+D.
//!
//! [`Demo`] is one episode in memory; [`format`] is its file (`fleetrl-demo`, safetensors:
//! what each tensor and header field holds), with [`write`], [`read`] and [`list`];
//! [`Recorder`] builds a demo while an episode is played; [`DemoKind`] and
//! [`value_weights`] are what PPO+D ranks its demos by.

use std::path::PathBuf;

use fleetrl_proto::space::{Action, Space};

/// The `format` header value of every demo file.
pub const FORMAT: &str = "fleetrl-demo";
/// The newest format version this build reads (and writes, for U8 observations).
pub const VERSION: u32 = 2;
/// File name ending of demo files; [`list`] picks these out of a directory.
pub const EXTENSION: &str = ".demo.safetensors";

/// Why a demo could not be read, written or used.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Reading or writing the file failed.
    #[error("demo file {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        cause: std::io::Error,
    },
    /// The file is not a demo file of this format.
    #[error("{path} is not a fleetrl demo file: {reason}")]
    NotADemo {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The file was written by a newer fleetrl.
    #[error("{path} is demo format version {found}; this build reads up to version {VERSION}")]
    TooNew {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// The demo's arrays do not fit together.
    #[error("inconsistent demo: {0}")]
    Inconsistent(String),
    /// The demo was recorded on another environment than the one it is used with.
    #[error("demo {what} does not match the environment: {detail}")]
    EnvMismatch {
        /// Which property differs.
        what: &'static str,
        /// Both values.
        detail: String,
    },
}

/// Who produced a demo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoSource {
    /// A person playing.
    Human,
    /// A hand-written controller.
    Scripted,
    /// A trained policy loaded from a checkpoint.
    Checkpoint,
    /// The learning agent's own episode (PPO+D keeps its best ones).
    Agent,
}

impl DemoSource {
    /// The name written in the header.
    pub fn as_str(self) -> &'static str {
        match self {
            DemoSource::Human => "human",
            DemoSource::Scripted => "scripted",
            DemoSource::Checkpoint => "checkpoint",
            DemoSource::Agent => "agent",
        }
    }

    fn parse(name: &str) -> Option<DemoSource> {
        [
            DemoSource::Human,
            DemoSource::Scripted,
            DemoSource::Checkpoint,
            DemoSource::Agent,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// The actions of a demo, one per step.
#[derive(Debug, Clone, PartialEq)]
pub enum DemoActions {
    /// Indices into a discrete space of `n` actions.
    Discrete {
        /// Number of actions in the space.
        n: i64,
        /// One index per step.
        actions: Vec<i64>,
    },
    /// Points in a box action space of `low.len()` dimensions.
    Continuous {
        /// Lower bounds of the space.
        low: Vec<f32>,
        /// Upper bounds of the space.
        high: Vec<f32>,
        /// Row-major `[T, dim]`.
        actions: Vec<f32>,
    },
}

impl DemoActions {
    /// Empty actions for `space` (a box must be one-dimensional).
    pub fn for_space(space: &Space) -> DemoActions {
        match space {
            Space::Discrete { n } => DemoActions::Discrete {
                n: *n,
                actions: Vec::new(),
            },
            Space::Box { low, high, .. } => DemoActions::Continuous {
                low: low.clone(),
                high: high.clone(),
                actions: Vec::new(),
            },
        }
    }

    fn steps(&self) -> usize {
        match self {
            DemoActions::Discrete { actions, .. } => actions.len(),
            DemoActions::Continuous { low, actions, .. } => actions.len() / low.len().max(1),
        }
    }

    /// The action space these actions come from.
    pub fn space(&self) -> Space {
        match self {
            DemoActions::Discrete { n, .. } => Space::Discrete { n: *n },
            DemoActions::Continuous { low, high, .. } => Space::Box {
                shape: vec![low.len() as i64],
                low: low.clone(),
                high: high.clone(),
            },
        }
    }
}

/// One recorded episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Demo {
    /// The environment id it was recorded on.
    pub env_id: String,
    /// Who played it.
    pub source: DemoSource,
    /// Shape of one observation.
    pub obs_shape: Vec<usize>,
    /// Row-major `[T+1, *obs_shape]`: before each step, then after the last.
    pub observations: Vec<f32>,
    /// The action of each step.
    pub actions: DemoActions,
    /// The reward of each step.
    pub rewards: Vec<f32>,
    /// The playing policy's value prediction at each step, when it had one.
    pub values: Option<Vec<f32>>,
    /// The episode ended in a terminal state (not a time limit).
    pub terminated: bool,
}

impl Demo {
    /// Number of steps.
    pub fn len(&self) -> usize {
        self.rewards.len()
    }

    /// True for an episode of no steps.
    pub fn is_empty(&self) -> bool {
        self.rewards.is_empty()
    }

    /// Undiscounted return.
    pub fn total_reward(&self) -> f64 {
        self.rewards.iter().map(|&r| r as f64).sum()
    }

    /// Elements in one observation.
    pub fn obs_dim(&self) -> usize {
        self.obs_shape.iter().product()
    }

    /// Observation `t` (`t == len()` is the one after the last step).
    pub fn obs(&self, t: usize) -> &[f32] {
        let d = self.obs_dim();
        &self.observations[t * d..(t + 1) * d]
    }

    /// The action of step `t`.
    pub fn action(&self, t: usize) -> Action {
        match &self.actions {
            DemoActions::Discrete { actions, .. } => Action::Discrete(actions[t]),
            DemoActions::Continuous { low, actions, .. } => {
                let d = low.len();
                Action::Continuous(actions[t * d..(t + 1) * d].to_vec())
            }
        }
    }

    /// Checks that the arrays fit together: `T+1` observations, `T` actions, rewards and values.
    pub fn validate(&self) -> Result<(), DemoError> {
        let t = self.len();
        let fail = |what: String| Err(DemoError::Inconsistent(what));
        // Checked: a file's shape may be `[0, 2^40, 2^40]` (no data, so safetensors accepts it).
        let dim = self
            .obs_shape
            .iter()
            .try_fold(1usize, |all, &d| all.checked_mul(d));
        if dim == Some(0) {
            return fail("observations have no elements".into());
        }
        if dim.and_then(|d| d.checked_mul(t + 1)) != Some(self.observations.len()) {
            return fail(format!(
                "{} observation values for {t} steps of shape {:?} (want (T+1) rows)",
                self.observations.len(),
                self.obs_shape
            ));
        }
        if let DemoActions::Continuous { low, high, actions } = &self.actions {
            if low.is_empty() || low.len() != high.len() || actions.len() != t * low.len() {
                return fail(format!(
                    "{} action values for {t} steps of {} dimensions",
                    actions.len(),
                    low.len()
                ));
            }
        }
        if self.actions.steps() != t {
            return fail(format!("{} actions for {t} rewards", self.actions.steps()));
        }
        if let DemoActions::Discrete { n, actions } = &self.actions {
            if let Some(bad) = actions.iter().find(|&&a| a < 0 || a >= *n) {
                return fail(format!("action {bad} outside discrete({n})"));
            }
        }
        match &self.values {
            Some(v) if v.len() != t => fail(format!("{} values for {t} steps", v.len())),
            _ => Ok(()),
        }
    }

    /// Checks that this demo can be used with an environment of these id and spaces.
    pub fn check_env(&self, env_id: &str, obs: &Space, action: &Space) -> Result<(), DemoError> {
        let mismatch = |what, detail| Err(DemoError::EnvMismatch { what, detail });
        if self.env_id != env_id {
            return mismatch("env id", format!("demo {} vs env {env_id}", self.env_id));
        }
        let dim = obs.flat_dim();
        if self.obs_dim() != dim {
            return mismatch(
                "observation size",
                format!("demo {:?} vs env {dim}", self.obs_shape),
            );
        }
        if &self.actions.space() != action {
            return mismatch(
                "action space",
                format!("demo {:?} vs env {action:?}", self.actions.space()),
            );
        }
        Ok(())
    }
}

pub mod format;
mod record;

pub use format::{list, read, read_dir, write};
pub use record::Recorder;

/// Which buffer a demo is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoKind {
    /// Loaded at start from the demos directory; a reward demo never evicted.
    Initial,
    /// The agent's own episode (or a supplementary demo) that reached the threshold.
    Agent,
    /// An unsuccessful agent episode kept for its high predicted value.
    Value,
}

impl DemoKind {
    /// Whether it is in the reward buffer.
    pub fn is_reward(self) -> bool {
        matches!(self, DemoKind::Initial | DemoKind::Agent)
    }

    /// Its name in persisted state.
    pub fn as_str(self) -> &'static str {
        match self {
            DemoKind::Initial => "initial",
            DemoKind::Agent => "agent",
            DemoKind::Value => "value",
        }
    }

    /// The kind called `name`.
    pub fn parse(name: &str) -> Option<DemoKind> {
        [DemoKind::Initial, DemoKind::Agent, DemoKind::Value]
            .into_iter()
            .find(|k| k.as_str() == name)
    }
}

/// Sampling weights of value demos with these max values: `exp(alpha * (v - max v))`,
/// normalised to sum to 1 (uniform when all are equal or alpha is 0). A non-finite max value
/// weighs 0 unless no value is finite (then all weigh the same). Empty in, empty out.
pub fn value_weights(max_values: &[f32], alpha: f64) -> Vec<f64> {
    let top = max_values
        .iter()
        .map(|&v| v as f64)
        .filter(|v| v.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    let raw: Vec<f64> = max_values
        .iter()
        .map(|&v| match (v as f64).is_finite() {
            true => (alpha * (v as f64 - top)).exp(),
            false => 0.0,
        })
        .collect();
    let sum: f64 = raw.iter().sum();
    if sum > 0.0 {
        raw.iter().map(|w| w / sum).collect()
    } else {
        vec![1.0 / max_values.len().max(1) as f64; max_values.len()]
    }
}

#[cfg(test)]
mod tests;
