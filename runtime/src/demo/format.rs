//! The demo file: one episode in one safetensors file.
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

use super::{Demo, DemoActions, DemoError, DemoSource, EXTENSION, FORMAT, VERSION};

impl Demo {
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
