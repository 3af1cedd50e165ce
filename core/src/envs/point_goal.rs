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
//!
//! PointRobotSparse-v0 is the PEARL paper's sparse point robot (Rakelly et al. 2019, §6.3):
//! goals on the upper half of the unit circle, the same dynamics, and a score only inside
//! the goal's radius 0.2 (`1 - distance` there, 0 elsewhere); 20-step episodes. As in the
//! paper's code, the reward an algorithm trains on stays the dense `-distance` and the sparse
//! one is the score ([`Env::score_reward`]): what episodes report, what evaluation measures
//! and what PEARL's context encoder sees.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use tch::{Kind, Tensor};

use super::{Env, EnvError, Step};
use crate::tasks::Task;
use fleetrl_proto::space::{Action, Space};

/// How far a unit action moves the point in one step.
const SPEED: f32 = 0.1;
/// The point stays within `[-BOUND, BOUND]^2`.
const BOUND: f32 = 2.0;
/// Goals lie in `[-GOAL_RANGE, GOAL_RANGE]^2`.
const GOAL_RANGE: f32 = 0.5;

/// The sparse robot's goal radius.
const SPARSE_RADIUS: f32 = 0.2;

/// The point-goal task family.
#[derive(Debug, Clone)]
pub struct PointGoal {
    position: [f32; 2],
    goal: [f32; 2],
    /// The sparse robot: goals on the half circle, score only within the radius.
    sparse: bool,
    /// The sparse robot's score of the last step.
    score: f32,
}

impl PointGoal {
    /// A point at the origin with the default goal; call [`Env::reset`] before stepping.
    pub fn new() -> PointGoal {
        PointGoal {
            position: [0.0; 2],
            goal: [GOAL_RANGE, GOAL_RANGE],
            sparse: false,
            score: 0.0,
        }
    }

