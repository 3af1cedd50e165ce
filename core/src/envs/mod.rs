//! Environments: the [`Env`] trait every environment implements (native or hosted), the
//! registry [`make`], wrappers, and [`VecEnv`], a vector of envs with auto-reset.

/// Forwards [`Env::game_over`], [`Env::lives`], [`Env::set_task`] and
/// [`Env::byte_observations`] to the wrapped env in field `$inner`.
macro_rules! forward_game_info {
    ($inner:ident) => {
        fn game_over(&self) -> bool {
            self.$inner.game_over()
        }

        fn lives(&self) -> Option<u32> {
            self.$inner.lives()
        }

        fn set_task(&mut self, task: &crate::tasks::Task) -> Result<(), EnvError> {
            self.$inner.set_task(task)
        }

        fn byte_observations(&self) -> bool {
            self.$inner.byte_observations()
        }

        fn success(&self) -> Option<bool> {
            self.$inner.success()
        }
    };
}

mod acrobot;
mod atari;
mod batch;
mod cartpole;
pub mod config;
mod configured;
mod frame_stack;
mod mask_velocity;
mod minatar;
mod mountain_car;
mod mountain_car_continuous;
mod pendulum;
mod point_goal;
mod point_mass;
mod prev_action_reward;
#[cfg(feature = "python")]
pub mod python;
mod reward_transform;
#[cfg(test)]
mod scripted;
mod sparse_mountain_car;
mod time_limit;
mod vec_env;

use crate::tasks::Task;
use fleetrl_proto::space::{Action, Space};

pub use acrobot::Acrobot;
pub use atari::{AtariPreprocessing, ATARI_SIZE};
pub use batch::{BatchActions, BatchEnv};
pub use cartpole::CartPole;
pub use configured::{make_configured, make_vec, make_vec_per_row};
pub use frame_stack::FrameStack;
pub use mask_velocity::MaskObservation;
pub use minatar::{
    Asterix, Breakout, Draws, Freeway, Game, Input, MinAtar, Seaquest, SpaceInvaders, FULL_ACTIONS,
    STICKY_ACTION_PROB,
};
pub use mountain_car::MountainCar;
pub use mountain_car_continuous::MountainCarContinuous;
pub use pendulum::Pendulum;
pub use point_goal::{hindsight_goals, PointGoal};
pub use point_mass::PointMass;
pub use prev_action_reward::PrevActionReward;
pub use reward_transform::RewardTransform;
pub use sparse_mountain_car::{mountain_car_controller, SparseMountainCar};
pub use time_limit::TimeLimit;
pub use vec_env::{note_success, Episode, VecEnv, VecStep};

/// Why an environment could not be made or stepped.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// No environment is registered under this id.
    #[error(
        "unknown environment `{0}`{hint} (native: {known}; gymnasium ids take the `gym:` prefix, \
         e.g. gym:Hopper-v5, EnvPool task ids the `envpool:` prefix, e.g. envpool:Hopper-v5, \
         the meta-RL task families HalfCheetahVel-v0 and HalfCheetahDir-v0 run on gymnasium's \
         MuJoCo, and Meta-World ML1 envs take the `MetaWorld/` prefix, e.g. MetaWorld/reach-v3, \
         in a build with the `python` feature)",
        hint = crate::suggest::did_you_mean(.0, KNOWN_ENVS.iter().copied()),
        known = KNOWN_ENVS.join(", ")
    )]
    UnknownEnv(String),
    /// The action does not belong to the env's action space.
    #[error("invalid action {action:?} for action space {space:?}")]
    InvalidAction {
        /// The action that was given.
        action: Action,
        /// The env's action space.
        space: Space,
    },
    /// A vector of envs was built or stepped inconsistently: no envs, envs whose spaces
    /// differ, or an action count that is not the number of envs.
    #[error("vector env mismatch: {0}")]
    VecMismatch(String),
    /// The env is not a task family: meta-RL needs one whose tasks it can set.
    #[error(
        "environment `{0}` has no tasks; meta-RL algorithms need a task family such as \
         PointGoal-v0"
    )]
    NoTasks(String),
    /// A gymnasium env (`gym:` id) could not be made or stepped, or Python/gymnasium is
    /// missing; the message says what to install or which id is wrong.
    #[error("{0}")]
    Python(String),
}

impl EnvError {
    /// The error with the env id filled in where the env could not know it
    /// ([`EnvError::NoTasks`]); any other error as it is.
    pub fn naming(self, env_id: &str) -> EnvError {
        match self {
            EnvError::NoTasks(_) => EnvError::NoTasks(env_id.to_string()),
            other => other,
        }
    }
}

