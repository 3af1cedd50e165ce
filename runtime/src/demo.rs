//! Demonstrations: one recorded episode per file, the input of behaviour cloning and PPO+D.
//!
//! # Format `fleetrl-demo`, version 2
//!
//! A demo is a [safetensors](https://github.com/huggingface/safetensors) file named
//! `*.demo.safetensors`, readable from Python with `safetensors.numpy.load_file` (tensors) and
//! `safetensors.safe_open(path, "np").metadata()` (header). One file holds one episode of `T`
//! steps:
//!
//! | tensor | dtype | shape | meaning |
//! |---|---|---|---|
//! | `observations` | F32 or U8 | `[T+1, *obs_shape]` | row `t` is what the agent saw before action `t`; row `T` after the last step |
//! | `actions` | I64 / F32 | `[T]` (discrete) / `[T, dim]` (box) | the action taken at step `t` |
//! | `rewards` | F32 | `[T]` | the reward of step `t` |
//! | `values` (optional) | F32 | `[T]` | the value the playing policy predicted at step `t` |
//! | `action_low`, `action_high` (box only) | F32 | `[dim]` | the action space's bounds |
//!
//! Observations are written as U8 when every value is a whole number in 0..=255 (Atari frames,
//! MinAtar grids: a quarter of the bytes, no loss) and as F32 otherwise; readers widen U8 to
//! f32. A file with U8 observations is version 2 (version 1 readers know only F32); every other
//! file is still written as version 1.
//!
//! Header metadata (all strings): `format` = `fleetrl-demo`, `version` = `1` or `2`, `env_id`,
//! `source` (`human`, `scripted`, `checkpoint` or `agent`), `terminated` (`true` when the
//! episode reached a terminal state, `false` when it was cut short), `action_space`
//! (`discrete(N)` or `box(DIM)`), and for tools that only read headers `length` and
//! `total_reward`. Readers refuse a newer `version` with an error that says so; fields added
//! later without breaking readers keep the version.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;

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

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, DemoError> {
        self.validate()?;
        let t = self.len();
        let mut shape = vec![t + 1];
        shape.extend(&self.obs_shape);
        // Whole numbers in a byte's range are stored as bytes (version 2), exactly.
        let bytes_suffice = self
            .observations
            .iter()
            .all(|&v| (0.0..=255.0).contains(&v) && v.fract() == 0.0);
        let (obs_dtype, obs_bytes, version) = if bytes_suffice {
            let bytes = self.observations.iter().map(|&v| v as u8).collect();
            (Dtype::U8, bytes, 2)
        } else {
            (Dtype::F32, f32_bytes(&self.observations), 1)
        };
        let mut tensors: Vec<(&str, Dtype, Vec<usize>, Vec<u8>)> = vec![
            ("observations", obs_dtype, shape, obs_bytes),
            ("rewards", Dtype::F32, vec![t], f32_bytes(&self.rewards)),
        ];
        let space = match &self.actions {
            DemoActions::Discrete { n, actions } => {
                let bytes = actions.iter().flat_map(|a| a.to_le_bytes()).collect();
                tensors.push(("actions", Dtype::I64, vec![t], bytes));
                format!("discrete({n})")
            }
            DemoActions::Continuous { low, high, actions } => {
                let d = low.len();
                tensors.push(("actions", Dtype::F32, vec![t, d], f32_bytes(actions)));
                tensors.push(("action_low", Dtype::F32, vec![d], f32_bytes(low)));
                tensors.push(("action_high", Dtype::F32, vec![d], f32_bytes(high)));
                format!("box({d})")
            }
        };
        if let Some(values) = &self.values {
            tensors.push(("values", Dtype::F32, vec![t], f32_bytes(values)));
        }
        let header = HashMap::from([
            ("format".to_string(), FORMAT.to_string()),
            ("version".to_string(), u32::to_string(&version)),
            ("env_id".to_string(), self.env_id.clone()),
            ("source".to_string(), self.source.as_str().to_string()),
            ("terminated".to_string(), self.terminated.to_string()),
            ("action_space".to_string(), space),
            ("length".to_string(), t.to_string()),
            ("total_reward".to_string(), self.total_reward().to_string()),
        ]);
        let views = tensors
            .iter()
            .map(|(name, dtype, shape, bytes)| {
                TensorView::new(*dtype, shape.clone(), bytes).map(|v| (*name, v))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DemoError::Inconsistent(e.to_string()))?;
        safetensors::serialize(views, &Some(header))
            .map_err(|e| DemoError::Inconsistent(e.to_string()))
    }

    /// Parses a file's bytes; `path` only names the source in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Demo, DemoError> {
        let not_a_demo = |reason: String| DemoError::NotADemo {
            path: path.to_path_buf(),
            reason,
        };
        let file = SafeTensors::deserialize(bytes).map_err(|e| not_a_demo(format!("{e:?}")))?;
        let (_, meta) =
            SafeTensors::read_metadata(bytes).map_err(|e| not_a_demo(format!("{e:?}")))?;
        let header = meta.metadata().clone().unwrap_or_default();
        let field = |key: &str| {
            header
                .get(key)
                .cloned()
                .ok_or_else(|| not_a_demo(format!("header has no `{key}`")))
        };
        if field("format")? != FORMAT {
            return Err(not_a_demo(format!("format is not `{FORMAT}`")));
        }
        let version: u32 = field("version")?
            .parse()
            .map_err(|_| not_a_demo("version is not a number".into()))?;
        if version > VERSION {
            return Err(DemoError::TooNew {
                path: path.to_path_buf(),
                found: version,
            });
        }
        let source = DemoSource::parse(&field("source")?)
            .ok_or_else(|| not_a_demo("unknown `source`".into()))?;
        let tensor = |name: &str, dtype: Dtype| -> Result<(Vec<usize>, Vec<u8>), DemoError> {
            let view = file
                .tensor(name)
                .map_err(|_| not_a_demo(format!("no `{name}` tensor")))?;
            if view.dtype() != dtype {
                return Err(not_a_demo(format!(
                    "`{name}` is {:?}, not {dtype:?}",
                    view.dtype()
                )));
            }
            Ok((view.shape().to_vec(), view.data().to_vec()))
        };
        let (obs_shape, observations) = match file.tensor("observations").map(|v| v.dtype()) {
            Ok(Dtype::U8) if version >= 2 => {
                let (shape, bytes) = tensor("observations", Dtype::U8)?;
                (shape, bytes.iter().map(|&b| f32::from(b)).collect())
            }
            _ => {
                let (shape, bytes) = tensor("observations", Dtype::F32)?;
                (shape, bytes_f32(&bytes))
            }
        };
        let (_, rewards) = tensor("rewards", Dtype::F32)?;
        let space = field("action_space")?;
        let actions = match SpaceHeader::parse(&space) {
            Some(SpaceHeader::Discrete(n)) => {
                let (_, a) = tensor("actions", Dtype::I64)?;
                let actions = a
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8-byte chunk")))
                    .collect();
                DemoActions::Discrete { n, actions }
            }
            Some(SpaceHeader::Box) => DemoActions::Continuous {
                low: bytes_f32(&tensor("action_low", Dtype::F32)?.1),
                high: bytes_f32(&tensor("action_high", Dtype::F32)?.1),
                actions: bytes_f32(&tensor("actions", Dtype::F32)?.1),
            },
            None => {
                return Err(not_a_demo(format!(
                    "action_space {space:?} is neither `discrete(N)` nor `box(DIM)`"
                )))
            }
        };
        let values = match file.tensor("values") {
            Ok(_) => Some(bytes_f32(&tensor("values", Dtype::F32)?.1)),
            Err(_) => None,
        };
        let demo = Demo {
            env_id: field("env_id")?,
            source,
            obs_shape: obs_shape.get(1..).unwrap_or_default().to_vec(),
            observations,
            actions,
            rewards: bytes_f32(&rewards),
            values,
            terminated: field("terminated")? == "true",
        };
        demo.validate().map_err(|e| not_a_demo(e.to_string()))?;
        Ok(demo)
    }
}

