//! Recurrent DQN (R2D2) end to end through the real binaries: `fleetrl train` on
//! CartPoleNoVel-v1 (CartPole without the velocities, where a feed-forward Q network stays
//! low) reaches a deterministic evaluation return of 150 within 300k env steps, far above what
//! a random policy (about 9 greedy, 22 uniform) or a feed-forward DQN gets (README). Actor
//! timing makes every run different: seed 0 reached 150 at 48k, 58k, 86k and 138k env steps in
//! four runs on 2026-11-26 (seed 2, the seed before, at 114k, and one CI run of it peaked at
//! 143 and failed a 150k budget); the budget is the preset's 300k, and the run stops at 150;
//! `fleetrl eval` of its checkpoint, which carries the LSTM state through each episode, gives
//! the same return as the run's final evaluation, and `fleetrl record` plays it. Fixed seed;
//! assertions on returns, never on time.

use fleetrl_tests::cli::{assert_eval_gives, fleetrl_ok};

#[test]
fn r2d2_learns_cartpole_without_velocities() {
    let out = fleetrl_tests::scratch("fleetrl-r2d2");
    let out_str = out.display().to_string();
    fleetrl_ok(&[
        "train",
        "--config",
        "cartpolenovel-r2d2",
        "--set",
        "seed=0",
        "--set",
        "stop.target_return=150",
        "--set",
        "stop.total_env_steps=300000",
        "--out",
        &out_str,
    ]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).expect("summary"))
            .expect("summary is JSON");
    let final_return = summary["final_eval_return"].as_f64().expect("final return");
    assert_eq!(summary["solved"], true, "not solved: {summary:#}");
    assert!(final_return >= 150.0, "{summary:#}");

    let checkpoint = summary["checkpoint"].as_str().expect("checkpoint");
    assert_eval_gives(checkpoint, final_return);
    let demos = out.join("demos").display().to_string();
    fleetrl_ok(&[
        "record",
        "--checkpoint",
        checkpoint,
        "--episodes",
        "2",
        "--out",
        &demos,
    ]);
    assert!(std::fs::read_dir(&demos).expect("demo dir").count() >= 2);
    std::fs::remove_dir_all(&out).expect("cleanup");
}
