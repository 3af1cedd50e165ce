//! Every on-policy algorithm learns CartPole-v1 through the real binaries: `fleetrl train
//! --config cartpole-<algo>` starts a replay server, a learner and two actors on loopback and
//! must stop with a 20-episode deterministic evaluation of at least 475. A policy-lag scenario
//! runs IMPALA with actors that act on weights several versions old.
//!
//! The runs take a few seconds each on a 2-core machine (see the closing table in the README);
//! the budgets are several times the steps any seed we tried needed, and are env steps, not
//! seconds: the tests run beside the other scenarios, two at a time on 2 cores (so actors lag
//! more than in a run alone), and a slower run only takes longer.

use std::path::PathBuf;
use std::process::Command;

fn train(name: &str, preset: &str, overrides: &[&str]) -> anyhow::Result<serde_json::Value> {
    let out = fleetrl_tests::scratch(&format!("fleetrl-{name}"));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin = fleetrl_runtime::launch::bin_dir()?.join("fleetrl");
    let mut cmd = Command::new(bin);
    cmd.current_dir(&root).args(["train", "--config", preset]);
    for o in overrides {
        cmd.args(["--set", o]);
    }
    let run = cmd.arg("--out").arg(&out).output()?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "fleetrl train {preset} failed: {stderr}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json"))?)?;
    eprintln!(
        "{preset}: {} env steps, {:.1} s, eval {}, mean policy lag {}",
        summary["total_env_steps"],
        summary["wall_seconds"].as_f64().unwrap_or(f64::NAN),
        summary["final_eval_return"],
        summary["mean_policy_lag"]
    );
    std::fs::remove_dir_all(&out)?;
    Ok(summary)
}

fn assert_solved(summary: &serde_json::Value, algo: &str) {
    assert_eq!(summary["algo"], algo, "{summary:#}");
    assert_eq!(summary["solved"], true, "CartPole not solved: {summary:#}");
    let final_return = summary["final_eval_return"]
        .as_f64()
        .expect("final_eval_return");
    assert!(final_return >= 475.0, "{summary:#}");
}

/// Seeds 1-3 solved within 80k steps; the budget is 300k.
#[test]
fn a2c_solves_cartpole() -> anyhow::Result<()> {
    let summary = train(
        "a2c",
        "cartpole-a2c",
        &["seed=1", "stop.total_env_steps=300000"],
    )?;
    assert_solved(&summary, "a2c");
    Ok(())
}

/// A2C with RMSprop (rlpyt's A2C optimiser, its 7e-4 rate) instead of Adam. Actor timing makes
/// every run different: 52 runs of seed 1 (42 beside a busy loop) solved at a median of 42k steps,
/// but 4 needed 146k-227k and one CI run stalled near 430 until its 300k budget ran out; the
/// budget is 600k (about 15 s).
#[test]
fn a2c_with_rmsprop_solves_cartpole() -> anyhow::Result<()> {
    let summary = train(
        "a2c-rmsprop",
        "cartpole-a2c",
        &[
            "seed=1",
            "stop.total_env_steps=600000",
            "algo.optimizer=\"rmsprop\"",
            "algo.learning_rate=7e-4",
        ],
    )?;
    assert_solved(&summary, "a2c");
    Ok(())
}

/// Seeds 1-3 solved within 55k steps; the budget is 300k.
#[test]
fn vpg_solves_cartpole() -> anyhow::Result<()> {
    let summary = train(
        "vpg",
        "cartpole-vpg",
        &["seed=1", "stop.total_env_steps=300000"],
    )?;
    assert_solved(&summary, "vpg");
    Ok(())
}

/// Seeds 1-3 solved within 45k steps; the budget is 300k.
#[test]
fn trpo_solves_cartpole() -> anyhow::Result<()> {
    let summary = train(
        "trpo",
        "cartpole-trpo",
        &["seed=1", "stop.total_env_steps=300000"],
    )?;
    assert_solved(&summary, "trpo");
    Ok(())
}

/// Asynchronous and lagged, IMPALA is the noisiest: seed 1 solved within 36k-245k steps over
/// seven runs (1-8 s), and one run under load took more than 300k; the budget is 1.5M (a slow
/// run must not end with its linear learning rate spent just short of the target).
#[test]
fn impala_solves_cartpole() -> anyhow::Result<()> {
    let summary = train(
        "impala",
        "cartpole-impala",
        &["seed=1", "stop.total_env_steps=1500000"],
    )?;
    assert_solved(&summary, "impala");
    Ok(())
}