    /// The sparse point robot, its default goal straight up.
    pub fn sparse() -> PointGoal {
        PointGoal {
            position: [0.0; 2],
            goal: [0.0, 1.0],
            sparse: true,
            score: 0.0,
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
        self.score = 0.0;
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
        let distance = (dx * dx + dy * dy).sqrt();
        self.score = if distance <= SPARSE_RADIUS {
            1.0 - distance
        } else {
            0.0
        };
        Ok(Step {
            obs: self.position.to_vec(),
            reward: -distance,
            terminated: false,
            truncated: false,
        })
    }

    /// The sparse robot's score; the dense goal env's score is its reward.
    fn score_reward(&self) -> Option<f32> {
        self.sparse.then_some(self.score)
    }

    /// The sparse robot: whether the last step was within the goal's radius (an episode that
    /// got there succeeded, as the PEARL paper counts it); the dense goal env has no flag.
    fn success(&self) -> Option<bool> {
        self.sparse.then_some(self.score > 0.0)
    }

    fn set_task(&mut self, task: &Task) -> Result<(), EnvError> {
        let mut rng = SmallRng::seed_from_u64(task.draw);
        self.goal = if self.sparse {
            let angle: f32 = rng.random_range(0.0..std::f32::consts::PI);
            [angle.cos(), angle.sin()]
        } else {
            [
                rng.random_range(-GOAL_RANGE..GOAL_RANGE),
                rng.random_range(-GOAL_RANGE..GOAL_RANGE),
            ]
        };
        Ok(())
    }
}

/// Hindsight task relabelling of sparse-robot rounds (after Packer et al. 2021, "Hindsight
/// Task Relabelling: Experience Replay for Sparse Reward Meta-RL"): a round that never found
/// its goal says little, but it is a round that found another goal of the family.
///
/// Of K rounds of positions after each step, `next_obs` `[K, N, 2]`, each is taken with
/// probability `fraction`; one of its steps within the goal radius of the upper half circle
/// is drawn at random, and the goal on the half circle at that step's angle becomes the
/// round's. Its rewards (`-distance`) and scores are recomputed for that goal as
/// [`PointGoal`]'s step computes them. A round that is not taken, or none of whose steps came
/// that near, keeps its own `reward` and `score` (`[K, N]`). Returns the new (reward, score).
pub fn hindsight_goals(
    next_obs: &Tensor,
    reward: &Tensor,
    score: &Tensor,
    fraction: f64,
) -> (Tensor, Tensor) {
    let _guard = tch::no_grad_guard();
    let (k, n) = (next_obs.size()[0], next_obs.size()[1]);
    let device = next_obs.device();
    let (x, y) = (next_obs.select(2, 0), next_obs.select(2, 1));
    let radius = (x.square() + y.square()).sqrt();
    let near = (radius - 1.0)
        .abs()
        .le(f64::from(SPARSE_RADIUS))
        .logical_and(&y.ge(0.0));
    // Near steps draw keys in [1, 2), the others in [0, 1): the largest is a random near step.
    let keys = Tensor::rand([k, n], (Kind::Float, device)) + near.to_kind(Kind::Float);
    let pick = keys.argmax(1, true);
    let angle = y
        .gather(1, &pick, false)
        .atan2(&x.gather(1, &pick, false))
        .clamp(0.0, std::f64::consts::PI);
    let goal = Tensor::stack(&[angle.cos(), angle.sin()], -1);
    let distance = (next_obs - goal)
        .square()
        .sum_dim_intlist(2, false, Kind::Float)
        .sqrt();
    let inside = distance.le(f64::from(SPARSE_RADIUS));
    let new_score = (-&distance + 1.0).where_self(&inside, &distance.zeros_like());
    let taken = Tensor::rand([k, 1], (Kind::Float, device))
        .lt(fraction)
        .logical_and(&near.any_dim(1, true));
    (
        (-distance).where_self(&taken, reward),
        new_score.where_self(&taken, score),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;
    use crate::tasks::{TaskSet, TasksConfig};

    #[test]
    fn keeps_the_env_contract() {
        check_env_contract(&mut PointGoal::new());
        check_env_contract(&mut PointGoal::sparse());
    }

    /// Sparse goals lie on the upper unit half circle; the score is 0 until the point is
    /// within 0.2 of the goal, then 1 - distance, while the reward stays -distance.
    #[test]
    fn sparse_robot_rewards_only_near_the_goal() {
        let set = TaskSet::new(&TasksConfig::default(), 1);
        let mut env = PointGoal::sparse();
        for id in 0..20 {
            env.set_task(&set.get(id).unwrap()).unwrap();
            let [x, y] = env.goal();
            assert!((x * x + y * y - 1.0).abs() < 1e-5 && y >= 0.0, "{x}, {y}");
        }
        env.reset(None);
        let [gx, gy] = env.goal();
        let toward = Action::Continuous(vec![gx, gy]);
        let mut rewards = Vec::new();
        let mut successes = Vec::new();
        assert_eq!(PointGoal::new().success(), None);
        for i in 0..10 {
            let step = env.step(&toward).unwrap();
            let distance = 1.0 - 0.1 * (i + 1) as f32;
            assert!(
                (step.reward + distance).abs() < 1e-4,
                "{i}: {}",
                step.reward
            );
            rewards.push(env.score_reward().unwrap());
            successes.push(env.success().unwrap());
        }
        // Success is being within the radius (the 8th step lands on its edge).
        assert!(!successes[..7].iter().any(|&s| s), "{successes:?}");
        assert!(successes[8..].iter().all(|&s| s), "{successes:?}");
        // After 7 unit steps the point is 0.3 from the goal, after 8 0.2, after 9 0.1.
        assert!(rewards[..7].iter().all(|&r| r == 0.0), "{rewards:?}");
        assert!((rewards[8] - 0.9).abs() < 1e-4, "{rewards:?}");
    }

    /// Hindsight goals: a taken round gets the half circle's goal at its one step near it,
    /// and the env's rewards and scores for that goal; a round that is not taken, or that never
    /// came near the half circle, keeps its own; about `fraction` of the rounds are taken.
    #[test]
    fn hindsight_goals_relabel_rounds_with_a_goal_they_reached() {
        // Round 0 crosses the half circle once, at (0.6, 0.8); round 1 never comes near it.
        let path = [[0.1, 0.0], [0.3, 0.2], [0.6, 0.8], [1.5, 1.5]];
        let stay = [[0.1, 0.0], [0.2, 0.0], [0.3, 0.1], [0.2, -0.3]];
        let next_obs: Vec<f32> = path.iter().chain(&stay).flatten().copied().collect();
        let next_obs = Tensor::from_slice(&next_obs).view([2, 4, 2]);
        let own = Tensor::full([2, 4], -7.0, (Kind::Float, tch::Device::Cpu));
        let (reward, score) = hindsight_goals(&next_obs, &own, &own, 1.0);
        // The env's own reward and score with the goal at (0.6, 0.8), standing at each point.
        let mut env = PointGoal::sparse();
        env.goal = [0.6, 0.8];
        let reward = Vec::<f32>::try_from(reward.flatten(0, -1)).unwrap();
        let score = Vec::<f32>::try_from(score.flatten(0, -1)).unwrap();
        for (t, p) in path.iter().enumerate() {
            env.position = *p;
            let step = env.step(&Action::Continuous(vec![0.0, 0.0])).unwrap();
            assert!((reward[t] - step.reward).abs() < 1e-5, "{t}: {reward:?}");
            let want = env.score_reward().unwrap();
            assert!((score[t] - want).abs() < 1e-5, "{t}: {score:?}");
        }
        assert!(score[2] > 0.99, "{score:?}");
        assert_eq!(&reward[4..], &[-7.0; 4]);
        assert_eq!(&score[4..], &[-7.0; 4]);
        let (reward, _) = hindsight_goals(&next_obs, &own, &own, 0.0);
        assert_eq!(
            Vec::<f32>::try_from(reward.flatten(0, -1)).unwrap(),
            vec![-7.0; 8]
        );
        // 400 copies of round 0 at a half: about 200 taken.
        let many = next_obs
            .narrow(0, 0, 1)
            .expand([400, 4, 2], false)
            .contiguous();
        let own = Tensor::full([400, 4], -7.0, (Kind::Float, tch::Device::Cpu));
        let (reward, _) = hindsight_goals(&many, &own, &own, 0.5);
        let taken = reward
            .ne(-7.0)
            .any_dim(1, false)
            .sum(Kind::Int64)
            .int64_value(&[]);
        assert!((140..=260).contains(&taken), "{taken} of 400 taken");
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
