//! CartPole-v1, a port of gymnasium 1.4's `CartPoleEnv`
//! (`gymnasium/envs/classic_control/cartpole.py`).
//!
//! Matches gymnasium step for step: f64 internal state, explicit Euler with the same operation
//! order, the same termination box, reward 1.0 on every step including the terminating one, and a
//! float32 observation. Only the reset RNG differs (gymnasium draws from numpy's PCG64, we from
//! [`SmallRng`]), so start states are comparable only through [`CartPole::set_state`].
//! The 500-step limit of `CartPole-v1` comes from [`super::TimeLimit`], as in `gym.make`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

const GRAVITY: f64 = 9.8;
const MASSCART: f64 = 1.0;
const MASSPOLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASSPOLE + MASSCART;
/// Half the pole's length, as gymnasium's `length`.
const LENGTH: f64 = 0.5;
const POLEMASS_LENGTH: f64 = MASSPOLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
/// Seconds between state updates.
const TAU: f64 = 0.02;
/// The episode terminates once |theta| exceeds 12 degrees (computed as gymnasium does).
const THETA_THRESHOLD_RADIANS: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
/// The episode terminates once |x| exceeds this.
const X_THRESHOLD: f64 = 2.4;
/// Each state component of a new episode is drawn from U(-RESET_BOUND, RESET_BOUND).
const RESET_BOUND: f64 = 0.05;

/// The cart-pole balancing task: push a cart left (action 0) or right (action 1) to keep the
/// pole upright. Observation `[x, x_dot, theta, theta_dot]` as f32.
pub struct CartPole {
    /// `[x, x_dot, theta, theta_dot]`, f64 as in gymnasium.
    state: [f64; 4],
    rng: SmallRng,
    /// Steps taken since the episode terminated (gymnasium's `steps_beyond_terminated`);
    /// `None` while the episode is running.
    steps_beyond_terminated: Option<u64>,
}

impl CartPole {
    /// A new env whose RNG is seeded from OS entropy (like gymnasium before its first seeded
    /// reset). Call [`Env::reset`] before stepping.
    pub fn new() -> CartPole {
        CartPole {
            state: [0.0; 4],
            rng: SmallRng::from_os_rng(),
            steps_beyond_terminated: None,
        }
    }

    /// The internal f64 state `[x, x_dot, theta, theta_dot]`.
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    /// Overwrites the internal state, e.g. with `env.unwrapped.state` from gymnasium, and starts
    /// a fresh episode from it (the episode-ended bookkeeping is cleared).
    pub fn set_state(&mut self, state: [f64; 4]) {
        self.state = state;
        self.steps_beyond_terminated = None;
    }

    /// The observation for the current state: the f64 state cast to f32.
    fn obs(&self) -> [f32; 4] {
        self.state.map(|v| v as f32)
    }

    /// Whether `state` lies outside the termination box. Written as gymnasium's four
    /// comparisons (not `!range.contains`) so a NaN state is not terminal there either.
    #[allow(clippy::manual_range_contains)]
    fn is_terminal(state: &[f64; 4]) -> bool {
        let [x, _, theta, _] = *state;
        x < -X_THRESHOLD
            || x > X_THRESHOLD
            || theta < -THETA_THRESHOLD_RADIANS
            || theta > THETA_THRESHOLD_RADIANS
    }

    /// Reward for a step that ended in `terminated`, updating the past-the-end bookkeeping:
    /// 1.0 while running and on the terminating step, 0.0 on steps taken after it.
    fn reward(&mut self, terminated: bool) -> f32 {
        if !terminated {
            return 1.0;
        }
        match self.steps_beyond_terminated.as_mut() {
            None => {
                self.steps_beyond_terminated = Some(0);
                1.0
            }
            Some(steps) => {
                *steps += 1;
                0.0
            }
        }
    }
}

impl Default for CartPole {
    fn default() -> Self {
        CartPole::new()
    }
}

