//! Demo tables on disk: a directory with `state.json` (counters, threshold, and each demo's
//! id, kind and max value; rho and phi follow from the success count) and one
//! `<id>.demo.safetensors` per demo. Written to a temporary sibling directory and renamed into
//! place, so a crash leaves the old state or the new one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{DemoStore, DemoStoreConfig, StoredDemo};
use fleetrl_runtime::demo::{self, DemoError, DemoKind};

/// The persisted format's version.
const STATE_VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct State {
    version: u32,
    next_id: u64,
    threshold: Option<f64>,
    successes: u64,
    collections: u64,
    generation: u64,
    seen_files: Vec<String>,
    demos: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    id: u64,
    kind: String,
    max_value: Option<f32>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Io {
        path: path.to_path_buf(),
        cause: source,
    }
}

fn demo_file(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:08}{}", demo::EXTENSION))
}

/// Writes `store` to `dir` (replacing what is there).
pub fn save(store: &DemoStore, dir: &Path) -> Result<(), DemoError> {
    let tmp = dir.with_extension("writing");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    for d in &store.demos {
        demo::write(&d.demo, &demo_file(&tmp, d.id))?;
    }
    let state = State {
        version: STATE_VERSION,
        next_id: store.next_id,
        threshold: store.threshold.is_finite().then_some(store.threshold),
        successes: store.successes,
        collections: store.collections,
        generation: store.generation,
        seen_files: store.seen_files.clone(),
        demos: store
            .demos
            .iter()
            .map(|d| Entry {
                id: d.id,
                kind: d.kind.as_str().to_string(),
                max_value: d.max_value.is_finite().then_some(d.max_value),
            })
            .collect(),
    };
    let json = serde_json::to_vec_pretty(&state).expect("state serialises");
    let state_path = tmp.join("state.json");
    std::fs::write(&state_path, json).map_err(io(&state_path))?;
    let old = dir.with_extension("old");
    if dir.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(io(&old))?;
        }
        std::fs::rename(dir, &old).map_err(io(dir))?;
    }
    std::fs::rename(&tmp, dir).map_err(io(dir))?;
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    }
    Ok(())
}

/// Reads the store saved in `dir` with parameters `config`; `None` if nothing was saved
/// there.
pub fn load(dir: &Path, config: DemoStoreConfig) -> Result<Option<DemoStore>, DemoError> {
    let mut dir = dir.to_path_buf();
    if !dir.join("state.json").exists() {
        // A crash between the two renames of `save` leaves only the old copy.
        dir = dir.with_extension("old");
        if !dir.join("state.json").exists() {
            return Ok(None);
        }
    }
    let state_path = dir.join("state.json");
    let bytes = std::fs::read(&state_path).map_err(io(&state_path))?;
    let state: State = serde_json::from_slice(&bytes).map_err(|e| DemoError::NotADemo {
        path: state_path.clone(),
        reason: format!("demo store state: {e}"),
    })?;
    if state.version != STATE_VERSION {
        return Err(DemoError::NotADemo {
            path: state_path,
            reason: format!("demo store state version {} unknown", state.version),
        });
    }
    let mut demos = Vec::with_capacity(state.demos.len());
    for e in state.demos {
        let kind = DemoKind::parse(&e.kind).ok_or_else(|| DemoError::NotADemo {
            path: state_path.clone(),
            reason: format!("unknown demo kind `{}`", e.kind),
        })?;
        let demo = demo::read(&demo_file(&dir, e.id))?;
        demos.push(StoredDemo {
            id: e.id,
            kind,
            max_value: e.max_value.unwrap_or(f32::NEG_INFINITY),
            total_reward: demo.total_reward(),
            demo,
        });
    }
    let mut store = DemoStore {
        rho: config.rho,
        phi: config.phi,
        config,
        demos,
        next_id: state.next_id,
        threshold: state.threshold.unwrap_or(f64::INFINITY),
        successes: state.successes,
        collections: state.collections,
        generation: state.generation,
        seen_files: state.seen_files,
    };
    store.set_annealed();
    Ok(Some(store))
}
