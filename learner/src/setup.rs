//! Building the learner's algorithm: fresh, or restored from a checkpoint.

use std::path::Path;

use anyhow::{bail, Context};
use fleetrl_core::algos::{self, Algorithm};
use fleetrl_core::checkpoint;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs;
use fleetrl_core::models::ActorCritic;
use fleetrl_proto::v1::RunSpec;

use crate::stats::Stats;

/// The algorithm and the counters it resumes from.
pub(crate) struct Restored {
    pub(crate) algo: Box<dyn Algorithm>,
    pub(crate) stats: Stats,
}

/// A fresh learner for `config.algo`, or one restored from `resume`: a path, `latest` (the
/// newest checkpoint under `checkpoint_dir`, which must exist) or `auto` (the newest if any,
/// else fresh: what a container that restarts in place wants).
pub(crate) fn build_algorithm(
    config: &RunConfig,
    resume: Option<&str>,
    checkpoint_dir: &Path,
) -> anyhow::Result<Restored> {
    let devices = config.learner.resolve_devices(config.algo.name())?;
    if let Some(gpu) = devices.iter().find(|d| d.is_cuda()) {
        let visible = tch::Cuda::device_count();
        if !tch::Cuda::is_available() {
            bail!(
                "the learner is configured for {gpu:?} but CUDA is not available to libtorch \
                 (no GPU visible, or fleet-learner was built with FLEETRL_LINK_CUDA=0)"
            );
        }
        if let Some(missing) = devices
            .iter()
            .find(|d| matches!(d, tch::Device::Cuda(n) if *n as i64 >= visible))
        {
            bail!("learner device {missing:?} does not exist: libtorch sees {visible} GPU(s)");
        }
    }
    tracing::info!(?devices, "learner devices");
    tch::manual_seed(config.seed as i64);
    let env = envs::make_configured(&config.env)?;
    let (obs_space, action_space) = (env.observation_space(), env.action_space());
    let model = ActorCritic::new(&config.model, &obs_space, &action_space, devices[0])?;
    let make = |device| {
        ActorCritic::new(&config.model, &obs_space, &action_space, device)
            .expect("the master copy of this model built")
    };
    let mut algo: Box<dyn Algorithm> = algos::build_on_devices(config, model, &devices, make);
    let resume = match resume {
        Some("auto") if checkpoint::latest(checkpoint_dir).is_none() => {
            tracing::info!(dir = %checkpoint_dir.display(), "no checkpoint yet; starting fresh");
            None
        }
        Some("auto") => Some("latest"),
        other => other,
    };
    let Some(resume) = resume else {
        return Ok(Restored {
            algo,
            stats: Stats::new(0, 0, 0),
        });
    };
    let path = match resume {
        "latest" => checkpoint::latest(checkpoint_dir).with_context(|| {
            format!(
                "no checkpoint under {} to resume from",
                checkpoint_dir.display()
            )
        })?,
        explicit => explicit.into(),
    };
    let ckpt = checkpoint::load(&path)?;
    algo.model_mut()
        .load_named(&ckpt.model)
        .context("restoring model weights")?;
    algo.load_state(&ckpt.state)
        .map_err(anyhow::Error::msg)
        .context("restoring optimiser state")?;
    tracing::info!(path = %path.display(), version = ckpt.meta.policy_version, env_steps = ckpt.meta.env_steps, "resumed");
    let stats = Stats::new(
        ckpt.meta.policy_version,
        ckpt.meta.updates,
        ckpt.meta.env_steps,
    );
    Ok(Restored { algo, stats })
}

/// What actors need to start: the effective config and the table to insert into.
pub(crate) fn run_spec(config: &RunConfig) -> RunSpec {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    RunSpec {
        run_id: format!("run-{started}-{}", std::process::id()),
        config_toml: config.to_toml(),
        table: config.replay.table.clone(),
    }
}
