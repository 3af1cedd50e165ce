//! gymnasium envs inside fleetrl's processes through an embedded CPython (PyO3), behind the
//! same [`Env`](super::Env) trait and [`VecEnv`](super::VecEnv) as the native envs.
//!
//! Ids prefixed `gym:` (e.g. `gym:Hopper-v5`, `gym:ALE/Pong-v5`) are made with
//! `gymnasium.make(id, **kwargs)`, the kwargs coming from `[env] kwargs`. [`GymEnv`] hosts one
//! env (entered once per step, for Rust wrappers such as Atari preprocessing); [`GymVecEnv`]
//! hosts a batch of envs with same-step auto-reset, entered once per batch: stepped in one
//! loop in host.py (`vectorization = "sync"`), or an `AsyncVectorEnv` (`"async"`).
//! `envpool:` ids are hosted the same ways by EnvPool, and `MetaWorld/` ids (Meta-World ML1
//! task families, [`MetaWorldTask`]) one env per row, from metaworld's own directory.
//!
//! The interpreter starts only when the first gymnasium env is made, so binaries that run
//! native envs never touch Python. At that point the project's virtualenv is found without
//! activation (`FLEETRL_VENV`, else `VIRTUAL_ENV`, else a `.venv` beside an ancestor of the
//! executable or of the working directory) and its site-packages is added to `sys.path`.

mod gym_env;
mod gym_vec;
mod half_cheetah_tasks;
mod metaworld;

use std::ffi::CString;
use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyModule, PyTuple};

pub use gym_env::GymEnv;
pub use gym_vec::GymVecEnv;
pub use half_cheetah_tasks::{Goal, HalfCheetahTask};
pub use metaworld::{MetaWorldTask, METAWORLD_PREFIX};

use super::{EnvError, Space};

/// Prefix that routes an env id to gymnasium.
pub const GYM_PREFIX: &str = "gym:";

/// Prefix that routes an env id to EnvPool (`envpool.make_gymnasium`), e.g.
/// `envpool:CartPole-v1`, `envpool:Hopper-v5`, `envpool:Pong-v5`.
pub const ENVPOOL_PREFIX: &str = "envpool:";

/// Which Python library hosts an env.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// `gymnasium.make`, one env or a batch (an `AsyncVectorEnv` for `"async"`): `gym:` ids.
    Gymnasium,
    /// An EnvPool of one env or of a whole batch, with same-step auto-reset: `envpool:` ids.
    EnvPool,
    /// One Meta-World env with fleetrl's tasks (`MetaWorld/` ids), never batched.
    MetaWorld,
}

impl Host {
    /// What host.py makes one env and a batch with.
    fn classes(self) -> (&'static str, &'static str) {
        match self {
            Host::Gymnasium => ("Single", "vector"),
            Host::EnvPool => ("EnvPoolSingle", "EnvPoolVector"),
            Host::MetaWorld => ("MetaWorldSingle", ""),
        }
    }

    fn library(self) -> &'static str {
        match self {
            Host::Gymnasium => "gymnasium",
            Host::EnvPool => "EnvPool",
            Host::MetaWorld => "Meta-World",
        }
    }
}

/// The host module (host.py), made once per process; `Err` holds why Python or gymnasium
/// could not be loaded, with what to install. A `PyOnceLock` releases the interpreter while
/// waiting for another thread's initialisation (a `std` lock would deadlock on the GIL).
static HOST: PyOnceLock<Result<Py<PyModule>, String>> = PyOnceLock::new();

/// The host module, starting the interpreter and importing gymnasium on first use.
fn host(py: Python<'_>) -> Result<Bound<'_, PyModule>, EnvError> {
    let host = HOST.get_or_init(py, || load_host(py));
    match host {
        Ok(module) => Ok(module.bind(py).clone()),
        Err(message) => Err(EnvError::Python(message.clone())),
    }
}

fn load_host(py: Python<'_>) -> Result<Py<PyModule>, String> {
    let venv = find_venv();
    if let Some(site) = venv.as_deref().and_then(|v| site_packages(py, v)) {
        let added = py
            .import("site")
            .and_then(|site_mod| site_mod.call_method1("addsitedir", (site.to_string_lossy(),)));
        if let Err(e) = added {
            return Err(format!("adding {} to sys.path: {e}", site.display()));
        }
    }
    let where_ = venv.map_or_else(
        || "no .venv found; set FLEETRL_VENV to the virtualenv".to_string(),
        |v| format!("venv {}", v.display()),
    );
    if let Err(e) = py.import("gymnasium") {
        return Err(format!(
            "gymnasium is not importable ({where_}): run `.venv/bin/pip install gymnasium==1.4.0` \
             (add `mujoco` for MuJoCo envs, `ale-py` for ALE/ envs), or scripts/setup.sh: {e}"
        ));
    }
    let code = CString::new(include_str!("host.py")).expect("host.py has no NUL");
    PyModule::from_code(py, &code, c"fleetrl_host.py", c"fleetrl_host")
        .map(Bound::unbind)
        .map_err(|e| format!("loading fleetrl's gymnasium host: {e}"))
}

/// The virtualenv whose site-packages gymnasium is taken from.
fn find_venv() -> Option<PathBuf> {
    for var in ["FLEETRL_VENV", "VIRTUAL_ENV"] {
        if let Some(dir) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(dir));
        }
    }
    let starts = [std::env::current_exe().ok(), std::env::current_dir().ok()];
    starts
        .into_iter()
        .flatten()
        .flat_map(|start| {
            start
                .ancestors()
                .map(|dir| dir.join(".venv"))
                .collect::<Vec<_>>()
        })
        .find(|venv| venv.join("pyvenv.cfg").is_file())
}

