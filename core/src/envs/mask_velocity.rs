//! A partially observed wrapper: keeps only some observation components (e.g. CartPole's
//! positions, hiding its velocities), so the task needs memory (as SB3-contrib's
//! `CartPoleNoVel`). Registered as `CartPoleNoVel-v1`: observation `[x, theta]`, and
//! `PendulumNoVel-v1`: observation `[cos theta, sin theta]`.

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Shows only the observation components at `keep`.
pub struct MaskObservation<E> {
    inner: E,
    keep: Vec<usize>,
}

impl<E: Env> MaskObservation<E> {
    /// Wraps `inner`, observing components `keep` (indices into its flat observation).
    pub fn new(inner: E, keep: Vec<usize>) -> MaskObservation<E> {
        MaskObservation { inner, keep }
    }

    fn mask(&self, obs: &[f32]) -> Vec<f32> {
        self.keep.iter().map(|&i| obs[i]).collect()
    }
}

impl<E: Env> Env for MaskObservation<E> {
    fn observation_space(&self) -> Space {
        match self.inner.observation_space() {
            Space::Box { low, high, .. } => Space::Box {
                shape: vec![self.keep.len() as i64],
                low: self.mask(&low),
                high: self.mask(&high),
            },
            discrete => discrete,
        }
    }

    fn action_space(&self) -> Space {
        self.inner.action_space()
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        let obs = self.inner.reset(seed);
        self.mask(&obs)
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut step = self.inner.step(action)?;
        step.obs = self.mask(&step.obs);
        Ok(step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::{check_env_contract, make, CartPole};

    #[test]
    fn cartpole_without_velocities_keeps_the_contract() {
        check_env_contract(&mut MaskObservation::new(CartPole::new(), vec![0, 2]));
        let env = make("CartPoleNoVel-v1").unwrap();
        assert_eq!(env.observation_space().flat_dim(), 2);
        let mut pendulum = make("PendulumNoVel-v1").unwrap();
        assert_eq!(pendulum.observation_space().flat_dim(), 2);
        let obs = pendulum.reset(Some(1));
        assert!(
            (obs[0] * obs[0] + obs[1] * obs[1] - 1.0).abs() < 1e-5,
            "{obs:?}"
        );
        check_env_contract(pendulum.as_mut());
    }
}