/// One explicit-Euler step of the cart-pole dynamics under push `action` (0 left, 1 right).
/// The operation order follows gymnasium's so results agree to the last bit wherever
/// `sin`/`cos` do.
fn dynamics(state: [f64; 4], action: i64) -> [f64; 4] {
    let [x, x_dot, theta, theta_dot] = state;
    let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
    let costheta = theta.cos();
    let sintheta = theta.sin();
    let temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
    let thetaacc = (GRAVITY * sintheta - costheta * temp)
        / (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
    let xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
    // Explicit Euler: positions advance with the old velocities.
    [
        x + TAU * x_dot,
        x_dot + TAU * xacc,
        theta + TAU * theta_dot,
        theta_dot + TAU * thetaacc,
    ]
}

impl Env for CartPole {
    fn observation_space(&self) -> Space {
        // gymnasium: high = float32([2 * x_threshold, inf, 2 * theta_threshold, inf]).
        let high = vec![
            (X_THRESHOLD * 2.0) as f32,
            f32::INFINITY,
            (THETA_THRESHOLD_RADIANS * 2.0) as f32,
            f32::INFINITY,
        ];
        let low = high.iter().map(|h| -h).collect();
        Space::Box {
            shape: vec![4],
            low,
            high,
        }
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 2 }
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        for v in &mut self.state {
            *v = self.rng.random_range(-RESET_BOUND..RESET_BOUND);
        }
        self.steps_beyond_terminated = None;
        self.obs().to_vec()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        super::step_via_into(self, action)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let a = match action {
            Action::Discrete(a @ (0 | 1)) => *a,
            _ => {
                return Err(EnvError::InvalidAction {
                    action: action.clone(),
                    space: self.action_space(),
                })
            }
        };
        self.state = dynamics(self.state, a);
        let terminated = Self::is_terminal(&self.state);
        let reward = self.reward(terminated);
        obs.copy_from_slice(&self.obs());
        Ok(Step {
            obs: Vec::new(),
            reward,
            terminated,
            truncated: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;
    use proptest::prelude::*;

    #[test]
    fn passes_env_contract() {
        check_env_contract(&mut CartPole::new());
    }

    #[test]
    fn observation_bounds_match_gymnasium() {
        let Space::Box { high, low, .. } = CartPole::new().observation_space() else {
            panic!("CartPole observations are a Box");
        };
        assert_eq!(high[0], 4.8f32);
        assert_eq!(high[2], 0.418_879_03f32);
        assert!(high[1].is_infinite() && high[3].is_infinite());
        assert_eq!(low[0], -4.8f32);
    }

    #[test]
    fn reset_draws_within_bounds_and_reseeds() {
        let mut env = CartPole::new();
        let a = env.reset(Some(7));
        assert!(a.iter().all(|v| v.abs() < 0.05));
        let b = env.reset(None);
        assert_ne!(a, b, "reset(None) continues the stream");
        assert_eq!(env.reset(Some(7)), a);
    }

    #[test]
    fn reward_is_one_on_terminating_step_then_zero() {
        let mut env = CartPole::new();
        env.set_state([2.399, 1.0, 0.0, 0.0]);
        let step = env.step(&Action::Discrete(1)).unwrap();
        assert!(step.terminated && !step.truncated);
        assert_eq!(step.reward, 1.0);
        let after = env.step(&Action::Discrete(1)).unwrap();
        assert!(after.terminated);
        assert_eq!(after.reward, 0.0);
    }

    #[test]
    fn one_step_from_rest_matches_hand_computation() {
        let mut env = CartPole::new();
        env.set_state([0.0; 4]);
        let step = env.step(&Action::Discrete(1)).unwrap();
        // temp = 10/1.1, thetaacc = -temp / (0.5 * (4/3 - 0.1/1.1)), xacc = temp - 0.05*thetaacc/1.1
        let temp = 10.0 / 1.1;
        let thetaacc = -temp / (0.5 * (4.0 / 3.0 - 0.1 / 1.1));
        let xacc = temp - 0.05 * thetaacc / 1.1;
        let expected = [0.0, 0.02 * xacc, 0.0, 0.02 * thetaacc];
        for (got, want) in env.state().iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        }
        assert_eq!(step.obs, env.obs().to_vec());
    }

    /// The gymnasium formula written out independently (no shared constants).
    fn reference_step(s: [f64; 4], action: i64) -> [f64; 4] {
        let f = if action == 1 { 10.0 } else { -10.0 };
        let (sin, cos) = s[2].sin_cos();
        let temp = (f + 0.05 * s[3] * s[3] * sin) / 1.1;
        let thetaacc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos * cos / 1.1));
        let xacc = temp - 0.05 * thetaacc * cos / 1.1;
        [
            s[0] + 0.02 * s[1],
            s[1] + 0.02 * xacc,
            s[2] + 0.02 * s[3],
            s[3] + 0.02 * thetaacc,
        ]
    }

    proptest! {
        #[test]
        fn step_matches_formula(
            x in -2.4f64..2.4, x_dot in -5.0f64..5.0,
            theta in -0.2094f64..0.2094, theta_dot in -5.0f64..5.0,
            action in 0i64..2,
        ) {
            let start = [x, x_dot, theta, theta_dot];
            let mut env = CartPole::new();
            env.set_state(start);
            let step = env.step(&Action::Discrete(action)).unwrap();
            let want = reference_step(start, action);
            for (got, want) in env.state().iter().zip(want) {
                prop_assert!((got - want).abs() <= 1e-12 * (1.0 + want.abs()));
            }
            let out = want[0].abs() > 2.4 || want[2].abs() > THETA_THRESHOLD_RADIANS;
            prop_assert_eq!(step.terminated, out);
            prop_assert_eq!(step.reward, 1.0);
        }
    }
}
