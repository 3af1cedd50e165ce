//! MountainCarContinuous-v0, reimplemented from the equations of gymnasium 1.4's
//! `Continuous_MountainCarEnv` (`gymnasium/envs/classic_control/continuous_mountain_car.py`).
//!
//! The mountain car of [`super::MountainCar`] with a continuous engine: the action `a` (a float32
//! in `[-1, 1]`; outside values are clipped for the dynamics) adds `0.0015·a - 0.0025·cos 3x` to
//! the velocity (clipped to `±0.07`), then the velocity moves the position (clipped to
//! `[-1.2, 0.6]`); hitting the left wall stops the car. The episode terminates once `x >= 0.45`
//! with non-negative velocity. The reward is `-0.1·a²` for the *unclipped* action, plus 100 on
//! the terminating step. The 999-step limit of `MountainCarContinuous-v0` comes from
//! [`super::TimeLimit`]. Observation `[x, ẋ]` as f32.
//!
//! gymnasium keeps this state as float32 after the first step and mixes float32 and float64
//! arithmetic as numpy 2's promotion rules dictate (a float32 value meeting a Python float stays
//! float32; a clipped action becomes a Python float). This port tracks which values are float32
//! and rounds where numpy does, so trajectories agree to the last bit wherever `cos` does. Only the
//! reset RNG differs; start states are comparable through [`MountainCarContinuous::set_state`].
//!
//! One deliberate difference: a non-finite action is rejected as invalid (gymnasium would return
//! an infinite or NaN reward).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::mountain_car::{
    observation_space, GRAVITY, MAX_POSITION, MAX_SPEED, MIN_POSITION, RESET_HIGH, RESET_LOW,
};
use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

const MIN_ACTION: f32 = -1.0;
const MAX_ACTION: f32 = 1.0;
const GOAL_POSITION: f64 = 0.45;
const POWER: f64 = 0.0015;
const GOAL_REWARD: f64 = 100.0;

/// A scalar with the precision numpy would hold it in: float32 (`f32 == true`) or float64.
#[derive(Clone, Copy)]
struct Num {
    value: f64,
    f32: bool,
}

impl Num {
    fn f64(value: f64) -> Num {
        Num { value, f32: false }
    }

    fn f32(value: f32) -> Num {
        Num {
            value: f64::from(value),
            f32: true,
        }
    }

    /// `self + other` where `other` is a Python float (weak: it takes `self`'s precision).
    fn add_py(self, other: f64) -> Num {
        if self.f32 {
            Num::f32(self.value as f32 + other as f32)
        } else {
            Num::f64(self.value + other)
        }
    }

    /// `self + other` for two numpy scalars (the wider precision wins).
    fn add(self, other: Num) -> Num {
        if self.f32 && other.f32 {
            Num::f32(self.value as f32 + other.value as f32)
        } else {
            Num::f64(self.value + other.value)
        }
    }

    /// `self > c`, `self < c`, `self >= c`, `self == c` against a Python float, compared in
    /// `self`'s precision.
    fn cmp_py(self, c: f64) -> std::cmp::Ordering {
        let ord = if self.f32 {
            (self.value as f32).partial_cmp(&(c as f32))
        } else {
            self.value.partial_cmp(&c)
        };
        ord.expect("mountain car state is never NaN")
    }
}

/// The continuous mountain-car task.
pub struct MountainCarContinuous {
    /// `[x, ẋ]` as f64 values.
    state: [f64; 2],
    /// Whether gymnasium holds the state as float32 (after a step) or float64 (after reset).
    state_is_f32: bool,
    rng: SmallRng,
}

impl MountainCarContinuous {
    /// A new env whose RNG is seeded from OS entropy. Call [`Env::reset`] before stepping.
    pub fn new() -> MountainCarContinuous {
        MountainCarContinuous {
            state: [0.0; 2],
            state_is_f32: false,
            rng: SmallRng::from_os_rng(),
        }
    }

    /// The state `[x, ẋ]` as f64 (float32-valued after a step, as gymnasium's).
    pub fn state(&self) -> [f64; 2] {
        self.state
    }

    /// Overwrites the state with a float64 start state, as gymnasium's reset leaves it (e.g.
    /// `env.unwrapped.state` right after `reset`).
    pub fn set_state(&mut self, state: [f64; 2]) {
        self.state = state;
        self.state_is_f32 = false;
    }

