//! The user's own network (`model.torchscript`): a `torch.jit.script`ed `nn.Module` saved
//! from PyTorch, loaded through libtorch with its parameters in the model's `VarStore` (under
//! `script.`, by the module's own parameter names), so the learner's optimiser trains them and
//! the weight broadcast and checkpoints carry them as every other parameter.
//!
//! The actor-critic interface: `forward(obs: Tensor[N, D]) -> (policy, value)`, where policy
//! is the logits `[N, n]` of a discrete action or the mean `[N, A]` of a Gaussian one and
//! value is `[N, 1]` or `[N]`. A Gaussian policy's log-std is fleetrl's learned,
//! state-independent `pi.log_std` (`model.init_log_std`), unless forward returns three
//! tensors, `(mean, log_std, value)`, with log_std `[N, A]` or `[A]`. The module is probed
//! with a batch of zeros when it loads, and one that does not fit is refused there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tch::{nn, CModule, Device, IValue, Kind, Tensor};

use super::ModelError;

/// The batch a module is probed with when it loads: more than one row, so a module that
/// drops the batch dimension is caught.
const PROBE_ROWS: i64 = 2;

/// What the policy part of a module's output stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PolicyOut {
    /// Logits of a categorical over `n` actions.
    Logits(i64),
    /// The mean of a diagonal Gaussian over `A` dimensions.
    Mean(i64),
}

/// A loaded TorchScript actor-critic; cheap to clone as a handle on the same module.
#[derive(Debug, Clone)]
pub(crate) struct ScriptNet {
    module: Arc<CModule>,
    /// The file it came from, for messages.
    path: PathBuf,
    /// Whether forward returns a log-std between the mean and the value.
    own_log_std: bool,
}

/// One forward pass.
#[derive(Debug)]
pub(crate) struct ScriptOut {
    /// Logits `[N, n]` or mean `[N, A]`.
    pub(crate) policy: Tensor,
    /// The module's own log-std (`[N, A]` or `[A]`), when it returns one.
    pub(crate) log_std: Option<Tensor>,
    /// V(s) `[N]`.
    pub(crate) value: Tensor,
}

/// The error for a module that cannot be used, naming its file and what was expected.
fn refuse(path: &Path, message: impl std::fmt::Display) -> ModelError {
    ModelError::Config {
        key: "model.torchscript",
        message: format!("{}: {message}", path.display()),
    }
}

/// What forward must return, for messages.
fn interface(obs_dim: i64, policy: PolicyOut) -> String {
    let head = match policy {
        PolicyOut::Logits(n) => format!("logits [N, {n}]"),
        PolicyOut::Mean(a) => format!("mean [N, {a}] (optionally then log_std [N, {a}] or [{a}])"),
    };
    format!("forward(obs: Tensor[N, {obs_dim}]) -> ({head}, value [N, 1] or [N])")
}

impl ScriptNet {
    /// Loads the module at `path` onto `root`'s device, registers its parameters under `root`
    /// (a parameter `body.0.weight` becomes `script.body.0.weight` when `root` is `script`)
    /// and probes it with a batch of zeros `[2, obs_dim]`.
    pub(crate) fn load(
        path: &Path,
        root: &nn::Path,
        obs_dim: i64,
        policy: PolicyOut,
    ) -> Result<ScriptNet, ModelError> {
        let mut module = CModule::load_on_device(path, root.device()).map_err(|e| {
            refuse(
                path,
                format!("is not a TorchScript module (save one with torch.jit.save(torch.jit.script(module), path)): {e}"),
            )
        })?;
        module
            .f_set_eval()
            .map_err(|e| refuse(path, format!("cannot switch to eval mode: {e}")))?;
        let net = ScriptNet {
            module: Arc::new(module),
            path: path.to_path_buf(),
            own_log_std: false,
        }
        .probe(obs_dim, policy, root.device())?;
        let params = net
            .module
            .named_parameters()
            .map_err(|e| refuse(path, format!("cannot list its parameters: {e}")))?;
        if params.is_empty() {
            return Err(refuse(path, "has no parameters to train"));
        }
        for (name, tensor) in params {
            register(root, &name, tensor);
        }
        Ok(net)
    }

