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
    let out = fleetrl_tests::scratch("fleetrl-resume");
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

    // A newest checkpoint that does not load (a machine that went down mid-write) is
    // skipped, with a warning naming it, for the one before.
    let newest = fleetrl_core::checkpoint::latest(&out.join("checkpoints")).expect("checkpoints");
    std::fs::write(newest.join("model.safetensors"), b"")?;
    let fourth = train(&out, 12_288, Some(Path::new("latest")))?;
    assert!(
        fourth["total_env_steps"].as_u64().expect("steps") >= 12_288,
        "{fourth:#}"
    );
    let log = std::fs::read_to_string(out.join("logs/learner.log"))?;
    assert!(
        log.contains("skipping a checkpoint that does not load")
            && log.contains(&newest.display().to_string()),
        "{log}"
    );
    std::fs::remove_dir_all(&out)?;
    std::fs::remove_dir_all(&branch)?;
    Ok(())
}

/// A `--resume` with nothing to resume from is refused before any role starts, naming what to
/// give; not even the run directory is made. Before, the learner failed on it after
/// start with "meta.json: No such file or directory".
#[test]
fn a_resume_with_nothing_to_resume_from_is_refused_at_once() -> anyhow::Result<()> {
    let out = fleetrl_tests::scratch("fleetrl-no-resume");
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
        assert!(!out.exists(), "{} was made: {stderr}", out.display());
    }
    Ok(())
}

/// `--resume` without `--config` resumes with the checkpoint's own config (here A2C, not the
/// default preset), `--set` still applying; a `--config` of another algorithm or network is
/// refused before anything starts, naming the keys, and the run's files stay as they were.
/// Before, the default preset (cartpole-ppo) was loaded, and the learner failed on the
/// checkpoint's weights with "missing `pi.l0.bias`"-like errors after the launcher had
/// replaced the run's config.
#[test]
fn a_run_resumes_with_its_own_config_and_refuses_another_network() -> anyhow::Result<()> {
    let out = fleetrl_tests::scratch("fleetrl-own-config");
    let fleetrl = || -> anyhow::Result<Command> {
        let mut cmd = Command::new(fleetrl_runtime::launch::bin_dir()?.join("fleetrl"));
        cmd.current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
            .args(["train", "--set", "stop.target_return=1e9", "--out"])
            .arg(&out);
        Ok(cmd)
    };
    let first = fleetrl()?
        .args([
            "--config",
            "cartpole-a2c",
            "--set",
            "stop.total_env_steps=4096",
        ])
        .output()?;
    anyhow::ensure!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let config = std::fs::read_to_string(out.join("config.toml"))?;

    for (args, says) in [
        (
            &["--config", "cartpole-ppo"][..],
            r#"`algo.name`: "a2c" in the checkpoint, "ppo" here"#,
        ),
        (
            &["--set", "model.hidden_sizes=[32]"][..],
            "`model.hidden_sizes`: [64, 64] in the checkpoint, [32] here",
        ),
    ] {
        let refused = fleetrl()?
            .args(["--resume", "latest"])
            .args(args)
            .output()?;
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{stderr}");
        assert!(
            stderr.contains("was trained with another algorithm or network than this config's")
                && stderr.contains(says),
            "{stderr}"
        );
        assert_eq!(std::fs::read_to_string(out.join("config.toml"))?, config);
    }

    let resumed = fleetrl()?
        .args(["--resume", "latest", "--set", "stop.total_env_steps=8192"])
        .output()?;
    anyhow::ensure!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json"))?)?;
    assert_eq!(summary["algo"], "a2c", "{summary:#}");
    assert!(
        summary["total_env_steps"].as_u64() >= Some(8192),
        "{summary:#}"
    );
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
