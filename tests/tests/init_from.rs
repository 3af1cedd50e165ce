//! `fleetrl train --init-from CKPT` (`learner.init_from`) starts a new run from a checkpoint's
//! model weights only: the policy is the checkpoint's, while the optimiser, the counters and the
//! schedules start fresh. Off-policy algorithms are refused with an error naming the key.

use std::path::PathBuf;

use fleetrl_tests::cli::fleetrl_command;

fn scratch(name: &str) -> PathBuf {
    fleetrl_tests::scratch(&format!("fleetrl-init-{name}"))
}

/// Runs `fleetrl train` and returns its exit success, stderr and summary (when written).
fn train(args: &[&str], out: &PathBuf) -> (bool, String, serde_json::Value) {
    let run = fleetrl_command(&["train"])
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("fleetrl runs");
    let summary = std::fs::read(out.join("summary.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    (
        run.status.success(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
        summary,
    )
}

/// With the learning rate at 1e-12 (Adam then moves no weight visibly), a run initialised from
/// a solved checkpoint plays its policy, and a run from random weights does not; both count
/// their updates from zero. The source solved over 100 confirmation episodes at 475 or more;
/// the frozen run evaluates the same sampling policy on 20 other episodes, which scored 461.85
/// once (a CI run), so the bar is 400: far above what a random policy plays (about 20), and
/// far above the cold run's bar.
#[test]
fn a_run_starts_from_a_checkpoints_weights_only() {
    let (source, warm, cold) = (scratch("source"), scratch("warm"), scratch("cold"));
    let (ok, err, solved) = train(&["--config", "cartpole-ppo", "--set", "seed=1"], &source);
    assert!(ok, "{err}");
    assert_eq!(solved["solved"], true, "{solved:#}");
    let checkpoint = solved["checkpoint"]
        .as_str()
        .expect("checkpoint")
        .to_string();
    let frozen = [
        "--config",
        "cartpole-ppo",
        "--set",
        "seed=1",
        "--set",
        "algo.learning_rate=1e-12",
        "--set",
        "stop.total_env_steps=2048",
        "--set",
        "stop.target_return=1e9",
    ];
    let mut args = frozen.to_vec();
    args.extend(["--init-from", &checkpoint]);
    let (ok, err, warm_summary) = train(&args, &warm);
    assert!(ok, "{err}");
    let (ok, err, cold_summary) = train(&frozen, &cold);
    assert!(ok, "{err}");
    let score = |s: &serde_json::Value| s["final_eval_return"].as_f64().expect("final eval");
    assert!(
        score(&warm_summary) >= 400.0,
        "the initialised run should play the solved policy: {warm_summary:#}"
    );
    assert!(
        score(&cold_summary) < 300.0,
        "random weights that barely train should not solve: {cold_summary:#}"
    );
    let updates = warm_summary["updates"].as_u64().expect("updates");
    assert!(
        updates <= 16,
        "counters start fresh, not at the source's {}: {warm_summary:#}",
        solved["updates"]
    );
    for dir in [source, warm, cold] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// An off-policy run cannot start from weights alone (its targets and replay would not match).
#[test]
fn off_policy_init_from_is_refused_by_name() {
    let out = scratch("dqn");
    let here = std::env::current_dir().expect("cwd");
    let any = here.display().to_string();
    let (ok, err, _) = train(&["--config", "cartpole-dqn", "--init-from", &any], &out);
    assert!(!ok, "an off-policy init_from must fail");
    assert!(err.contains("learner.init_from"), "{err}");
    assert!(err.contains("on-policy"), "{err}");
    let _ = std::fs::remove_dir_all(out);
}