/// IMPALA with RMSprop (`algo.optimizer = "rmsprop"`, the IMPALA paper's rule): seed 1
/// solved at 54k env steps (1.9 s) here.
#[test]
fn impala_with_rmsprop_solves_cartpole() -> anyhow::Result<()> {
    let summary = train(
        "impala-rmsprop",
        "cartpole-impala",
        &[
            "seed=1",
            "algo.optimizer=\"rmsprop\"",
            "stop.total_env_steps=500000",
        ],
    )?;
    assert_solved(&summary, "impala");
    Ok(())
}

/// A Gaussian policy (learned state-independent log-std) learns the native continuous
/// PointMass-v0 task with PPO: from about -17 at the start to -2.5 or better (the optimum is
/// about -1.4; the untrained policy scores about -17), with observations normalised by
/// running statistics that travel to the actors with the weights. Seeds 1-3 got there within
/// 18k steps;
/// the budget is 150k.
#[test]
fn gaussian_ppo_learns_pointmass() -> anyhow::Result<()> {
    let summary = train(
        "pointmass",
        "pointmass-ppo",
        &["seed=1", "stop.total_env_steps=150000"],
    )?;
    assert_eq!(summary["env"], "PointMass-v0");
    assert_eq!(summary["solved"], true, "PointMass not solved: {summary:#}");
    let final_return = summary["final_eval_return"]
        .as_f64()
        .expect("final_eval_return");
    assert!(final_return >= -2.5, "{summary:#}");
    Ok(())
}

/// Actors act with weights at least 3 versions older than the newest they received, so every
/// rollout lags the learner by 4 or more versions when trained on; V-trace still learns, and
/// the run reports the lag. Seed 1 solved within 45k-133k steps at a mean lag of 8.5-9.4 in
/// five runs on 2026-11-24, but one clean-clone CI run sat near 150 for a long while and ended
/// at 469.7 at a 600k budget, its linear learning rate nearly spent; the budget is 1.5M (the
/// schedule spans it, so the rate stays up longer).
#[test]
fn vtrace_learns_with_actors_lagging_several_versions() -> anyhow::Result<()> {
    let summary = train(
        "impala-lag",
        "cartpole-impala",
        &[
            "seed=1",
            "stop.total_env_steps=1500000",
            "actors.lag_versions=3",
            "actors.max_policy_lag=10",
        ],
    )?;
    assert_solved(&summary, "impala");
    let lag = summary["mean_policy_lag"]
        .as_f64()
        .expect("mean_policy_lag");
    assert!(
        lag >= 4.0,
        "actors were meant to lag by 4+ versions: {summary:#}"
    );
    Ok(())
}

/// PPO and A2C with V-trace targets in place of GAE (`[algo.vtrace]`) solve CartPole with
/// actors acting on weights versions old. Measured: PPO seeds 1-2 at 5.4k and 10.8k steps
/// (lag 2.9); A2C seeds 1-4, three runs each four at a time, at 13k-114k (lag 2.8); the
/// budgets are 300k and 800k. A2C at two versions of lag (4.4-4.6 measured, up to 4 allowed)
/// is not asserted: without an entropy bonus one CI run of seed 2 reached 427, then its
/// policy went deterministic (entropy 1e-8, eval 9.1) and never came back, and with
/// `entropy_loss_coeff = 0.01` one run of eight did the same.
#[test]
fn ppo_and_a2c_learn_with_vtrace_targets_under_lag() -> anyhow::Result<()> {
    let ppo = train(
        "ppo-vtrace",
        "cartpole-ppo",
        &[
            "seed=1",
            "algo.vtrace.c_bar=1.0",
            "actors.lag_versions=1",
            "actors.max_policy_lag=2",
            "stop.total_env_steps=300000",
        ],
    )?;
    assert_solved(&ppo, "ppo");
    let a2c = train(
        "a2c-vtrace",
        "cartpole-a2c",
        &[
            "seed=2",
            "algo.vtrace.rho_bar=1.0",
            "actors.lag_versions=1",
            "actors.max_policy_lag=2",
            "stop.total_env_steps=800000",
        ],
    )?;
    assert_solved(&a2c, "a2c");
    for summary in [&ppo, &a2c] {
        let lag = summary["mean_policy_lag"]
            .as_f64()
            .expect("mean_policy_lag");
        assert!(lag >= 2.0, "actors were meant to lag: {summary:#}");
    }
    Ok(())
}

