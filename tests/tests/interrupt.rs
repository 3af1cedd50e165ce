//! Ctrl-C on `fleetrl train` checkpoints, evaluates, writes the summary, exits 130, and leaves
//! no role process behind.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(needle) {
                found.push(text);
            }
        }
    }
    found
}

#[test]
fn ctrl_c_stops_the_run_cleanly() -> anyhow::Result<()> {
    let out = std::env::temp_dir().join(format!("fleetrl-interrupt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let fleetrl = fleetrl_runtime::launch::bin_dir()?.join("fleetrl");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut child = Command::new(fleetrl)
        .current_dir(root)
        .args([
            "train",
            "--config",
            "cartpole-ppo",
            "--set",
            "stop.total_env_steps=100000000",
        ])
        .args([
            "--set",
            "stop.target_return=1e9",
            "--set",
            "stop.max_wall_seconds=0",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let learner_log = out.join("logs/learner.log");
    let started = Instant::now();
    while !std::fs::read_to_string(&learner_log)
        .unwrap_or_default()
        .contains("progress")
    {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(180),
            "training never made progress"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: kill(2) on the child we spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait()?;
    assert_eq!(status.code(), Some(130), "interrupted runs exit 130");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json"))?)?;
    assert_eq!(summary["stop_reason"], "interrupted", "{summary:#}");
    assert!(
        PathBuf::from(summary["checkpoint"].as_str().expect("checkpoint"))
            .join("meta.json")
            .exists()
    );
    let leftovers = processes_mentioning(&out.display().to_string());
    assert!(
        leftovers.is_empty(),
        "role processes outlived the launcher: {leftovers:?}"
    );
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
