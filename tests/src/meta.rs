//! What the meta-RL scenarios share: training a preset into a run directory they keep, and
//! reading its checkpoints and `fleetrl eval`'s reports.

use std::path::{Path, PathBuf};

use crate::cli::fleetrl_command;

/// Trains `preset` into a fresh directory (kept, for `fleetrl eval`); the summary and the dir.
pub fn train(name: &str, preset: &str, overrides: &[&str]) -> (serde_json::Value, PathBuf) {
    let out = crate::scratch(&format!("fleetrl-meta-{name}"));
    let mut cmd = fleetrl_command(&["train", "--config", preset]);
    for o in overrides {
        cmd.args(["--set", o]);
    }
    let run = cmd.arg("--out").arg(&out).output().expect("fleetrl runs");
    assert!(
        run.status.success(),
        "fleetrl train {preset} failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary"))
            .expect("summary.json parses");
    eprintln!(
        "{preset}: {} env steps, {:.1} s, adapted {} (before/after: {})",
        summary["total_env_steps"],
        summary["wall_seconds"].as_f64().unwrap_or(f64::NAN),
        summary["final_eval_return"],
        summary["final_adaptation_returns"]
    );
    (summary, out)
}

/// The newest checkpoint under run directory `out`.
pub fn newest_checkpoint(out: &Path) -> String {
    let ckpt = std::fs::read_dir(out.join("checkpoints"))
        .expect("checkpoints")
        .flatten()
        .map(|e| e.path())
        .max()
        .expect("a checkpoint");
    ckpt.to_str().expect("utf-8 path").to_string()
}

/// The report the last `fleetrl eval` of `ckpt` wrote, `ckpt/eval.json`.
pub fn eval_report(ckpt: &str) -> serde_json::Value {
    let path = format!("{ckpt}/eval.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}
