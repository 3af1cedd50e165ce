//! `fleetrl record`: play a checkpoint's policy (or a scripted controller) and write each
//! episode as a demo file.

use std::path::{Path, PathBuf};

use anyhow::Context;
use fleetrl_core::acting::eval::record_episode_env;
use fleetrl_runtime::demo::{self, DemoSource};

use crate::eval_cmd::load_policy;

/// What to record and where.
#[derive(Debug, Clone)]
pub(crate) struct RecordArgs {
    /// Episodes to record.
    pub(crate) episodes: usize,
    /// Env seed of the first episode; episode `i` uses `seed + i`.
    pub(crate) seed: u64,
    /// Sample actions instead of taking the policy's mode.
    pub(crate) stochastic: bool,
    /// Keep only episodes whose return reaches this.
    pub(crate) min_return: Option<f64>,
}

/// Who plays.
#[derive(Debug, Clone)]
pub(crate) enum Player {
    /// The policy in this checkpoint directory.
    Checkpoint(PathBuf),
    /// The hand-written controller of this env id.
    Scripted(String),
    /// A person at the terminal, on this env id.
    Keyboard(String),
}

/// Records `args.episodes` episodes played by `player` into `out`
/// (`episode-SSSSSSSS.demo.safetensors`, S the env seed), or with `out` = `minari:ID` into the
/// Minari dataset ID; prints one line per episode.
pub(crate) fn run(player: &Player, out: &Path, args: &RecordArgs) -> anyhow::Result<()> {
    let Some(dataset_id) = out.to_str().and_then(crate::minari::dataset_name) else {
        return record(player, out, args).map(|_| ());
    };
    let scratch = crate::minari::scratch_dir();
    let recorded = record(player, &scratch, args);
    let written =
        recorded.and_then(|env_id| crate::minari::from_demos(&scratch, dataset_id, &env_id));
    let _ = std::fs::remove_dir_all(&scratch);
    println!("Minari dataset: {}", written?.trim());
    Ok(())
}

/// Records into the demo directory `out`; the env id played.
fn record(player: &Player, out: &Path, args: &RecordArgs) -> anyhow::Result<String> {
    let loaded = match player {
        Player::Checkpoint(checkpoint) => Some(load_policy(checkpoint)?),
        Player::Scripted(_) | Player::Keyboard(_) => None,
    };
    let env_id = match (player, &loaded) {
        (_, Some((_, config))) => config.env.id.clone(),
        (Player::Scripted(id) | Player::Keyboard(id), None) => id.clone(),
        (Player::Checkpoint(_), None) => unreachable!("loaded above"),
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut kept = 0;
    for i in 0..args.episodes {
        let seed = args.seed + i as u64;
        let episode = match &loaded {
            Some((policy, config)) => record_episode_env(
                policy.as_ref(),
                &config.env,
                seed,
                !args.stochastic,
                DemoSource::Checkpoint,
            )?,
            None if matches!(player, Player::Keyboard(_)) => crate::keyboard::play(
                &env_id,
                seed,
                &mut std::io::stdin().lock(),
                &mut std::io::stderr(),
            )?,
            None => fleetrl_core::acting::scripted::play(&env_id, seed, DemoSource::Scripted)?,
        };
        let total = episode.total_reward();
        if args.min_return.is_some_and(|min| total < min) {
            println!(
                "seed {seed}: return {total:.2}, {} steps: below --min-return, skipped",
                episode.len()
            );
            continue;
        }
        let path = out.join(format!("episode-{seed:08}{}", demo::EXTENSION));
        demo::write(&episode, &path)?;
        kept += 1;
        println!(
            "seed {seed}: return {total:.2}, {} steps -> {}",
            episode.len(),
            path.display()
        );
    }
    println!("wrote {kept} demo(s) of {} to {}", env_id, out.display());
    if kept == 0 {
        anyhow::bail!("no episode reached --min-return; nothing was written");
    }
    Ok(env_id)
}
