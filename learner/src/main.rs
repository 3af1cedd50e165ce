//! fleet-learner: samples rollout batches from a replay server, trains on a dedicated thread,
//! publishes every new version of the weights, checkpoints, and serves its status.

mod demo_stats;
mod metrics;
mod offpolicy;
mod prefetch;
mod service;
mod stats;
mod trainer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use fleetrl_core::config::RunConfig;
use fleetrl_core::replay_client;
use fleetrl_runtime::telemetry::{self, EventWriter};
use tokio::sync::{mpsc, oneshot};

use crate::setup::{build_algorithm, Restored};

mod setup;

/// The fleetrl learner.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to serve the learner service on.
    #[arg(long, env = "FLEETRL_LEARNER_LISTEN", default_value = "0.0.0.0:50052")]
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
    /// Resume from a checkpoint directory (`latest`: the newest under <run-dir>/checkpoints;
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
    if config.algo.is_off_policy() {
        let at = offpolicy::Endpoints {
            listen: args.listen,
            replay: args.replay,
            run_dir: args.run_dir,
            resume: args.resume,
            metrics_listen: args.metrics_listen,
        };
        return offpolicy::run(config, at).await;
    }
    let checkpoint_dir = args.run_dir.join("checkpoints");
    let Restored { algo, stats } =
        build_algorithm(&config, args.resume.as_deref(), &checkpoint_dir)?;
    let metrics = metrics::start(args.metrics_listen.as_deref(), &stats).await?;
    let initial = trainer::weights_message(algo.as_ref(), stats.policy_version)
        .map_err(anyhow::Error::msg)?;
    let (weights_tx, weights_rx) = tokio::sync::watch::channel(Arc::new(initial));
    let stats = Arc::new(Mutex::new(stats));
    let (work_tx, work_rx) = mpsc::channel(1);
    let events = config
        .learner
        .tensorboard
        .then(|| EventWriter::create(&args.run_dir.join("tb")))
        .transpose()
        .context("creating the TensorBoard event file")?;
    let demo_stats = demo_stats::DemoStats::default();
    let trainer = trainer::Trainer {
        algo,
        config: config.clone(),
        stats: stats.clone(),
        weights: weights_tx,
        checkpoint_dir,
        events,
        last_log: Instant::now(),
        timing: trainer::Timing::default(),
        pending: Vec::new(),
        metrics: metrics.clone(),
        demo_stats: demo_stats.clone(),
    };
    let trainer_thread = std::thread::Builder::new()
        .name("trainer".into())
        .spawn(move || trainer.run(work_rx))
        .context("starting the trainer thread")?;
    let shards = replay_client::parse_shards(&args.replay)?;
    if config.ppod.enabled && config.learner.tensorboard {
        demo_stats.spawn_poller(shards[0].clone(), Duration::from_secs(2));
    }
    let table =
        fleetrl_core::items::rollout::table_spec(&config).context("building the rollout table")?;
    replay_client::ensure_table(&shards, &table, Duration::from_secs(120))
        .await
        .context("creating the rollout table on the replay server")?;
    let prefetch = tokio::spawn(prefetch::run(
        shards,
        config.replay.table.clone(),
        work_tx.clone(),
    ));

    let spec = setup::run_spec(&config);
    let service = service::Learner {
        spec,
        stats,
        weights: weights_rx,
        work: work_tx.clone(),
        subscribers: Default::default(),
        metrics,
        encoded: Arc::new(fleetrl_core::broadcast::EncodedCache::new(
            config.learner.broadcast_dtype,
        )),
    };
    service::serve(&args.listen, service).await?;

    tracing::info!("shutting down: writing a final checkpoint");
    prefetch.abort();
    let (reply, saved) = oneshot::channel();
    if work_tx.send(trainer::Work::Checkpoint(reply)).await.is_ok() {
        trainer::log_final_checkpoint(saved).await;
    }
    drop(work_tx);
    let _ = tokio::task::spawn_blocking(move || trainer_thread.join()).await;
    Ok(())
}
