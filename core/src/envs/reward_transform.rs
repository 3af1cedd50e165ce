//! [`RewardTransform`]: scales, normalises and clips the rewards the learner sees (SB3's
//! reward scaling, `VecNormalize`'s reward normalisation, the Atari `ClipRewardEnv`), while
//! episodes keep being reported in the unchanged score.

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// `reward * scale`, then divided by the running standard deviation of the discounted return
/// when normalising, then clipped to `[-clip, clip]` when `clip > 0`.
pub struct RewardTransform<E> {
    env: E,
    scale: f32,
    clip: f32,
    normalize: Option<ReturnScale>,
    score: Option<f32>,
}

impl<E: Env> RewardTransform<E> {
    /// Wraps `env`; `clip = 0` does not clip.
    pub fn new(env: E, scale: f32, clip: f32) -> Self {
        RewardTransform {
            env,
            scale,
            clip,
            normalize: None,
            score: None,
        }
    }

    /// Also divides each (scaled) reward by the running standard deviation of this env's
    /// discounted return with `discount`, as SB3's `VecNormalize(norm_reward=True, gamma)`.
    pub fn normalizing(mut self, discount: f64) -> Self {
        self.normalize = Some(ReturnScale::new(discount));
        self
    }
}

/// The running variance of the discounted return `G <- discount * G + r` (reset to 0 at an
/// episode's end), counted from SB3's prior (mean 0, variance 1, weight 1e-4): the reward's
/// divisor is `sqrt(var + 1e-8)`.
struct ReturnScale {
    discount: f64,
    ret: f64,
    mean: f64,
    var: f64,
    count: f64,
}

impl ReturnScale {
    fn new(discount: f64) -> Self {
        ReturnScale {
            discount,
            ret: 0.0,
            mean: 0.0,
            var: 1.0,
            count: 1e-4,
        }
    }

    /// Folds `reward` into the return and its statistics; returns the normalised reward.
    fn normalize(&mut self, reward: f32, episode_over: bool) -> f32 {
        self.ret = self.ret * self.discount + f64::from(reward);
        // One sample merged into the running moments (Chan et al.'s parallel update).
        let count = self.count + 1.0;
        let delta = self.ret - self.mean;
        self.mean += delta / count;
        self.var = (self.var * self.count + delta * delta * self.count / count) / count;
        self.count = count;
        if episode_over {
            self.ret = 0.0;
        }
        (f64::from(reward) / (self.var + 1e-8).sqrt()) as f32
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
        if let Some(scale) = &mut self.normalize {
            step.reward = scale.normalize(step.reward, step.terminated || step.truncated);
        }
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

    /// The normalised rewards are the reward over the running standard deviation of the
    /// discounted return, computed here by hand from every return seen so far and SB3's prior
    /// (variance 1 at weight 1e-4); the return restarts after an episode; scores stay raw.
    #[test]
    fn normalizing_divides_by_the_running_std_of_the_discounted_return() {
        // Two-step episodes of rewards 3, -1 (the script restarts at each reset).
        let script = || Scripted::new(vec![3.0, -1.0], 2);
        // Not `check_env_contract`: the divisor carries over from earlier episodes by design,
        // so a replay of the same seed and actions gets other rewards.
        let mut env = RewardTransform::new(script(), 1.0, 0.0).normalizing(0.9);
        let (mut returns, mut g) = (Vec::new(), 0.0f64);
        for t in 0..6 {
            if t % 2 == 0 {
                env.reset(Some(0));
                g = 0.0;
            }
            let r = [3.0f32, -1.0][t % 2];
            let step = env.step(&Action::Discrete(0)).unwrap();
            assert_eq!(step.terminated || step.truncated, t % 2 == 1);
            let got = step.reward;
            assert_eq!(env.score_reward(), Some(r));
            g = 0.9 * g + f64::from(r);
            returns.push(g);
            // Moments of the prior (mean 0, var 1, weight 1e-4) and the returns so far.
            let w = 1e-4;
            let n = w + returns.len() as f64;
            let mean = returns.iter().sum::<f64>() / n;
            let second = (w * 1.0 + returns.iter().map(|x| x * x).sum::<f64>()) / n;
            let var = second - mean * mean;
            let want = (f64::from(r) / (var + 1e-8).sqrt()) as f32;
            assert!((got - want).abs() < 1e-4, "step {t}: {got} vs {want}");
        }
    }
}
