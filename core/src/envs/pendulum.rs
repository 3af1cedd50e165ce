//! Pendulum-v1, reimplemented from the equations of gymnasium 1.4's `PendulumEnv`
//! (`gymnasium/envs/classic_control/pendulum.py`).
//!
//! A rigid pendulum (mass 1, length 1, gravity 10) hangs from a motor; the action is the motor
//! torque, clipped to `[-2, 2]`. Each step is one semi-implicit Euler step of `dt = 0.05`: the
//! angular velocity is updated first (and clipped to `[-8, 8]`), then the angle advances with the
//! new velocity. The cost is `angle² + 0.1·velocity² + 0.001·torque²` for the state before the
//! step (angle normalised to `[-π, π)`), the reward its negative. The task never terminates; the
//! 200-step limit of `Pendulum-v1` comes from [`super::TimeLimit`]. Observation
//! `[cos θ, sin θ, θ̇]` as f32.
//!
//! The torque terms are computed in f32, as numpy computes them for a float32 action, so the
//! dynamics match gymnasium's to the last bit wherever `sin`/`cos` do. Only the reset RNG differs;
//! start states are comparable through [`Pendulum::set_state`].

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

const MAX_SPEED: f64 = 8.0;
const MAX_TORQUE: f32 = 2.0;
const DT: f64 = 0.05;
const GRAVITY: f64 = 10.0;
const MASS: f64 = 1.0;
const LENGTH: f64 = 1.0;
/// A new episode draws `θ ~ U(-π, π)` and `θ̇ ~ U(-RESET_SPEED, RESET_SPEED)`.
const RESET_SPEED: f64 = 1.0;

/// The inverted-pendulum swing-up task with a continuous torque.
pub struct Pendulum {
    /// `[θ, θ̇]`, f64 as in gymnasium (θ = 0 is upright).
    state: [f64; 2],
    rng: SmallRng,
}

impl Pendulum {
    /// A new env whose RNG is seeded from OS entropy. Call [`Env::reset`] before stepping.
    pub fn new() -> Pendulum {
        Pendulum {
            state: [0.0; 2],
            rng: SmallRng::from_os_rng(),
        }
    }

    /// The internal f64 state `[θ, θ̇]`.
    pub fn state(&self) -> [f64; 2] {
        self.state
    }

    /// Overwrites the internal state, e.g. with `env.unwrapped.state` from gymnasium.
    pub fn set_state(&mut self, state: [f64; 2]) {
        self.state = state;
    }

    fn obs(&self) -> [f32; 3] {
        let [theta, theta_dot] = self.state;
        [theta.cos() as f32, theta.sin() as f32, theta_dot as f32]
    }
}

impl Default for Pendulum {
    fn default() -> Self {
        Pendulum::new()
    }
}

/// Maps an angle to `[-π, π)`.
fn angle_normalize(x: f64) -> f64 {
    use std::f64::consts::PI;
    (x + PI).rem_euclid(2.0 * PI) - PI
}

impl Env for Pendulum {
    fn observation_space(&self) -> Space {
        let high = vec![1.0, 1.0, MAX_SPEED as f32];
        let low = high.iter().map(|h| -h).collect();
        Space::Box {
            shape: vec![3],
            low,
            high,
        }
    }

    fn action_space(&self) -> Space {
        Space::Box {
            shape: vec![1],
            low: vec![-MAX_TORQUE],
            high: vec![MAX_TORQUE],
        }
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        use std::f64::consts::PI;
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        self.state = [
            self.rng.random_range(-PI..PI),
            self.rng.random_range(-RESET_SPEED..RESET_SPEED),
        ];
        self.obs().to_vec()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        super::step_via_into(self, action)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let u = match action {
            Action::Continuous(v) if v.len() == 1 && !v[0].is_nan() => {
                v[0].clamp(-MAX_TORQUE, MAX_TORQUE)
            }
            other => {
                return Err(EnvError::InvalidAction {
                    action: other.clone(),
                    space: self.action_space(),
                })
            }
        };
        let [theta, theta_dot] = self.state;
        let angle = angle_normalize(theta);
        let cost = angle * angle + 0.1 * (theta_dot * theta_dot) + f64::from(0.001f32 * (u * u));
        let angular_acc = 3.0 * GRAVITY / (2.0 * LENGTH) * theta.sin()
            + f64::from((3.0 / (MASS * LENGTH * LENGTH)) as f32 * u);
        let new_theta_dot = (theta_dot + angular_acc * DT).clamp(-MAX_SPEED, MAX_SPEED);
        let new_theta = theta + new_theta_dot * DT;
        self.state = [new_theta, new_theta_dot];
        obs.copy_from_slice(&self.obs());
        Ok(Step {
            obs: Vec::new(),
            reward: -cost as f32,
            terminated: false,
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
        check_env_contract(&mut Pendulum::new());
    }

    #[test]
    fn reset_draws_within_gymnasium_bounds() {
        let mut env = Pendulum::new();
        let (mut lo, mut hi) = ([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]);
        for seed in 0..2000 {
            env.reset(Some(seed));
            for k in 0..2 {
                lo[k] = lo[k].min(env.state()[k]);
                hi[k] = hi[k].max(env.state()[k]);
            }
        }
        let pi = std::f64::consts::PI;
        assert!(lo[0] >= -pi && hi[0] < pi && lo[0] < -3.0 && hi[0] > 3.0);
        assert!(lo[1] >= -1.0 && hi[1] < 1.0 && lo[1] < -0.95 && hi[1] > 0.95);
    }

    #[test]
    fn torque_is_clipped_and_cost_uses_the_clipped_torque() {
        let mut a = Pendulum::new();
        let mut b = Pendulum::new();
        a.set_state([0.3, -0.2]);
        b.set_state([0.3, -0.2]);
        let sa = a.step(&Action::Continuous(vec![5.0])).unwrap();
        let sb = b.step(&Action::Continuous(vec![2.0])).unwrap();
        assert_eq!(sa, sb);
        assert_eq!(a.state(), b.state());
        let want = -(0.09 + 0.1 * 0.04 + 0.004);
        assert!((f64::from(sa.reward) - want).abs() < 1e-6);
    }

    #[test]
    fn angle_normalize_wraps_to_half_open_interval() {
        let pi = std::f64::consts::PI;
        assert!((angle_normalize(3.0 * pi / 2.0) + pi / 2.0).abs() < 1e-12);
        assert!((angle_normalize(-pi) + pi).abs() < 1e-12);
        assert!((angle_normalize(0.1) - 0.1).abs() < 1e-12);
    }
}
