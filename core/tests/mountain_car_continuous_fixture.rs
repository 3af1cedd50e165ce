//! Replays MountainCarContinuous-v0 trajectories recorded from gymnasium 1.4.0
//! (`scripts/gen_classic_control_fixtures.py`) through `TimeLimit<MountainCarContinuous>` (what
//! `envs::make("MountainCarContinuous-v0")` builds) and checks every step.

use crate::common;

use fleetrl_core::envs::{MountainCarContinuous, TimeLimit};

fn fixture() -> common::Fixture {
    common::load(
        "mountain_car_continuous_v0_gymnasium.json",
        "MountainCarContinuous-v0",
    )
}

#[test]
fn matches_gymnasium_trajectories() {
    common::replay_all(
        &fixture(),
        || TimeLimit::new(MountainCarContinuous::new(), 999),
        |env, s| env.set_state([s[0], s[1]]),
        |env| env.state().to_vec(),
        1e-12,
    );
}

#[test]
fn fixture_covers_termination_truncation_and_clipped_actions() {
    let fixture = fixture();
    let (terminated, truncated) = common::ends(&fixture, 999);
    assert!(terminated, "no terminated trajectory");
    assert!(truncated, "no trajectory truncated at 999 steps");
    let clipped =
        fixture.trajectories.iter().flat_map(|t| &t.steps).any(
            |s| matches!(&s.action, common::RecordedAction::Continuous(v) if v[0].abs() > 1.0),
        );
    assert!(clipped, "no action outside [-1, 1]");
}