/// `VENV/lib/pythonX.Y/site-packages` for the running interpreter's X.Y.
fn site_packages(py: Python<'_>, venv: &Path) -> Option<PathBuf> {
    let version = py.version_info();
    let dir = venv
        .join("lib")
        .join(format!("python{}.{}", version.major, version.minor))
        .join("site-packages");
    dir.is_dir().then_some(dir)
}

/// A Python error as an [`EnvError`], with the hint that fits its kind.
fn py_error(py: Python<'_>, library: Host, id: &str, err: PyErr) -> EnvError {
    let kind = err
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let hint = match kind.as_str() {
        // host.py's Meta-World errors name the env and the fix themselves.
        _ if library == Host::MetaWorld => format!("Meta-World env `{id}`"),
        "NameNotFound" | "NamespaceNotFound" | "VersionNotFound" | "DeprecatedEnv" => {
            format!("`{id}` is not a registered gymnasium env id")
        }
        // gymnasium's `module:EnvId`: the user's own module must be importable.
        "ModuleNotFoundError" | "ImportError" if id.contains(':') => format!(
            "`{id}` names the Python module `{}`, which is not importable: put its directory \
             on PYTHONPATH (or install it into .venv)",
            id.split(':').next().unwrap_or_default()
        ),
        "DependencyNotInstalled" | "ModuleNotFoundError" | "ImportError" => format!(
            "`{id}` needs a Python package that is not installed in .venv \
             (MuJoCo envs: `.venv/bin/pip install mujoco`, ALE/ envs: `ale-py`, envpool: ids: \
             `envpool`)"
        ),
        _ => format!("{} env `{id}`", library.library()),
    };
    EnvError::Python(format!("{hint}: {err}"))
}

/// Builds `kwargs` as a Python dict.
fn kwargs_dict<'py>(py: Python<'py>, kwargs: &toml::Table) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in kwargs {
        dict.set_item(key, toml_to_py(py, value)?)?;
    }
    Ok(dict)
}

fn toml_to_py<'py>(py: Python<'py>, value: &toml::Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        toml::Value::String(s) => s.into_pyobject(py)?.into_any(),
        toml::Value::Integer(i) => i.into_pyobject(py)?.into_any(),
        toml::Value::Float(f) => f.into_pyobject(py)?.into_any(),
        toml::Value::Boolean(b) => b.into_pyobject(py)?.to_owned().into_any(),
        toml::Value::Datetime(d) => d.to_string().into_pyobject(py)?.into_any(),
        toml::Value::Array(items) => {
            let items = items
                .iter()
                .map(|v| toml_to_py(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        toml::Value::Table(table) => kwargs_dict(py, table)?.into_any(),
    })
}

/// Reads host.py's `('discrete', n, start)` / `('box', shape, low, high)` description.
fn parse_space(desc: &Bound<'_, PyAny>) -> PyResult<Space> {
    let desc = desc.cast::<PyTuple>()?;
    let kind: String = desc.get_item(0)?.extract()?;
    if kind == "discrete" {
        return Ok(Space::Discrete {
            n: desc.get_item(1)?.extract()?,
        });
    }
    Ok(Space::Box {
        shape: desc.get_item(1)?.extract()?,
        low: desc.get_item(2)?.extract()?,
        high: desc.get_item(3)?.extract()?,
    })
}

/// Makes host.py's one-env class for `library`, or its batch of `num_envs`, and reads its
/// spaces.
fn make_host_env(
    py: Python<'_>,
    library: Host,
    id: &str,
    vector: Option<(usize, &str)>,
    kwargs: &toml::Table,
) -> Result<(Py<PyAny>, Space, Space), EnvError> {
    let host = host(py)?;
    let (single, batch) = library.classes();
    let made = (|| {
        let kwargs = kwargs_dict(py, kwargs)?;
        let env = match (vector, library) {
            (None, _) => host.getattr(single)?.call1((id, kwargs))?,
            (Some((n, mode)), Host::Gymnasium) => {
                host.getattr(batch)?.call1((id, n, kwargs, mode))?
            }
            // EnvPool steps its envs on its own threads: there is no mode to pick.
            (Some((n, _)), Host::EnvPool) => host.getattr(batch)?.call1((id, n, kwargs))?,
            (Some(_), Host::MetaWorld) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "Meta-World envs are hosted one per row (each has its own task)",
                ))
            }
        };
        let obs = parse_space(&env.getattr("obs_space")?)?;
        let act = parse_space(&env.getattr("act_space")?)?;
        Ok::<_, PyErr>((env.unbind(), obs, act))
    })();
    made.map_err(|e| py_error(py, library, id, e))
}

/// The library that hosts `id` and the id it knows, for a `gym:` or `envpool:` id.
pub fn hosted_id(id: &str) -> Option<(Host, &str)> {
    if let Some(rest) = id.strip_prefix(GYM_PREFIX) {
        return Some((Host::Gymnasium, rest));
    }
    id.strip_prefix(ENVPOOL_PREFIX)
        .map(|rest| (Host::EnvPool, rest))
}
