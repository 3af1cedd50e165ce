//! Minari datasets in and out, through one conversion: a dataset becomes a directory of demo
//! files (`fleetrl-demo`), which BC (`algo.demos`), PPO+D (`ppod.demos_dir`,
//! `ppod.initial_agent_demos_dir`) and an off-policy table (`algo.replay.initial_demos`) read
//! as they read recorded demos; `fleetrl record --out minari:ID` turns its demo files into a
//! dataset. The Python side (`minari_bridge.py`, run by the project's Python, which has
//! minari) does both directions; this side resolves the keys and checks the dataset's spaces
//! against the run's env before anything starts.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs;
use fleetrl_proto::space::Space;

use crate::export_cmd::python;

/// The prefix that names a Minari dataset where a demo directory is expected.
pub(crate) const PREFIX: &str = "minari:";

/// Both directions of the conversion, run with `python -c`.
const BRIDGE: &str = include_str!("minari_bridge.py");

/// What the bridge reports about a dataset it converted.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Converted {
    /// The dataset's id.
    pub(crate) dataset: String,
    /// Episodes converted.
    pub(crate) episodes: u64,
    /// Steps in all of them.
    pub(crate) steps: u64,
    /// `{"box": [shape]}` of one observation.
    #[serde(default)]
    observation: serde_json::Value,
    /// `{"discrete": n}` or `{"box": [dim]}`.
    #[serde(default)]
    action: serde_json::Value,
}

/// The Minari dataset `value` names (`minari:ID` or `minari:PATH`), if it names one.
pub(crate) fn dataset_name(value: &str) -> Option<&str> {
    value.strip_prefix(PREFIX)
}

/// Converts every `minari:` value among the run's demo keys into a directory of demo files
/// under `out/minari/` and puts that directory in the key, so every role reads plain demos.
pub(crate) fn resolve(config: &mut RunConfig, out: &Path) -> anyhow::Result<()> {
    let env_id = config.env.id.clone();
    let env = config.env.clone();
    let mut keys: Vec<(&'static str, &mut String)> = Vec::new();
    for (key, value) in config.algo.demo_sources_mut() {
        if let Some(value) = value.as_mut() {
            keys.push((key, value));
        }
    }
    if config.ppod.enabled {
        keys.push(("ppod.demos_dir", &mut config.ppod.demos_dir));
        keys.push((
            "ppod.initial_agent_demos_dir",
            &mut config.ppod.initial_agent_demos_dir,
        ));
    }
    for (key, value) in keys {
        let Some(name) = dataset_name(value) else {
            continue;
        };
        let dir = out.join("minari").join(dir_name(name));
        let converted = to_demos(name, &dir, &env_id)?;
        let made = envs::make_configured(&env)?;
        check_spaces(
            &converted,
            &env_id,
            &made.observation_space(),
            &made.action_space(),
        )
        .with_context(|| format!("{key} = {value:?}"))?;
        tracing::info!(key, dataset = %converted.dataset, episodes = converted.episodes,
            steps = converted.steps, dir = %dir.display(), "Minari dataset converted to demos");
        *value = dir.display().to_string();
    }
    Ok(())
}

/// A directory name for dataset `name`: its id's `/` (or a path's) become `_`.
fn dir_name(name: &str) -> String {
    name.trim_matches('/')
        .chars()
        .map(|c| match c {
            '/' | '\\' | ':' => '_',
            c => c,
        })
        .collect()
}

/// Writes the episodes of dataset `name` as demo files in `dir` (emptied first), labelled
/// with the run's `env_id`.
pub(crate) fn to_demos(name: &str, dir: &Path, env_id: &str) -> anyhow::Result<Converted> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    let dir_arg = dir.display().to_string();
    let stdout = bridge(&["to-demos", name, &dir_arg, env_id])
        .with_context(|| format!("reading Minari dataset {name}"))?;
    serde_json::from_str(stdout.trim()).with_context(|| format!("the bridge said {stdout:?}"))
}

