//! Tasks: an env family whose members differ by a parameter (a goal position, a target
//! velocity), as garage's `sample_tasks` / `set_task`. Meta-RL trains on tasks drawn from a
//! training set and is judged on a held-out test set.
//!
//! A task is an id. [`TaskSet`] numbers a run's tasks: ids `0..num_train` are the training
//! tasks and `num_train..num_train + num_test` the held-out test tasks. What a task *is* comes
//! from the env, which draws its parameters from a generator seeded by the run's seed and the
//! id ([`Task::draw`]), so every actor, the learner and `fleetrl eval` agree on task 17's goal
//! without sending it, and a seed fixes the test set.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::config::error::ConfigError;

/// One task, as an env is given it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    /// The task's number in its [`TaskSet`].
    pub id: u32,
    /// Seed of the generator the env draws the task's parameters from.
    pub draw: u64,
}

/// `[tasks]`: how many training and held-out test tasks a meta-RL run has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// Training tasks (garage/PEARL's `num_train_tasks`).
    pub num_train: u32,
    /// Held-out test tasks for meta-evaluation (`num_test_tasks`).
    pub num_test: u32,
    /// A plain on-policy algorithm (no meta-RL) acts each rollout on a random training task
    /// and is evaluated on the test tasks without adapting: the task-agnostic baseline
    /// meta-RL must beat. Tasks change between rollouts, so `actors.rollout_length` should be
    /// the env's episode length.
    pub multi_task: bool,
}

impl Default for TasksConfig {
    fn default() -> Self {
        TasksConfig {
            num_train: 100,
            num_test: 20,
            multi_task: false,
        }
    }
}

impl TasksConfig {
    /// Checks the counts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::config::error::check(self.num_train >= 1, "tasks.num_train", "must be >= 1")?;
        crate::config::error::check(self.num_test >= 1, "tasks.num_test", "must be >= 1")?;
        crate::config::error::check(
            self.num_train.checked_add(self.num_test).is_some(),
            "tasks.num_test",
            "num_train + num_test must fit in 32 bits",
        )
    }
}

/// A task id that is not in the run's task set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown task {id}: this run has training tasks 0..{num_train} and test tasks \
     {num_train}..{end}",
    end = u64::from(*num_train) + u64::from(*num_test)
)]
pub struct UnknownTask {
    /// The id that was given.
    pub id: u64,
    /// Training tasks in the set.
    pub num_train: u32,
    /// Test tasks in the set.
    pub num_test: u32,
}

/// A run's tasks: training ids first, then the held-out test ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSet {
    seed: u64,
    num_train: u32,
    num_test: u32,
}

impl TaskSet {
    /// The task set of a run with `seed`.
    pub fn new(config: &TasksConfig, seed: u64) -> TaskSet {
        TaskSet {
            seed,
            num_train: config.num_train,
            num_test: config.num_test,
        }
    }

    /// A training task, uniformly.
    pub fn sample_train(&self, rng: &mut impl Rng) -> Task {
        self.task(rng.random_range(0..self.num_train))
    }

    /// The held-out test tasks, in order.
    pub fn test_tasks(&self) -> Vec<Task> {
        (self.num_train..self.num_train + self.num_test)
            .map(|id| self.task(id))
            .collect()
    }

    /// Task `id`, or why there is no such task.
    pub fn get(&self, id: u64) -> Result<Task, UnknownTask> {
        let end = u64::from(self.num_train) + u64::from(self.num_test);
        if id >= end {
            return Err(UnknownTask {
                id,
                num_train: self.num_train,
                num_test: self.num_test,
            });
        }
        Ok(self.task(id as u32))
    }

    /// Whether `id` is a training task (what actors may report training on).
    pub fn is_train(&self, id: u64) -> bool {
        id < u64::from(self.num_train)
    }

    fn task(&self, id: u32) -> Task {
        // splitmix64 of (seed, id): neighbouring ids and seeds draw unrelated parameters.
        let mut z = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(
            u64::from(id)
                .wrapping_add(1)
                .wrapping_mul(0xBF58_476D_1CE4_E5B9),
        );
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Task {
            id,
            draw: z ^ (z >> 31),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn train_and_test_ids_do_not_overlap_and_unknown_ids_are_named() {
        let set = TaskSet::new(
            &TasksConfig {
                num_train: 5,
                num_test: 3,
                multi_task: false,
            },
            7,
        );
        let test: Vec<u32> = set.test_tasks().iter().map(|t| t.id).collect();
        assert_eq!(test, vec![5, 6, 7]);
        let mut rng = rand::rng();
        for _ in 0..100 {
            assert!(set.sample_train(&mut rng).id < 5);
        }
        assert!(set.is_train(4) && !set.is_train(5));
        let err = set.get(8).unwrap_err().to_string();
        assert!(
            err.contains("unknown task 8") && err.contains("5..8"),
            "{err}"
        );
        // The same seed and id always give the same draw; another seed another one.
        assert_eq!(set.get(3).unwrap(), set.get(3).unwrap());
        let other = TaskSet::new(&TasksConfig::default(), 8);
        assert_ne!(set.get(3).unwrap().draw, other.get(3).unwrap().draw);
    }
}
