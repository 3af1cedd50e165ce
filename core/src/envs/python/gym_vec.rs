//! [`GymVecEnv`]: a batch of gymnasium envs (stepped in one loop, or an `AsyncVectorEnv`), or
//! an EnvPool, behind [`BatchEnv`], entered once per batch.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::gym_env::read_f32;
use super::{make_host_env, py_error, Host};
use crate::envs::config::Vectorization;
use crate::envs::{BatchActions, BatchEnv, EnvError, VecStep};
use fleetrl_proto::space::Space;

/// M copies of a gymnasium env in one vector env (or one EnvPool) with same-step auto-reset.
pub struct GymVecEnv {
    library: Host,
    id: String,
    env: Py<PyAny>,
    num_envs: usize,
    observation_space: Space,
    action_space: Space,
    /// Reused buffers: the actions as bytes, and the flag and reward rows read back.
    action_bytes: Vec<u8>,
    flags: Vec<u8>,
    rewards: Vec<f64>,
}

impl GymVecEnv {
    /// `num_envs` copies of gymnasium env `id` (no `gym:` prefix) made with `kwargs`, in one
    /// process or a worker process each (`mode`).
    pub fn new(
        id: &str,
        num_envs: usize,
        kwargs: &toml::Table,
        mode: Vectorization,
    ) -> Result<GymVecEnv, EnvError> {
        GymVecEnv::hosted(Host::Gymnasium, id, num_envs, kwargs, mode)
    }

    /// `num_envs` copies of env `id` (no prefix) of `library` in one batch; `mode` picks
    /// gymnasium's vector env (EnvPool has its own threads).
    pub fn hosted(
        library: Host,
        id: &str,
        num_envs: usize,
        kwargs: &toml::Table,
        mode: Vectorization,
    ) -> Result<GymVecEnv, EnvError> {
        if num_envs == 0 {
            return Err(EnvError::VecMismatch("no envs given".to_string()));
        }
        Python::attach(|py| {
            let (env, observation_space, action_space) =
                make_host_env(py, library, id, Some((num_envs, mode.as_str())), kwargs)?;
            Ok(GymVecEnv {
                library,
                id: id.to_string(),
                env,
                num_envs,
                observation_space,
                action_space,
                action_bytes: Vec::new(),
                flags: vec![0; num_envs],
                rewards: vec![0.0; num_envs],
            })
        })
    }
}

/// Copies a uint8 flag array into `out` through the reused `scratch`.
fn read_flags(
    py: Python<'_>,
    array: &Bound<'_, PyAny>,
    scratch: &mut [u8],
    out: &mut [bool],
) -> PyResult<()> {
    PyBuffer::<u8>::get(array)?.copy_to_slice(py, scratch)?;
    for (o, f) in out.iter_mut().zip(scratch.iter()) {
        *o = *f != 0;
    }
    Ok(())
}

impl BatchEnv for GymVecEnv {
    fn num_envs(&self) -> usize {
        self.num_envs
    }

    fn observation_space(&self) -> Space {
        self.observation_space.clone()
    }

    fn action_space(&self) -> Space {
        self.action_space.clone()
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError> {
        Python::attach(|py| {
            let array = self.env.bind(py).call_method1("reset", (seed,))?;
            read_f32(py, &array, obs)
        })
        .map_err(|e| {
            EnvError::Python(format!(
                "{} `{}` reset: {e}",
                self.library.library(),
                self.id
            ))
        })
    }

    fn step(&mut self, actions: BatchActions<'_>, out: &mut VecStep) -> Result<(), EnvError> {
        self.action_bytes.clear();
        match actions {
            BatchActions::Discrete(a) => a
                .iter()
                .for_each(|v| self.action_bytes.extend_from_slice(&v.to_ne_bytes())),
            BatchActions::Continuous(a) => a
                .iter()
                .for_each(|v| self.action_bytes.extend_from_slice(&v.to_ne_bytes())),
        }
        let dim = self.observation_space.flat_dim();
        Python::attach(|py| {
            let bytes = PyBytes::new(py, &self.action_bytes);
            let env = self.env.bind(py).clone();
            let result = env.call_method1(pyo3::intern!(py, "step"), (bytes,))?;
            let result = result.cast::<PyTuple>()?;
            read_f32(py, &result.get_item(0)?, &mut out.obs)?;
            PyBuffer::<f64>::get(&result.get_item(1)?)?.copy_to_slice(py, &mut self.rewards)?;
            for (o, r) in out.reward.iter_mut().zip(&self.rewards) {
                *o = *r as f32;
            }
            read_flags(
                py,
                &result.get_item(2)?,
                &mut self.flags,
                &mut out.terminated,
            )?;
            read_flags(
                py,
                &result.get_item(3)?,
                &mut self.flags,
                &mut out.truncated,
            )?;
            let final_obs = result.get_item(4)?;
            if final_obs.is_none() {
                out.final_obs.fill(None);
                return Ok(());
            }
            let mut all = vec![0.0f32; self.num_envs * dim];
            read_f32(py, &final_obs, &mut all)?;
            for i in 0..self.num_envs {
                let ended = out.terminated[i] || out.truncated[i];
                out.final_obs[i] = ended.then(|| all[i * dim..(i + 1) * dim].to_vec());
            }
            Ok(())
        })
        .map_err(|e| Python::attach(|py| py_error(py, self.library, &self.id, e)))
    }
}

impl Drop for GymVecEnv {
    fn drop(&mut self) {
        Python::attach(|py| {
            let _ = self.env.bind(py).call_method0("close");
        });
    }
}