/// Ids [`make`] knows.
pub const KNOWN_ENVS: &[&str] = &[
    "CartPole-v1",
    "CartPoleNoVel-v1",
    "PointMass-v0",
    "PointGoal-v0",
    "PointRobotSparse-v0",
    "Pendulum-v1",
    "PendulumNoVel-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "SparseMountainCar-v0",
    "MinAtar/Breakout-v1",
    "MinAtar/SpaceInvaders-v1",
    "MinAtar/Freeway-v1",
    "MinAtar/Asterix-v1",
    "MinAtar/Seaquest-v1",
    "MinAtar/Breakout-v0",
    "MinAtar/SpaceInvaders-v0",
    "MinAtar/Freeway-v0",
    "MinAtar/Asterix-v0",
    "MinAtar/Seaquest-v0",
];

/// Steps after which a MinAtar episode is cut (the `minatar` package sets no limit; Freeway
/// ends itself at 2,501).
pub const MINATAR_MAX_STEPS: u32 = 10_000;

/// What one env step returns, named as gymnasium names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Observation after the step (flattened row-major).
    pub obs: Vec<f32>,
    /// Reward for the step.
    pub reward: f32,
    /// The episode reached a terminal state (no bootstrapping past it).
    pub terminated: bool,
    /// The episode was cut short (time limit); the state is not terminal.
    pub truncated: bool,
}

/// A single environment.
///
/// Contract: `reset` must be called before the first `step` and after any step that
/// returned `terminated || truncated`; stepping past the end is the caller's bug and an env
/// may panic on it. An env is used from one thread at a time (`Send`, not `Sync`).
pub trait Env: Send {
    /// The space observations come from.
    fn observation_space(&self) -> Space;
    /// The space actions must come from.
    fn action_space(&self) -> Space;
    /// Starts a new episode and returns its first observation. `Some(seed)` reseeds the
    /// env's random generator first (same seed, same start); `None` continues its stream.
    fn reset(&mut self, seed: Option<u64>) -> Vec<f32>;
    /// Applies one action.
    fn step(&mut self, action: &Action) -> Result<Step, EnvError>;
    /// [`Env::step`] writing the observation into `obs` (the observation space's flat length)
    /// and returning the step with an empty `obs`: the path [`VecEnv`] steps, which native envs
    /// implement without allocating. The default steps and copies.
    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let mut step = self.step(action)?;
        obs.copy_from_slice(&step.obs);
        step.obs = Vec::new();
        Ok(step)
    }
    /// The last step's reward before reward wrappers changed it (the score an episode's
    /// return is reported in), or `None` when the step's reward is the score.
    fn score_reward(&self) -> Option<f32> {
        None
    }
    /// False after a step that ended an episode only for learning (e.g. an Atari life lost
    /// under episodic life): the reported episode then goes on until the game is over.
    fn game_over(&self) -> bool {
        true
    }
    /// Lives left in a game with lives (ALE), else `None`; drives episodic life.
    fn lives(&self) -> Option<u32> {
        None
    }
    /// Switches to `task` (its parameters drawn from [`Task::draw`]); the next episode runs
    /// in it. Envs that are not a task family refuse with [`EnvError::NoTasks`].
    fn set_task(&mut self, task: &Task) -> Result<(), EnvError> {
        let _ = task;
        Err(EnvError::NoTasks(String::new()))
    }
    /// True when every observation value is a whole number in 0..=255 (pixel frames, 0/1
    /// grids): items then carry observations as bytes, a quarter of f32's size, exactly.
    fn byte_observations(&self) -> bool {
        false
    }
    /// Whether the task counted as solved at the last step (Meta-World's `info["success"]`),
    /// or `None` for an env without such a flag. An episode succeeds when any of its steps
    /// does; evaluations report the share of episodes that did.
    fn success(&self) -> Option<bool> {
        None
    }
}

/// A boxed env is an env, so wrappers stack on envs chosen at run time.
impl Env for Box<dyn Env> {
    fn observation_space(&self) -> Space {
        (**self).observation_space()
    }
    fn action_space(&self) -> Space {
        (**self).action_space()
    }
    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        (**self).reset(seed)
    }
    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        (**self).step(action)
    }
    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        (**self).step_into(action, obs)
    }
    fn score_reward(&self) -> Option<f32> {
        (**self).score_reward()
    }
    fn game_over(&self) -> bool {
        (**self).game_over()
    }
    fn lives(&self) -> Option<u32> {
        (**self).lives()
    }
    fn set_task(&mut self, task: &Task) -> Result<(), EnvError> {
        (**self).set_task(task)
    }
    fn success(&self) -> Option<bool> {
        (**self).success()
    }
    fn byte_observations(&self) -> bool {
        (**self).byte_observations()
    }
}

