//! The off-policy learner (DQN, SAC, TD3, DDPG, BC): samples batches of transitions from a
//! replay table at the rate the replay server's samples-per-insert limiter allows, updates
//! on a dedicated thread, sends new priorities back (prioritized replay), publishes weights
//! and serves the same learner service as the on-policy path.

mod demos;
mod priorities;
mod trainer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::algos::offpolicy::{self as algos, OffPolicyAlgorithm};
use fleetrl_core::checkpoint;
use fleetrl_core::config::{AlgoConfig, RunConfig};
use fleetrl_core::envs;
use fleetrl_core::items::transition;
use fleetrl_core::replay_client::{self, sample_stream, SampleOptions};
use fleetrl_proto::table::RateLimiterSpec;
use fleetrl_runtime::telemetry::EventWriter;
use tokio::sync::{mpsc, oneshot};

use crate::setup::run_spec;
use crate::stats::Stats;
use crate::{metrics, service, trainer::Work};

pub(crate) use trainer::Task;

/// Where the learner listens, samples from and writes, as the command line gave it.
pub(crate) struct Endpoints {
    pub(crate) listen: String,
    pub(crate) replay: String,
    pub(crate) run_dir: PathBuf,
    pub(crate) resume: Option<String>,
    pub(crate) metrics_listen: Option<String>,
}

/// Runs the off-policy learner until shutdown.
pub(crate) async fn run(config: RunConfig, at: Endpoints) -> anyhow::Result<()> {
    let checkpoint_dir = at.run_dir.join("checkpoints");
    let (algo, stats) = build(&config, at.resume.as_deref(), &checkpoint_dir)?;
    let metrics = metrics::start(at.metrics_listen.as_deref(), &stats).await?;
    let initial = trainer::weights_message(algo.as_ref(), stats.policy_version)?;
    let (weights_tx, weights_rx) = tokio::sync::watch::channel(Arc::new(initial));
    let stats = Arc::new(Mutex::new(stats));
    let events = config
        .learner
        .tensorboard
        .then(|| EventWriter::create(&at.run_dir.join("tb")))
        .transpose()
        .context("creating the TensorBoard event file")?;

    let shards = replay_client::parse_shards(&at.replay)?;
    let replay = algos::replay_options(&config.algo)
        .context("an off-policy algorithm has replay options")?
        .clone();
    let mut table = transition::table_spec(&config, &replay)?;
    let demo_items = match &config.algo {
        AlgoConfig::Bc(c) => match c.demo_dir() {
            Some(dir) => Some(demos::items(&config, dir)?),
            None => None,
        },
        _ => None,
    };
    if let Some(items) = &demo_items {
        // Demos are all inserted up front; BC then samples them as often as it likes.
        table.rate_limiter = RateLimiterSpec::MinSize {
            min_size: replay.min_size.min(items.len() as u64).max(1),
        };
        table.max_size = table.max_size.max(items.len() as u64);
    }
    replay_client::ensure_table(&shards, &table, Duration::from_secs(120))
        .await
        .context("creating the transition table on the replay server")?;
    if let Some(items) = demo_items {
        demos::insert(&shards, &table.name, items).await?;
    }

    let (tasks_tx, tasks_rx) = mpsc::channel(2);
    let (priorities_tx, priorities_rx) = mpsc::unbounded_channel();
    let priorities = tokio::spawn(priorities::run(
        shards.clone(),
        table.name.clone(),
        priorities_rx,
    ));
    let trainer = trainer::OffPolicyTrainer {
        algo,
        config: config.clone(),
        replay: replay.clone(),
        stats: stats.clone(),
        weights: weights_tx,
        checkpoint_dir,
        events,
        metrics: metrics.clone(),
        priorities: replay.prioritized.then_some(priorities_tx),
        last_log: Instant::now(),
        device: config.learner.resolve_devices(config.algo.name())?[0],
    };
    let trainer_thread = std::thread::Builder::new()
        .name("trainer".into())
        .spawn(move || trainer.run(tasks_rx))
        .context("starting the trainer thread")?;
    let sampling = tokio::spawn(sample(
        shards,
        table.name.clone(),
        replay.batch_size,
        tasks_tx.clone(),
    ));
    let (work_tx, work_rx) = mpsc::channel(1);
    let bridge = tokio::spawn(bridge_checkpoints(work_rx, tasks_tx.clone()));

    let service = service::Learner {
        spec: run_spec(&config),
        stats,
        weights: weights_rx,
        work: work_tx,
        subscribers: Default::default(),
        metrics,
        encoded: Arc::new(fleetrl_core::broadcast::EncodedCache::new(
            config.learner.broadcast_dtype,
        )),
    };
    service::serve(&at.listen, service).await?;

    tracing::info!("shutting down: writing a final checkpoint");
    sampling.abort();
    priorities.abort();
    bridge.abort();
    let (reply, saved) = oneshot::channel();
    if tasks_tx.send(Task::Checkpoint(reply)).await.is_ok() {
        crate::trainer::log_final_checkpoint(saved).await;
    }
    drop(tasks_tx);
    let _ = tokio::task::spawn_blocking(move || trainer_thread.join()).await;
    Ok(())
}

