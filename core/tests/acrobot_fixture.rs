//! Replays Acrobot-v1 trajectories recorded from gymnasium 1.4.0
//! (`scripts/gen_classic_control_fixtures.py`) through `TimeLimit<Acrobot>` (what
//! `envs::make("Acrobot-v1")` builds) and checks every step, including 500-step chaotic runs.

use crate::common;

use fleetrl_core::envs::{Acrobot, TimeLimit};

fn fixture() -> common::Fixture {
    common::load("acrobot_v1_gymnasium.json", "Acrobot-v1")
}

#[test]
fn matches_gymnasium_trajectories() {
    common::replay_all(
        &fixture(),
        || TimeLimit::new(Acrobot::new(), 500),
        |env, s| env.set_state([s[0], s[1], s[2], s[3]]),
        |env| env.state().to_vec(),
        1e-9,
    );
}

#[test]
fn fixture_covers_termination_and_truncation() {
    let (terminated, truncated) = common::ends(&fixture(), 500);
    assert!(terminated, "no terminated trajectory");
    assert!(truncated, "no trajectory truncated at 500 steps");
}
