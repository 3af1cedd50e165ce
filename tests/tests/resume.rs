//! A run resumes from its newest checkpoint: weights, optimiser state and counters carry over.

use std::path::{Path, PathBuf};
use std::process::Command;

fn train(out: &Path, steps: u64, resume: bool) -> anyhow::Result<serde_json::Value> {
    let fleetrl = fleetrl_runtime::launch::bin_dir()?.join("fleetrl");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(fleetrl);
    cmd.current_dir(root)
        .args(["train", "--config", "cartpole-ppo"]);
    cmd.args([
        "--set",
        "stop.target_return=1e9",
        "--set",
        &format!("stop.total_env_steps={steps}"),
    ]);
    cmd.arg("--out").arg(out);
    if resume {
        cmd.args(["--resume", "latest"]);
    }
    let run = cmd.output()?;
    anyhow::ensure!(
        run.status.success(),
        "fleetrl train failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    Ok(serde_json::from_slice(&std::fs::read(
        out.join("summary.json"),
    )?)?)
}

#[test]
fn training_resumes_where_the_checkpoint_left_off() -> anyhow::Result<()> {
    let out = std::env::temp_dir().join(format!("fleetrl-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let first = train(&out, 4_096, false)?;
    assert_eq!(first["stop_reason"], "step_budget", "{first:#}");
    let first_version = first["policy_version"].as_i64().expect("policy_version");
    assert!(first_version >= 16, "{first:#}");

    let second = train(&out, 8_192, true)?;
    assert_eq!(second["stop_reason"], "step_budget", "{second:#}");
    assert!(
        second["policy_version"].as_i64().expect("policy_version") >= first_version + 16,
        "{second:#}"
    );
    assert!(
        second["total_env_steps"].as_u64().expect("steps") >= 8_192,
        "{second:#}"
    );
    let log = std::fs::read_to_string(out.join("logs/learner.log"))?;
    assert!(
        log.contains("resumed"),
        "the learner should log that it resumed:\n{log}"
    );
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