/// The `action_space` header: `discrete(N)` with N >= 1, or `box(DIM)` (its bounds and
/// dimension come from the tensors). Parsed with `strip_prefix`/`strip_suffix`, never by byte
/// offsets: the header comes from the network (PPO+D's `Offer`) and may hold any UTF-8.
#[derive(Debug, PartialEq)]
enum SpaceHeader {
    Discrete(i64),
    Box,
}

impl SpaceHeader {
    fn parse(header: &str) -> Option<SpaceHeader> {
        let inner = |prefix: &str| header.strip_prefix(prefix)?.strip_suffix(')');
        if let Some(n) = inner("discrete(") {
            return n
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .map(SpaceHeader::Discrete);
        }
        let dim = inner("box(")?;
        dim.parse::<usize>().ok().map(|_| SpaceHeader::Box)
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn bytes_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4-byte chunk")))
        .collect()
}

/// Writes `demo` to `path` atomically (a temporary file renamed into place).
pub fn write(demo: &Demo, path: &Path) -> Result<(), DemoError> {
    let io = |source| DemoError::Io {
        path: path.to_path_buf(),
        cause: source,
    };
    let bytes = demo.to_bytes()?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Reads the demo in `path`.
pub fn read(path: &Path) -> Result<Demo, DemoError> {
    let bytes = std::fs::read(path).map_err(|source| DemoError::Io {
        path: path.to_path_buf(),
        cause: source,
    })?;
    Demo::from_bytes(&bytes, path)
}

/// The demo files (`*.demo.safetensors`) in `dir`, sorted by name.
pub fn list(dir: &Path) -> Result<Vec<PathBuf>, DemoError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DemoError::Io {
        path: dir.to_path_buf(),
        cause: source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(EXTENSION))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every demo file in `dir` (sorted by name).
pub fn read_dir(dir: &Path) -> Result<Vec<Demo>, DemoError> {
    list(dir)?.iter().map(|p| read(p)).collect()
}

/// Builds a [`Demo`] step by step while an episode is played.
#[derive(Debug, Clone)]
pub struct Recorder {
    demo: Demo,
}

impl Recorder {
    /// Starts an episode of `env_id` at its first observation.
    pub fn new(
        env_id: &str,
        source: DemoSource,
        obs_shape: Vec<usize>,
        action_space: &Space,
        first_obs: &[f32],
    ) -> Recorder {
        Recorder {
            demo: Demo {
                env_id: env_id.to_string(),
                source,
                obs_shape,
                observations: first_obs.to_vec(),
                actions: DemoActions::for_space(action_space),
                rewards: Vec::new(),
                values: None,
                terminated: false,
            },
        }
    }

    /// Records one step: the action taken, its reward, the observation after it and, when
    /// the policy has one, its value prediction before the step.
    pub fn push(&mut self, action: &Action, reward: f32, next_obs: &[f32], value: Option<f32>) {
        match (&mut self.demo.actions, action) {
            (DemoActions::Discrete { actions, .. }, Action::Discrete(a)) => actions.push(*a),
            (DemoActions::Continuous { actions, .. }, Action::Continuous(a)) => {
                actions.extend_from_slice(a)
            }
            (kind, action) => panic!("recording {action:?} into {kind:?}: the caller's bug"),
        }
        if let Some(v) = value {
            let step = self.demo.rewards.len();
            let values = self.demo.values.get_or_insert_with(|| vec![0.0; step]);
            values.push(v);
        }
        self.demo.rewards.push(reward);
        self.demo.observations.extend_from_slice(next_obs);
    }

    /// Steps recorded so far.
    pub fn len(&self) -> usize {
        self.demo.len()
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.demo.is_empty()
    }

    /// The finished episode.
    pub fn finish(mut self, terminated: bool) -> Demo {
        self.demo.terminated = terminated;
        self.demo
    }
}

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
mod tests {
    use super::*;

    fn discrete_demo() -> Demo {
        let space = Space::Discrete { n: 2 };
        let mut rec = Recorder::new(
            "CartPole-v1",
            DemoSource::Scripted,
            vec![2],
            &space,
            &[0., 1.],
        );
        rec.push(&Action::Discrete(1), 1.0, &[2., 3.], None);
        rec.push(&Action::Discrete(0), 0.5, &[4., 5.], None);
        rec.finish(true)
    }

    #[test]
    fn discrete_demo_round_trips_through_a_file() {
        let dir = tempdir();
        let demo = discrete_demo();
        let path = dir.join(format!("a{EXTENSION}"));
        write(&demo, &path).unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back, demo);
        assert_eq!(back.len(), 2);
        assert_eq!(back.total_reward(), 1.5);
        assert_eq!(back.obs(2), &[4., 5.]);
        assert_eq!(back.action(0), Action::Discrete(1));
        assert_eq!(list(&dir).unwrap(), vec![path]);
    }

    #[test]
    fn continuous_demo_with_values_round_trips() {
        let space = Space::Box {
            shape: vec![1],
            low: vec![-2.0],
            high: vec![2.0],
        };
        let mut rec = Recorder::new(
            "Pendulum-v1",
            DemoSource::Checkpoint,
            vec![3],
            &space,
            &[0.; 3],
        );
        rec.push(&Action::Continuous(vec![1.5]), -1.0, &[1.; 3], Some(-3.0));
        rec.push(&Action::Continuous(vec![-0.5]), -2.0, &[2.; 3], Some(-2.5));
        let demo = rec.finish(false);
        let back = Demo::from_bytes(&demo.to_bytes().unwrap(), Path::new("x")).unwrap();
        assert_eq!(back, demo);
        assert_eq!(back.values, Some(vec![-3.0, -2.5]));
        back.check_env(
            "Pendulum-v1",
            &Space::Box {
                shape: vec![3],
                low: vec![-1.; 3],
                high: vec![1.; 3],
            },
            &space,
        )
        .unwrap();
    }

    #[test]
    fn mismatches_and_foreign_files_get_named_errors() {
        let demo = discrete_demo();
        let obs = Space::Box {
            shape: vec![4],
            low: vec![-1.; 4],
            high: vec![1.; 4],
        };
        let err = demo.check_env("CartPole-v1", &obs, &Space::Discrete { n: 2 });
        assert!(err.unwrap_err().to_string().contains("observation size"));
        let err = demo.check_env("Acrobot-v1", &obs, &Space::Discrete { n: 3 });
        assert!(err.unwrap_err().to_string().contains("env id"));

        let err = Demo::from_bytes(b"not a safetensors file", Path::new("junk")).unwrap_err();
        assert!(
            err.to_string().contains("junk is not a fleetrl demo file"),
            "{err}"
        );

        let mut newer = demo.to_bytes().unwrap();
        let at = find(&newer, b"\"version\":\"2\"").expect("version in header");
        newer[at + 11] = b'9';
        let err = Demo::from_bytes(&newer, Path::new("new")).unwrap_err();
        assert!(err.to_string().contains("version 9"), "{err}");

        let mut bad = demo.clone();
        bad.rewards.push(1.0);
        assert!(matches!(bad.to_bytes(), Err(DemoError::Inconsistent(_))));
    }

    /// Whole-number observations in a byte's range are stored as U8 (version 2, a quarter of
    /// the bytes) and read back exactly; anything else stays F32 (version 1); a version 1 file
    /// claiming U8 observations is refused.
    #[test]
    fn byte_valued_observations_are_stored_as_bytes() {
        let grid = |k: usize| -> Vec<f32> { (0..400).map(|i| ((i + k) % 2) as f32).collect() };
        let space = Space::Discrete { n: 3 };
        let mut rec = Recorder::new(
            "MinAtar/Breakout-v1",
            DemoSource::Agent,
            vec![4, 10, 10],
            &space,
            &grid(0),
        );
        for t in 1..=50 {
            rec.push(&Action::Discrete(1), 0.0, &grid(t), None);
        }
        let demo = rec.finish(true);
        let bytes = demo.to_bytes().unwrap();
        assert!(find(&bytes, b"\"version\":\"2\"").is_some());
        assert!(bytes.len() < 51 * 400 + 2_000, "{} bytes", bytes.len());
        assert_eq!(Demo::from_bytes(&bytes, Path::new("g")).unwrap(), demo);

        let mut fractional = demo.clone();
        fractional.observations[7] = 0.5;
        let bytes = fractional.to_bytes().unwrap();
        assert!(find(&bytes, b"\"version\":\"1\"").is_some());
        assert!(bytes.len() > 51 * 400 * 4);
        assert_eq!(
            Demo::from_bytes(&bytes, Path::new("f")).unwrap(),
            fractional
        );

        let mut old = demo.to_bytes().unwrap();
        let at = find(&old, b"\"version\":\"2\"").unwrap();
        old[at + 11] = b'1';
        let err = Demo::from_bytes(&old, Path::new("old")).unwrap_err();
        assert!(
            err.to_string().contains("`observations` is U8, not F32"),
            "{err}"
        );
    }

    /// Headers a network client may send in an `Offer`: each is refused by name, none panics
    /// (`"discrete("` and a multi-byte last character once sliced past a char boundary).
    #[test]
    fn malformed_action_space_headers_are_refused_without_panicking() {
        let good = discrete_demo().to_bytes().unwrap();
        let at = find(&good, b"\"discrete(2)\"").expect("action_space in header");
        // Same length as `"discrete(2)"`, so the header's length prefix still holds; JSON
        // allows the padding spaces after a string.
        for forged in [
            "\"discrete(\"  ",
            "\"discrete(\u{e9}\"",
            "\"discrete(0)\"",
            "\"box(two)\"   ",
            "\"\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\" ",
        ] {
            assert_eq!(forged.len(), 13, "{forged}");
            let mut bytes = good.clone();
            bytes[at..at + 13].copy_from_slice(forged.as_bytes());
            let err = Demo::from_bytes(&bytes, Path::new("offered")).unwrap_err();
            assert!(
                matches!(&err, DemoError::NotADemo { reason, .. } if reason.contains("action_space")),
                "{forged}: {err}"
            );
        }
    }

    fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
        haystack.windows(needle.len()).position(|w| w == needle)
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "fleetrl-demo-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
