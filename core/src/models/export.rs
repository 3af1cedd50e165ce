//! A trained policy as a standalone TorchScript module (`fleetrl export`): libtorch's tracer
//! records the policy's forward pass (observation normalisation, encoder, layers, the action
//! or the distribution's parameters) with the trained weights as constants, so the file needs
//! neither fleetrl nor its config: `torch.jit.load(file)(obs)` in Python, or any libtorch.
//!
//! Inputs and outputs of an actor-critic, with `obs` f32 `[N, D]` (flattened observations):
//! - feed-forward, action: `forward(obs) -> action` (i64 `[N]`, or f32 `[N, A]` unclipped);
//! - feed-forward, distribution: `forward(obs) -> log_probs [N, n]` (normalised logits), or
//!   `-> (mean [N, A], log_std [N, A])`;
//! - recurrent (`model.lstm_size`): `forward(obs, h [N, H], c [N, H])` returns the same
//!   followed by the next `(h, c)` (a GRU ignores and returns `c` as given).
//!
//! An off-policy model (DQN, SAC, TD3, DDPG, BC; feed-forward): `forward(obs) -> action`,
//! greedy (i64 `[N]`) over Q-values or a categorical's probabilities, or the deterministic
//! action (the squashed Gaussian's mean, TD3's tanh output) scaled to the action box (f32
//! `[N, A]`); the distribution is the Q-values `q [N, n]` (DQN), `log_probs [N, n]`
//! (discrete SAC), or `(mean [N, A], log_std [N, A])` before the squash (SAC).

use std::path::Path;

use tch::Tensor;

use super::{ActorCritic, Dist, ModelError, OffPolicyModel, PolicyKind, RnnState};

/// What the exported module returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportOutput {
    /// The deterministic action (the distribution's mode), as `fleetrl eval` plays.
    Action,
    /// The distribution's parameters: log-probabilities, or mean and log-std.
    Distribution,
}

/// The tensors `output` asks of `dist`.
fn outputs(dist: &Dist, output: ExportOutput) -> Vec<Tensor> {
    match (output, dist) {
        (ExportOutput::Action, _) => vec![dist.mode()],
        (ExportOutput::Distribution, Dist::Categorical { log_probs }) => {
            vec![log_probs.shallow_clone()]
        }
        (ExportOutput::Distribution, Dist::Gaussian { mean, log_std }) => {
            vec![mean.shallow_clone(), log_std.expand_as(mean)]
        }
    }
}

/// Traces `model`'s policy on `example` observations `[N, D]` (a few real ones: the trace
/// follows the path they take) and saves it to `path` as a TorchScript module. The model's
/// parameters must not require gradients (the tracer refuses to freeze those as constants):
/// see [`ActorCritic::freeze`].
pub fn trace_policy(
    model: &ActorCritic,
    example: &Tensor,
    output: ExportOutput,
    path: &Path,
) -> Result<(), ModelError> {
    let _guard = tch::no_grad_guard();
    let heads = model.heads();
    let size = heads.state_size();
    let mut inputs = vec![example.shallow_clone()];
    if size > 0 {
        let zero = RnnState::zeros(example.size()[0], size, example.device());
        inputs.extend([zero.h, zero.c]);
    }
    let trace = shim::Trace::begin(&inputs)?;
    let outputs = match inputs.as_slice() {
        [obs] => outputs(&heads.dist(obs), output),
        [obs, h, c] => {
            let state = RnnState {
                h: h.shallow_clone(),
                c: c.shallow_clone(),
            };
            let (dist, _, next) = heads.step(obs, &state);
            let mut out = outputs(&dist, output);
            out.extend([next.h, next.c]);
            out
        }
        _ => unreachable!("one or three inputs, built above"),
    };
    trace.end(&outputs, path)
}

/// The names of what an export returns, in order (the ONNX outputs): `action`, or the
/// distribution's parameters (`log_probs`, `q`, or `mean` and `log_std`).
pub fn output_names(
    output: ExportOutput,
    discrete: bool,
    q_values: bool,
) -> &'static [&'static str] {
    match (output, discrete, q_values) {
        (ExportOutput::Action, _, _) => &["action"],
        (ExportOutput::Distribution, true, true) => &["q"],
        (ExportOutput::Distribution, true, false) => &["log_probs"],
        (ExportOutput::Distribution, false, _) => &["mean", "log_std"],
    }
}

