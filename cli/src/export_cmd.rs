//! `fleetrl export`: a checkpoint's policy as a standalone TorchScript or ONNX file that needs
//! neither fleetrl nor its config (the interface is in `fleetrl_core::models::export`).
//! TorchScript comes from libtorch's tracer here; ONNX from PyTorch's own exporter
//! (`torch.onnx.export`) run on that TorchScript file by the project's Python.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use fleetrl_core::acting::policy_loader::{load_actor_critic, load_offpolicy};
use fleetrl_core::algos::registry::{spec, Family};
use fleetrl_core::checkpoint;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs;
use fleetrl_core::models::export::{output_names, trace_offpolicy, trace_policy, ExportOutput};
use fleetrl_core::models::{ActorCritic, OffPolicyModel, PolicyKind};
use fleetrl_proto::space::Space;
use tch::Tensor;

/// The file format `--format` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// A TorchScript module (`torch.jit.load`).
    Torchscript,
    /// An ONNX model (opset 17), e.g. for onnxruntime.
    Onnx,
}

/// The Python that runs PyTorch's ONNX exporter (`examples/`' scripts use the same one).
const ONNX_SCRIPT: &str = include_str!("export_onnx.py");

/// Env resets the trace is recorded on (real observations, so it follows their path).
const EXAMPLE_ROWS: u64 = 2;

/// A checkpoint's policy, by the family of the algorithm that trained it (the registry's).
enum Trained {
    OnPolicy(ActorCritic),
    OffPolicy(OffPolicyModel),
}

impl Trained {
    /// The policy in `checkpoint`, frozen, and its run config.
    fn load(checkpoint: &Path) -> anyhow::Result<(Trained, RunConfig)> {
        let config = checkpoint::load(checkpoint)?.config;
        Ok(match spec(&config).family {
            Family::OnPolicy => {
                let (mut model, config) = load_actor_critic(checkpoint)?;
                model.freeze();
                (Trained::OnPolicy(model), config)
            }
            Family::OffPolicy => {
                let (mut model, config) = load_offpolicy(checkpoint)?;
                model.freeze();
                (Trained::OffPolicy(model), config)
            }
        })
    }

    /// The recurrent state's width H (0: feed-forward).
    fn state_size(&self) -> i64 {
        match self {
            Trained::OnPolicy(model) => model.heads().state_size(),
            Trained::OffPolicy(_) => 0,
        }
    }

    fn trace(&self, example: &Tensor, output: ExportOutput, path: &Path) -> anyhow::Result<()> {
        match self {
            Trained::OnPolicy(model) => trace_policy(model, example, output, path),
            Trained::OffPolicy(model) => trace_offpolicy(model, example, output, path),
        }
        .with_context(|| format!("writing {}", path.display()))
    }

    /// The names of the policy's outputs (see [`output_names`]).
    fn output_names(&self, output: ExportOutput, discrete: bool) -> &'static [&'static str] {
        let q_values = matches!(self, Trained::OffPolicy(m) if m.kind() == PolicyKind::QValues);
        output_names(output, discrete, q_values)
    }
}

/// Writes checkpoint `checkpoint`'s policy to `out` as `format`: the deterministic action, or
/// the distribution's parameters with `distribution`.
pub(crate) fn run(
    checkpoint: &Path,
    format: Format,
    out: &Path,
    distribution: bool,
) -> anyhow::Result<()> {
    let (model, config) = Trained::load(checkpoint)?;
    let mut env = envs::make_configured(&config.env)?;
    let mut rows = Vec::new();
    for seed in 0..EXAMPLE_ROWS {
        rows.extend(env.reset(Some(seed)));
    }
    let obs_dim = env.observation_space().flat_dim() as i64;
    let example = Tensor::from_slice(&rows).view([EXAMPLE_ROWS as i64, obs_dim]);
    let output = match distribution {
        true => ExportOutput::Distribution,
        false => ExportOutput::Action,
    };
    let discrete = matches!(env.action_space(), Space::Discrete { .. });
    let names = model.output_names(output, discrete).join(",");
    let state = model.state_size();
    match format {
        Format::Torchscript => model.trace(&example, output, out)?,
        Format::Onnx => {
            let traced = scratch_path(out);
            model.trace(&example, output, &traced)?;
            let result = onnx(&traced, out, obs_dim, state, &names);
            let _ = std::fs::remove_file(&traced);
            result?;
        }
    }
    eprintln!(
        "[fleetrl] wrote {} ({format:?}, {names}): inputs obs [N, {obs_dim}]{}",
        out.display(),
        if state > 0 {
            format!(", h [N, {state}], c [N, {state}]")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// A scratch file beside `out` for the TorchScript the ONNX exporter reads.
fn scratch_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.torchscript.tmp", std::process::id()));
    out.with_file_name(name)
}

/// The Python that has PyTorch: `FLEETRL_PYTHON`, else the project's `.venv` beside this
/// binary (`target/release/fleetrl` -> `.venv/bin/python`), else `python3`.
pub(crate) fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("FLEETRL_PYTHON") {
        return python.into();
    }
    let venv = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join(".venv/bin/python")));
    venv.filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Converts the TorchScript file `traced` to ONNX at `out` with `torch.onnx.export`.
fn onnx(traced: &Path, out: &Path, obs_dim: i64, state: i64, names: &str) -> anyhow::Result<()> {
    let python = python();
    let result = Command::new(&python)
        .arg("-c")
        .arg(ONNX_SCRIPT)
        .arg(traced)
        .arg(out)
        .arg(obs_dim.to_string())
        .arg(state.to_string())
        .arg(names)
        .output()
        .with_context(|| {
            format!(
                "starting {} for torch.onnx.export (set FLEETRL_PYTHON to a Python with torch \
                 and onnx, or run scripts/setup.sh)",
                python.display()
            )
        })?;
    if !result.status.success() {
        bail!(
            "torch.onnx.export ({}) failed: {}",
            python.display(),
            String::from_utf8_lossy(&result.stderr).trim()
        );
    }
    Ok(())
}
