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
    let meta_path = path.join("meta.json");
    let meta_text = std::fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
    let meta = serde_json::from_str(&meta_text).map_err(|e| CheckpointError::Meta {
        path: meta_path.clone(),
        message: e.to_string(),
    })?;
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
mod tests {
    use super::*;

    /// A learner that died mid-write left a `.tmp-ckpt-*` directory; the next start removes
    /// it and keeps every whole checkpoint.
    #[test]
    fn partial_checkpoints_are_removed_and_whole_ones_kept() {
        let dir = std::env::temp_dir().join(format!("fleetrl-partial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let partial = dir.join(".tmp-ckpt-00000004-77");
        std::fs::create_dir_all(&partial).unwrap();
        std::fs::write(partial.join("model.safetensors"), b"half").unwrap();
        std::fs::create_dir_all(dir.join("ckpt-00000003")).unwrap();
        assert_eq!(remove_partial(&dir).unwrap(), 1);
        assert!(!partial.exists());
        assert!(dir.join("ckpt-00000003").is_dir());
        assert_eq!(remove_partial(&dir.join("absent")).unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn save_load_prune() {
        let dir = std::env::temp_dir().join(format!("fleetrl-ckpt-{}", std::process::id()));
        let config = RunConfig::default();
        for version in 1..=3 {
            let meta = CheckpointMeta {
                policy_version: version,
                updates: 5,
                env_steps: 640,
                env_id: "CartPole-v1".into(),
                progress: RunProgress {
                    episodes: 12,
                    recent_returns: vec![9.0, 31.5],
                    ..RunProgress::default()
                },
            };
            let model = vec![(
                "pi.out.bias".to_string(),
                Tensor::from_slice(&[version as f32, 2.0]),
            )];
            let state = vec![("adam.steps".to_string(), Tensor::from(7i64))];
            save(&dir, &model, &state, &meta, &config).unwrap();
        }
        prune(&dir, 2).unwrap();
        let newest = latest(&dir).unwrap();
        assert!(newest.ends_with("ckpt-00000003"));
        // A checkpoint, the directory above it, and a run directory all mean it.
        assert_eq!(resolve(&newest).unwrap(), newest);
        assert_eq!(resolve(&dir).unwrap(), newest);
        let run = dir.parent().unwrap();
        let run_dir = run.join(format!("fleetrl-ckpt-run-{}", std::process::id()));
        std::fs::create_dir_all(&run_dir).unwrap();
        let _ = std::fs::remove_file(run_dir.join("checkpoints"));
        std::os::unix::fs::symlink(&dir, run_dir.join("checkpoints")).unwrap();
        assert_eq!(
            resolve(&run_dir).unwrap(),
            run_dir.join("checkpoints/ckpt-00000003")
        );
        std::fs::remove_dir_all(&run_dir).unwrap();
        let err = resolve(Path::new("/nonexistent/run"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("no checkpoint at /nonexistent/run: "),
            "{err}"
        );
        let ckpt = load(&newest).unwrap();
        assert_eq!(ckpt.meta.policy_version, 3);
        assert_eq!(ckpt.meta.progress.episodes, 12);
        assert_eq!(ckpt.meta.progress.recent_returns, vec![9.0, 31.5]);
        assert_eq!(ckpt.config, config);
        assert_eq!(
            Vec::<f32>::try_from(&ckpt.model[0].1).unwrap(),
            vec![3.0, 2.0]
        );
        assert_eq!(list(&dir).len(), 2);

        // A newest checkpoint that does not load (empty files, as a machine that went down
        // mid-write leaves them) is skipped for the one before.
        assert_eq!(load_newest(&dir).unwrap().unwrap().meta.policy_version, 3);
        std::fs::write(newest.join("model.safetensors"), b"").unwrap();
        assert_eq!(load_newest(&dir).unwrap().unwrap().meta.policy_version, 2);
        std::fs::write(dir.join("ckpt-00000002/meta.json"), b"").unwrap();
        let err = load_newest(&dir).unwrap_err().to_string();
        assert!(err.contains("ckpt-00000003/model.safetensors"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(load_newest(&dir).unwrap().is_none());
    }

    /// The same version written again while another thread reads it: every read finds a
    /// whole checkpoint (the learner's final checkpoint can rewrite the version a
    /// `fleetrl train` evaluation is loading).
    #[test]
    fn rewriting_a_version_never_hides_it_from_a_reader() {
        let dir = std::env::temp_dir().join(format!("fleetrl-ckpt-rw-{}", std::process::id()));
        let config = RunConfig::default();
        let meta = CheckpointMeta {
            policy_version: 9,
            updates: 9,
            env_steps: 900,
            env_id: "CartPole-v1".into(),
            progress: RunProgress::default(),
        };
        let model = vec![(
            "pi.out.weight".to_string(),
            Tensor::zeros([64, 64], tch::kind::FLOAT_CPU),
        )];
        let state = vec![("adam.steps".to_string(), Tensor::from(9i64))];
        let path = save(&dir, &model, &state, &meta, &config).unwrap();
        let writer = {
            let (dir, config) = (dir.clone(), config.clone());
            std::thread::spawn(move || {
                for _ in 0..100 {
                    save(&dir, &model, &state, &meta, &config).unwrap();
                }
            })
        };
        let (mut reads, mut failures) = (0, Vec::new());
        while !writer.is_finished() {
            reads += 1;
            if let Err(e) = load(&path) {
                failures.push(e.to_string());
            }
        }
        writer.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(reads > 0);
        assert!(
            failures.is_empty(),
            "{} of {reads} reads failed during 100 rewrites, e.g. {}",
            failures.len(),
            failures[0]
        );
    }

    #[test]
    fn a_checkpoint_without_progress_loads_with_zero_counters() {
        let meta: CheckpointMeta = serde_json::from_str(
            r#"{"policy_version": 4, "updates": 4, "env_steps": 512, "env_id": "CartPole-v1"}"#,
        )
        .unwrap();
        assert_eq!(meta.progress, RunProgress::default());
    }

    #[test]
    fn missing_checkpoint_names_the_file() {
        let err = load(Path::new("/nonexistent/ckpt-1"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/ckpt-1/meta.json"), "{err}");
    }
}