/// What an off-policy model's export returns on `obs`: what `fleetrl eval` plays (see
/// [`crate::models::Policy::act`], deterministic), or the distribution's parameters; a
/// deterministic policy has none.
fn offpolicy_outputs(
    model: &OffPolicyModel,
    obs: &Tensor,
    output: ExportOutput,
) -> Result<Vec<Tensor>, ModelError> {
    Ok(match (model.kind(), output) {
        (PolicyKind::QValues, ExportOutput::Action) => {
            vec![model.q_values(obs).max_dim(1, false).1]
        }
        (PolicyKind::QValues, ExportOutput::Distribution) => vec![model.q_values(obs)],
        (PolicyKind::Categorical, ExportOutput::Action) => {
            vec![model.categorical(obs).0.argmax(1, false)]
        }
        (PolicyKind::Categorical, ExportOutput::Distribution) => vec![model.categorical(obs).1],
        (PolicyKind::SquashedGaussian | PolicyKind::Deterministic, ExportOutput::Action) => {
            vec![model.to_env_scale(&model.mean_action(obs))]
        }
        (PolicyKind::SquashedGaussian, ExportOutput::Distribution) => {
            let (mean, log_std) = model.gaussian(obs);
            vec![mean, log_std]
        }
        (PolicyKind::Deterministic, ExportOutput::Distribution) => {
            return Err(ModelError::Config {
                key: "algo.name",
                message: "a deterministic policy (TD3, DDPG) has no distribution to export: \
                          drop --distribution"
                    .into(),
            })
        }
    })
}

/// [`trace_policy`] for an off-policy model (feed-forward; recurrent ones, R2D2's Q network
/// and recurrent SAC's and TD3's networks, are refused).
pub fn trace_offpolicy(
    model: &OffPolicyModel,
    example: &Tensor,
    output: ExportOutput,
    path: &Path,
) -> Result<(), ModelError> {
    if model.recurrent().is_some() {
        return Err(ModelError::Config {
            key: "model.lstm_size",
            message:
                "a recurrent off-policy model (R2D2's Q network, recurrent SAC or TD3) does not \
                      export yet; fleetrl eval and fleetrl record play it with its state"
                    .into(),
        });
    }
    let _guard = tch::no_grad_guard();
    // Checked before the trace starts: an error inside it would leave it open.
    offpolicy_outputs(model, example, output)?;
    let trace = shim::Trace::begin(&[example.shallow_clone()])?;
    let outputs = offpolicy_outputs(model, example, output)?;
    trace.end(&outputs, path)
}

/// The C++ side (core/csrc/trace.cpp).
mod shim {
    use std::ffi::{c_char, c_int, c_void, CStr, CString};
    use std::path::Path;

    use tch::Tensor;

    use crate::models::ModelError;

    extern "C" {
        fn fleetrl_trace_free_error(err: *mut c_char);
        fn fleetrl_trace_begin(
            name: *const c_char,
            inputs: *const *const c_void,
            n: c_int,
            err: *mut *mut c_char,
        ) -> *mut c_void;
        fn fleetrl_trace_end(
            module: *mut c_void,
            outputs: *const *const c_void,
            n: c_int,
            path: *const c_char,
            err: *mut *mut c_char,
        ) -> c_int;
    }

    /// A trace running on this thread: every tensor op is recorded until [`Trace::end`].
    pub(super) struct Trace(*mut c_void);

    /// The message of a failed call, freed.
    fn take_error(err: *mut c_char) -> ModelError {
        // SAFETY: a non-null `err` is the strdup'd message the shim wrote; freed once here.
        let message = unsafe { CStr::from_ptr(err) }
            .to_string_lossy()
            .into_owned();
        unsafe { fleetrl_trace_free_error(err) };
        ModelError::Tch(tch::TchError::Torch(message))
    }

    fn pointers(tensors: &[Tensor]) -> Vec<*const c_void> {
        tensors
            .iter()
            .map(|t| t.as_ptr() as *const c_void)
            .collect()
    }

    impl Trace {
        /// Starts tracing with `inputs` as the method's arguments.
        pub(super) fn begin(inputs: &[Tensor]) -> Result<Trace, ModelError> {
            let name = CString::new("FleetrlPolicy").expect("no NUL");
            let ptrs = pointers(inputs);
            let mut err = std::ptr::null_mut();
            // SAFETY: the pointers are live tch tensors (torch::Tensor*) for the call.
            let module = unsafe {
                fleetrl_trace_begin(name.as_ptr(), ptrs.as_ptr(), ptrs.len() as c_int, &mut err)
            };
            if module.is_null() {
                return Err(take_error(err));
            }
            Ok(Trace(module))
        }

        /// Ends the trace with `outputs` as forward's return value and saves it to `path`.
        pub(super) fn end(self, outputs: &[Tensor], path: &Path) -> Result<(), ModelError> {
            let path = CString::new(path.as_os_str().as_encoded_bytes())
                .map_err(|e| ModelError::Tch(tch::TchError::Kind(e.to_string())))?;
            let ptrs = pointers(outputs);
            let mut err = std::ptr::null_mut();
            // SAFETY: the module came from fleetrl_trace_begin and is freed by this call.
            let failed = unsafe {
                fleetrl_trace_end(
                    self.0,
                    ptrs.as_ptr(),
                    ptrs.len() as c_int,
                    path.as_ptr(),
                    &mut err,
                )
            };
            match failed {
                0 => Ok(()),
                _ => Err(take_error(err)),
            }
        }
    }
}