/// [`Env::step`] for an env that implements [`Env::step_into`]: steps into a new vector.
pub(crate) fn step_via_into<E: Env>(env: &mut E, action: &Action) -> Result<Step, EnvError> {
    let mut obs = vec![0.0; env.observation_space().flat_dim()];
    let mut step = env.step_into(action, &mut obs)?;
    step.obs = obs;
    Ok(step)
}

/// Builds a registered environment, with gymnasium's time limit for that id.
pub fn make(id: &str) -> Result<Box<dyn Env>, EnvError> {
    make_limited(id, 0)
}

/// [`make`] with episodes cut at `max_steps` instead of the id's own limit (0: the id's own).
pub fn make_limited(id: &str, max_steps: u32) -> Result<Box<dyn Env>, EnvError> {
    let limit = |own: u32| if max_steps > 0 { max_steps } else { own };
    match id {
        "CartPole-v1" => Ok(Box::new(TimeLimit::new(CartPole::new(), limit(500)))),
        "CartPoleNoVel-v1" => Ok(Box::new(TimeLimit::new(
            MaskObservation::new(CartPole::new(), vec![0, 2]),
            limit(500),
        ))),
        "PointMass-v0" => Ok(Box::new(TimeLimit::new(PointMass::new(), limit(50)))),
        "PointGoal-v0" => Ok(Box::new(TimeLimit::new(PointGoal::new(), limit(100)))),
        "PointRobotSparse-v0" => Ok(Box::new(TimeLimit::new(PointGoal::sparse(), limit(20)))),
        "Pendulum-v1" => Ok(Box::new(TimeLimit::new(Pendulum::new(), limit(200)))),
        "PendulumNoVel-v1" => Ok(Box::new(TimeLimit::new(
            MaskObservation::new(Pendulum::new(), vec![0, 1]),
            limit(200),
        ))),
        "Acrobot-v1" => Ok(Box::new(TimeLimit::new(Acrobot::new(), limit(500)))),
        "MountainCar-v0" => Ok(Box::new(TimeLimit::new(MountainCar::new(), limit(200)))),
        "MountainCarContinuous-v0" => Ok(Box::new(TimeLimit::new(
            MountainCarContinuous::new(),
            limit(999),
        ))),
        "SparseMountainCar-v0" => Ok(Box::new(TimeLimit::new(
            SparseMountainCar::new(),
            limit(200),
        ))),
        other if other.starts_with("MinAtar/") => minatar(other, limit(MINATAR_MAX_STEPS)),
        #[cfg(feature = "python")]
        "HalfCheetahVel-v0" => Ok(Box::new(python::HalfCheetahTask::make(true, limit(200))?)),
        #[cfg(feature = "python")]
        "HalfCheetahDir-v0" => Ok(Box::new(python::HalfCheetahTask::make(false, limit(200))?)),
        #[cfg(feature = "python")]
        other if other.starts_with(python::METAWORLD_PREFIX) => Ok(Box::new(
            python::MetaWorldTask::make(&other[python::METAWORLD_PREFIX.len()..], max_steps)?,
        )),
        other => make_hosted(other, max_steps),
    }
}

/// The MinAtar game of `id` with the paper's sticky actions, cut at `max_steps`:
/// `MinAtar/<Game>-v1` plays its minimal action set, `MinAtar/<Game>-v0` all six inputs.
fn minatar(id: &str, max_steps: u32) -> Result<Box<dyn Env>, EnvError> {
    fn game<G: Game + 'static>(full: bool, max_steps: u32) -> Box<dyn Env> {
        let game = MinAtar::<G>::new();
        let game = if full { game.full_actions() } else { game };
        Box::new(TimeLimit::new(game, max_steps))
    }
    let unknown = || EnvError::UnknownEnv(id.to_string());
    let (name, full) = match id
        .strip_prefix("MinAtar/")
        .and_then(|n| n.rsplit_once("-v"))
    {
        Some((name, "1")) => (name, false),
        Some((name, "0")) => (name, true),
        _ => return Err(unknown()),
    };
    Ok(match name {
        "Breakout" => game::<Breakout>(full, max_steps),
        "SpaceInvaders" => game::<SpaceInvaders>(full, max_steps),
        "Freeway" => game::<Freeway>(full, max_steps),
        "Asterix" => game::<Asterix>(full, max_steps),
        "Seaquest" => game::<Seaquest>(full, max_steps),
        _ => return Err(unknown()),
    })
}

/// A `gym:` or `envpool:` id's env, with its own time limit set to `max_steps` when not 0.
#[cfg(feature = "python")]
fn make_hosted(id: &str, max_steps: u32) -> Result<Box<dyn Env>, EnvError> {
    let Some((library, id)) = python::hosted_id(id) else {
        return Err(EnvError::UnknownEnv(id.to_string()));
    };
    let mut kwargs = toml::Table::new();
    if max_steps > 0 {
        kwargs.insert(
            "max_episode_steps".into(),
            toml::Value::Integer(i64::from(max_steps)),
        );
    }
    Ok(Box::new(python::GymEnv::hosted(library, id, &kwargs)?))
}

