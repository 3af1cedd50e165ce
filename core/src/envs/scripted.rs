//! A tiny scripted env for wrapper tests: observation `[t, seed-dependent offset, last action]`,
//! reward `rewards[t]`, terminated after `len` steps.

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Steps through `rewards`; the observation is `[t, offset, last action]`.
pub(crate) struct Scripted {
    rewards: Vec<f32>,
    len: usize,
    t: usize,
    offset: f32,
    last_action: f32,
    /// Lives left (counts down one every `len / 2` steps when set), for episodic-life tests.
    pub(crate) lives: Option<u32>,
}

impl Scripted {
    /// An env whose episode lasts `len` steps with rewards `rewards[t % rewards.len()]`.
    pub(crate) fn new(rewards: Vec<f32>, len: usize) -> Scripted {
        Scripted {
            rewards,
            len,
            t: 0,
            offset: 0.0,
            last_action: 0.0,
            lives: None,
        }
    }

    fn obs(&self) -> Vec<f32> {
        vec![self.t as f32, self.offset, self.last_action]
    }
}

impl Env for Scripted {
    fn observation_space(&self) -> Space {
        Space::Box {
            shape: vec![3],
            low: vec![0.0; 3],
            high: vec![1e6; 3],
        }
    }

    fn action_space(&self) -> Space {
        Space::Discrete { n: 4 }
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.offset = (seed % 97) as f32;
        }
        self.t = 0;
        self.last_action = 0.0;
        self.obs()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let a = match action {
            Action::Discrete(a) if (0..4).contains(a) => *a,
            _ => {
                return Err(EnvError::InvalidAction {
                    action: action.clone(),
                    space: self.action_space(),
                })
            }
        };
        let reward = self.rewards[self.t % self.rewards.len()];
        self.t += 1;
        self.last_action = a as f32;
        if let Some(lives) = &mut self.lives {
            if self.t.is_multiple_of((self.len / 2).max(1)) {
                *lives = lives.saturating_sub(1);
            }
        }
        Ok(Step {
            obs: self.obs(),
            reward,
            terminated: self.t >= self.len,
            truncated: false,
        })
    }

    fn lives(&self) -> Option<u32> {
        self.lives
    }
}
