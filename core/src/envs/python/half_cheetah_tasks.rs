//! HalfCheetah task families for meta-RL, over gymnasium's MuJoCo `HalfCheetah-v5` (the MAML
//! and PEARL papers' locomotion benchmarks; garage's `HalfCheetahVelEnv` and
//! `HalfCheetahDirEnv`).
//!
//! - `HalfCheetahVel-v0`: each task a target forward velocity drawn from `U(0, 2)`; reward
//!   `-|v - target| - 0.05 |a|^2`.
//! - `HalfCheetahDir-v0`: each task a direction, forward or backward; reward
//!   `dir * v - 0.05 |a|^2`.
//!
//! Episodes are 200 steps, as in both papers. gymnasium's own reward with
//! `forward_reward_weight = 1` and `ctrl_cost_weight = 0.05` is `v - 0.05 |a|^2`, so the
//! wrapper recovers the forward velocity `v` from it and the action, and replaces the reward.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::GymEnv;
use crate::envs::{Env, EnvError, Step, TimeLimit};
use crate::tasks::Task;
use fleetrl_proto::space::{Action, Space};

/// garage's control cost weight (0.5 * 0.1).
const CTRL_COST: f32 = 0.05;

/// What a task asks of the cheetah.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// Run at this forward velocity.
    Velocity(f32),
    /// Run forward (+1) or backward (-1) as fast as possible.
    Direction(f32),
}

/// HalfCheetah with a task's reward.
pub struct HalfCheetahTask {
    env: GymEnv,
    goal: Goal,
}

impl HalfCheetahTask {
    /// `HalfCheetahVel-v0` (`velocity`) or `HalfCheetahDir-v0`, cut at `steps` (the papers:
    /// 200); the goal before any task is velocity 1 or direction forward.
    pub fn make(velocity: bool, steps: u32) -> Result<TimeLimit<HalfCheetahTask>, EnvError> {
        let mut kwargs = toml::Table::new();
        kwargs.insert("forward_reward_weight".into(), toml::Value::Float(1.0));
        kwargs.insert(
            "ctrl_cost_weight".into(),
            toml::Value::Float(f64::from(CTRL_COST)),
        );
        let env = GymEnv::new("HalfCheetah-v5", &kwargs)?;
        let goal = if velocity {
            Goal::Velocity(1.0)
        } else {
            Goal::Direction(1.0)
        };
        Ok(TimeLimit::new(HalfCheetahTask { env, goal }, steps))
    }

    /// The current task's goal.
    pub fn goal(&self) -> Goal {
        self.goal
    }
}

impl Env for HalfCheetahTask {
    fn observation_space(&self) -> Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }

    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        self.env.reset(seed)
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut step = self.env.step(action)?;
        let ctrl = match action {
            Action::Continuous(a) => CTRL_COST * a.iter().map(|x| x * x).sum::<f32>(),
            Action::Discrete(_) => 0.0,
        };
        let velocity = step.reward + ctrl;
        step.reward = match self.goal {
            Goal::Velocity(target) => -(velocity - target).abs() - ctrl,
            Goal::Direction(dir) => dir * velocity - ctrl,
        };
        Ok(step)
    }

    fn set_task(&mut self, task: &Task) -> Result<(), EnvError> {
        let mut rng = SmallRng::seed_from_u64(task.draw);
        self.goal = match self.goal {
            Goal::Velocity(_) => Goal::Velocity(rng.random_range(0.0..2.0)),
            Goal::Direction(_) => Goal::Direction(if rng.random_bool(0.5) { 1.0 } else { -1.0 }),
        };
        Ok(())
    }
}