/// A fresh algorithm, or one restored from `resume` (a path, `latest` or `auto`, as the
/// on-policy learner takes it).
fn build(
    config: &RunConfig,
    resume: Option<&str>,
    checkpoint_dir: &std::path::Path,
) -> anyhow::Result<(Box<dyn OffPolicyAlgorithm>, Stats)> {
    let device = config.learner.resolve_devices(config.algo.name())?[0];
    if device.is_cuda() && !tch::Cuda::is_available() {
        anyhow::bail!(
            "the learner is configured for {device:?} but CUDA is not available to libtorch"
        );
    }
    tch::manual_seed(config.seed as i64);
    let env = envs::make_configured(&config.env)?;
    let (obs, action) = (env.observation_space(), env.action_space());
    let model = algos::build_model(config, &obs, &action, device)?;
    let target = algos::build_model(config, &obs, &action, device)?;
    let mut algo = algos::build(config, model, target);
    let path = match resume {
        None => None,
        Some("auto") => checkpoint::latest(checkpoint_dir),
        Some("latest") => Some(checkpoint::latest(checkpoint_dir).with_context(|| {
            format!(
                "no checkpoint under {} to resume from",
                checkpoint_dir.display()
            )
        })?),
        Some(explicit) => Some(explicit.into()),
    };
    let Some(path) = path else {
        return Ok((algo, Stats::new(0, 0, 0)));
    };
    let ckpt = checkpoint::load(&path)?;
    algo.model_mut()
        .load_named(&ckpt.model)
        .context("restoring model weights")?;
    algo.load_state(&ckpt.state)
        .map_err(anyhow::Error::msg)
        .context("restoring optimiser state")?;
    tracing::info!(path = %path.display(), version = ckpt.meta.policy_version, "resumed");
    let stats = Stats::new(
        ckpt.meta.policy_version,
        ckpt.meta.updates,
        ckpt.meta.env_steps,
    );
    Ok((algo, stats))
}

/// Streams batches of `batch_size` transitions into the trainer until it goes away.
async fn sample(shards: Vec<String>, table: String, batch_size: u32, tasks: mpsc::Sender<Task>) {
    let mut options = SampleOptions::new(&table, batch_size);
    options.prefetch = 2;
    let (mut batches, streams) = sample_stream(shards, options);
    tracing::info!(table, batch_size, "sampling transitions");
    while let Some(batch) = batches.recv().await {
        match batch {
            Ok(batch) => {
                if tasks.send(Task::Batch(batch)).await.is_err() {
                    break;
                }
            }
            Err(error) => {
                tracing::error!(error = format!("{error:#}"), "cannot sample transitions");
                break;
            }
        }
    }
    for stream in streams {
        stream.abort();
    }
}

/// Forwards the service's checkpoint requests to the off-policy trainer.
async fn bridge_checkpoints(mut work: mpsc::Receiver<Work>, tasks: mpsc::Sender<Task>) {
    while let Some(item) = work.recv().await {
        if let Work::Checkpoint(reply) = item {
            if tasks.send(Task::Checkpoint(reply)).await.is_err() {
                return;
            }
        }
    }
}
