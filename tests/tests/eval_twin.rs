//! An independent check of the native CartPole: a policy trained by `fleetrl train` on the
//! native env scores the same, within sampling noise, when `fleetrl eval --env gym:CartPole-v1`
//! plays it in gymnasium's own implementation (hosted through the embedded Python). The
//! trajectory fixtures (core/tests/*_fixture.rs) check the dynamics step by step; this checks
//! what a user reads: the score of a checkpoint.

use std::path::{Path, PathBuf};

use fleetrl_tests::cli::{fleetrl_command, fleetrl_ok};

const EPISODES: usize = 100;

fn eval(checkpoint: &Path, extra: &[&str]) -> serde_json::Value {
    let ckpt = checkpoint.to_str().expect("utf-8 path");
    let episodes = EPISODES.to_string();
    let mut args = vec!["eval", "--checkpoint", ckpt, "--episodes", &episodes];
    args.extend_from_slice(extra);
    let stdout = fleetrl_ok(&args);
    let written = stdout
        .lines()
        .find_map(|l| l.strip_prefix("wrote "))
        .unwrap_or_else(|| panic!("`fleetrl eval` names the file it wrote: {stdout}"));
    serde_json::from_slice(&std::fs::read(written).expect("the eval file")).expect("eval JSON")
}

/// `fleetrl eval --checkpoint checkpoint extra...`, which must fail: its stderr.
fn refused(checkpoint: &Path, extra: &[&str]) -> String {
    let ckpt = checkpoint.to_str().expect("utf-8 path");
    let mut args = vec!["eval", "--checkpoint", ckpt];
    args.extend_from_slice(extra);
    let out = fleetrl_command(&args).output().expect("fleetrl runs");
    assert!(!out.status.success(), "eval {extra:?} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_native_cartpole_policy_scores_the_same_in_gymnasium() {
    let out = fleetrl_tests::scratch("fleetrl-eval-twin");
    // Part-trained (no target), so that episodes vary in length and both envs' terminations
    // matter: a fully solved policy would score 500 in any CartPole that times out at 500.
    let train = fleetrl_command(&[
        "train",
        "--config",
        "cartpole-ppo",
        "--set",
        "seed=3",
        "--set",
        "stop.total_env_steps=6000",
        "--set",
        "stop.target_return=1e9",
        "--out",
    ])
    .arg(&out)
    .output()
    .expect("fleetrl train runs");
    assert!(
        train.status.success(),
        "fleetrl train failed: {}",
        String::from_utf8_lossy(&train.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let checkpoint = PathBuf::from(summary["checkpoint"].as_str().expect("a checkpoint"));

    let native = eval(&checkpoint, &[]);
    let gym = eval(&checkpoint, &["--env", "gym:CartPole-v1"]);
    assert_eq!(gym["env"], "gym:CartPole-v1");
    let stats = |v: &serde_json::Value| {
        (
            v["mean_return"].as_f64().unwrap(),
            v["std_return"].as_f64().unwrap(),
        )
    };
    let ((m1, s1), (m2, s2)) = (stats(&native), stats(&gym));
    eprintln!("native {m1:.1} ± {s1:.1}, gymnasium {m2:.1} ± {s2:.1} over {EPISODES} episodes");
    // Different reset RNGs, so the episodes differ: compare the means within 4 standard
    // errors of their difference (plus one step for a policy that always solves).
    let se = ((s1 * s1 + s2 * s2) / EPISODES as f64).sqrt();
    assert!(
        (m1 - m2).abs() <= 4.0 * se + 1.0,
        "native {m1:.1} ± {s1:.1} vs gymnasium {m2:.1} ± {s2:.1}: beyond 4 standard errors ({se:.2})"
    );

    // An env whose spaces the policy cannot play is refused, naming both.
    let stderr = refused(&checkpoint, &["--env", "Acrobot-v1"]);
    assert!(
        stderr.contains("--env Acrobot-v1 does not fit this checkpoint")
            && stderr.contains("CartPole-v1"),
        "{stderr}"
    );
    assert_eq!(native["episodes"], EPISODES, "{native:#}");
    // A run without tasks has no held-out tasks to meta-test more of.
    let stderr = refused(&checkpoint, &["--set", "tasks.num_test=100"]);
    assert!(
        stderr.contains("is not evaluated on held-out tasks"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// `[eval.env]` is what evaluation plays: here the same CartPole cut at 50 steps, so no
/// evaluation can score above 50 whatever the policy, and the run is never solved.
#[test]
fn evaluation_plays_the_eval_env() {
    let (status, stderr, summary) = fleetrl_tests::train_preset(
        "eval-env",
        "cartpole-ppo",
        &[
            "stop.total_env_steps=40000",
            "eval.interval_env_steps=10000",
            "eval.env.id=\"CartPole-v1\"",
            "eval.env.max_episode_steps=50",
        ],
        &[],
    )
    .expect("fleetrl train runs");
    assert!(status.success(), "{stderr}");
    let summary = summary.expect("a summary");
    let evaluations = summary["evaluations"].as_array().expect("evaluations");
    assert!(evaluations.len() >= 2, "{summary:#}");
    for e in evaluations {
        assert!(
            e["mean_return"].as_f64().expect("a return") <= 50.0,
            "{summary:#}"
        );
    }
    // The training env kept its own limit: training episodes ran past 50 steps.
    assert!(
        summary["recent_training_return"].as_f64().unwrap_or(0.0) > 50.0,
        "{summary:#}"
    );
}