    fn obs(&self) -> [f32; 2] {
        self.state.map(|v| v as f32)
    }
}

impl Default for MountainCarContinuous {
    fn default() -> Self {
        MountainCarContinuous::new()
    }
}

impl Env for MountainCarContinuous {
    fn observation_space(&self) -> Space {
        observation_space()
    }

    fn action_space(&self) -> Space {
        Space::Box {
            shape: vec![1],
            low: vec![MIN_ACTION],
            high: vec![MAX_ACTION],
        }
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        self.state = [self.rng.random_range(RESET_LOW..RESET_HIGH), 0.0];
        self.state_is_f32 = false;
        self.obs().to_vec()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        super::step_via_into(self, action)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let a = match action {
            Action::Continuous(v) if v.len() == 1 && v[0].is_finite() => v[0],
            other => {
                return Err(EnvError::InvalidAction {
                    action: other.clone(),
                    space: self.action_space(),
                })
            }
        };
        let mut position = Num {
            value: self.state[0],
            f32: self.state_is_f32,
        };
        let mut velocity = Num {
            value: self.state[1],
            f32: self.state_is_f32,
        };
        // A clipped action becomes a Python float; an in-range one stays float32.
        let push = if a < MIN_ACTION {
            Num::f64(f64::from(MIN_ACTION) * POWER)
        } else if a > MAX_ACTION {
            Num::f64(f64::from(MAX_ACTION) * POWER)
        } else {
            Num::f32(a * POWER as f32)
        };
        let three_x = if position.f32 {
            f64::from(3.0 * position.value as f32)
        } else {
            3.0 * position.value
        };
        // `push - 0.0025 cos 3x`, the cosine term being a Python float.
        let dv = push.add_py(-(GRAVITY * three_x.cos()));
        velocity = if dv.f32 {
            velocity.add(dv)
        } else {
            velocity.add_py(dv.value)
        };
        if velocity.cmp_py(MAX_SPEED) == Greater {
            velocity = Num::f64(MAX_SPEED);
        }
        if velocity.cmp_py(-MAX_SPEED) == Less {
            velocity = Num::f64(-MAX_SPEED);
        }
        position = if velocity.f32 {
            position.add(velocity)
        } else {
            position.add_py(velocity.value)
        };
        if position.cmp_py(MAX_POSITION) == Greater {
            position = Num::f64(MAX_POSITION);
        }
        if position.cmp_py(MIN_POSITION) == Less {
            position = Num::f64(MIN_POSITION);
        }
        if position.cmp_py(MIN_POSITION) == Equal && velocity.value < 0.0 {
            velocity = Num::f64(0.0);
        }
        let terminated = position.cmp_py(GOAL_POSITION) != Less && velocity.value >= 0.0;
        let bonus = if terminated { GOAL_REWARD } else { 0.0 };
        let reward = bonus - f64::from(a) * f64::from(a) * 0.1;
        self.state = [
            f64::from(position.value as f32),
            f64::from(velocity.value as f32),
        ];
        self.state_is_f32 = true;
        obs.copy_from_slice(&self.obs());
        Ok(Step {
            obs: Vec::new(),
            reward: reward as f32,
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
        check_env_contract(&mut MountainCarContinuous::new());
    }

    #[test]
    fn reset_draws_within_gymnasium_bounds() {
        let mut env = MountainCarContinuous::new();
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
    fn reward_charges_the_unclipped_action_and_pays_the_goal() {
        let mut env = MountainCarContinuous::new();
        env.set_state([0.44, 0.03]);
        let step = env.step(&Action::Continuous(vec![2.0])).unwrap();
        assert!(step.terminated);
        assert!((step.reward - (100.0 - 0.4)).abs() < 1e-5);
        let mut clipped = MountainCarContinuous::new();
        clipped.set_state([0.44, 0.03]);
        clipped.step(&Action::Continuous(vec![1.0])).unwrap();
        assert_eq!(
            env.state(),
            clipped.state(),
            "dynamics see the clipped action"
        );
    }

    #[test]
    fn non_finite_actions_are_rejected() {
        let mut env = MountainCarContinuous::new();
        env.reset(Some(0));
        for a in [f32::NAN, f32::INFINITY] {
            assert!(matches!(
                env.step(&Action::Continuous(vec![a])),
                Err(EnvError::InvalidAction { .. })
            ));
        }
    }
}
