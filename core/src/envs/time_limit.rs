//! [`TimeLimit`], gymnasium's `TimeLimit` wrapper (`gymnasium/wrappers/common.py`): truncates an
//! episode after a fixed number of steps.

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Wraps an env and sets `truncated = true` on the step where the number of steps since the last
/// reset reaches `max_episode_steps`. As in gymnasium, `terminated` and `truncated` are
/// independent: a step that terminates exactly at the limit reports both.
pub struct TimeLimit<E> {
    env: E,
    max_episode_steps: u32,
    elapsed_steps: u32,
}

impl<E: Env> TimeLimit<E> {
    /// Wraps `env` so that its episodes last at most `max_episode_steps` steps.
    pub fn new(env: E, max_episode_steps: u32) -> Self {
        TimeLimit {
            env,
            max_episode_steps,
            elapsed_steps: 0,
        }
    }

    /// The wrapped env.
    pub fn inner(&self) -> &E {
        &self.env
    }

    /// The wrapped env, mutably (e.g. to set a start state after `reset`).
    pub fn inner_mut(&mut self) -> &mut E {
        &mut self.env
    }

    /// Steps taken since the last reset.
    pub fn elapsed_steps(&self) -> u32 {
        self.elapsed_steps
    }

    /// The step limit.
    pub fn max_episode_steps(&self) -> u32 {
        self.max_episode_steps
    }
}

impl<E: Env> Env for TimeLimit<E> {
    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        self.elapsed_steps = 0;
        self.env.reset(seed)
    }

    /// Steps the inner env; a rejected action does not count as a step.
    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut step = self.env.step(action)?;
        self.elapsed_steps = self.elapsed_steps.saturating_add(1);
        if self.elapsed_steps >= self.max_episode_steps {
            step.truncated = true;
        }
        Ok(step)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let mut step = self.env.step_into(action, obs)?;
        self.elapsed_steps = self.elapsed_steps.saturating_add(1);
        if self.elapsed_steps >= self.max_episode_steps {
            step.truncated = true;
        }
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
    use crate::envs::{check_env_contract, make, CartPole};

    #[test]
    fn passes_env_contract() {
        check_env_contract(&mut TimeLimit::new(CartPole::new(), 500));
    }

    #[test]
    fn truncates_at_max_and_resets_count() {
        let mut env = TimeLimit::new(CartPole::new(), 3);
        for _ in 0..2 {
            env.reset(Some(0));
            env.inner_mut().set_state([0.0; 4]);
            let flags: Vec<bool> = (0..3)
                .map(|i| env.step(&Action::Discrete(i % 2)).unwrap().truncated)
                .collect();
            assert_eq!(flags, [false, false, true]);
            assert_eq!(env.elapsed_steps(), 3);
        }
    }

    #[test]
    fn truncated_set_even_when_terminating() {
        let mut env = TimeLimit::new(CartPole::new(), 1);
        env.reset(Some(0));
        env.inner_mut().set_state([2.399, 1.0, 0.0, 0.0]);
        let step = env.step(&Action::Discrete(1)).unwrap();
        assert!(step.terminated && step.truncated);
    }

    #[test]
    fn invalid_action_is_not_counted() {
        let mut env = TimeLimit::new(CartPole::new(), 5);
        env.reset(Some(0));
        assert!(env.step(&Action::Discrete(2)).is_err());
        assert_eq!(env.elapsed_steps(), 0);
    }

    /// From upright, a controller that pushes toward the falling side keeps the pole up, so
    /// `make("CartPole-v1")` ends the episode by truncation at exactly step 500.
    #[test]
    fn cartpole_v1_truncates_at_500() {
        let mut env = make("CartPole-v1").unwrap();
        let mut obs = env.reset(Some(3));
        for t in 1..=500 {
            let action = i64::from(obs[2] + 0.5 * obs[3] > 0.0);
            let step = env.step(&Action::Discrete(action)).unwrap();
            assert!(!step.terminated, "fell at step {t}");
            assert_eq!(step.truncated, t == 500, "step {t}");
            obs = step.obs;
        }
    }
}
