//! fleet-learner: samples batches from the replay server(s), trains on a dedicated thread,
//! publishes every new version of the weights, checkpoints, and serves its status. One path
//! for every algorithm; [`supervise`] joins what it runs.

mod collected;
mod demo_stats;
mod demos;
mod error;
mod metrics;
mod priorities;
mod sampler;
mod service;
mod setup;
mod stats;
mod supervise;
mod trainer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use fleetrl_core::config::RunConfig;
use fleetrl_core::replay_client;
use fleetrl_runtime::telemetry::{self, EventWriter};
use tokio::sync::mpsc;

use crate::setup::{build_algorithm, declare_tables, Restored};

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
    telemetry::exit_code(run().await)
}

async fn run() -> anyhow::Result<()> {
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
    let Restored {
        algo,
        stats,
        device,
        action_space,
    } = build_algorithm(&config, args.resume.as_deref(), &checkpoint_dir)?;
    let metrics = metrics::start(args.metrics_listen.as_deref(), &stats).await?;
    let initial = trainer::weights_message(algo.as_ref(), stats.policy_version)?;
    let (weights_tx, weights_rx) = tokio::sync::watch::channel(Arc::new(initial));
    let stats = Arc::new(Mutex::new(stats));
    let events = config
        .learner
        .tensorboard
        .then(|| EventWriter::create(&args.run_dir.join("tb")))
        .transpose()
        .context("creating the TensorBoard event file")?;

    let shards = replay_client::parse_shards(&args.replay)?;
    let table = declare_tables(&config, &shards).await?;
    let demo_stats = demo_stats::DemoStats::default();
    if config.ppod.enabled && config.learner.tensorboard {
        demo_stats.spawn_poller(shards[0].clone(), Duration::from_secs(2));
    }
    let prioritized = fleetrl_core::algos::registry::spec(&config)
        .replay
        .is_some_and(|r| r.prioritized);
    let (priorities_tx, priorities_rx) = mpsc::unbounded_channel();
    let priorities = tokio::spawn(priorities::run(
        shards.clone(),
        table.name.clone(),
        priorities_rx,
    ));
    let mut helpers = vec![priorities];
    if fleetrl_core::algos::registry::spec(&config)
        .replay
        .is_some()
    {
        let resumed = stats.lock().expect("stats lock poisoned").env_steps_trained > 0;
        helpers.push(tokio::spawn(collected::run(
            shards.clone(),
            table.name.clone(),
            collected::steps_per_item(&config),
            resumed,
            stats.clone(),
        )));
    }
    let (work_tx, work_rx) = mpsc::channel(table.prefetch.max(1));
    let subscribers = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let trainer = trainer::Trainer {
        algo,
        config: config.clone(),
        stats: stats.clone(),
        weights: weights_tx,
        checkpoint_dir,
        events,
        metrics: metrics.clone(),
        demo_stats,
        priorities: prioritized.then_some(priorities_tx),
        device,
        action_space,
        last_log: Instant::now(),
        timing: trainer::Timing::default(),
        pending: Vec::new(),
        subscribers: subscribers.clone(),
        filling: trainer::Filling::default(),
        stopped: None,
    };
    let trainer = std::thread::Builder::new()
        .name("trainer".into())
        .spawn(move || trainer.run(work_rx))
        .context("starting the trainer thread")?;
    let sampler = tokio::spawn(sampler::run(shards, table, work_tx.clone()));

    let (closing, closing_rx) = tokio::sync::watch::channel(false);
    let service = service::Learner {
        spec: setup::run_spec(&config),
        stats,
        weights: weights_rx,
        work: work_tx.clone(),
        subscribers,
        metrics,
        encoded: Arc::new(fleetrl_core::broadcast::EncodedCache::new(
            config.learner.broadcast_dtype,
        )),
        closing: closing_rx,
    };
    let roles = supervise::Roles {
        trainer,
        sampler,
        helpers,
        work: work_tx,
        closing,
    };
    supervise::run(&args.listen, service, roles).await
}
