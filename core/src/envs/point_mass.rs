//! PointMass-v0: a small native continuous-control task, for Gaussian policies until the
//! environments issue brings Pendulum.
//!
//! A point on a line starts at `p ~ U(-1, 1)`; each step the action (a velocity in
//! `[-1, 1]`, clipped like gymnasium's Pendulum clips its torque) moves it by `0.1 a`, within
//! `[-2, 2]`, and the reward is `-|p|` after the move. Episodes are cut at 50 steps
//! ([`super::TimeLimit`]). Standing still scores about -25; heading straight for the origin
//! about -2; observation `[p]`.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// How far a unit action moves the point in one step.
const SPEED: f32 = 0.1;
/// The point stays within `[-BOUND, BOUND]`.
const BOUND: f32 = 2.0;

/// The point-mass task.
pub struct PointMass {
    position: f32,
    rng: SmallRng,
}

impl PointMass {
    /// A new env seeded from OS entropy; call [`Env::reset`] before stepping.
    pub fn new() -> PointMass {
        PointMass {
            position: 0.0,
            rng: SmallRng::from_os_rng(),
        }
    }
}

impl Default for PointMass {
    fn default() -> Self {
        PointMass::new()
    }
}

impl Env for PointMass {
    fn observation_space(&self) -> Space {
        Space::Box {
            shape: vec![1],
            low: vec![-BOUND],
            high: vec![BOUND],
        }
    }

    fn action_space(&self) -> Space {
        Space::Box {
            shape: vec![1],
            low: vec![-1.0],
            high: vec![1.0],
        }
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        self.position = self.rng.random_range(-1.0..1.0);
        vec![self.position]
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let velocity = match action {
            Action::Continuous(v) if v.len() == 1 && !v[0].is_nan() => v[0].clamp(-1.0, 1.0),
            other => {
                return Err(EnvError::InvalidAction {
                    action: other.clone(),
                    space: self.action_space(),
                })
            }
        };
        self.position = (self.position + SPEED * velocity).clamp(-BOUND, BOUND);
        Ok(Step {
            obs: vec![self.position],
            reward: -self.position.abs(),
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
    fn keeps_the_env_contract() {
        check_env_contract(&mut PointMass::new());
    }

    #[test]
    fn moving_towards_the_origin_is_rewarded() {
        let mut env = PointMass::new();
        env.position = 0.5;
        let step = env.step(&Action::Continuous(vec![-3.0])).unwrap();
        // Clipped to -1: 0.5 - 0.1 = 0.4.
        assert!((step.obs[0] - 0.4).abs() < 1e-6);
        assert!((step.reward + 0.4).abs() < 1e-6);
    }
}
