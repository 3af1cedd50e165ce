//! Replays MountainCar-v0 trajectories recorded from gymnasium 1.4.0
//! (`scripts/gen_classic_control_fixtures.py`) through `TimeLimit<MountainCar>` (what
//! `envs::make("MountainCar-v0")` builds) and checks every step.

use crate::common;

use fleetrl_core::envs::{MountainCar, TimeLimit};

fn fixture() -> common::Fixture {
    common::load("mountain_car_v0_gymnasium.json", "MountainCar-v0")
}

#[test]
fn matches_gymnasium_trajectories() {
    common::replay_all(
        &fixture(),
        || TimeLimit::new(MountainCar::new(), 200),
        |env, s| env.set_state([s[0], s[1]]),
        |env| env.state().to_vec(),
        1e-12,
    );
}

#[test]
fn fixture_covers_termination_truncation_and_the_wall() {
    let fixture = fixture();
    let (terminated, truncated) = common::ends(&fixture, 200);
    assert!(terminated, "no terminated trajectory");
    assert!(truncated, "no trajectory truncated at 200 steps");
    let at_wall = fixture
        .trajectories
        .iter()
        .flat_map(|t| &t.steps)
        .any(|s| s.obs[0] == -1.2f32 && s.obs[1] == 0.0);
    assert!(at_wall, "no step stopped at the left wall");
}