/// Without the `python` feature, every id that is not native is unknown.
#[cfg(not(feature = "python"))]
fn make_hosted(id: &str, _max_steps: u32) -> Result<Box<dyn Env>, EnvError> {
    Err(EnvError::UnknownEnv(id.to_string()))
}

/// Checks that `env` keeps the [`Env`] contract, panicking with a message on the first breach;
/// every env implementation runs it in its tests (like SB3's `check_env`).
///
/// Checks: observations have the observation space's flat length and lie in its bounds; the
/// same seed gives the same start and, under the same actions, the same steps; actions outside
/// the action space are rejected with [`EnvError::InvalidAction`].
pub fn check_env_contract(env: &mut dyn Env) {
    let obs_space = env.observation_space();
    let first = env.reset(Some(42));
    assert_obs_in_space(&obs_space, &first, "reset");
    let run_a = seeded_run(env, 42, 20);
    let run_b = seeded_run(env, 42, 20);
    assert_eq!(
        run_a, run_b,
        "same seed and actions must give the same steps"
    );
    for (t, step) in run_a.iter().enumerate() {
        assert_obs_in_space(&obs_space, &step.obs, &format!("step {t}"));
        assert!(step.reward.is_finite(), "step {t}: reward {}", step.reward);
    }
    env.reset(Some(0));
    for action in invalid_actions(&env.action_space()) {
        let result = env.step(&action);
        assert!(
            matches!(result, Err(EnvError::InvalidAction { .. })),
            "action {action:?} outside the space was not rejected: {result:?}"
        );
    }
}

/// Resets with `seed` and takes up to `steps` steps with a fixed action sequence, stopping when
/// the episode ends; returns the steps taken.
fn seeded_run(env: &mut dyn Env, seed: u64, steps: usize) -> Vec<Step> {
    let space = env.action_space();
    let mut out = Vec::new();
    let first = env.reset(Some(seed));
    out.push(Step {
        obs: first,
        reward: 0.0,
        terminated: false,
        truncated: false,
    });
    for t in 0..steps {
        let action = match &space {
            Space::Discrete { n } => Action::Discrete((t as i64 * 7 + 3) % n),
            Space::Box { low, high, .. } => Action::Continuous(
                low.iter()
                    .zip(high)
                    .map(|(lo, hi)| if t % 2 == 0 { *lo } else { *hi })
                    .collect(),
            ),
        };
        let step = match env.step(&action) {
            Ok(step) => step,
            Err(e) => panic!("step {t}: valid action {action:?} rejected: {e}"),
        };
        let done = step.terminated || step.truncated;
        out.push(step);
        if done {
            break;
        }
    }
    out
}

fn assert_obs_in_space(space: &Space, obs: &[f32], when: &str) {
    assert_eq!(obs.len(), space.flat_dim(), "{when}: observation length");
    if let Space::Box { low, high, .. } = space {
        for (k, v) in obs.iter().enumerate() {
            assert!(
                low[k] <= *v && *v <= high[k],
                "{when}: obs[{k}] = {v} outside [{}, {}]",
                low[k],
                high[k]
            );
        }
    }
}

/// Actions that do not belong to `space`.
fn invalid_actions(space: &Space) -> Vec<Action> {
    match space {
        Space::Discrete { n } => vec![
            Action::Discrete(-1),
            Action::Discrete(*n),
            Action::Continuous(vec![0.0]),
        ],
        Space::Box { .. } => vec![
            Action::Discrete(0),
            Action::Continuous(vec![0.0; space.flat_dim() + 1]),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[env] max_episode_steps` replaces a native env's time limit, shorter or longer.
    #[test]
    fn max_episode_steps_replaces_the_native_limit() {
        for limit in [7u32, 80] {
            let config = super::config::EnvConfig {
                id: "PointMass-v0".into(),
                max_episode_steps: limit,
                ..super::config::EnvConfig::default()
            };
            let mut env = make_configured(&config).unwrap();
            env.reset(Some(0));
            let mut steps = 0;
            loop {
                steps += 1;
                let step = env.step(&Action::Continuous(vec![0.0])).unwrap();
                if step.truncated || step.terminated {
                    break;
                }
            }
            assert_eq!(steps, limit);
        }
    }

    #[test]
    fn every_known_env_is_made_and_keeps_the_contract() {
        for id in KNOWN_ENVS {
            let mut env = make(id).unwrap_or_else(|e| panic!("{id}: {e}"));
            check_env_contract(env.as_mut());
        }
    }
}
