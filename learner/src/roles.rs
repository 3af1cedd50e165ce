//! Wiring the learner's roles: the trainer thread, the sampler, the replay helpers and the
//! service that publishes the trainer's weights, all from one run config and one restored
//! algorithm. `main` starts them; [`crate::supervise`] joins them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::config::RunConfig;
use fleetrl_core::replay_client;
use fleetrl_runtime::telemetry::EventWriter;
use tokio::sync::mpsc;

use crate::metrics::LearnerMetrics;
use crate::setup::{declare_tables, Restored};
use crate::{collected, demo_stats, priorities, sampler, service, setup, supervise, trainer};

/// Declares the replay tables, starts the trainer thread, the sampler and the helpers, and
/// builds the service; the service serves nothing until [`supervise::run`].
pub(crate) async fn start(
    config: &RunConfig,
    replay: &str,
    run_dir: &Path,
    restored: Restored,
    checkpoint_dir: PathBuf,
    metrics: Arc<LearnerMetrics>,
) -> anyhow::Result<(service::Learner, supervise::Roles)> {
    let Restored {
        algo,
        stats,
        device,
        action_space,
        group,
    } = restored;
    let initial = trainer::weights_message(algo.as_ref(), stats.policy_version)?;
    let (weights_tx, weights_rx) = tokio::sync::watch::channel(Arc::new(initial));
    let stats = Arc::new(Mutex::new(stats));
    let events = config
        .learner
        .tensorboard
        .then(|| EventWriter::create(&run_dir.join("tb")))
        .transpose()
        .context("creating the TensorBoard event file")?;

    let shards = replay_client::parse_shards(replay)?;
    let table = declare_tables(config, &shards).await?;
    let demo_stats = demo_stats::DemoStats::default();
    if config.ppod.enabled && config.learner.tensorboard {
        demo_stats.spawn_poller(shards[0].clone(), Duration::from_secs(2));
    }
    let prioritized = fleetrl_core::algos::registry::spec(config)
        .replay
        .is_some_and(|r| r.prioritized);
    let (priorities_tx, priorities_rx) = mpsc::unbounded_channel();
    let priorities = tokio::spawn(priorities::run(
        shards.clone(),
        table.name.clone(),
        priorities_rx,
    ));
    let mut helpers = vec![priorities];
    if fleetrl_core::algos::registry::spec(config).replay.is_some() {
        let resumed = stats.lock().expect("stats lock poisoned").env_steps_trained > 0;
        helpers.push(tokio::spawn(collected::run(
            shards.clone(),
            table.name.clone(),
            collected::steps_per_item(config),
            (resumed, table.uncounted_items),
            stats.clone(),
        )));
    }
    let (work_tx, work_rx) = mpsc::channel(table.prefetch.max(1));
    let fleet = crate::fleet::Fleet::new(stats.clone(), metrics.clone());
    let trainer = trainer::Trainer {
        algo,
        config: config.clone(),
        stats: stats.clone(),
        weights: weights_tx,
        checkpoint_dir,
        events,
        metrics: metrics.clone(),
        demo_stats,
        key_updates: priorities_tx,
        prioritized,
        refused: Default::default(),
        device,
        action_space,
        last_log: Instant::now(),
        timing: trainer::Timing::default(),
        pending: Vec::new(),
        fleet: fleet.clone(),
        filling: trainer::Filling::default(),
        stopped: None,
        fallback: Default::default(),
        group,
    };
    let trainer = std::thread::Builder::new()
        .name("trainer".into())
        .spawn(move || trainer.run(work_rx))
        .context("starting the trainer thread")?;
    let sampler = tokio::spawn(sampler::run(shards, table, work_tx.clone()));

    let (closing, closing_rx) = tokio::sync::watch::channel(false);
    let service = service::Learner {
        spec: setup::run_spec(config),
        rank: config.learner.rank,
        stats,
        weights: weights_rx,
        work: work_tx.clone(),
        fleet,
        metrics,
        encoded: Arc::new(fleetrl_core::broadcast::EncodedCache::new(
            config.learner.broadcast_dtype,
        )),
        closing: closing_rx,
        subscriber_timeout: Duration::try_from_secs_f64(config.learner.subscriber_timeout_s)
            .unwrap_or(Duration::MAX),
    };
    let roles = supervise::Roles {
        trainer,
        sampler,
        helpers,
        work: work_tx,
        closing,
    };
    Ok((service, roles))
}
