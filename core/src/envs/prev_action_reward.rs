//! `[env] prev_action_reward`: the previous action and reward appended to every observation,
//! the extra inputs rlpyt's recurrent agents give their LSTM (`prev_action`, `prev_reward` of
//! `MujocoLstmModel` and `AtariLstmModel`). Carrying them in the observation gets them to the
//! model everywhere an observation goes (actor, wire, replay, learner, evaluation) with no
//! second path.
//!
//! The observation becomes `[obs, a, r]`: `a` is the previous action (one-hot for a discrete
//! space, the values the env received for a box) and `r` the previous step's reward as the env
//! returned it; both are zero on the first observation of an episode.

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Appends the previous action and reward to `inner`'s observations.
pub struct PrevActionReward<E> {
    inner: E,
    obs_dim: usize,
    action_space: Space,
    /// `[a, r]` of the last step, zero after a reset.
    tail: Vec<f32>,
}

impl<E: Env> PrevActionReward<E> {
    /// Wraps `inner`, whose observations must be flat (a box of one dimension): image frames
    /// would lose their shape.
    pub fn new(inner: E) -> Result<PrevActionReward<E>, EnvError> {
        let obs_space = inner.observation_space();
        if let Space::Box { shape, .. } = &obs_space {
            if shape.len() > 1 {
                return Err(EnvError::VecMismatch(format!(
                    "[env] prev_action_reward needs flat observations; this env's are a box of \
                     shape {shape:?} (image frames), which an appended action would unshape"
                )));
            }
        }
        let action_space = inner.action_space();
        let action_dim = match &action_space {
            Space::Discrete { n } => *n as usize,
            space => space.flat_dim(),
        };
        Ok(PrevActionReward {
            obs_dim: obs_space.flat_dim(),
            tail: vec![0.0; action_dim + 1],
            inner,
            action_space,
        })
    }

    /// Records `action` and `reward` as the tail of the next observations.
    fn remember(&mut self, action: &Action, reward: f32) {
        self.tail.fill(0.0);
        let last = self.tail.len() - 1;
        match action {
            Action::Discrete(a) => {
                if let Some(slot) = usize::try_from(*a).ok().filter(|&a| a < last) {
                    self.tail[slot] = 1.0;
                }
            }
            Action::Continuous(values) => {
                for (slot, v) in self.tail[..last].iter_mut().zip(values) {
                    *slot = *v;
                }
            }
        }
        self.tail[last] = reward;
    }
}

impl<E: Env> Env for PrevActionReward<E> {
    fn observation_space(&self) -> Space {
        let (low, high) = match self.inner.observation_space() {
            Space::Box { low, high, .. } => (low, high),
            Space::Discrete { n } => (vec![0.0], vec![(n - 1) as f32]),
        };
        let (action_low, action_high) = match &self.action_space {
            Space::Discrete { n } => (vec![0.0; *n as usize], vec![1.0; *n as usize]),
            Space::Box { low, high, .. } => (low.clone(), high.clone()),
        };
        let low: Vec<f32> = low
            .into_iter()
            .chain(action_low)
            .chain([f32::NEG_INFINITY])
            .collect();
        let high: Vec<f32> = high
            .into_iter()
            .chain(action_high)
            .chain([f32::INFINITY])
            .collect();
        Space::Box {
            shape: vec![low.len() as i64],
            low,
            high,
        }
    }

    fn action_space(&self) -> Space {
        self.action_space.clone()
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        self.tail.fill(0.0);
        let mut obs = self.inner.reset(seed);
        obs.extend_from_slice(&self.tail);
        obs
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut step = self.inner.step(action)?;
        self.remember(action, step.reward);
        step.obs.extend_from_slice(&self.tail);
        Ok(step)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let (head, tail) = obs.split_at_mut(self.obs_dim);
        let step = self.inner.step_into(action, head)?;
        self.remember(action, step.reward);
        tail.copy_from_slice(&self.tail);
        Ok(step)
    }

    fn score_reward(&self) -> Option<f32> {
        self.inner.score_reward()
    }

    fn game_over(&self) -> bool {
        self.inner.game_over()
    }

    fn lives(&self) -> Option<u32> {
        self.inner.lives()
    }

    fn set_task(&mut self, task: &super::Task) -> Result<(), EnvError> {
        self.inner.set_task(task)
    }

    fn success(&self) -> Option<bool> {
        self.inner.success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::{check_env_contract, make};

    #[test]
    fn discrete_actions_append_one_hot_and_the_reward() {
        let mut env = PrevActionReward::new(make("CartPole-v1").unwrap()).unwrap();
        assert_eq!(env.observation_space().flat_dim(), 4 + 2 + 1);
        let first = env.reset(Some(3));
        assert_eq!(&first[4..], &[0.0, 0.0, 0.0]);
        let step = env.step(&Action::Discrete(1)).unwrap();
        assert_eq!(&step.obs[4..], &[0.0, 1.0, 1.0]);
        let mut obs = vec![0.0; 7];
        env.step_into(&Action::Discrete(0), &mut obs).unwrap();
        assert_eq!(&obs[4..], &[1.0, 0.0, 1.0]);
        assert_eq!(&env.reset(None)[4..], &[0.0, 0.0, 0.0]);
        check_env_contract(&mut env);
    }

    #[test]
    fn continuous_actions_append_their_values_and_the_reward() {
        let mut env = PrevActionReward::new(make("Pendulum-v1").unwrap()).unwrap();
        assert_eq!(env.observation_space().flat_dim(), 3 + 1 + 1);
        env.reset(Some(0));
        let step = env.step(&Action::Continuous(vec![0.5])).unwrap();
        assert_eq!(step.obs[3], 0.5);
        assert_eq!(step.obs[4], step.reward);
        check_env_contract(&mut env);
    }
}
