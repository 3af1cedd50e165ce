//! [`GymEnv`]: one gymnasium env behind the [`Env`] trait, entered once per reset or step.

use pyo3::buffer::PyBuffer;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::{make_host_env, py_error, Host};
use crate::envs::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// One gymnasium env (`gymnasium.make(id, **kwargs)`), or one EnvPool env, observations as
/// flat f32.
pub struct GymEnv {
    library: Host,
    id: String,
    env: Py<PyAny>,
    observation_space: Space,
    action_space: Space,
}

impl GymEnv {
    /// Makes gymnasium env `id` (no `gym:` prefix) with `kwargs`; starts Python on first use.
    pub fn new(id: &str, kwargs: &toml::Table) -> Result<GymEnv, EnvError> {
        GymEnv::hosted(Host::Gymnasium, id, kwargs)
    }

    /// Makes env `id` (no prefix) of `library` with `kwargs`; starts Python on first use.
    pub fn hosted(library: Host, id: &str, kwargs: &toml::Table) -> Result<GymEnv, EnvError> {
        Python::attach(|py| {
            let (env, observation_space, action_space) =
                make_host_env(py, library, id, None, kwargs)?;
            Ok(GymEnv {
                library,
                id: id.to_string(),
                env,
                observation_space,
                action_space,
            })
        })
    }

    /// The ALE action names (`get_action_meanings`), empty for envs without them.
    pub fn action_meanings(&self) -> Result<Vec<String>, EnvError> {
        self.with_host(|env| {
            env.call_method0("action_meanings")
                .and_then(|m| m.extract())
        })
    }

    /// Runs `f` on host.py's object for this env (for a host class's own methods), with a
    /// Python error as an [`EnvError`] naming the env.
    pub(super) fn with_host<T>(
        &self,
        f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
    ) -> Result<T, EnvError> {
        Python::attach(|py| {
            f(self.env.bind(py)).map_err(|e| py_error(py, self.library, &self.id, e))
        })
    }

    fn contains(&self, action: &Action) -> bool {
        match (&self.action_space, action) {
            (Space::Discrete { n }, Action::Discrete(a)) => (0..*n).contains(a),
            (Space::Box { .. }, Action::Continuous(v)) => v.len() == self.action_space.flat_dim(),
            _ => false,
        }
    }
}

/// Copies a float32 array (host.py's `flat`) into a new vector.
pub(super) fn read_f32(py: Python<'_>, array: &Bound<'_, PyAny>, out: &mut [f32]) -> PyResult<()> {
    PyBuffer::<f32>::get(array)?.copy_to_slice(py, out)
}

impl Env for GymEnv {
    fn observation_space(&self) -> Space {
        self.observation_space.clone()
    }

    fn action_space(&self) -> Space {
        self.action_space.clone()
    }

    /// Panics if the library's `reset` raises (the [`Env`] trait's reset cannot fail).
    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        let mut obs = vec![0.0; self.observation_space.flat_dim()];
        Python::attach(|py| {
            let array = self.env.bind(py).call_method1("reset", (seed,))?;
            read_f32(py, &array, &mut obs)
        })
        .unwrap_or_else(|e| panic!("{} `{}` reset: {e}", self.library.library(), self.id));
        obs
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        crate::envs::step_via_into(self, action)
    }

    /// Reads the observation straight into `obs`: no allocation on the Rust side.
    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        if !self.contains(action) {
            return Err(EnvError::InvalidAction {
                action: action.clone(),
                space: self.action_space.clone(),
            });
        }
        Python::attach(|py| {
            let env = self.env.bind(py);
            let mut read = || -> PyResult<Step> {
                let result = match action {
                    Action::Discrete(a) => env.call_method1(intern!(py, "step_discrete"), (*a,)),
                    Action::Continuous(v) => {
                        env.call_method1(intern!(py, "step_continuous"), (v.as_slice(),))
                    }
                }?;
                let result = result.cast_into::<PyTuple>()?;
                read_f32(py, &result.get_item(0)?, obs)?;
                Ok(Step {
                    obs: Vec::new(),
                    reward: result.get_item(1)?.extract()?,
                    terminated: result.get_item(2)?.extract()?,
                    truncated: result.get_item(3)?.extract()?,
                })
            };
            read().map_err(|e| py_error(py, self.library, &self.id, e))
        })
    }

    fn lives(&self) -> Option<u32> {
        self.py_lives()
    }
}

impl GymEnv {
    fn py_lives(&self) -> Option<u32> {
        Python::attach(|py| {
            self.env
                .bind(py)
                .getattr("lives")
                .and_then(|l| l.extract::<Option<u32>>())
                .ok()
                .flatten()
        })
    }
}

impl Drop for GymEnv {
    fn drop(&mut self) {
        Python::attach(|py| {
            let _ = self.env.bind(py).call_method0("close");
        });
    }
}
