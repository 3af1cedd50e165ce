//! Replays MinAtar trajectories recorded from the `minatar` package 1.0.15 through gymnasium
//! (`scripts/gen_minatar_fixtures.py`, sticky actions off) through the native games, checking
//! every observation, reward and termination, and the final game state.

use fleetrl_core::envs::{Breakout, Env, Game, MinAtar, SpaceInvaders};
use fleetrl_proto::space::Action;
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture {
    header: Header,
    trajectories: Vec<Trajectory>,
}

#[derive(Deserialize)]
struct Header {
    env_id: String,
    minatar_version: String,
    sticky_action_prob: f64,
}

#[derive(Deserialize)]
struct Trajectory {
    seed: u64,
    initial_state: Vec<f64>,
    final_state: Vec<f64>,
    steps: Vec<RecordedStep>,
}

#[derive(Deserialize)]
struct RecordedStep {
    action: i64,
    obs_hex: String,
    reward: f64,
    terminated: bool,
    truncated: bool,
}

fn load(file: &str, env_id: &str) -> Fixture {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("fixture readable");
    let fixture: Fixture = serde_json::from_str(&text).expect("fixture parses");
    assert_eq!(fixture.header.env_id, env_id);
    assert_eq!(fixture.header.minatar_version, "1.0.15");
    assert_eq!(fixture.header.sticky_action_prob, 0.0);
    assert!(!fixture.trajectories.is_empty());
    fixture
}

/// The observation's bits, unpacked from hex (first bit of each digit highest).
fn bits(hex: &str, len: usize) -> Vec<f32> {
    let mut out: Vec<f32> = hex
        .chars()
        .flat_map(|c| {
            let n = c.to_digit(16).expect("hex digit");
            (0..4).rev().map(move |k| ((n >> k) & 1) as f32)
        })
        .collect();
    out.truncate(len);
    out
}

fn replay<G: Game>(
    fixture: &Fixture,
    set_start: impl Fn(&mut MinAtar<G>, &[f64]),
    state: impl Fn(&G) -> Vec<f64>,
) -> usize {
    let mut steps = 0;
    for (k, traj) in fixture.trajectories.iter().enumerate() {
        let mut env = MinAtar::<G>::with_sticky(0.0);
        env.reset(Some(traj.seed));
        set_start(&mut env, &traj.initial_state);
        for (t, want) in traj.steps.iter().enumerate() {
            let at = format!("trajectory {k} (seed {}), step {t}", traj.seed);
            let got = env
                .step(&Action::Discrete(want.action))
                .unwrap_or_else(|e| panic!("{at}: {e}"));
            let want_obs = bits(&want.obs_hex, got.obs.len());
            if got.obs != want_obs {
                let cell = got.obs.iter().zip(&want_obs).position(|(g, w)| g != w);
                panic!("{at}: observation differs first at index {cell:?} (channel-major)");
            }
            assert_eq!(f64::from(got.reward), want.reward, "{at}: reward");
            assert_eq!(got.terminated, want.terminated, "{at}: terminated");
            assert_eq!(got.truncated, want.truncated, "{at}: truncated");
            steps += 1;
        }
        assert_eq!(
            state(env.game()),
            traj.final_state,
            "trajectory {k}: final state"
        );
    }
    steps
}

#[test]
fn breakout_matches_minatar() {
    let fixture = load("minatar_breakout_v1.json", "MinAtar/Breakout-v1");
    let steps = replay::<Breakout>(
        &fixture,
        |env, start| *env.game_mut() = Breakout::start_at(start[0] == 1.0),
        |game| game.state().to_vec(),
    );
    assert!(steps > 1000, "{steps} steps replayed");
    let ended = fixture
        .trajectories
        .iter()
        .filter(|t| t.steps.last().is_some_and(|s| s.terminated));
    assert!(ended.count() >= 2, "the fixture holds lost balls");
}

#[test]
fn space_invaders_matches_minatar() {
    let fixture = load("minatar_space_invaders_v1.json", "MinAtar/SpaceInvaders-v1");
    let steps = replay::<SpaceInvaders>(&fixture, |_, _| {}, |game| game.state().to_vec());
    assert!(steps > 300, "{steps} steps replayed");
}
