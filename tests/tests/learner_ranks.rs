//! Two learner processes train one policy through the real binaries: `fleetrl train --set
//! learner.world_size=2` starts rank 0 (the learner the actors and the launcher talk to) and
//! rank 1, which rendezvous on a loopback port and all-reduce their gradients over gloo.
//! On-policy (cartpole-ppo: the ranks split each version's rollouts) and off-policy
//! (pendulum-sac: each rank samples its own batches) runs learn to their presets' targets
//! within the presets' env-step budgets; a run resumed from rank 0's checkpoint goes on from
//! its version, and killing rank 1 ends that run, naming it, within seconds. A rank waiting
//! at the rendezvous stops at once on SIGTERM.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetrl_tests::cli::fleetrl_command;
use fleetrl_tests::{read_log as read, wait_exit};

/// `fleetrl train --config PRESET` with two learner ranks into `out`.
fn train_command(preset: &str, out: &Path, sets: &[&str]) -> Command {
    let mut cmd = fleetrl_command(&["train", "--config", preset]);
    cmd.args(["--set", "learner.world_size=2"]);
    for set in sets {
        cmd.args(["--set", set]);
    }
    cmd.arg("--out").arg(out);
    cmd
}

/// Runs a two-rank training to its end; its summary.
fn train(preset: &str, out: &Path, sets: &[&str]) -> anyhow::Result<serde_json::Value> {
    let run = train_command(preset, out, sets).output()?;
    anyhow::ensure!(
        run.status.success(),
        "fleetrl train {preset} with two learner ranks failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json"))?)?;
    eprintln!(
        "{preset}, 2 learner ranks: {} env steps, {:.1} s, eval {}, version {}",
        summary["total_env_steps"],
        summary["wall_seconds"].as_f64().unwrap_or(f64::NAN),
        summary["final_eval_return"],
        summary["policy_version"]
    );
    Ok(summary)
}

/// Rank 1 joined rank 0 and trained: its log says it joined and reports updates.
fn assert_rank_1_trained(out: &Path) {
    let log = read(&out.join("logs/learner-rank-1.log"));
    assert!(
        log.contains("joined: every rank holds rank 0's weights"),
        "rank 1 should join rank 0:\n{log}"
    );
    assert!(
        log.contains("progress"),
        "rank 1 should train beside rank 0:\n{log}"
    );
}

/// The `version=N` in `line`.
fn version_in(line: &str) -> Option<i64> {
    line.split("version=")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The policy version in the newest `progress` line of `log`, if past `after`.
fn progressed_version(log: &str, after: i64) -> Option<i64> {
    let line = log.lines().rev().find(|l| l.contains(" progress "))?;
    version_in(line).filter(|&v| v > after)
}

/// Processes whose command line names `dir`: the run's roles.
fn processes_under(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) && pid != std::process::id() {
            found.push((pid, cmdline));
        }
    }
    found
}