/// Writes the demo files in `demos` as the Minari dataset `dataset_id` (under
/// `MINARI_DATASETS_PATH`, else `~/.minari/datasets`), with `env_id`'s gymnasium spec.
pub(crate) fn from_demos(demos: &Path, dataset_id: &str, env_id: &str) -> anyhow::Result<String> {
    let dir_arg = demos.display().to_string();
    bridge(&["from-demos", &dir_arg, dataset_id, env_id])
        .with_context(|| format!("writing Minari dataset {dataset_id}"))
}

/// Runs the bridge with `args`; its stdout, or its one-line error.
fn bridge(args: &[&str]) -> anyhow::Result<String> {
    let python = python();
    let result = Command::new(&python)
        .arg("-c")
        .arg(BRIDGE)
        .args(args)
        .output()
        .with_context(|| {
            format!(
                "starting {} (set FLEETRL_PYTHON to a Python with minari, or run scripts/setup.sh)",
                python.display()
            )
        })?;
    if !result.status.success() {
        bail!("{}", String::from_utf8_lossy(&result.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&result.stdout).into_owned())
}

/// Refuses a dataset whose observation or action shape differs from the run's env's, naming
/// the dataset and both shapes.
fn check_spaces(
    converted: &Converted,
    env_id: &str,
    obs: &Space,
    action: &Space,
) -> anyhow::Result<()> {
    let env_obs = match obs {
        Space::Box { shape, .. } => serde_json::json!({ "box": shape }),
        Space::Discrete { n } => serde_json::json!({ "discrete": n }),
    };
    let env_action = match action {
        Space::Box { shape, .. } => serde_json::json!({ "box": shape }),
        Space::Discrete { n } => serde_json::json!({ "discrete": n }),
    };
    if converted.observation != env_obs || converted.action != env_action {
        bail!(
            "Minari dataset {} does not fit env {env_id}: the dataset's observations are {} and \
             its actions {}, the env's observations {} and actions {}",
            converted.dataset,
            describe(&converted.observation),
            describe(&converted.action),
            describe(&env_obs),
            describe(&env_action),
        );
    }
    Ok(())
}

/// `box [4]` or `discrete(2)` from the bridge's JSON.
fn describe(space: &serde_json::Value) -> String {
    if let Some(shape) = space.get("box") {
        return format!("box {shape}");
    }
    if let Some(n) = space.get("discrete") {
        return format!("discrete({n})");
    }
    space.to_string()
}

/// A scratch directory for demo files on their way into a dataset.
pub(crate) fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("fleetrl-record-minari-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dataset_of_other_shapes_is_refused_naming_both() {
        let converted = Converted {
            dataset: "cartpole/expert-v0".into(),
            episodes: 1,
            steps: 10,
            observation: serde_json::json!({ "box": [4] }),
            action: serde_json::json!({ "discrete": 2 }),
        };
        let obs = Space::Box {
            shape: vec![2],
            low: vec![0.0; 2],
            high: vec![1.0; 2],
        };
        let error = check_spaces(
            &converted,
            "MountainCar-v0",
            &obs,
            &Space::Discrete { n: 3 },
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("cartpole/expert-v0")
                && error.contains("box [4]")
                && error.contains("box [2]")
                && error.contains("discrete(2)")
                && error.contains("discrete(3)"),
            "{error}"
        );
        let same = Space::Box {
            shape: vec![4],
            low: vec![0.0; 4],
            high: vec![1.0; 4],
        };
        assert!(check_spaces(&converted, "CartPole-v1", &same, &Space::Discrete { n: 2 }).is_ok());
    }

    #[test]
    fn dataset_names_become_one_directory() {
        assert_eq!(
            dataset_name("minari:cartpole/expert-v0"),
            Some("cartpole/expert-v0")
        );
        assert_eq!(dataset_name("demos/x"), None);
        assert_eq!(dir_name("cartpole/expert-v0"), "cartpole_expert-v0");
        assert_eq!(dir_name("/data/ds/cartpole/"), "data_ds_cartpole");
    }
}
