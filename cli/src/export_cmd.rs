//! `fleetrl export`: a checkpoint's policy as a standalone TorchScript or ONNX file that needs
//! neither fleetrl nor its config (the interface is in `fleetrl_core::models::export`).
//! TorchScript comes from libtorch's tracer here; ONNX from PyTorch's own exporter
//! (`torch.onnx.export`) run on that TorchScript file by the project's Python.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use fleetrl_core::acting::policy_loader::load_actor_critic;
use fleetrl_core::envs;
use fleetrl_core::models::export::{trace_policy, ExportOutput};
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

/// Writes checkpoint `checkpoint`'s policy to `out` as `format`: the deterministic action, or
/// the distribution's parameters with `distribution`.
pub(crate) fn run(
    checkpoint: &Path,
    format: Format,
    out: &Path,
    distribution: bool,
) -> anyhow::Result<()> {
    let (mut model, config) = load_actor_critic(checkpoint)?;
    model.freeze();
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
    let state = model.heads().state_size();
    match format {
        Format::Torchscript => trace_policy(&model, &example, output, out)
            .with_context(|| format!("writing {}", out.display()))?,
        Format::Onnx => {
            let traced = scratch_path(out);
            trace_policy(&model, &example, output, &traced)
                .with_context(|| format!("writing {}", traced.display()))?;
            let result = onnx(&traced, out, obs_dim, state, output);
            let _ = std::fs::remove_file(&traced);
            result?;
        }
    }
    eprintln!(
        "[fleetrl] wrote {} ({format:?}, {}): inputs obs [N, {obs_dim}]{}",
        out.display(),
        if distribution {
            "distribution parameters"
        } else {
            "deterministic action"
        },
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
fn onnx(
    traced: &Path,
    out: &Path,
    obs_dim: i64,
    state: i64,
    output: ExportOutput,
) -> anyhow::Result<()> {
    let python = python();
    let kind = match output {
        ExportOutput::Action => "action",
        ExportOutput::Distribution => "distribution",
    };
    let result = Command::new(&python)
        .arg("-c")
        .arg(ONNX_SCRIPT)
        .arg(traced)
        .arg(out)
        .arg(obs_dim.to_string())
        .arg(state.to_string())
        .arg(kind)
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
