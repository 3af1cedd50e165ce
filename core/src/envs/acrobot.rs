//! Acrobot-v1, reimplemented from the equations of gymnasium 1.4's `AcrobotEnv`
//! (`gymnasium/envs/classic_control/acrobot.py`, the "book" dynamics of Sutton & Barto).
//!
//! Two links (length 1, mass 1, centre of mass at 0.5, moment of inertia 1) hang from a fixed
//! joint; the action applies a torque of -1, 0 or +1 at the joint between them. Each step
//! integrates the equations of motion over `dt = 0.2` with one classical Runge-Kutta (RK4) step,
//! then wraps both angles into `[-π, π]` and clips the angular velocities to `±4π` and `±9π`.
//! The episode terminates once the free end rises more than one link length above the pivot
//! (`-cos θ₁ - cos(θ₁ + θ₂) > 1`); the reward is -1 per step and 0 on the terminating step. The
//! 500-step limit of `Acrobot-v1` comes from [`super::TimeLimit`]. Observation
//! `[cos θ₁, sin θ₁, cos θ₂, sin θ₂, θ̇₁, θ̇₂]` as f32.
//!
//! The integration follows gymnasium's operation order, so trajectories agree to the last bit
//! wherever `sin`/`cos` do. Only the reset RNG differs; start states are comparable through
//! [`Acrobot::set_state`].

use std::f64::consts::PI;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Integration time step, seconds.
const DT: f64 = 0.2;
const LINK_LENGTH_1: f64 = 1.0;
const LINK_MASS_1: f64 = 1.0;
const LINK_MASS_2: f64 = 1.0;
/// Position of each link's centre of mass along it.
const LINK_COM_POS_1: f64 = 0.5;
const LINK_COM_POS_2: f64 = 0.5;
/// Moment of inertia of each link.
const LINK_MOI: f64 = 1.0;
const GRAVITY: f64 = 9.8;
const MAX_VEL_1: f64 = 4.0 * PI;
const MAX_VEL_2: f64 = 9.0 * PI;
/// Torque for actions 0, 1, 2.
const TORQUES: [f64; 3] = [-1.0, 0.0, 1.0];
/// Each state component of a new episode is drawn from U(-RESET_BOUND, RESET_BOUND) (as f32).
const RESET_BOUND: f32 = 0.1;

/// The acrobot swing-up task: swing the free end above the bar.
pub struct Acrobot {
    /// `[θ₁, θ₂, θ̇₁, θ̇₂]`, f64 as in gymnasium (θ₁ = 0 hangs straight down).
    state: [f64; 4],
    rng: SmallRng,
}

impl Acrobot {
    /// A new env whose RNG is seeded from OS entropy. Call [`Env::reset`] before stepping.
    pub fn new() -> Acrobot {
        Acrobot {
            state: [0.0; 4],
            rng: SmallRng::from_os_rng(),
        }
    }

    /// The internal f64 state `[θ₁, θ₂, θ̇₁, θ̇₂]`.
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    /// Overwrites the internal state, e.g. with `env.unwrapped.state` from gymnasium.
    pub fn set_state(&mut self, state: [f64; 4]) {
        self.state = state;
    }

    fn obs(&self) -> [f32; 6] {
        let [t1, t2, dt1, dt2] = self.state;
        [t1.cos(), t1.sin(), t2.cos(), t2.sin(), dt1, dt2].map(|v| v as f32)
    }

    fn is_terminal(state: &[f64; 4]) -> bool {
        let [t1, t2, _, _] = *state;
        -t1.cos() - (t2 + t1).cos() > 1.0
    }
}

impl Default for Acrobot {
    fn default() -> Self {
        Acrobot::new()
    }
}

/// Time derivative of `[θ₁, θ₂, θ̇₁, θ̇₂]` under joint torque `torque`.
fn derivatives(s: [f64; 4], torque: f64) -> [f64; 4] {
    let (m1, m2, l1) = (LINK_MASS_1, LINK_MASS_2, LINK_LENGTH_1);
    let (lc1, lc2) = (LINK_COM_POS_1, LINK_COM_POS_2);
    let (i1, i2, g) = (LINK_MOI, LINK_MOI, GRAVITY);
    let [t1, t2, dt1, dt2] = s;
    // Inertia terms.
    let d1 = m1 * (lc1 * lc1) + m2 * (l1 * l1 + lc2 * lc2 + 2.0 * l1 * lc2 * t2.cos()) + i1 + i2;
    let d2 = m2 * (lc2 * lc2 + l1 * lc2 * t2.cos()) + i2;
    // Gravity and Coriolis terms.
    let phi2 = m2 * lc2 * g * (t1 + t2 - PI / 2.0).cos();
    let phi1 = -m2 * l1 * lc2 * (dt2 * dt2) * t2.sin() - 2.0 * m2 * l1 * lc2 * dt2 * dt1 * t2.sin()
        + (m1 * lc1 + m2 * l1) * g * (t1 - PI / 2.0).cos()
        + phi2;
    let ddt2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * (dt1 * dt1) * t2.sin() - phi2)
        / (m2 * (lc2 * lc2) + i2 - d2 * d2 / d1);
    let ddt1 = -(d2 * ddt2 + phi1) / d1;
    [dt1, dt2, ddt1, ddt2]
}

