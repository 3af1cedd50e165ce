//! fleet-learner: samples batches from the replay server(s), trains on a dedicated thread,
//! publishes every new version of the weights, checkpoints, and serves its status. One path
//! for every algorithm; [`supervise`] joins what it runs.

mod collected;
mod demo_stats;
mod demos;
mod error;
mod fallback;
mod fleet;
mod metrics;
mod priorities;
mod roles;
mod sampler;
mod screen;
mod service;
mod setup;
mod stats;
mod supervise;
mod trainer;

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fleetrl_core::config::RunConfig;
use fleetrl_runtime::signals::Signals;
use fleetrl_runtime::telemetry;

use crate::setup::build_algorithm;

/// The fleetrl learner.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to serve the learner service on.
    #[arg(
        long,
        env = "FLEETRL_LEARNER_LISTEN",
        default_value = "127.0.0.1:50052"
    )]
    listen: String,
    /// Replay server(s) to sample from: `host:port`, or a comma-separated list of shards.
    #[arg(long, env = "FLEETRL_REPLAY_ADDR", default_value = "127.0.0.1:50051")]
    replay: String,
    /// Run config: a TOML path or a preset name from configs/.
    #[arg(long, env = "FLEETRL_CONFIG", default_value = "cartpole-ppo")]
    config: String,
    /// Config overrides, `dotted.key=value`, applied in order.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Directory for checkpoints and TensorBoard events.
    #[arg(long, env = "FLEETRL_RUN_DIR", default_value = "runs/latest")]
    run_dir: PathBuf,
    /// Resume from a checkpoint directory, or a run directory's newest checkpoint (`latest`:
    /// the newest under <run-dir>/checkpoints;
    /// `auto`: the newest if there is one, else start fresh, for restartable containers).
    #[arg(long, env = "FLEETRL_RESUME")]
    resume: Option<String>,
    /// Serve Prometheus metrics on this address (`GET /metrics`); off when unset.
    #[arg(long, env = "FLEETRL_METRICS_LISTEN")]
    metrics_listen: Option<String>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fleetrl_runtime::private::private_files();
    telemetry::exit_code(run().await)
}

async fn run() -> anyhow::Result<()> {
    let signals = Signals::listen().context("listening for SIGTERM and Ctrl-C")?;
    telemetry::init("info");
    let args = Args::parse();
    fleetrl_runtime::net::load_security()?;
    // Before any work: a learner that may not serve should say so at once.
    for addr in tokio::net::lookup_host(&args.listen)
        .await
        .with_context(|| format!("resolving --listen {}", args.listen))?
    {
        fleetrl_runtime::net::auth::check_exposure(addr)?;
    }
    let config =
        RunConfig::load(&args.config, &args.overrides).context("loading the run config")?;
    fleetrl_core::cpu::wait_passively(config.learner.torch_threads)
        .context("starting again with OMP_WAIT_POLICY=PASSIVE")?;
    tracing::info!(config = %config.to_toml(), "effective config");
    tracing::info!(
        cuda_available = tch::Cuda::is_available(),
        cuda_devices = tch::Cuda::device_count(),
        device = %config.learner.device,
        "libtorch"
    );
    tch::set_num_threads(config.learner.torch_threads as i32);
    tch::set_num_interop_threads(1);
    fleetrl_core::cpu::keep_tensor_memory();
    std::fs::create_dir_all(&args.run_dir)
        .with_context(|| format!("creating --run-dir {}", args.run_dir.display()))?;
    // Before resuming from its checkpoints: another learner may be writing them.
    let _lock = fleetrl_runtime::dir_lock::lock(
        &args.run_dir,
        "learner.lock",
        "learner",
        "two learners on one --run-dir overwrite each other's checkpoints; stop that one, or \
         give this one another --run-dir",
    )?;
    let checkpoint_dir = args.run_dir.join("checkpoints");
    let partial = fleetrl_core::checkpoint::remove_partial(&checkpoint_dir)?;
    if partial > 0 {
        tracing::warn!(partial, dir = %checkpoint_dir.display(), "removed partial checkpoints");
    }
    // Restoring, joining the other ranks and declaring the tables can each block for a long
    // time (a rank waits for the others at the rendezvous up to the collective timeout, the
    // replay server may take its patience to answer), so they run beside the stop: one asked
    // for before training begins ends the process at once, as nothing has been trained or
    // written yet (a `docker-compose down` used to wait out the rendezvous of a rank 0 that
    // compose had just restarted).
    let building = {
        let (config, resume, dir) = (config.clone(), args.resume.clone(), checkpoint_dir.clone());
        tokio::task::spawn_blocking(move || build_algorithm(&config, resume.as_deref(), &dir))
    };
    let setup = async {
        let restored = building
            .await
            .context("the learner's setup task failed")??;
        let metrics = metrics::start(args.metrics_listen.as_deref(), &restored.stats).await?;
        roles::start(
            &config,
            &args.replay,
            &args.run_dir,
            restored,
            checkpoint_dir,
            metrics,
        )
        .await
    };
    let Some(ready) = signals.before_stop(setup).await else {
        tracing::info!("stopped before training began: nothing was trained or written");
        // Not a return: the runtime would wait for the blocking setup task.
        std::process::exit(0);
    };
    let (service, roles) = ready?;
    supervise::run(&args.listen, service, roles, &signals).await
}
