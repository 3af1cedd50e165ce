//! [`RewardTransform`]: scales and clips the rewards the learner sees (SB3's reward scaling,
//! the Atari `ClipRewardEnv`), while episodes keep being reported in the unchanged score.

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// `reward * scale`, then clipped to `[-clip, clip]` when `clip > 0`.
pub struct RewardTransform<E> {
    env: E,
    scale: f32,
    clip: f32,
    score: Option<f32>,
}

impl<E: Env> RewardTransform<E> {
    /// Wraps `env`; `clip = 0` does not clip.
    pub fn new(env: E, scale: f32, clip: f32) -> Self {
        RewardTransform {
            env,
            scale,
            clip,
            score: None,
        }
    }
}

impl<E: Env> Env for RewardTransform<E> {
    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        self.score = None;
        self.env.reset(seed)
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut step = self.env.step(action)?;
        self.score = Some(self.env.score_reward().unwrap_or(step.reward));
        step.reward *= self.scale;
        if self.clip > 0.0 {
            step.reward = step.reward.clamp(-self.clip, self.clip);
        }
        Ok(step)
    }

    fn score_reward(&self) -> Option<f32> {
        self.score
    }

    forward_game_info!(env);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::scripted::Scripted;
    use crate::envs::{check_env_contract, VecEnv};

    #[test]
    fn scales_then_clips_and_reports_the_raw_score() {
        let mut env = RewardTransform::new(Scripted::new(vec![3.0, -0.2, 0.5], 3), 0.5, 1.0);
        check_env_contract(&mut env);
        env.reset(Some(0));
        let rewards: Vec<(f32, Option<f32>)> = (0..3)
            .map(|_| {
                let r = env.step(&Action::Discrete(0)).unwrap().reward;
                (r, env.score_reward())
            })
            .collect();
        assert_eq!(
            rewards,
            [(1.0, Some(3.0)), (-0.1, Some(-0.2)), (0.25, Some(0.5))]
        );
        let mut venv = VecEnv::new(vec![Box::new(RewardTransform::new(
            Scripted::new(vec![3.0, -0.2, 0.5], 3),
            0.5,
            1.0,
        ))])
        .unwrap();
        venv.reset(0);
        for _ in 0..3 {
            venv.step_discrete(&[0]).unwrap();
        }
        let episodes = venv.drain_episodes();
        assert_eq!(episodes.len(), 1);
        assert!((episodes[0].return_ - 3.3).abs() < 1e-6, "{episodes:?}");
    }
}
