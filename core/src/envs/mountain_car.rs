//! MountainCar-v0, reimplemented from the equations of gymnasium 1.4's `MountainCarEnv`
//! (`gymnasium/envs/classic_control/mountain_car.py`).
//!
//! A car in a valley (height `sin 3x`) must reach the flag at `x >= 0.5` but its engine is too
//! weak to drive straight up: action 0 pushes left, 1 coasts, 2 pushes right. Each step adds
//! `(a - 1)·0.001 - 0.0025·cos 3x` to the velocity (clipped to `±0.07`), then the velocity to the
//! position (clipped to `[-1.2, 0.6]`); hitting the left wall stops the car. The episode
//! terminates once `x >= 0.5` with non-negative velocity; the reward is -1 on every step,
//! including the last. The 200-step limit of `MountainCar-v0` comes from [`super::TimeLimit`].
//! Observation `[x, ẋ]` as f32.
//!
//! The state is f64 and the update follows gymnasium's operation order, so trajectories agree
//! to the last bit wherever `cos` does. Only the reset RNG differs; start states are comparable
//! through [`MountainCar::set_state`].

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

pub(super) const MIN_POSITION: f64 = -1.2;
pub(super) const MAX_POSITION: f64 = 0.6;
pub(super) const MAX_SPEED: f64 = 0.07;
const GOAL_POSITION: f64 = 0.5;
const FORCE: f64 = 0.001;
pub(super) const GRAVITY: f64 = 0.0025;
/// A new episode starts at rest at `x ~ U(RESET_LOW, RESET_HIGH)`.
pub(super) const RESET_LOW: f64 = -0.6;
pub(super) const RESET_HIGH: f64 = -0.4;

/// The discrete mountain-car task.
pub struct MountainCar {
    /// `[x, ẋ]`, f64 as in gymnasium.
    state: [f64; 2],
    rng: SmallRng,
}

impl MountainCar {
    /// A new env whose RNG is seeded from OS entropy. Call [`Env::reset`] before stepping.
    pub fn new() -> MountainCar {
        MountainCar {
            state: [0.0; 2],
            rng: SmallRng::from_os_rng(),
        }
    }

    /// The internal f64 state `[x, ẋ]`.
    pub fn state(&self) -> [f64; 2] {
        self.state
    }

    /// Overwrites the internal state, e.g. with `env.unwrapped.state` from gymnasium.
    pub fn set_state(&mut self, state: [f64; 2]) {
        self.state = state;
    }

    fn obs(&self) -> [f32; 2] {
        self.state.map(|v| v as f32)
    }
}

impl Default for MountainCar {
    fn default() -> Self {
        MountainCar::new()
    }
}

/// The observation box shared by both mountain cars.
pub(super) fn observation_space() -> Space {
    Space::Box {
        shape: vec![2],
        low: vec![MIN_POSITION as f32, -MAX_SPEED as f32],
        high: vec![MAX_POSITION as f32, MAX_SPEED as f32],
    }
}

impl Env for MountainCar {
    fn observation_space(&self) -> Space {
        observation_space()
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 3 }
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        self.state = [self.rng.random_range(RESET_LOW..RESET_HIGH), 0.0];
        self.obs().to_vec()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        super::step_via_into(self, action)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let push = match action {
            Action::Discrete(a @ 0..=2) => (a - 1) as f64,
            _ => {
                return Err(EnvError::InvalidAction {
                    action: action.clone(),
                    space: self.action_space(),
                })
            }
        };
        let [mut position, mut velocity] = self.state;
        velocity += push * FORCE + (3.0 * position).cos() * (-GRAVITY);
        velocity = velocity.clamp(-MAX_SPEED, MAX_SPEED);
        position = (position + velocity).clamp(MIN_POSITION, MAX_POSITION);
        if position == MIN_POSITION && velocity < 0.0 {
            velocity = 0.0;
        }
        let terminated = position >= GOAL_POSITION && velocity >= 0.0;
        self.state = [position, velocity];
        obs.copy_from_slice(&self.obs());
        Ok(Step {
            obs: Vec::new(),
            reward: -1.0,
            terminated,
            truncated: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;

    #[test]
    fn passes_env_contract() {
        check_env_contract(&mut MountainCar::new());
    }

    #[test]
    fn reset_draws_within_gymnasium_bounds() {
        let mut env = MountainCar::new();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for seed in 0..1000 {
            env.reset(Some(seed));
            let [x, v] = env.state();
            assert_eq!(v, 0.0);
            lo = lo.min(x);
            hi = hi.max(x);
        }
        assert!((-0.6..-0.599).contains(&lo) && (-0.401..-0.4).contains(&hi));
    }

    #[test]
    fn left_wall_stops_the_car() {
        let mut env = MountainCar::new();
        env.set_state([-1.19, -0.05]);
        let step = env.step(&Action::Discrete(0)).unwrap();
        assert_eq!(env.state(), [MIN_POSITION, 0.0]);
        assert_eq!(step.reward, -1.0);
        assert!(!step.terminated);
    }

    #[test]
    fn reaching_the_flag_terminates_with_reward_minus_one() {
        let mut env = MountainCar::new();
        env.set_state([0.49, 0.03]);
        let step = env.step(&Action::Discrete(2)).unwrap();
        assert!(step.terminated);
        assert_eq!(step.reward, -1.0);
    }
}
