//! Meta-World ML1 as a task family (`MetaWorld/<name>` ids, e.g. `MetaWorld/reach-v3`): one
//! Sawyer arm task of the `metaworld` package, whose goal and object positions (Meta-World's
//! `rand_vec`) are the task. ML1 draws them uniformly in the env's random reset space and hides
//! the goal from the observation, redrawing until goal and object are apart. fleetrl draws
//! them the same way (Meta-World's own resets) from a generator seeded by each task's seed
//! ([`Task::draw`]), so every process agrees on a task, and training and held-out test tasks
//! are ML1's kind of split.
//!
//! metaworld 3.1.1 pins mujoco 3.3.0 and does not run on the mujoco 4.0 that gymnasium's
//! MuJoCo envs use here (`reset_mocap_welds` fails on the changed `eq_data` width), so
//! scripts/setup.sh installs it with its own mujoco into `.venv/metaworld`, which host.py puts
//! first on `sys.path` in the process that makes the env.

use pyo3::prelude::*;

use super::{GymEnv, Host};
use crate::envs::{Env, EnvError, Step};
use crate::tasks::Task;
use fleetrl_proto::space::{Action, Space};

/// The id prefix of the Meta-World ML1 task families.
pub const METAWORLD_PREFIX: &str = "MetaWorld/";

/// Where scripts/setup.sh installs metaworld and the mujoco it pins, inside the venv.
const METAWORLD_DIR: &str = "metaworld";

/// One Meta-World env with fleetrl's tasks; Meta-World ends its own episodes (500 steps, or
/// the `max_steps` it was made with).
pub struct MetaWorldTask {
    env: GymEnv,
}

impl MetaWorldTask {
    /// Meta-World v3 env `name` (e.g. `reach-v3`), episodes cut at `max_steps` (0: Meta-World's
    /// 500); its task before any [`Env::set_task`] is the one of draw 0.
    pub fn make(name: &str, max_steps: u32) -> Result<MetaWorldTask, EnvError> {
        let venv = super::find_venv().ok_or_else(|| {
            EnvError::Python(
                "MetaWorld/ ids need the project's .venv (scripts/setup.sh installs metaworld \
                 into .venv/metaworld); set FLEETRL_VENV to it"
                    .into(),
            )
        })?;
        let mut kwargs = toml::Table::new();
        kwargs.insert(
            "metaworld_path".into(),
            toml::Value::String(venv.join(METAWORLD_DIR).to_string_lossy().into_owned()),
        );
        if max_steps > 0 {
            kwargs.insert(
                "max_episode_steps".into(),
                toml::Value::Integer(i64::from(max_steps)),
            );
        }
        Ok(MetaWorldTask {
            env: GymEnv::hosted(Host::MetaWorld, name, &kwargs)?,
        })
    }

    /// The current task's goal position (x, y, z), as Meta-World placed it at the last reset.
    pub fn goal(&self) -> Result<Vec<f32>, EnvError> {
        self.env
            .with_host(|env| env.call_method0("goal").and_then(|g| g.extract()))
    }

    /// The current task as Meta-World stores it: its `rand_vec` (object and goal positions).
    pub fn task_vector(&self) -> Result<Vec<f64>, EnvError> {
        self.env
            .with_host(|env| env.call_method0("task_vector").and_then(|g| g.extract()))
    }
}

impl Env for MetaWorldTask {
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
        self.env.step(action)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        self.env.step_into(action, obs)
    }

    /// Meta-World's `info["success"]` of the last step (false before any step).
    fn success(&self) -> Option<bool> {
        // A getattr on the host object cannot fail once made; an error reads as no flag.
        self.env
            .with_host(|env| env.getattr("success").and_then(|s| s.extract()))
            .ok()
    }

    /// Takes effect at the next reset, as in Meta-World.
    fn set_task(&mut self, task: &Task) -> Result<(), EnvError> {
        self.env
            .with_host(|env| env.call_method1("set_task", (task.draw,)).map(drop))
    }
}
