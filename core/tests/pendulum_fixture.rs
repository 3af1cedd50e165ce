//! Replays Pendulum-v1 trajectories recorded from gymnasium 1.4.0
//! (`scripts/gen_classic_control_fixtures.py`) through `TimeLimit<Pendulum>` (what
//! `envs::make("Pendulum-v1")` builds) and checks every step.

use crate::common;

use fleetrl_core::envs::{Pendulum, TimeLimit};

fn fixture() -> common::Fixture {
    common::load("pendulum_v1_gymnasium.json", "Pendulum-v1")
}

#[test]
fn matches_gymnasium_trajectories() {
    common::replay_all(
        &fixture(),
        || TimeLimit::new(Pendulum::new(), 200),
        |env, s| env.set_state([s[0], s[1]]),
        |env| env.state().to_vec(),
        1e-9,
    );
}

#[test]
fn fixture_covers_truncation_and_clipped_torques() {
    let fixture = fixture();
    let (_, truncated) = common::ends(&fixture, 200);
    assert!(truncated, "no trajectory truncated at 200 steps");
    let clipped =
        fixture.trajectories.iter().flat_map(|t| &t.steps).any(
            |s| matches!(&s.action, common::RecordedAction::Continuous(v) if v[0].abs() > 2.0),
        );
    assert!(clipped, "no action outside [-2, 2]");
}
