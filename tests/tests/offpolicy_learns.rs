//! Off-policy learning end to end through the real binaries (`fleetrl train` starts a replay
//! server, a learner and actors): DQN and DQN with prioritized replay solve CartPole-v1, SAC on
//! discrete actions learns it, SAC, TD3 and DDPG reach -200 on Pendulum-v1 within 20k env
//! steps, recurrent SAC swings the pendulum up without seeing its velocity (PendulumNoVel-v1)
//! and recurrent TD3 and DDPG train on it end to end, and BC clones the DQN expert to
//! 90% of the expert's measured return, from demos that `fleetrl record` wrote and from the
//! expert played by the actors. A sandbox run checks that gradient updates track inserted
//! transitions at the configured samples-per-insert ratio. Fixed seeds; assertions on returns
//! and counts, never on time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleetrl_proto::v1::InfoRequest;
use fleetrl_tests::cli::{assert_eval_gives, fleetrl_command, fleetrl_ok};
use fleetrl_tests::Sandbox;

fn scratch(name: &str) -> PathBuf {
    fleetrl_tests::scratch(&format!("fleetrl-{name}"))
}

/// Runs `fleetrl train` on `preset` with overrides and returns its summary.
fn train(preset: &str, out: &Path, sets: &[&str]) -> serde_json::Value {
    let mut cmd = fleetrl_command(&["train", "--config", preset]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let run = cmd.arg("--out").arg(out).output().expect("fleetrl runs");
    assert!(
        run.status.success(),
        "fleetrl train {preset} failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary"))
        .expect("summary is JSON")
}

fn solved(summary: &serde_json::Value, target: f64) -> f64 {
    let ret = summary["final_eval_return"].as_f64().expect("final return");
    assert_eq!(summary["solved"], true, "not solved: {summary:#}");
    assert!(ret >= target, "{summary:#}");
    ret
}

/// DQN solves CartPole; its checkpoint is the expert that BC then clones twice: from demo files
/// recorded with `fleetrl record`, and from the checkpoint played by the actors.
#[test]
fn dqn_solves_cartpole_and_bc_clones_it() {
    let out = scratch("dqn");
    let summary = train("cartpole-dqn", &out, &["seed=1"]);
    solved(&summary, 475.0);
    assert_eq!(summary["algo"], "dqn");
    // Replayed transitions carry no policy version: the summary names no lag rather than 0.
    assert!(summary.get("mean_policy_lag").is_none(), "{summary:#}");
    let expert = summary["checkpoint"]
        .as_str()
        .expect("checkpoint")
        .to_string();

    fleetrl_ok(&["eval", "--checkpoint", &expert, "--episodes", "20"]);
    let expert_eval: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(&expert).join("eval.json")).expect("the expert's eval.json"),
    )
    .expect("eval.json is JSON");
    let expert_return = expert_eval["mean_return"].as_f64().expect("mean_return");
    // A clone is judged against the expert it copies: 90% of the expert's 20-episode return.
    // A fixed 475 flaked when the expert itself sat at ~475 (a clone at 456-466 failed CI).
    let clone_target = ((0.9 * expert_return).min(475.0) * 10.0).floor() / 10.0;
    let target_set = format!("stop.target_return={clone_target:.1}");

    let demos = out.join("demos");
    let demos_arg = demos.display().to_string();
    fleetrl_ok(&[
        "record",
        "--checkpoint",
        &expert,
        "--episodes",
        "10",
        "--out",
        &demos_arg,
    ]);

    let demo_set = format!("algo.demos={}", demos.display());
    let bc = train(
        "cartpole-bc",
        &out.join("bc-demos"),
        &["seed=1", &demo_set, &target_set],
    );
    solved(&bc, clone_target);

    let expert_set = format!("algo.expert_checkpoint=\"{expert}\"");
    let bc = train(
        "cartpole-bc",
        &out.join("bc-expert"),
        &["seed=1", "algo.demos=\"\"", &expert_set, &target_set],
    );
    solved(&bc, clone_target);
    std::fs::remove_dir_all(&out).expect("cleanup");
}

#[test]
fn dqn_with_prioritized_replay_solves_cartpole() {
    let out = scratch("dqn-per");
    let summary = train("cartpole-dqn-per", &out, &["seed=1"]);
    solved(&summary, 475.0);
    std::fs::remove_dir_all(&out).expect("cleanup");
}

