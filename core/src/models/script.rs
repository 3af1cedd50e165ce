//! The user's own network (`model.torchscript`, `model.torchscript_critic`): a
//! `torch.jit.script`ed `nn.Module` saved from PyTorch, loaded through libtorch with its
//! parameters in the model's `VarStore` (under `script.`, or `<net>.script.` off-policy, by
//! the module's own parameter names), so the learner's optimiser trains them and the weight
//! broadcast and checkpoints carry them as every other parameter.
//!
//! The off-policy interfaces (DQN's Q-network, SAC's and TD3's actor and critics) are
//! [`Interface`]'s other variants. The actor-critic interface: `forward(obs: Tensor[N, D]) -> (policy, value)`, where policy
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

/// What a module's forward takes and returns: the interface it is probed against when it
/// loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interface {
    /// The actor-critic (PPO, A2C): `forward(obs) -> (policy, value)`, or `(mean, log_std,
    /// value)` for a Gaussian.
    ActorCritic(PolicyOut),
    /// One tensor, `width` values per row: `forward(obs) -> out [N, width]` (DQN's Q-values,
    /// discrete SAC's logits and critics, TD3's action before its tanh). `what` names it.
    Rows {
        /// Values per row.
        width: i64,
        /// What they are, for messages (`q`, `logits`, `action`).
        what: &'static str,
    },
    /// SAC's actor on `A` dimensions: `forward(obs) -> (mean [N, A], log_std [N, A] or [A])`,
    /// before fleetrl's tanh squash.
    Gaussian(i64),
    /// A critic of `A`-dimensional actions (in [-1, 1]): `forward(obs, action) -> q [N, 1] or
    /// [N]`.
    Critic(i64),
}

impl Interface {
    /// What forward must take and return, for messages.
    fn describe(self, obs_dim: i64) -> String {
        let obs = format!("obs: Tensor[N, {obs_dim}]");
        match self {
            Interface::ActorCritic(policy) => {
                let head = match policy {
                    PolicyOut::Logits(n) => format!("logits [N, {n}]"),
                    PolicyOut::Mean(a) => {
                        format!("mean [N, {a}] (optionally then log_std [N, {a}] or [{a}])")
                    }
                };
                format!("forward({obs}) -> ({head}, value [N, 1] or [N])")
            }
            Interface::Rows { width, what } => format!("forward({obs}) -> {what} [N, {width}]"),
            Interface::Gaussian(a) => {
                format!("forward({obs}) -> (mean [N, {a}], log_std [N, {a}] or [{a}])")
            }
            Interface::Critic(a) => {
                format!("forward({obs}, action: Tensor[N, {a}]) -> q [N, 1] or [N]")
            }
        }
    }

    /// Whether forward returns a tuple (otherwise one tensor).
    fn returns_tuple(self) -> bool {
        matches!(self, Interface::ActorCritic(_) | Interface::Gaussian(_))
    }

    /// Whether outputs of `shapes` on a probe batch fit.
    fn fits(self, shapes: &[Vec<i64>]) -> bool {
        let rows = |width: i64| vec![PROBE_ROWS, width];
        let per_row_or_shared = |s: &Vec<i64>, width: i64| *s == rows(width) || *s == [width];
        match (self, shapes) {
            (Interface::ActorCritic(PolicyOut::Logits(n)), [p, v]) => {
                *p == rows(n) && value_fits(v)
            }
            (Interface::ActorCritic(PolicyOut::Mean(a)), [p, v]) => *p == rows(a) && value_fits(v),
            (Interface::ActorCritic(PolicyOut::Mean(a)), [p, s, v]) => {
                *p == rows(a) && per_row_or_shared(s, a) && value_fits(v)
            }
            (Interface::Rows { width, .. }, [out]) => *out == rows(width),
            (Interface::Gaussian(a), [mean, s]) => *mean == rows(a) && per_row_or_shared(s, a),
            (Interface::Critic(_), [q]) => value_fits(q),
            _ => false,
        }
    }
}

/// A loaded TorchScript module; cheap to clone as a handle on the same module.
#[derive(Debug, Clone)]
pub(crate) struct ScriptNet {
    module: Arc<CModule>,
    /// The file it came from, for messages.
    path: PathBuf,
    interface: Interface,
    /// Whether forward returns a log-std between the mean and the value (actor-critic).
    own_log_std: bool,
}

