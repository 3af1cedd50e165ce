//! A run resumes from its newest checkpoint: weights, optimiser state and counters carry over.

use std::path::{Path, PathBuf};
use std::process::Command;

fn command() -> anyhow::Result<Command> {
    let fleetrl = fleetrl_runtime::launch::bin_dir()?.join("fleetrl");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(fleetrl);
    cmd.current_dir(root)
        .args(["train", "--config", "cartpole-ppo"]);
    Ok(cmd)
}

/// Trains `steps` into `out`, resuming from `resume` (`latest`, a checkpoint or a run directory).
fn train(out: &Path, steps: u64, resume: Option<&Path>) -> anyhow::Result<serde_json::Value> {
    let mut cmd = command()?;
    cmd.args([
        "--set",
        "stop.target_return=1e9",
        "--set",
        &format!("stop.total_env_steps={steps}"),
    ]);
    cmd.arg("--out").arg(out);
    if let Some(resume) = resume {
        cmd.arg("--resume").arg(resume);
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
    let first = train(&out, 4_096, None)?;
    assert_eq!(first["stop_reason"], "step_budget", "{first:#}");
    let first_version = first["policy_version"].as_i64().expect("policy_version");
    assert!(first_version >= 16, "{first:#}");

    let second = train(&out, 8_192, Some(Path::new("latest")))?;
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

    // A new run directory going on from this run's newest checkpoint, named by the run's
    // directory.
    let branch = out.with_extension("branch");
    let _ = std::fs::remove_dir_all(&branch);
    let third = train(&branch, 12_288, Some(&out))?;
    assert!(
        third["policy_version"].as_i64() >= second["policy_version"].as_i64(),
        "{third:#}"
    );
    std::fs::remove_dir_all(&out)?;
    std::fs::remove_dir_all(&branch)?;
    Ok(())
}

/// A `--resume` with nothing to resume from is refused before any role starts, naming what to
/// give; the directory gets no config, token or logs. Before, the learner failed on it after
/// start with "meta.json: No such file or directory".
#[test]
fn a_resume_with_nothing_to_resume_from_is_refused_at_once() -> anyhow::Result<()> {
    let out = std::env::temp_dir().join(format!("fleetrl-no-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let missing = out.with_extension("missing");
    for (resume, says) in [
        (
            missing.display().to_string(),
            vec![
                format!(
                    "--resume {} (or `latest`, the newest of this --out)",
                    missing.display()
                ),
                format!(
                    "no checkpoint at {}: give a checkpoint directory",
                    missing.display()
                ),
            ],
        ),
        (
            "latest".to_string(),
            vec![format!(
                "--resume latest: no checkpoint under {}",
                out.join("checkpoints").display()
            )],
        ),
    ] {
        let run = command()?
            .args(["--resume", &resume, "--out"])
            .arg(&out)
            .output()?;
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{stderr}");
        for says in says {
            assert!(stderr.contains(&says), "{stderr}");
        }
        for file in ["config.toml", "run.token", "logs"] {
            assert!(!out.join(file).exists(), "{file} was written: {stderr}");
        }
    }
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
