//! PointGoal-v0: 2D point navigation with a goal per task, the MAML paper's meta-RL benchmark
//! (Finn et al. 2017, §5.2; garage's `PointEnv`).
//!
//! A point starts at the origin; each step the action (a velocity in `[-1, 1]^2`, clipped)
//! moves it by `0.1 a`, and the reward is minus its distance to the task's goal after the
//! move. The observation is the position only, so the goal must be found from rewards: a
//! policy adapts to a task or it scores like one that ignores it. Goals are drawn uniformly
//! from `[-0.5, 0.5]^2` per task; without a task the goal is the origin's neighbour
//! `(0.5, 0.5)`. Episodes run the full time limit (100 steps, [`super::TimeLimit`]); heading
//! straight for a goal scores about -2, standing still about -40.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Env, EnvError, Step};
use crate::tasks::Task;
use fleetrl_proto::space::{Action, Space};

/// How far a unit action moves the point in one step.
const SPEED: f32 = 0.1;
/// The point stays within `[-BOUND, BOUND]^2`.
const BOUND: f32 = 2.0;
/// Goals lie in `[-GOAL_RANGE, GOAL_RANGE]^2`.
const GOAL_RANGE: f32 = 0.5;

/// The point-goal task family.
#[derive(Debug, Clone)]
pub struct PointGoal {
    position: [f32; 2],
    goal: [f32; 2],
}

impl PointGoal {
    /// A point at the origin with the default goal; call [`Env::reset`] before stepping.
    pub fn new() -> PointGoal {
        PointGoal {
            position: [0.0; 2],
            goal: [GOAL_RANGE, GOAL_RANGE],
        }
    }

    /// The current task's goal.
    pub fn goal(&self) -> [f32; 2] {
        self.goal
    }
}

impl Default for PointGoal {
    fn default() -> Self {
        PointGoal::new()
    }
}

impl Env for PointGoal {
    fn observation_space(&self) -> Space {
        Space::Box {
            shape: vec![2],
            low: vec![-BOUND; 2],
            high: vec![BOUND; 2],
        }
    }

    fn action_space(&self) -> Space {
        Space::Box {
            shape: vec![2],
            low: vec![-1.0; 2],
            high: vec![1.0; 2],
        }
    }

    /// Every episode starts at the origin; the seed does not matter.
    fn reset(&mut self, _seed: Option<u64>) -> Vec<f32> {
        self.position = [0.0; 2];
        self.position.to_vec()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let v = match action {
            Action::Continuous(v) if v.len() == 2 && v.iter().all(|x| !x.is_nan()) => v,
            other => {
                return Err(EnvError::InvalidAction {
                    action: other.clone(),
                    space: self.action_space(),
                })
            }
        };
        for (p, a) in self.position.iter_mut().zip(v) {
            *p = (*p + SPEED * a.clamp(-1.0, 1.0)).clamp(-BOUND, BOUND);
        }
        let (dx, dy) = (
            self.position[0] - self.goal[0],
            self.position[1] - self.goal[1],
        );
        Ok(Step {
            obs: self.position.to_vec(),
            reward: -(dx * dx + dy * dy).sqrt(),
            terminated: false,
            truncated: false,
        })
    }

    fn set_task(&mut self, task: &Task) -> Result<(), EnvError> {
        let mut rng = SmallRng::seed_from_u64(task.draw);
        self.goal = [
            rng.random_range(-GOAL_RANGE..GOAL_RANGE),
            rng.random_range(-GOAL_RANGE..GOAL_RANGE),
        ];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;
    use crate::tasks::{TaskSet, TasksConfig};

    #[test]
    fn keeps_the_env_contract() {
        check_env_contract(&mut PointGoal::new());
    }

    /// Reward is minus the distance to the task's goal; tasks move the goal, deterministically.
    #[test]
    fn tasks_set_the_goal_and_the_reward_follows_it() {
        let set = TaskSet::new(&TasksConfig::default(), 3);
        let mut env = PointGoal::new();
        env.set_task(&set.get(0).unwrap()).unwrap();
        let g0 = env.goal();
        env.set_task(&set.get(1).unwrap()).unwrap();
        let g1 = env.goal();
        assert_ne!(g0, g1);
        assert!(g1.iter().all(|x| x.abs() <= GOAL_RANGE));
        env.set_task(&set.get(0).unwrap()).unwrap();
        assert_eq!(env.goal(), g0);
        env.reset(None);
        let step = env.step(&Action::Continuous(vec![1.0, -2.0])).unwrap();
        assert_eq!(step.obs, vec![0.1, -0.1]);
        let want = -((0.1 - g0[0]).powi(2) + (-0.1 - g0[1]).powi(2)).sqrt();
        assert!((step.reward - want).abs() < 1e-6);
    }
}