/// One forward pass of an actor-critic.
#[derive(Debug)]
pub(crate) struct ScriptOut {
    /// Logits `[N, n]` or mean `[N, A]`.
    pub(crate) policy: Tensor,
    /// The module's own log-std (`[N, A]` or `[A]`), when it returns one.
    pub(crate) log_std: Option<Tensor>,
    /// V(s) `[N]`.
    pub(crate) value: Tensor,
}

/// The error for a module that cannot be used, naming its key, its file and what was
/// expected.
fn refuse(key: &'static str, path: &Path, message: impl std::fmt::Display) -> ModelError {
    ModelError::Config {
        key,
        message: format!("{}: {message}", path.display()),
    }
}

impl ScriptNet {
    /// Loads the module at `path` (the value of `key`) onto `root`'s device, registers its
    /// parameters under `root` (a parameter `body.0.weight` becomes `script.body.0.weight`
    /// when `root` is `script`) and probes it with zeros `[2, obs_dim]` (and `[2, A]` actions
    /// for a critic).
    pub(crate) fn load(
        key: &'static str,
        path: &Path,
        root: &nn::Path,
        obs_dim: i64,
        interface: Interface,
    ) -> Result<ScriptNet, ModelError> {
        let mut module = CModule::load_on_device(path, root.device()).map_err(|e| {
            refuse(
                key,
                path,
                format!("is not a TorchScript module (save one with torch.jit.save(torch.jit.script(module), path)): {e}"),
            )
        })?;
        module
            .f_set_eval()
            .map_err(|e| refuse(key, path, format!("cannot switch to eval mode: {e}")))?;
        let net = ScriptNet {
            module: Arc::new(module),
            path: path.to_path_buf(),
            interface,
            own_log_std: false,
        }
        .probe(key, obs_dim, root.device())?;
        let params = net
            .module
            .named_parameters()
            .map_err(|e| refuse(key, path, format!("cannot list its parameters: {e}")))?;
        if params.is_empty() {
            return Err(refuse(key, path, "has no parameters to train"));
        }
        for (name, tensor) in params {
            register(root, &name, tensor);
        }
        Ok(net)
    }

    /// Runs the module on zeros and checks the outputs' count and shapes.
    fn probe(
        mut self,
        key: &'static str,
        obs_dim: i64,
        device: Device,
    ) -> Result<Self, ModelError> {
        let want = self.interface.describe(obs_dim);
        let zeros =
            |width: i64| IValue::Tensor(Tensor::zeros([PROBE_ROWS, width], (Kind::Float, device)));
        let mut inputs = vec![zeros(obs_dim)];
        if let Interface::Critic(a) = self.interface {
            inputs.push(zeros(a));
        }
        let out = {
            let _guard = tch::no_grad_guard();
            self.module.forward_is(&inputs)
        }
        .map_err(|e| {
            refuse(
                key,
                &self.path,
                format!("expected {want}; calling it failed: {e}"),
            )
        })?;
        let tensors = tensors_of(out, self.interface.returns_tuple()).map_err(|got| {
            refuse(
                key,
                &self.path,
                format!("expected {want}; forward returned {got}"),
            )
        })?;
        let shapes: Vec<Vec<i64>> = tensors.iter().map(Tensor::size).collect();
        if !self.interface.fits(&shapes) {
            let got = match shapes.as_slice() {
                [one] if !self.interface.returns_tuple() => format!("shape {one:?}"),
                _ => format!("shapes {shapes:?}"),
            };
            return Err(refuse(
                key,
                &self.path,
                format!("expected {want}; on a batch of {PROBE_ROWS} it returned {got}"),
            ));
        }
        self.own_log_std = matches!(self.interface, Interface::ActorCritic(_)) && shapes.len() == 3;
        Ok(self)
    }

    /// Whether forward returns its own log-std (then fleetrl adds no `pi.log_std`).
    pub(crate) fn own_log_std(&self) -> bool {
        self.own_log_std
    }