    /// Runs the module on zeros and checks the outputs' count and shapes.
    fn probe(
        mut self,
        obs_dim: i64,
        policy: PolicyOut,
        device: Device,
    ) -> Result<Self, ModelError> {
        let want = interface(obs_dim, policy);
        let zeros = Tensor::zeros([PROBE_ROWS, obs_dim], (Kind::Float, device));
        let out = {
            let _guard = tch::no_grad_guard();
            self.module.forward_is(&[IValue::Tensor(zeros)])
        }
        .map_err(|e| {
            refuse(
                &self.path,
                format!("expected {want}; calling it failed: {e}"),
            )
        })?;
        let tensors = tensors_of(out).map_err(|got| {
            refuse(
                &self.path,
                format!("expected {want}; forward returned {got}"),
            )
        })?;
        let (width, gaussian) = match policy {
            PolicyOut::Logits(n) => (n, false),
            PolicyOut::Mean(a) => (a, true),
        };
        let shapes: Vec<Vec<i64>> = tensors.iter().map(Tensor::size).collect();
        let fits = match shapes.as_slice() {
            [p, v] => *p == [PROBE_ROWS, width] && value_fits(v),
            [p, s, v] if gaussian => {
                *p == [PROBE_ROWS, width]
                    && (*s == [PROBE_ROWS, width] || *s == [width])
                    && value_fits(v)
            }
            _ => false,
        };
        if !fits {
            return Err(refuse(
                &self.path,
                format!(
                    "expected {want}; on a batch of {PROBE_ROWS} it returned shapes {shapes:?}"
                ),
            ));
        }
        self.own_log_std = shapes.len() == 3;
        Ok(self)
    }

    /// Whether forward returns its own log-std (then fleetrl adds no `pi.log_std`).
    pub(crate) fn own_log_std(&self) -> bool {
        self.own_log_std
    }

    /// The module on `obs` `[N, D]`, with gradients unless the caller holds a no-grad guard.
    /// Panics if the module fails on a batch its probe's passed (an invariant of a module
    /// that fits its interface; its error names the file).
    pub(crate) fn forward(&self, obs: &Tensor) -> ScriptOut {
        let out = self
            .module
            .forward_is(&[IValue::Tensor(obs.shallow_clone())])
            .and_then(|v| tensors_of(v).map_err(tch::TchError::Kind));
        let mut tensors = match out {
            Ok(t) => t,
            Err(e) => panic!(
                "{}: forward failed after its probe passed: {e}",
                self.path.display()
            ),
        };
        let value = tensors.pop().expect("probed: a value output");
        let log_std = self
            .own_log_std
            .then(|| tensors.pop().expect("probed: a log-std"));
        let policy = tensors.pop().expect("probed: a policy output");
        let value = if value.dim() == 2 {
            value.squeeze_dim(1)
        } else {
            value
        };
        ScriptOut {
            policy,
            log_std,
            value,
        }
    }

    /// The loaded module (e.g. to save it again).
    pub(crate) fn module(&self) -> &CModule {
        &self.module
    }
}

/// A value output `[N, 1]` or `[N]`.
fn value_fits(shape: &[i64]) -> bool {
    shape == [PROBE_ROWS, 1] || shape == [PROBE_ROWS]
}

/// The tensors of a tuple output; what came instead, otherwise.
fn tensors_of(value: IValue) -> Result<Vec<Tensor>, String> {
    let items = match value {
        IValue::Tuple(items) | IValue::GenericList(items) => items,
        IValue::TensorList(tensors) => return Ok(tensors),
        IValue::Tensor(_) => return Err("a single tensor, not a tuple".into()),
        other => return Err(format!("{other:?}")),
    };
    let mut tensors = Vec::with_capacity(items.len());
    for item in items {
        match item {
            IValue::Tensor(t) => tensors.push(t),
            other => return Err(format!("a tuple holding {other:?}, not only tensors")),
        }
    }
    Ok(tensors)
}

/// Adds the module's parameter `name` (`body.0.weight`) under `root`, one path segment per
/// dotted part, so the store holds it as `<root>.body.0.weight` and shares its storage: the
/// optimiser's in-place steps and weight imports change the module itself.
fn register(root: &nn::Path, name: &str, tensor: Tensor) {
    let parts: Vec<&str> = name.split('.').collect();
    let (last, dirs) = parts.split_last().expect("split yields at least one part");
    let path = dirs.iter().fold(root.clone(), |path, dir| path.sub(*dir));
    let trainable = tensor.requires_grad();
    let _shared = path.add(last, tensor, trainable);
}
