//! `SparseMountainCar-v0`: the dynamics of [`MountainCar`] (gymnasium 1.4, 200-step limit in
//! [`super::make`]) with a sparse reward: 1 on the step that reaches the goal, 0 on every
//! other step. A random policy practically never reaches the goal in 200 steps, so there is
//! no learning signal until an episode succeeds: the PPO+D test task.

use super::{Env, EnvError, MountainCar, Step};
use fleetrl_proto::space::{Action, Space};

/// Mountain car rewarded only at the goal.
#[derive(Default)]
pub struct SparseMountainCar {
    inner: MountainCar,
}

impl SparseMountainCar {
    /// A new env; call [`Env::reset`] before stepping.
    pub fn new() -> SparseMountainCar {
        SparseMountainCar::default()
    }

    /// The underlying car (its state, for scripted controllers and tests).
    pub fn car(&self) -> &MountainCar {
        &self.inner
    }
}

impl Env for SparseMountainCar {
    fn observation_space(&self) -> Space {
        self.inner.observation_space()
    }

    fn action_space(&self) -> Space {
        self.inner.action_space()
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        self.inner.reset(seed)
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut step = self.inner.step(action)?;
        step.reward = if step.terminated { 1.0 } else { 0.0 };
        Ok(step)
    }
}

/// The hand-written controller `fleetrl record --scripted` plays on both mountain cars: push
/// in the direction of motion (right when at rest), which pumps energy into the swing.
pub fn mountain_car_controller(obs: &[f32]) -> i64 {
    if obs[1] >= 0.0 {
        2
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;
    use fleetrl_runtime::demo::DemoSource;

    #[test]
    fn keeps_the_contract_and_rewards_only_the_goal() {
        check_env_contract(&mut SparseMountainCar::new());
        let episode =
            crate::acting::scripted::play("SparseMountainCar-v0", 3, DemoSource::Scripted).unwrap();
        assert!(
            episode.terminated,
            "the controller reaches the goal in time"
        );
        assert_eq!(episode.total_reward(), 1.0);
        assert_eq!(*episode.rewards.last().unwrap(), 1.0);
        assert!(episode.len() < 200, "{} steps", episode.len());
    }
}