    /// The module's outputs on `inputs`, with gradients unless the caller holds a no-grad
    /// guard. Panics if the module fails on inputs of the shapes its probe passed (an
    /// invariant of a module that fits its interface; its error names the file).
    fn outputs(&self, inputs: &[&Tensor]) -> Vec<Tensor> {
        let inputs: Vec<IValue> = inputs
            .iter()
            .map(|t| IValue::Tensor(t.shallow_clone()))
            .collect();
        let out = self.module.forward_is(&inputs).and_then(|v| {
            tensors_of(v, self.interface.returns_tuple()).map_err(tch::TchError::Kind)
        });
        match out {
            Ok(t) => t,
            Err(e) => panic!(
                "{}: forward failed after its probe passed: {e}",
                self.path.display()
            ),
        }
    }

    /// The actor-critic on `obs` `[N, D]` (an [`Interface::ActorCritic`] module).
    pub(crate) fn forward(&self, obs: &Tensor) -> ScriptOut {
        debug_assert!(matches!(self.interface, Interface::ActorCritic(_)));
        let mut tensors = self.outputs(&[obs]);
        let value = tensors.pop().expect("probed: a value output");
        let log_std = self
            .own_log_std
            .then(|| tensors.pop().expect("probed: a log-std"));
        let policy = tensors.pop().expect("probed: a policy output");
        ScriptOut {
            policy,
            log_std,
            value: as_column(value).squeeze_dim(1),
        }
    }

    /// One off-policy network on `obs` `[N, D]` (and a critic's `action` `[N, A]`), in the
    /// layout fleetrl's own layers give: the rows as they are, a Gaussian's mean and log-std
    /// side by side `[N, 2A]`, a critic's Q-value `[N, 1]`.
    pub(crate) fn joined(&self, obs: &Tensor, action: Option<&Tensor>) -> Tensor {
        match (self.interface, action) {
            (Interface::Critic(_), Some(action)) => {
                as_column(self.outputs(&[obs, action]).remove(0))
            }
            (Interface::Gaussian(_), _) => {
                let out = self.outputs(&[obs]);
                Tensor::cat(&[&out[0], &out[1].expand_as(&out[0])], 1)
            }
            _ => self.outputs(&[obs]).remove(0),
        }
    }

    /// Moves the module off the file's starting point: each parameter's entries in a random
    /// order (one permutation per tensor, from libtorch's generator). The distribution of an
    /// element-wise initialisation (PyTorch's uniform and normal ones, layer norm's
    /// constants) stays the same, so a second critic from the same file starts as a different
    /// draw rather than a copy that would train in lockstep with the first.
    pub(crate) fn shuffle_parameters(&self) -> Result<(), ModelError> {
        let _guard = tch::no_grad_guard();
        let params = self
            .module
            .named_parameters()
            .map_err(|e| ModelError::Config {
                key: "model.torchscript_critic",
                message: format!("{}: cannot list its parameters: {e}", self.path.display()),
            })?;
        for (_, mut param) in params {
            let order = Tensor::randperm(param.numel() as i64, (Kind::Int64, param.device()));
            let shuffled = param.reshape([-1]).index_select(0, &order).view_as(&param);
            param.copy_(&shuffled);
        }
        Ok(())
    }

    /// The loaded module (e.g. to save it again).
    pub(crate) fn module(&self) -> &CModule {
        &self.module
    }
}

/// `[N]` or `[N, 1]` as `[N, 1]`.
fn as_column(value: Tensor) -> Tensor {
    if value.dim() == 1 {
        value.unsqueeze(1)
    } else {
        value
    }
}

/// A value output `[N, 1]` or `[N]`.
fn value_fits(shape: &[i64]) -> bool {
    shape == [PROBE_ROWS, 1] || shape == [PROBE_ROWS]
}

/// The tensors of a tuple output, or a single tensor where `tuple` is false; what came
/// instead, otherwise.
fn tensors_of(value: IValue, tuple: bool) -> Result<Vec<Tensor>, String> {
    let items = match value {
        IValue::Tensor(t) if !tuple => return Ok(vec![t]),
        IValue::Tensor(_) => return Err("a single tensor, not a tuple".into()),
        IValue::Tuple(items) | IValue::GenericList(items) if tuple => items,
        IValue::TensorList(tensors) if tuple => return Ok(tensors),
        IValue::Tuple(items) | IValue::GenericList(items) => {
            return Err(format!("a tuple of {}, not a single tensor", items.len()))
        }
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
