//! Recording an episode into a [`Demo`] as it is played.

use super::{Demo, DemoActions, DemoSource};
use fleetrl_proto::space::{Action, Space};

/// Builds a [`Demo`] step by step while an episode is played.
#[derive(Debug, Clone)]
pub struct Recorder {
    demo: Demo,
}

impl Recorder {
    /// Starts an episode of `env_id` at its first observation.
    pub fn new(
        env_id: &str,
        source: DemoSource,
        obs_shape: Vec<usize>,
        action_space: &Space,
        first_obs: &[f32],
    ) -> Recorder {
        Recorder {
            demo: Demo {
                env_id: env_id.to_string(),
                source,
                obs_shape,
                observations: first_obs.to_vec(),
                actions: DemoActions::for_space(action_space),
                rewards: Vec::new(),
                values: None,
                terminated: false,
            },
        }
    }

    /// Records one step: the action taken, its reward, the observation after it and, when
    /// the policy has one, its value prediction before the step.
    pub fn push(&mut self, action: &Action, reward: f32, next_obs: &[f32], value: Option<f32>) {
        match (&mut self.demo.actions, action) {
            (DemoActions::Discrete { actions, .. }, Action::Discrete(a)) => actions.push(*a),
            (DemoActions::Continuous { actions, .. }, Action::Continuous(a)) => {
                actions.extend_from_slice(a)
            }
            (kind, action) => panic!("recording {action:?} into {kind:?}: the caller's bug"),
        }
        if let Some(v) = value {
            let step = self.demo.rewards.len();
            let values = self.demo.values.get_or_insert_with(|| vec![0.0; step]);
            values.push(v);
        }
        self.demo.rewards.push(reward);
        self.demo.observations.extend_from_slice(next_obs);
    }

    /// Steps recorded so far.
    pub fn len(&self) -> usize {
        self.demo.len()
    }

    /// True before the first step.
    pub fn is_empty(&self) -> bool {
        self.demo.is_empty()
    }

    /// The finished episode.
    pub fn finish(mut self, terminated: bool) -> Demo {
        self.demo.terminated = terminated;
        self.demo
    }
}
