//! Replays MinAtar trajectories recorded from the `minatar` package 1.0.15 through gymnasium
//! (`scripts/gen_minatar_fixtures.py`, sticky actions off) through the native games, checking
//! every observation, reward and termination, and the final game state. Freeway, Asterix and
//! Seaquest draw random numbers as they run: their fixtures hold the package's draws, fed to
//! the native games through `Draws`, so a game that draws differently (in kind, range or count)
//! fails too.

use fleetrl_core::envs::{Asterix, Breakout, Draws, Freeway, Game, Seaquest, SpaceInvaders};
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
    /// Every number the game drew from numpy, the start included (Freeway and Asterix).
    #[serde(default)]
    draws: Vec<f64>,
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

/// The package's draws, handed to a native game in the order it recorded them; a draw of the
/// wrong kind, or one too many, fails the test.
struct Recorded<'a> {
    draws: &'a [f64],
    next: usize,
}

impl Recorded<'_> {
    fn take(&mut self, what: &str) -> f64 {
        let Some(&value) = self.draws.get(self.next) else {
            panic!(
                "the game draws {what} number {} but the package drew {}",
                self.next + 1,
                self.draws.len()
            );
        };
        self.next += 1;
        value
    }
}

impl Draws for Recorded<'_> {
    fn int(&mut self, low: i64, high: i64) -> i64 {
        let value = self.take("an integer as its");
        assert!(
            value.fract() == 0.0 && (low..high).contains(&(value as i64)),
            "draw {} is {value}, not an integer in {low}..{high}",
            self.next
        );
        value as i64
    }

    fn unit(&mut self) -> f64 {
        let value = self.take("a float as its");
        assert!(
            (0.0..1.0).contains(&value),
            "draw {} is {value}, not in [0, 1)",
            self.next
        );
        value
    }
}

/// Plays every trajectory through the native game (its start from `start`, which may read the
/// recorded start state or draw from the recorded numbers) and compares each step and the final
/// state; returns the steps replayed.
fn replay<G: Game>(
    fixture: &Fixture,
    start: impl Fn(&Trajectory, &mut Recorded) -> G,
    state: impl Fn(&G) -> Vec<f64>,
) -> usize {
    let mut steps = 0;
    for (k, traj) in fixture.trajectories.iter().enumerate() {
        let mut draws = Recorded {
            draws: &traj.draws,
            next: 0,
        };
        let mut game = start(traj, &mut draws);
        let mut obs = vec![0.0; G::CHANNELS * 10 * 10];
        for (t, want) in traj.steps.iter().enumerate() {
            let at = format!("trajectory {k} (seed {}), step {t}", traj.seed);
            let input = G::ACTIONS[usize::try_from(want.action).expect("action index")];
            let (reward, terminated) = game.act(input, &mut draws);
            obs.fill(0.0);
            game.render(&mut obs);
            let want_obs = bits(&want.obs_hex, obs.len());
            if obs != want_obs {
                let cell = obs.iter().zip(&want_obs).position(|(g, w)| g != w);
                panic!("{at}: observation differs first at index {cell:?} (channel-major)");
            }
            assert_eq!(f64::from(reward), want.reward, "{at}: reward");
            assert_eq!(terminated, want.terminated, "{at}: terminated");
            assert!(!want.truncated, "{at}: the package does not truncate");
            steps += 1;
        }
        assert_eq!(
            draws.next,
            traj.draws.len(),
            "trajectory {k}: draws left unused"
        );
        assert_eq!(
            state(&game),
            traj.final_state,
            "trajectory {k}: final state"
        );
    }
    steps
}

#[test]
fn breakout_matches_minatar() {
    let fixture = load("minatar_breakout_v1.json", "MinAtar/Breakout-v1");
    let steps = replay(
        &fixture,
        |traj, _| Breakout::start_at(traj.initial_state[0] == 1.0),
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
    let steps = replay(
        &fixture,
        |_, _| SpaceInvaders::initial(),
        |game| game.state().to_vec(),
    );
    assert!(steps > 300, "{steps} steps replayed");
}

/// Freeway draws new car speeds at the start and after every crossing.
#[test]
fn freeway_matches_minatar() {
    let fixture = load("minatar_freeway_v1.json", "MinAtar/Freeway-v1");
    let steps = replay(&fixture, |_, draws| Freeway::start(draws), Freeway::state);
    assert!(steps > 3000, "{steps} steps replayed");
    let crossings: f64 = fixture
        .trajectories
        .iter()
        .flat_map(|t| &t.steps)
        .map(|s| s.reward)
        .sum();
    assert!(
        crossings >= 10.0,
        "the fixture holds crossings (and speed draws): {crossings}"
    );
}

/// Asterix draws each new entity's side, kind and row.
#[test]
fn asterix_matches_minatar() {
    let fixture = load("minatar_asterix_v1.json", "MinAtar/Asterix-v1");
    let steps = replay(
        &fixture,
        |_, draws| Asterix::start(draws),
        |game| game.state().to_vec(),
    );
    assert!(steps > 400, "{steps} steps replayed");
    let ramped = fixture
        .trajectories
        .iter()
        .filter(|t| t.final_state[5] > 0.0);
    assert!(ramped.count() >= 1, "the fixture holds a ramped game");
}

/// Seaquest draws each new enemy's side, kind and row and each diver's side and row.
#[test]
fn seaquest_matches_minatar() {
    let fixture = load("minatar_seaquest_v1.json", "MinAtar/Seaquest-v1");
    let steps = replay(&fixture, |_, draws| Seaquest::start(draws), Seaquest::state);
    assert!(steps > 800, "{steps} steps replayed");
    let ended = fixture
        .trajectories
        .iter()
        .filter(|t| t.steps.last().is_some_and(|s| s.terminated));
    assert!(ended.count() >= 4, "the fixture holds lost games");
}