/// `y + h * k`, elementwise.
fn axpy(y: [f64; 4], h: f64, k: [f64; 4]) -> [f64; 4] {
    std::array::from_fn(|i| y[i] + h * k[i])
}

/// One classical RK4 step of length [`DT`] under a constant torque.
fn rk4(y: [f64; 4], torque: f64) -> [f64; 4] {
    let half = DT / 2.0;
    let k1 = derivatives(y, torque);
    let k2 = derivatives(axpy(y, half, k1), torque);
    let k3 = derivatives(axpy(y, half, k2), torque);
    let k4 = derivatives(axpy(y, DT, k3), torque);
    let sixth = DT / 6.0;
    std::array::from_fn(|i| y[i] + sixth * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]))
}

/// Shifts `x` by whole periods of `hi - lo` until it lies in `[lo, hi]`.
fn wrap(mut x: f64, lo: f64, hi: f64) -> f64 {
    let period = hi - lo;
    while x > hi {
        x -= period;
    }
    while x < lo {
        x += period;
    }
    x
}

impl Env for Acrobot {
    fn observation_space(&self) -> Space {
        let high = vec![1.0, 1.0, 1.0, 1.0, MAX_VEL_1 as f32, MAX_VEL_2 as f32];
        let low = high.iter().map(|h| -h).collect();
        Space::Box {
            shape: vec![6],
            low,
            high,
        }
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 3 }
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        for v in &mut self.state {
            // gymnasium draws in f64 and stores the state as f32.
            *v = f64::from(self.rng.random_range(-RESET_BOUND..RESET_BOUND));
        }
        self.obs().to_vec()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        super::step_via_into(self, action)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let torque = match action {
            Action::Discrete(a @ 0..=2) => TORQUES[*a as usize],
            _ => {
                return Err(EnvError::InvalidAction {
                    action: action.clone(),
                    space: self.action_space(),
                })
            }
        };
        let [t1, t2, dt1, dt2] = rk4(self.state, torque);
        self.state = [
            wrap(t1, -PI, PI),
            wrap(t2, -PI, PI),
            dt1.clamp(-MAX_VEL_1, MAX_VEL_1),
            dt2.clamp(-MAX_VEL_2, MAX_VEL_2),
        ];
        let terminated = Self::is_terminal(&self.state);
        obs.copy_from_slice(&self.obs());
        Ok(Step {
            obs: Vec::new(),
            reward: if terminated { 0.0 } else { -1.0 },
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
        check_env_contract(&mut Acrobot::new());
    }

    #[test]
    fn reset_draws_within_gymnasium_bounds() {
        let mut env = Acrobot::new();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for seed in 0..500 {
            env.reset(Some(seed));
            for v in env.state() {
                assert_eq!(v, f64::from(v as f32), "start state is f32-valued");
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
        assert!((-0.1..-0.099).contains(&lo) && (0.099..0.1).contains(&hi));
    }

    #[test]
    fn hanging_at_rest_without_torque_stays_put_with_reward_minus_one() {
        let mut env = Acrobot::new();
        env.set_state([0.0; 4]);
        let step = env.step(&Action::Discrete(1)).unwrap();
        // Only rounding in cos(-π/2) moves it.
        assert!(
            env.state().iter().all(|v| v.abs() < 1e-12),
            "{:?}",
            env.state()
        );
        assert_eq!(step.reward, -1.0);
        assert!(!step.terminated);
    }

    #[test]
    fn upright_is_terminal_with_reward_zero() {
        let mut env = Acrobot::new();
        env.set_state([PI - 1e-3, 0.0, 0.0, 0.0]);
        let step = env.step(&Action::Discrete(1)).unwrap();
        assert!(step.terminated);
        assert_eq!(step.reward, 0.0);
    }

    #[test]
    fn wrap_shifts_by_whole_periods() {
        assert!((wrap(3.5, -PI, PI) - (3.5 - 2.0 * PI)).abs() < 1e-15);
        assert!((wrap(-7.0, -PI, PI) - (-7.0 + 2.0 * PI)).abs() < 1e-15);
        assert_eq!(wrap(1.0, -PI, PI), 1.0);
    }
}
