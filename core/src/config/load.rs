//! Reading a run config: TOML text or a file (a path or a preset name), then `--set`
//! overrides, each value checked and a mistyped one named by its dotted key.

use std::path::PathBuf;

use super::{apply_override, check, ConfigError, RunConfig};

impl RunConfig {
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

    pub(super) fn from_table(table: toml::Table, origin: &str) -> Result<RunConfig, ConfigError> {
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