/// DQN with RMSprop (`algo.optimizer = "rmsprop"`, the DQN and MinAtar papers' rule): seed 1
/// solved at 27.6k env steps (7.3 s) here.
#[test]
fn dqn_with_rmsprop_solves_cartpole() {
    let out = scratch("dqn-rmsprop");
    let summary = train(
        "cartpole-dqn",
        &out,
        &["seed=1", "algo.optimizer=\"rmsprop\""],
    );
    solved(&summary, 475.0);
    std::fs::remove_dir_all(&out).expect("cleanup");
}

/// SAC on CartPole's discrete actions (a categorical policy, `cartpole-sac`) reaches 200
/// within 15k env steps; the preset's 475 is reached by some seeds only (see the preset).
#[test]
fn discrete_sac_learns_cartpole() {
    let out = scratch("sac-discrete");
    let sets = [
        "seed=1",
        "stop.target_return=200",
        "stop.total_env_steps=15000",
    ];
    let summary = train("cartpole-sac", &out, &sets);
    solved(&summary, 200.0);
    assert_eq!(summary["algo"], "sac");
    std::fs::remove_dir_all(&out).expect("cleanup");
}

fn pendulum(preset: &str, sets: &[&str]) {
    // Its own directory per variant: the tests run in parallel.
    let out = scratch(&[&[preset], sets].concat().join("-"));
    let summary = train(preset, &out, &[&["seed=1"], sets].concat());
    solved(&summary, -200.0);
    let steps = summary["evaluations"]
        .as_array()
        .and_then(|e| e.last())
        .and_then(|e| e["env_steps"].as_u64())
        .expect("the solving evaluation's step count");
    assert!(steps <= 20_000, "{preset} needed {steps} env steps");
    std::fs::remove_dir_all(&out).expect("cleanup");
}

#[test]
fn sac_reaches_minus_200_on_pendulum() {
    pendulum("pendulum-sac", &[]);
}

/// SAC with `model.normalize_obs` (running statistics every network reads, travelling with the
/// weights to the actors): seeds 1 and 2 solved at 7.8k and 4.9k env steps here.
#[test]
fn sac_with_normalised_observations_reaches_minus_200_on_pendulum() {
    pendulum("pendulum-sac", &["model.normalize_obs=true"]);
}

#[test]
fn td3_reaches_minus_200_on_pendulum() {
    pendulum("pendulum-td3", &[]);
}

#[test]
fn ddpg_reaches_minus_200_on_pendulum() {
    pendulum("pendulum-ddpg", &[]);
}

