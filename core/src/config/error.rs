//! Why a configuration cannot be used, and the one check every section's validation uses:
//! a leaf module, so components validate their own sections without depending on the whole
//! run configuration.

use std::path::PathBuf;

/// The config file format this build reads.
pub const CONFIG_VERSION: u32 = 1;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {cause}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        cause: std::io::Error,
    },
    /// A bare name (no `/`, no `.toml`) that is neither a file nor a preset.
    #[error(
        "no config file or preset named `{name}`{hint}; the presets: {list}",
        hint = crate::suggest::did_you_mean(name, presets.iter().map(String::as_str)),
        list = if presets.is_empty() {
            "none found (no configs/ in the current directory or beside the binary)".to_string()
        } else {
            presets.join(", ")
        }
    )]
    UnknownPreset {
        /// What was asked for.
        name: String,
        /// Every preset found, sorted.
        presets: Vec<String>,
    },
    /// The TOML is malformed or has unknown or mistyped keys.
    #[error("invalid config {origin}: {message}")]
    Parse {
        /// The file or override the text came from.
        origin: String,
        /// What the parser said, naming the key.
        message: String,
    },
    /// A config that cannot resume a checkpoint: another algorithm or network.
    #[error(
        "{checkpoint} was trained with another algorithm or network than this config's ({}); a \
         run resumes with the config it was trained with (`fleetrl train --resume` without \
         --config takes it from the checkpoint)",
        differences.join("; ")
    )]
    NotResumable {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// Each key that differs, with both values.
        differences: Vec<String>,
    },
    /// A `--set` override is malformed.
    #[error("invalid override `{0}`: expected dotted.key=value")]
    Override(String),
    /// A value is out of its range.
    #[error("invalid config value {key}: {message}")]
    Invalid {
        /// The dotted key.
        key: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A key that a running learner cannot change (`fleetrl set`).
    #[error("{key} cannot change while the run goes on: {message}")]
    Fixed {
        /// The dotted key.
        key: String,
        /// Why, and what can change.
        message: String,
    },
    /// The file was written for another config version.
    #[error("config version {0} is not supported (this build reads version {CONFIG_VERSION})")]
    Version(u32),
}

/// `Ok` when `ok`, else [`ConfigError::Invalid`] for `key` with `message`.
pub(crate) fn check(ok: bool, key: &'static str, message: &str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            key,
            message: message.to_string(),
        })
    }
}
