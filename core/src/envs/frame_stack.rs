//! [`FrameStack`]: the observation is the last k observations, oldest first (gymnasium's
//! `FrameStackObservation` with `padding_type="reset"`: a reset fills the stack with the first
//! observation).

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Stacks the last `k` observations along a new leading axis.
pub struct FrameStack<E> {
    env: E,
    k: usize,
    dim: usize,
    /// `k` frames of `dim` values, oldest first.
    stack: Vec<f32>,
}

impl<E: Env> FrameStack<E> {
    /// Wraps `env`, stacking `k >= 1` observations.
    pub fn new(env: E, k: usize) -> Self {
        let dim = env.observation_space().flat_dim();
        let k = k.max(1);
        FrameStack {
            env,
            k,
            dim,
            stack: vec![0.0; k * dim],
        }
    }

    fn push(&mut self, obs: &[f32]) -> Vec<f32> {
        self.stack.copy_within(self.dim.., 0);
        let last = (self.k - 1) * self.dim;
        self.stack[last..].copy_from_slice(obs);
        self.stack.clone()
    }
}

impl<E: Env> Env for FrameStack<E> {
    fn observation_space(&self) -> Space {
        match self.env.observation_space() {
            Space::Box { shape, low, high } => Space::Box {
                shape: std::iter::once(self.k as i64).chain(shape).collect(),
                low: low.repeat(self.k),
                high: high.repeat(self.k),
            },
            discrete => discrete,
        }
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        let first = self.env.reset(seed);
        for frame in self.stack.chunks_mut(self.dim) {
            frame.copy_from_slice(&first);
        }
        self.stack.clone()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut step = self.env.step(action)?;
        step.obs = self.push(&step.obs);
        Ok(step)
    }

    fn score_reward(&self) -> Option<f32> {
        self.env.score_reward()
    }

    forward_game_info!(env);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;
    use crate::envs::scripted::Scripted;

    #[test]
    fn stacks_oldest_first_and_refills_on_reset() {
        let mut env = FrameStack::new(Scripted::new(vec![1.0], 10), 3);
        check_env_contract(&mut env);
        let Space::Box { shape, .. } = env.observation_space() else {
            panic!("box expected");
        };
        assert_eq!(shape, [3, 3]);
        assert_eq!(env.reset(Some(5)), [0., 5., 0., 0., 5., 0., 0., 5., 0.]);
        env.step(&Action::Discrete(2)).unwrap();
        let obs = env.step(&Action::Discrete(3)).unwrap().obs;
        assert_eq!(obs, [0., 5., 0., 1., 5., 2., 2., 5., 3.]);
        assert_eq!(env.reset(Some(5))[..3], [0., 5., 0.]);
    }
}
