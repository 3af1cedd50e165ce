//! Checkpoints: a directory per saved version holding the model, the algorithm's state
//! (optimiser moments, counters) and the run config, written atomically (temp dir + rename).
//!
//! ```text
//! <dir>/ckpt-00000123/
//!   model.safetensors   policy parameters by var-store path
//!   state.safetensors   optimiser and algorithm state
//!   meta.json           counters (CheckpointMeta)
//!   config.toml         the run's effective configuration
//! ```

pub mod state;

pub use state::{counter, find, HasVarStore, StateError, StatePart, TargetNet};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tch::Tensor;

use crate::config::{ConfigError, RunConfig};

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Filesystem trouble, with the path.
    #[error("checkpoint {path}: {cause}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The IO error.
        cause: std::io::Error,
    },
    /// A tensor file could not be written or read.
    #[error("checkpoint {path}: {cause}")]
    Tensors {
        /// The file.
        path: PathBuf,
        /// The tch error.
        cause: tch::TchError,
    },
    /// `meta.json` is malformed.
    #[error("checkpoint {path}: bad meta.json: {message}")]
    Meta {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `config.toml` is malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Neither a checkpoint nor a directory with one under it.
    #[error(
        "no checkpoint at {0}: give a checkpoint directory (RUN/checkpoints/ckpt-NNNNNNNN, which \
         holds meta.json), or a run directory or its checkpoints/ for the newest one"
    )]
    NotFound(PathBuf),
}

/// Counters saved with a checkpoint (all zero for a fresh run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// Weights version of the saved model.
    pub policy_version: i64,
    /// Learner updates done.
    pub updates: u64,
    /// Env steps trained on.
    pub env_steps: u64,
    /// Env id the policy was trained on.
    pub env_id: String,
    /// The run's other counters, so a resumed learner goes on counting from them (zero in
    /// checkpoints written before they were saved).
    #[serde(default)]
    pub progress: RunProgress,
}

/// A run's counters beyond version, updates and env steps, as the learner's status reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunProgress {
    /// Episodes the actors reported.
    pub episodes: u64,
    /// Env steps the actors reported.
    pub env_steps_reported: u64,
    /// Rollouts trained on (on-policy).
    pub rollouts_trained: u64,
    /// Rollouts dropped as stale (on-policy).
    pub rollouts_dropped: u64,
    /// Sum of every update's policy lag, and the number of updates summed.
    pub policy_lag_sum: f64,
    /// Updates in `policy_lag_sum`.
    pub policy_lag_updates: u64,
    /// The most recent episode returns, oldest first (the status's recent return).
    pub recent_returns: Vec<f64>,
}

/// A checkpoint read back from disk.
#[derive(Debug)]
pub struct Checkpoint {
    /// Its directory.
    pub path: PathBuf,
    /// Counters.
    pub meta: CheckpointMeta,
    /// The run config it was trained with.
    pub config: RunConfig,
    /// Model parameters by path.
    pub model: Vec<(String, Tensor)>,
    /// Algorithm state by name.
    pub state: Vec<(String, Tensor)>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |cause| CheckpointError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

fn tensors(path: &Path) -> impl FnOnce(tch::TchError) -> CheckpointError + '_ {
    move |cause| CheckpointError::Tensors {
        path: path.to_path_buf(),
        cause,
    }
}

/// Writes a checkpoint under `dir` and returns its directory.
pub fn save(
    dir: &Path,
    model: &[(String, Tensor)],
    state: &[(String, Tensor)],
    meta: &CheckpointMeta,
    config: &RunConfig,
) -> Result<PathBuf, CheckpointError> {
    let final_dir = dir.join(format!("ckpt-{:08}", meta.policy_version));
    let tmp = dir.join(format!(
        "{PARTIAL_PREFIX}{:08}-{}",
        meta.policy_version,
        std::process::id()
    ));
    // A failed write (a full disk, most often) leaves no partial directory to fill the disk.
    if let Err(error) = write_files(&tmp, model, state, meta, config) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(error);
    }
    replace_dir(&tmp, &final_dir)?;
    sync(dir).map_err(io(dir))?;
    Ok(final_dir)
}

/// Writes the checkpoint's four files into `tmp` and syncs them and it to the disk.
fn write_files(
    tmp: &Path,
    model: &[(String, Tensor)],
    state: &[(String, Tensor)],
    meta: &CheckpointMeta,
    config: &RunConfig,
) -> Result<(), CheckpointError> {
    std::fs::create_dir_all(tmp).map_err(io(tmp))?;
    let model_path = tmp.join("model.safetensors");
    Tensor::write_safetensors(model, &model_path).map_err(tensors(&model_path))?;
    let state_path = tmp.join("state.safetensors");
    Tensor::write_safetensors(state, &state_path).map_err(tensors(&state_path))?;
    let meta_json = serde_json::to_string_pretty(meta).expect("meta always serialises");
    std::fs::write(tmp.join("meta.json"), meta_json).map_err(io(tmp))?;
    std::fs::write(tmp.join("config.toml"), config.to_toml()).map_err(io(tmp))?;
    // On disk before it is named: a machine that goes down just after the rename must not
    // come back with a newest checkpoint of empty files.
    for file in [
        "model.safetensors",
        "state.safetensors",
        "meta.json",
        "config.toml",
        "",
    ] {
        sync(&tmp.join(file)).map_err(io(tmp))?;
    }
    Ok(())
}