/// Intrinsic rewards (RND, `[algo.intrinsic]`) find the goal of SparseMountainCar-v0 (reward 1
/// at the goal only, no demos) where plain PPO does not: the same preset without its
/// `[algo.intrinsic]` section. Measured: with RND seeds 0-6 solved at 18k-217k steps (seeds 0
/// and 1 at 18k and 20k); without, seed 0 had not solved at 300k (twice). The budget is 150k.
#[test]
fn intrinsic_rewards_solve_sparse_mountain_car_where_plain_ppo_does_not() -> anyhow::Result<()> {
    for seed in ["seed=0", "seed=1"] {
        let summary = train(
            "ppo-rnd",
            "sparse-mountaincar-ppo-rnd",
            &[seed, "stop.total_env_steps=150000"],
        )?;
        assert_eq!(
            summary["solved"], true,
            "RND did not reach the goal: {summary:#}"
        );
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("configs/sparse-mountaincar-ppo-rnd.toml"))?;
    let mut preset: toml::Table = text.parse()?;
    let algo = preset["algo"].as_table_mut().expect("[algo]");
    assert!(
        algo.remove("intrinsic").is_some(),
        "the preset has [algo.intrinsic]"
    );
    let plain = fleetrl_tests::scratch("sparse-mc-plain").with_extension("toml");
    std::fs::write(&plain, toml::to_string(&preset)?)?;
    let summary = train(
        "ppo-plain",
        plain.to_str().expect("utf-8 path"),
        &["seed=0", "stop.total_env_steps=150000"],
    )?;
    std::fs::remove_file(&plain)?;
    assert_eq!(
        summary["solved"], false,
        "plain PPO was meant to miss the goal: {summary:#}"
    );
    Ok(())
}

/// A GRU core (`model.recurrent_cell = "gru"`, the `cartpolenovel-ppo-gru` preset) under
/// rlpyt's `mid_batch_reset = false`, as its recurrent agents run: an env whose episode ends
/// waits for the next rollout, and PPO masks the steps it sat out. On CartPoleNoVel-v1, where a
/// feed-forward PPO stays at 40-46 (below), seeds 0-4 solved at 25.9k-56.6k env steps (27-65 s,
/// two runs at a time, 2026-12-07). With the preset's former 20 epochs a batch this scenario
/// was the suite's longest (198 s of a 1,028 s run; 83 s alone for seed 0's 46.1k). Its own
/// scenario with mid-batch resets went earlier for the same reason: PPO's LSTM keeps the
/// pendulum and MinAtar scenarios, the LSTM IMPALA one and R2D2 this env, and `bench/seeds.sh`
/// runs the preset on five seeds. The budget is 300k.
#[test]
fn gru_ppo_solves_cartpole_without_velocities_without_mid_batch_resets() -> anyhow::Result<()> {
    let summary = train(
        "novel-gru-waiting",
        "cartpolenovel-ppo-gru",
        &[
            "seed=0",
            "stop.total_env_steps=300000",
            "actors.mid_batch_reset=false",
        ],
    )?;
    assert_solved(&summary, "ppo");
    Ok(())
}

/// IMPALA with an LSTM (`model.lstm_size`): the learner unrolls over each rollout from its
/// stored state and re-values the bootstrap observation from the state after the last step.
/// On CartPoleNoVel-v1 a feed-forward IMPALA stays at 41-48 (seed 1, 600k steps); with the
/// LSTM seed 1 reached 444.6 at 151k steps and ended at 362.9 after 800k (80 s here), seed 0
/// passed 150 by 526k in two runs. The run must get well past the feed-forward ceiling within
/// 1M steps; it stops at the first evaluation of 150 (the full 600k took 38 s in CI). The
/// budget was 600k until a run beside a busy benchmark (mean policy lag 4.5 versions) ended
/// there with a best evaluation of 129.7: it had climbed from 40-60 mid-run to 75-130 in its
/// last evaluations.
#[test]
fn lstm_impala_learns_cartpole_without_velocities() -> anyhow::Result<()> {
    let summary = train(
        "impala-lstm",
        "cartpole-impala",
        &[
            "seed=1",
            "env.id=CartPoleNoVel-v1",
            "model.lstm_size=64",
            "stop.total_env_steps=1000000",
            "stop.target_return=150",
        ],
    )?;
    let best = summary["evaluations"]
        .as_array()
        .expect("evaluations")
        .iter()
        .filter_map(|e| e["mean_return"].as_f64())
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(best >= 150.0, "best evaluation {best}: {summary:#}");
    Ok(())
}