/// cartpole-ppo on two ranks solves within its preset's budget (100k env steps); the run
/// resumed from rank 0's checkpoint goes on from that version, and killing rank 1 ends it
/// with an error naming rank 1, every role stopped.
#[test]
fn cartpole_ppo_on_two_ranks_solves_resumes_and_stops_when_rank_1_dies() -> anyhow::Result<()> {
    let out = fleetrl_tests::scratch("fleetrl-ranks-ppo");
    let solved = train("cartpole-ppo", &out, &["seed=1"])?;
    assert_eq!(solved["solved"], true, "{solved:#}");
    assert!(
        solved["final_eval_return"].as_f64().expect("return") >= 475.0,
        "{solved:#}"
    );
    assert_rank_1_trained(&out);
    let version = solved["policy_version"].as_i64().expect("policy_version");

    // Resumed from rank 0's newest checkpoint, with a budget it will not reach.
    let mut resumed = train_command(
        "cartpole-ppo",
        &out,
        &[
            "seed=1",
            "stop.target_return=1e9",
            "stop.total_env_steps=10000000",
        ],
    )
    .args(["--resume", "latest"])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()?;
    let learner_log = out.join("logs/learner.log");
    let waited = Instant::now();
    let (resumed_at, went_on) = loop {
        let log = read(&learner_log);
        // The version rank 0 resumed at, and a later progress line past it.
        let resume = log.rsplit_once(" resumed").and_then(|(_, rest)| {
            let at = version_in(rest.lines().next()?)?;
            Some((at, progressed_version(rest, at)))
        });
        if let Some((at, Some(on))) = resume {
            break (at, on);
        }
        assert!(
            waited.elapsed() < Duration::from_secs(300),
            "the resumed run did not train on:\n{log}"
        );
        assert!(
            resumed.try_wait()?.is_none(),
            "the resumed run ended early:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        resumed_at >= version,
        "rank 0 should resume from its newest checkpoint (the solved run evaluated version \
         {version}; it resumed at {resumed_at})"
    );
    eprintln!("resumed at version {resumed_at}, trained on to {went_on}");

    let rank_1 = processes_under(&out.join("ranks").join("learner-rank-1"));
    assert_eq!(rank_1.len(), 1, "one rank 1 process: {rank_1:?}");
    // SAFETY: kill(2) on the pid of this test's own grandchild, found by its run directory.
    unsafe {
        libc::kill(rank_1[0].0 as i32, libc::SIGKILL);
    }
    let (status, took) = wait_exit(&mut resumed, Duration::from_secs(60));
    let mut stderr = String::new();
    resumed
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)?;
    let status =
        status.unwrap_or_else(|| panic!("the run did not end after rank 1 died: {stderr}"));
    eprintln!("killing rank 1 ended the run in {took:?}");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("learner rank 1 (of 2) exited"),
        "the error should name rank 1: {stderr}"
    );
    let rank_0 = read(&learner_log);
    assert!(
        rank_0.contains("rank 1 stopped answering"),
        "rank 0 should name rank 1 too:\n{rank_0}"
    );
    let left = processes_under(&out);
    assert!(left.is_empty(), "roles still running: {left:?}");
    std::fs::remove_dir_all(&out)?;
    Ok(())
}

/// pendulum-sac on two ranks reaches its target (-200) within its preset's budget (20k env
/// steps): every rank samples its own batch, and the table serves twice the samples per
/// insert, so updates per env step stay one learner's.
#[test]
fn pendulum_sac_on_two_ranks_solves() -> anyhow::Result<()> {
    let out: PathBuf = fleetrl_tests::scratch("fleetrl-ranks-sac");
    let solved = train("pendulum-sac", &out, &["seed=1"])?;
    assert_eq!(solved["solved"], true, "{solved:#}");
    assert!(
        solved["final_eval_return"].as_f64().expect("return") >= -200.0,
        "{solved:#}"
    );
    assert_rank_1_trained(&out);
    std::fs::remove_dir_all(&out)?;
    Ok(())
}

/// A rank waiting at the rendezvous for ranks that never come stops at once on SIGTERM,
/// exiting 0: nothing has been trained or written yet. Before, the learner installed its
/// signal handler only once it served, so a container's learner (PID 1, which ignores a signal
/// it has no handler for) sat out the whole rendezvous timeout: `docker-compose down` of the
/// two-rank deployment took 33 s, waiting for a rank 0 that compose had just restarted, which
/// then exited 1. Here (not PID 1) the old learner died of the signal instead.
#[test]
fn a_rank_waiting_at_the_rendezvous_stops_at_once_on_sigterm() -> anyhow::Result<()> {
    let dir = fleetrl_tests::scratch("fleetrl-rank-waits");
    std::fs::create_dir_all(&dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let config = fleetrl_tests::compose::repo_root().join("configs/pendulum-sac.toml");
    let config = config.display().to_string();
    let run_dir = dir.join("run").display().to_string();
    let rendezvous = format!("learner.rendezvous=127.0.0.1:{port}");
    let args = [
        "--config",
        &config,
        "--run-dir",
        &run_dir,
        "--listen",
        "127.0.0.1:0",
        "--set",
        "learner.world_size=2",
        "--set",
        "learner.rank=0",
        "--set",
        &rendezvous,
        "--set",
        "learner.collective_timeout_s=120",
    ];
    fleetrl_tests::stopping::stops_at_once_while_waiting(
        "fleet-learner",
        &args,
        &dir.join("learner.log"),
        "joining the other learner processes",
        "stopped before training began",
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