/// The prefix of a checkpoint being written ([`save`] renames it to `ckpt-*` when whole).
const PARTIAL_PREFIX: &str = ".tmp-ckpt-";

/// Removes the partial checkpoints a learner that died mid-write left under `dir` (call it
/// holding the run directory's lock, so no other learner is writing one); returns how many.
pub fn remove_partial(dir: &Path) -> Result<usize, CheckpointError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0);
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let partial = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(PARTIAL_PREFIX));
        if partial && path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io(&path))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Flushes a file, or a directory's entries, to the disk.
fn sync(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// The newest checkpoint under `dir` that loads, if any: one that does not (a machine that
/// went down mid-write before checkpoints were synced, a disk error) is skipped with a warning
/// naming it and what is wrong, so a restarting learner (`--resume auto`) goes on from the one
/// before instead of failing on every restart. An error only when every checkpoint fails,
/// naming the newest's problem.
pub fn load_newest(dir: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    let mut first_error = None;
    for path in list(dir).into_iter().rev() {
        match load(&path) {
            Ok(ckpt) => return Ok(Some(ckpt)),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "skipping a checkpoint that does not load");
                first_error.get_or_insert(error);
            }
        }
    }
    first_error.map_or(Ok(None), Err)
}

/// Moves the finished `tmp` to `final_dir`. A checkpoint already there is the same version
/// written again (with newer counters): the two are swapped in one step where the system
/// can (Linux's `RENAME_EXCHANGE`), so a reader of that path, such as the evaluation of the
/// earlier write while the learner writes its final checkpoint, always finds a whole
/// checkpoint. Elsewhere the old one is removed first and a reader can miss it for a moment.
fn replace_dir(tmp: &Path, final_dir: &Path) -> Result<(), CheckpointError> {
    match std::fs::rename(tmp, final_dir) {
        Ok(()) => return Ok(()),
        // rename(2) does not replace a non-empty directory.
        Err(_) if final_dir.is_dir() => {}
        Err(e) => return Err(io(final_dir)(e)),
    }
    if exchange(tmp, final_dir).is_ok() {
        // `tmp` now holds the old copy; the new one is in place whether or not it goes.
        if let Err(error) = std::fs::remove_dir_all(tmp) {
            tracing::warn!(%error, path = %tmp.display(), "cannot remove a replaced checkpoint");
        }
        return Ok(());
    }
    std::fs::remove_dir_all(final_dir).map_err(io(final_dir))?;
    std::fs::rename(tmp, final_dir).map_err(io(final_dir))
}

/// Swaps two directory entries atomically.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let path = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    };
    let (a, b) = (path(a)?, path(b)?);
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// [`save`], then deletes all but the newest `keep` (at least one) checkpoints under `dir`; a
/// failure to delete is logged, not returned: the new checkpoint is safe either way.
pub fn save_and_prune(
    dir: &Path,
    model: &[(String, Tensor)],
    state: &[(String, Tensor)],
    meta: &CheckpointMeta,
    config: &RunConfig,
) -> Result<PathBuf, CheckpointError> {
    let path = save(dir, model, state, meta, config)?;
    let keep = config.learner.keep_checkpoints.max(1) as usize;
    if let Err(error) = prune(dir, keep) {
        tracing::warn!(%error, "cannot prune old checkpoints");
    }
    Ok(path)
}

/// Reads a checkpoint directory written by [`save`].
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let meta = load_meta(path)?;
    let config_path = path.join("config.toml");
    let config_text = std::fs::read_to_string(&config_path).map_err(io(&config_path))?;
    let config = RunConfig::from_toml(&config_text, &config_path.display().to_string())?;
    let model_path = path.join("model.safetensors");
    let model = Tensor::read_safetensors(&model_path).map_err(tensors(&model_path))?;
    let state_path = path.join("state.safetensors");
    let state = Tensor::read_safetensors(&state_path).map_err(tensors(&state_path))?;
    Ok(Checkpoint {
        path: path.to_path_buf(),
        meta,
        config,
        model,
        state,
    })
}

/// The counters of the checkpoint directory `path` alone (its `meta.json`).
pub fn load_meta(path: &Path) -> Result<CheckpointMeta, CheckpointError> {
    let meta_path = path.join("meta.json");
    let meta_text = std::fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
    serde_json::from_str(&meta_text).map_err(|e| CheckpointError::Meta {
        path: meta_path.clone(),
        message: e.to_string(),
    })
}

/// The checkpoint `path` means: itself when it is one (it holds `meta.json`), else the newest
/// under `path/checkpoints` (a run directory), else the newest under `path`.
pub fn resolve(path: &Path) -> Result<PathBuf, CheckpointError> {
    if path.join("meta.json").is_file() {
        return Ok(path.to_path_buf());
    }
    latest(&path.join("checkpoints"))
        .or_else(|| latest(path))
        .ok_or_else(|| CheckpointError::NotFound(path.to_path_buf()))
}

/// The newest checkpoint directory under `dir`, if any.
pub fn latest(dir: &Path) -> Option<PathBuf> {
    let mut all = list(dir);
    all.pop()
}

/// Deletes all but the newest `keep` checkpoints under `dir`.
pub fn prune(dir: &Path, keep: usize) -> Result<(), CheckpointError> {
    let all = list(dir);
    let excess = all.len().saturating_sub(keep);
    for old in &all[..excess] {
        std::fs::remove_dir_all(old).map_err(io(old))?;
    }
    Ok(())
}

fn list(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ckpt-"))
        })
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests;