/// rlpyt's recurrent Gaussian agent (`pendulumnovel-ppo-lstm`: layers before the LSTM, the
/// previous action and reward as inputs) swings up a pendulum whose angular velocity it
/// cannot see. A feed-forward PPO stays at -1,204 to -1,302 over 200k steps on the same task
/// (a random policy's score); this preset reached -306, -373 and -395 at 63k-74k steps with
/// seeds 0-2 (seed 1 passed -500 at 53k, about 30 s). The run stops once an evaluation
/// reaches -500; the budget is 200k.
#[test]
fn recurrent_gaussian_ppo_swings_up_a_pendulum_without_velocities() -> anyhow::Result<()> {
    let summary = train(
        "pendulum-novel",
        "pendulumnovel-ppo-lstm",
        &[
            "seed=1",
            "stop.target_return=-600",
            "stop.total_env_steps=300000",
        ],
    )?;
    assert_eq!(summary["env"], "PendulumNoVel-v1");
    assert_eq!(summary["solved"], true, "{summary:#}");
    Ok(())
}

/// The same task defeats a feed-forward policy: with positions only it cannot tell which way
/// the pole moves, and PPO stalls far below the target (about 40-46 over 100k steps).
#[test]
fn feed_forward_ppo_cannot_solve_cartpole_without_velocities() -> anyhow::Result<()> {
    let summary = train(
        "novel-ff",
        "cartpolenovel-ppo-lstm",
        &[
            "seed=1",
            "stop.total_env_steps=100000",
            "model.lstm_size=0",
            "algo.minibatches=1",
        ],
    )?;
    assert_eq!(summary["solved"], false, "{summary:#}");
    let final_return = summary["final_eval_return"]
        .as_f64()
        .expect("final_eval_return");
    assert!(final_return < 200.0, "{summary:#}");
    Ok(())
}

/// `actors.alternating`: each actor steps its two env groups in turn on a second thread while
/// acting for the other; the rollouts are the plain loop's, so PPO solves CartPole as usual.
#[test]
fn ppo_with_alternating_actors_solves_cartpole() -> anyhow::Result<()> {
    let summary = train(
        "ppo-alternating",
        "cartpole-ppo",
        &["actors.alternating=true", "stop.total_env_steps=200000"],
    )?;
    assert_solved(&summary, "ppo");
    Ok(())
}

/// Four actors on a preset tuned for two: each actor sends its share of a batch per version
/// (`ceil(batch_rollouts / actors)`, here 1) and the learner trains on every actor's share, so a
/// batch holds 4 rollouts and almost nothing goes stale. Before, the learner trained on the
/// first 2 and dropped the other 2 (at a 200k-step budget: 1,565 dropped, 1,565 trained). Seeds
/// 0-2 solved within 44k-50k env steps, 3.8-4.0 rollouts per update, 6-8 dropped.
#[test]
fn ppo_with_four_actors_trains_on_every_actors_share() -> anyhow::Result<()> {
    let summary = train(
        "ppo-four-actors",
        "cartpole-ppo",
        &["seed=1", "actors.count=4", "stop.total_env_steps=300000"],
    )?;
    assert_solved(&summary, "ppo");
    let count = |key: &str| summary[key].as_u64().unwrap_or_else(|| panic!("{key}"));
    let (trained, dropped, updates) = (
        count("rollouts_trained"),
        count("rollouts_dropped"),
        count("updates"),
    );
    assert!(
        trained as f64 / updates.max(1) as f64 >= 2.5,
        "batches should hold the four actors' shares, not batch_rollouts = 2: {summary:#}"
    );
    assert!(
        dropped * 10 <= trained,
        "more than a tenth of the rollouts went stale: {summary:#}"
    );
    Ok(())
}