/// Recurrent SAC (`pendulumnovel-sac-lstm`: LSTM cores for the policy and both critics, trained
/// on stored sequences with burn-in) swings the pendulum up without seeing its velocity: a
/// deterministic evaluation of -400 or better within 30k env steps. The feed-forward SAC with the
/// same settings evaluated no better than -932 through 30k (seeds 1, 2) and `pendulum-sac`'s
/// between -902 and -1,359 through 20k (docs/algorithms.md). `fleetrl eval` of the checkpoint
/// carries the recurrent state through each episode and gives the run's final evaluation, and
/// `fleetrl export` refuses the recurrent model by its key.
#[test]
fn recurrent_sac_swings_up_pendulum_without_velocities() {
    let (out, checkpoint) = swings_up("pendulumnovel-sac-lstm", "sac-lstm");
    let checkpoint = checkpoint.as_str();
    let exported = out.join("policy.pt").display().to_string();
    let args = [
        "export",
        "--checkpoint",
        checkpoint,
        "--format",
        "torchscript",
    ];
    let export = fleetrl_command(&args)
        .args(["--out", &exported])
        .output()
        .expect("fleetrl runs");
    let stderr = String::from_utf8_lossy(&export.stderr);
    assert!(
        !export.status.success() && stderr.contains("model.lstm_size"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&out).expect("cleanup");
}

/// Recurrent TD3 and DDPG (`pendulumnovel-td3-lstm`: LSTM cores for the deterministic policy
/// and the critics, trained on stored sequences with burn-in) run end to end through the real
/// processes: 1,000 random steps, then updates on sequences, evaluations, and a checkpoint
/// whose `fleetrl eval` carries the recurrent state through each episode and gives the run's
/// final evaluation. Learning is not asserted: the preset reached -400 within 30k env steps in
/// 16 runs of 18 on seeds 0-9; seed 1's third run stayed near -900 to the budget and seed 9's
/// never passed -1,354 (docs/algorithms.md), so this checks the path, not the swing-up.
#[test]
fn recurrent_td3_and_ddpg_train_and_evaluate_as_they_trained() {
    for (algo, sets) in [
        ("td3", &[][..]),
        (
            "ddpg",
            &[
                "algo.name=ddpg",
                "algo.num_critics=1",
                "algo.policy_delay=1",
                "algo.target_noise=0",
            ][..],
        ),
    ] {
        let out = scratch(&format!("{algo}-lstm"));
        let mut all = vec![
            "seed=1",
            "stop.total_env_steps=3000",
            "eval.interval_env_steps=1000",
        ];
        all.extend_from_slice(sets);
        let summary = train("pendulumnovel-td3-lstm", &out, &all);
        assert_eq!(summary["algo"], algo, "{summary:#}");
        assert!(
            summary["total_env_steps"].as_u64() >= Some(3000),
            "{summary:#}"
        );
        assert!(summary["updates"].as_u64() > Some(100), "{summary:#}");
        let final_return = summary["final_eval_return"].as_f64().expect("final return");
        assert!(
            final_return.is_finite() && final_return < 0.0,
            "{summary:#}"
        );
        let checkpoint = summary["checkpoint"].as_str().expect("checkpoint");
        assert_eval_gives(checkpoint, final_return);
        std::fs::remove_dir_all(&out).expect("cleanup");
    }
}

/// Trains the recurrent `preset` with seed 1 until a deterministic evaluation of -400 or
/// better on PendulumNoVel-v1, and checks that `fleetrl eval` of its checkpoint (carrying the
/// recurrent state through each episode) gives the run's final evaluation: the run's output
/// directory (`name` under scratch) and its checkpoint.
fn swings_up(preset: &str, name: &str) -> (PathBuf, String) {
    let out = scratch(name);
    let summary = train(preset, &out, &["seed=1", "stop.target_return=-400"]);
    let final_return = solved(&summary, -400.0);
    let checkpoint = summary["checkpoint"].as_str().expect("checkpoint");
    assert_eval_gives(checkpoint, final_return);
    (out, checkpoint.to_string())
}

/// With the actors stopped and the learner drained, the replay server's limiter guarantees
/// `|samples - samples_per_insert x inserts| <= min_size x samples_per_insert + error_buffer`;
/// the learner's updates account for every sampled batch but the few still buffered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_track_inserts_at_the_samples_per_insert_ratio() -> anyhow::Result<()> {
    let (spi, batch, min_size, error_buffer) = (32.0, 64.0, 1_000.0, 3_200.0);
    let mut sandbox = Sandbox::builder("offpolicy-ratio")
        .preset("cartpole-dqn")
        .set("stop.total_env_steps=1000000")
        .actors(2)
        .start()
        .await?;
    sandbox
        .wait_for("3000 updates", Duration::from_secs(300), |s| {
            s.updates >= 3_000
        })
        .await?;
    sandbox.kill_actor(0).await?;
    sandbox.kill_actor(1).await?;
    // Drained: the update count stops moving once the limiter holds the learner back.
    let mut last = sandbox.status().await?.updates;
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let now = sandbox.status().await?.updates;
        if now == last {
            break;
        }
        last = now;
    }
    let info = sandbox
        .replay()
        .await?
        .info(InfoRequest {})
        .await?
        .into_inner()
        .tables
        .into_iter()
        .find(|t| t.name == "transitions")
        .expect("the transition table");
    let (inserted, sampled) = (info.num_inserted as f64, info.num_sampled as f64);
    assert!(inserted > 6_000.0, "{info:?}");
    let slack = spi * min_size + error_buffer;
    assert!(
        (sampled - spi * inserted).abs() <= slack,
        "sampled {sampled} vs {spi} x {inserted} inserted (slack {slack})"
    );
    let trained = last as f64 * batch;
    assert!(
        trained <= sampled && sampled - trained <= 8.0 * batch,
        "{last} updates of {batch} vs {sampled} sampled"
    );
    let ratio = last as f64 / inserted;
    let expected = spi / batch;
    assert!(
        (ratio - expected).abs() / expected < 0.25,
        "updates per inserted transition {ratio:.3}, configured {expected:.3}"
    );
    Ok(())
}
