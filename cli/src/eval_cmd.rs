//! `fleetrl eval`: load a checkpoint and play the deterministic policy.

use std::path::Path;

use anyhow::Context;
use fleetrl_core::acting::eval::{eval_seed, evaluate_env, EvalResult};
use fleetrl_core::config::RunConfig;
use fleetrl_core::models::Policy;

/// Plays `episodes` deterministic episodes with the policy in checkpoint `path`.
/// Blocks (tch and env work): call from a blocking thread.
/// `seed` defaults to the run's evaluation seed; the seed used is returned with the result.
pub(crate) fn evaluate_checkpoint(
    path: &Path,
    episodes: usize,
    seed: Option<u64>,
) -> anyhow::Result<(EvalResult, u64)> {
    let (model, config) = load_policy(path)?;
    let seed = seed.unwrap_or_else(|| eval_seed(&config));
    Ok((
        evaluate_env(model.as_ref(), &config.env, episodes, seed, true)?,
        seed,
    ))
}

/// The policy saved in checkpoint `path` (any algorithm), on the CPU, and the run config it
/// was trained with.
pub(crate) fn load_policy(path: &Path) -> anyhow::Result<(Box<dyn Policy>, RunConfig)> {
    Ok(fleetrl_core::acting::policy_loader::load_policy(path)?)
}

/// The `eval` subcommand: prints the mean return and writes `<checkpoint>/eval.json`.
pub(crate) fn run(path: &Path, episodes: usize, seed: Option<u64>) -> anyhow::Result<()> {
    let (result, seed) = evaluate_checkpoint(path, episodes, seed)?;
    println!(
        "mean return {:.2} ± {:.2} over {} episodes",
        result.mean(),
        result.std(),
        episodes
    );
    let report = serde_json::json!({
        "checkpoint": path.display().to_string(),
        "episodes": episodes,
        "seed": seed,
        "mean_return": result.mean(),
        "std_return": result.std(),
        "returns": result.returns,
    });
    let out = path.join("eval.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}
