//! Replays CartPole-v1 trajectories recorded from gymnasium 1.4.0
//! (`scripts/gen_cartpole_fixture.py`) through `TimeLimit<CartPole>` and checks that every
//! observation, reward, `terminated` and `truncated` matches, step by step.

use fleetrl_core::envs::{CartPole, Env, TimeLimit};
use fleetrl_proto::space::Action;
use serde::Deserialize;

/// Observations agree to this (the fixture holds float32 values rounded to 9 digits).
const OBS_TOL: f32 = 1e-5;
/// The f64 end states agree to this; only `sin`/`cos` may differ from numpy's, by an ulp or so.
const STATE_TOL: f64 = 1e-9;

#[derive(Deserialize)]
struct Fixture {
    header: Header,
    trajectories: Vec<Trajectory>,
}

#[derive(Deserialize)]
struct Header {
    env_id: String,
    gymnasium_version: String,
}

#[derive(Deserialize)]
struct Trajectory {
    seed: u64,
    initial_state: [f64; 4],
    final_state: [f64; 4],
    steps: Vec<RecordedStep>,
}

#[derive(Deserialize)]
struct RecordedStep {
    action: i64,
    obs: [f32; 4],
    reward: f32,
    terminated: bool,
    truncated: bool,
}

fn load() -> Fixture {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/cartpole_v1_gymnasium.json"
    );
    let text = std::fs::read_to_string(path).expect("fixture readable");
    serde_json::from_str(&text).expect("fixture parses")
}

fn replay(k: usize, traj: &Trajectory) {
    // What `envs::make("CartPole-v1")` builds, kept concrete to reach `set_state`.
    let mut env = TimeLimit::new(CartPole::new(), 500);
    env.reset(Some(traj.seed));
    env.inner_mut().set_state(traj.initial_state);
    for (t, want) in traj.steps.iter().enumerate() {
        let at = format!("trajectory {k} (seed {}), step {t}", traj.seed);
        let got = env
            .step(&Action::Discrete(want.action))
            .unwrap_or_else(|e| panic!("{at}: {e}"));
        for (i, (g, w)) in got.obs.iter().zip(want.obs).enumerate() {
            assert!(
                (g - w).abs() <= OBS_TOL,
                "{at}: obs[{i}] = {g}, gymnasium {w}"
            );
        }
        assert_eq!(got.reward, want.reward, "{at}: reward");
        assert_eq!(got.terminated, want.terminated, "{at}: terminated");
        assert_eq!(got.truncated, want.truncated, "{at}: truncated");
    }
    let state = env.inner().state();
    for (i, (g, w)) in state.iter().zip(traj.final_state).enumerate() {
        assert!(
            (g - w).abs() <= STATE_TOL,
            "trajectory {k}: final state[{i}] = {g}, gymnasium {w}"
        );
    }
}

#[test]
fn matches_gymnasium_trajectories() {
    let fixture = load();
    assert_eq!(fixture.header.env_id, "CartPole-v1");
    assert_eq!(fixture.header.gymnasium_version, "1.4.0");
    assert!(!fixture.trajectories.is_empty());
    for (k, traj) in fixture.trajectories.iter().enumerate() {
        replay(k, traj);
    }
}

#[test]
fn fixture_covers_termination_and_truncation() {
    let fixture = load();
    let last_steps = || fixture.trajectories.iter().filter_map(|t| t.steps.last());
    assert!(
        last_steps().any(|s| s.terminated),
        "no terminated trajectory"
    );
    assert!(last_steps().any(|s| s.truncated), "no truncated trajectory");
    let truncated_len = fixture
        .trajectories
        .iter()
        .find(|t| t.steps.last().is_some_and(|s| s.truncated));
    assert_eq!(truncated_len.map(|t| t.steps.len()), Some(500));
}
