//! Shared replay of gymnasium trajectory fixtures (`scripts/gen_classic_control_fixtures.py`).
//!
//! Each fixture test sets the env's state to a recorded gymnasium start state, replays the recorded
//! actions, and checks every observation, reward, `terminated` and `truncated`, and the end state.

#![allow(dead_code)] // each test binary uses a different part

use fleetrl_core::envs::{Env, TimeLimit};
use fleetrl_core::items::rollout::RolloutBatch;
use fleetrl_proto::space::Action;
use fleetrl_proto::{Tensor, TensorMap};
use serde::Deserialize;

/// Observations and rewards agree to this (the fixture holds float32 observations rounded to 9
/// digits; rewards are gymnasium's float64 values, ours f32).
pub(crate) const TOL: f32 = 1e-5;

#[derive(Deserialize)]
pub(crate) struct Fixture {
    pub(crate) header: Header,
    pub(crate) trajectories: Vec<Trajectory>,
}

#[derive(Deserialize)]
pub(crate) struct Header {
    pub(crate) env_id: String,
    pub(crate) gymnasium_version: String,
}

#[derive(Deserialize)]
pub(crate) struct Trajectory {
    pub(crate) seed: u64,
    pub(crate) initial_state: Vec<f64>,
    pub(crate) final_state: Vec<f64>,
    pub(crate) steps: Vec<RecordedStep>,
}

/// A recorded action: an index for discrete envs, a float32 vector for continuous ones.
#[derive(Deserialize, Clone)]
#[serde(untagged)]
pub(crate) enum RecordedAction {
    Discrete(i64),
    Continuous(Vec<f32>),
}

#[derive(Deserialize)]
pub(crate) struct RecordedStep {
    pub(crate) action: RecordedAction,
    pub(crate) obs: Vec<f32>,
    pub(crate) reward: f64,
    pub(crate) terminated: bool,
    pub(crate) truncated: bool,
}

/// Loads `core/tests/fixtures/<file>` and checks its header.
pub(crate) fn load(file: &str, env_id: &str) -> Fixture {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture readable");
    let fixture: Fixture = serde_json::from_str(&text).expect("fixture parses");
    assert_eq!(fixture.header.env_id, env_id);
    assert_eq!(fixture.header.gymnasium_version, "1.4.0");
    assert!(!fixture.trajectories.is_empty());
    fixture
}

/// Replays every trajectory of `fixture` through `make()`'s env, with the start state set by
/// `set_state` and the end state read by `state`, compared to `state_tol`.
pub(crate) fn replay_all<E: Env>(
    fixture: &Fixture,
    make: impl Fn() -> TimeLimit<E>,
    set_state: impl Fn(&mut E, &[f64]),
    state: impl Fn(&E) -> Vec<f64>,
    state_tol: f64,
) {
    for (k, traj) in fixture.trajectories.iter().enumerate() {
        let mut env = make();
        env.reset(Some(traj.seed));
        set_state(env.inner_mut(), &traj.initial_state);
        for (t, want) in traj.steps.iter().enumerate() {
            let at = format!("trajectory {k} (seed {}), step {t}", traj.seed);
            let action = match &want.action {
                RecordedAction::Discrete(a) => Action::Discrete(*a),
                RecordedAction::Continuous(v) => Action::Continuous(v.clone()),
            };
            let got = env.step(&action).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(got.obs.len(), want.obs.len(), "{at}: obs length");
            for (i, (g, w)) in got.obs.iter().zip(&want.obs).enumerate() {
                assert!((g - w).abs() <= TOL, "{at}: obs[{i}] = {g}, gymnasium {w}");
            }
            assert!(
                (f64::from(got.reward) - want.reward).abs() <= f64::from(TOL),
                "{at}: reward {}, gymnasium {}",
                got.reward,
                want.reward
            );
            assert_eq!(got.terminated, want.terminated, "{at}: terminated");
            assert_eq!(got.truncated, want.truncated, "{at}: truncated");
        }
        let end = state(env.inner());
        assert_eq!(end.len(), traj.final_state.len());
        for (i, (g, w)) in end.iter().zip(&traj.final_state).enumerate() {
            assert!(
                (g - w).abs() <= state_tol,
                "trajectory {k}: final state[{i}] = {g}, gymnasium {w}"
            );
        }
    }
}

/// Whether some trajectory ends terminated and some truncated at `limit` steps.
pub(crate) fn ends(fixture: &Fixture, limit: usize) -> (bool, bool) {
    let terminated = fixture
        .trajectories
        .iter()
        .any(|t| t.steps.last().is_some_and(|s| s.terminated));
    let truncated = fixture
        .trajectories
        .iter()
        .any(|t| t.steps.last().is_some_and(|s| s.truncated) && t.steps.len() == limit);
    (terminated, truncated)
}

/// A single rollout as the replay server would hand it over: stacked, K = 1.
pub(crate) fn as_batch(item: &TensorMap) -> RolloutBatch {
    let stacked = TensorMap::from_pairs(
        item.tensors
            .iter()
            .map(|(k, v)| (k.clone(), Tensor::stack(&[v]).expect("one tensor stacks"))),
    );
    RolloutBatch::from_stacked(&stacked).expect("a rollout is a rollout batch")
}
