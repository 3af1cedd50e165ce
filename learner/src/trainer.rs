//! The update loop, on its own OS thread: batches in, updated weights out.
//!
//! Everything tch runs here, never on the async runtime. The loop owns the algorithm; the
//! gRPC side talks to it only through the [`Work`] channel and reads what it publishes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fleetrl_core::algos::{self, Algorithm, Metrics};
use fleetrl_core::checkpoint::{self, CheckpointMeta};
use fleetrl_core::config::RunConfig;
use fleetrl_core::items::rollout::RolloutBatch;
use fleetrl_proto::v1::Weights;
use fleetrl_proto::TensorMap;
use fleetrl_runtime::telemetry::EventWriter;
use tokio::sync::{mpsc, oneshot, watch};

use crate::metrics::LearnerMetrics;
use crate::stats::Stats;

/// Where a saved checkpoint is and which version it holds.
pub(crate) type Saved = Result<(PathBuf, i64), String>;

/// What the trainer thread is asked to do, in arrival order.
pub(crate) enum Work {
    /// One rollout from the replay server (stacked, leading dimension 1).
    Rollout(TensorMap),
    /// Write a checkpoint now and say where.
    Checkpoint(oneshot::Sender<Saved>),
}

/// The trainer thread's state.
pub(crate) struct Trainer {
    pub(crate) algo: Box<dyn Algorithm>,
    pub(crate) config: RunConfig,
    pub(crate) stats: Arc<Mutex<Stats>>,
    pub(crate) weights: watch::Sender<Arc<Weights>>,
    pub(crate) checkpoint_dir: PathBuf,
    pub(crate) events: Option<EventWriter>,
    pub(crate) last_log: Instant,
    /// Seconds spent waiting for batches and training on them since the last progress log.
    pub(crate) timing: Timing,
    /// Rollouts waiting for enough company to make a batch.
    pub(crate) pending: Vec<TensorMap>,
    /// What Prometheus scrapes.
    pub(crate) metrics: Arc<LearnerMetrics>,
    /// PPO+D's demo buffer state, logged with the scalars (empty without `[ppod]`).
    pub(crate) demo_stats: crate::demo_stats::DemoStats,
}

/// Where the trainer thread's time goes: waiting for data or updating.
#[derive(Debug, Default)]
pub(crate) struct Timing {
    waiting: f64,
    updating: f64,
    updates: u32,
}

/// Waits (a minute at most) for the final checkpoint asked for at shutdown and logs the outcome.
pub(crate) async fn log_final_checkpoint(saved: oneshot::Receiver<Saved>) {
    match tokio::time::timeout(std::time::Duration::from_secs(60), saved).await {
        Ok(Ok(Ok((path, version)))) => {
            tracing::info!(path = %path.display(), version, "final checkpoint")
        }
        other => tracing::error!(?other, "final checkpoint failed"),
    }
}

/// Builds the weights message for the model's current parameters.
pub(crate) fn weights_message(algo: &dyn Algorithm, version: i64) -> Result<Weights, String> {
    let params = algo.model().export().map_err(|e| e.to_string())?;
    // `subscribers` is filled in per subscriber stream by the service.
    Ok(Weights {
        version,
        params: Some(params),
        subscribers: 0,
        published_unix_nanos: fleetrl_core::broadcast::now_unix_nanos(),
        ..Weights::default()
    })
}

impl Trainer {
    /// Runs until every sender of `work` is gone.
    pub(crate) fn run(mut self, mut work: mpsc::Receiver<Work>) {
        loop {
            let waited = Instant::now();
            let Some(item) = work.blocking_recv() else {
                break;
            };
            let waited = waited.elapsed().as_secs_f64();
            self.timing.waiting += waited;
            self.metrics.batch_wait_seconds.add(waited);
            match item {
                Work::Rollout(rollout) => {
                    self.metrics.rollouts_received.inc();
                    let Some(batch) = self.admit(rollout) else {
                        continue;
                    };
                    let started = Instant::now();
                    self.train(&batch);
                    let updating = started.elapsed().as_secs_f64();
                    self.timing.updating += updating;
                    self.metrics.update_seconds.observe(updating);
                    self.timing.updates += 1;
                }
                Work::Checkpoint(reply) => {
                    let _ = reply.send(self.checkpoint());
                }
            }
        }
        if let Some(events) = self.events.as_mut() {
            let _ = events.flush();
        }
    }

    /// Keeps `rollout` unless it lags the current policy by more than `max_policy_lag`
    /// versions; returns a batch once `batch_rollouts` fresh rollouts are waiting.
    fn admit(&mut self, rollout: TensorMap) -> Option<RolloutBatch> {
        let max_lag = self.config.actors.max_policy_lag as i64;
        let mut stats = self.stats.lock().expect("stats lock poisoned");
        let current = stats.policy_version;
        let before = self.pending.len() + 1;
        if let Some(version) = RolloutBatch::version_of(&rollout) {
            let lag = (current - version).max(0) as f64;
            self.metrics.rollout_policy_lag.set(lag);
            self.metrics.rollout_policy_lag_sum.add(lag);
        }
        self.pending.push(rollout);
        self.pending.retain(|r| {
            let version = RolloutBatch::version_of(r);
            let keep = version.is_some_and(|v| current - v <= max_lag);
            if !keep {
                tracing::debug!(current, ?version, "dropping a stale rollout");
            }
            keep
        });
        let dropped = (before - self.pending.len()) as u64;
        stats.rollouts_dropped += dropped;
        self.metrics.rollouts_dropped.add(dropped as f64);
        drop(stats);
        if self.pending.len() < self.config.learner.batch_rollouts as usize {
            return None;
        }
        let parts = std::mem::take(&mut self.pending);
        match RolloutBatch::from_parts(&parts) {
            Ok(batch) => Some(batch),
            Err(error) => {
                tracing::error!(%error, "dropping rollouts that do not form a batch");
                None
            }
        }
    }

    fn budget_reached(&self) -> bool {
        let stats = self.stats.lock().expect("stats lock poisoned");
        stats.env_steps_trained >= self.config.stop.total_env_steps
    }

    fn train(&mut self, batch: &RolloutBatch) {
        if self.budget_reached() {
            return;
        }
        let version = self
            .stats
            .lock()
            .expect("stats lock poisoned")
            .policy_version;
        let span =
            tracing::info_span!("update", step = version + 1, batch_size = batch.env_steps());
        let metrics = span.in_scope(|| algos::train_on(self.algo.as_mut(), batch));
        let lag = version as f64 + 1.0
            - batch.policy_version.iter().sum::<i64>() as f64
                / batch.policy_version.len().max(1) as f64;
        self.publish(version + 1);
        let (steps, recent) = {
            let mut stats = self.stats.lock().expect("stats lock poisoned");
            stats.policy_version = version + 1;
            stats.updates = self.algo.updates();
            stats.env_steps_trained += batch.env_steps();
            stats.record_lag(lag);
            (stats.env_steps_trained, stats.recent_return())
        };
        let mut metrics = metrics;
        metrics.0.push(("policy_lag", lag));
        self.metrics
            .record_update(self.algo.updates(), steps, version + 1, &metrics);
        self.metrics.policy_lag.set(lag);
        self.record(version + 1, steps, recent, &metrics);
        let interval = self.config.learner.checkpoint_interval;
        let budget_done = steps >= self.config.stop.total_env_steps;
        if (interval > 0 && self.algo.updates().is_multiple_of(interval)) || budget_done {
            match self.checkpoint() {
                Ok((path, _)) if budget_done => {
                    tracing::info!(env_steps = steps, checkpoint = %path.display(), "step budget reached; training stops")
                }
                Ok(_) => {}
                Err(error) => tracing::error!(%error, "checkpoint failed"),
            }
        }
    }

    fn publish(&mut self, version: i64) {
        match weights_message(self.algo.as_ref(), version) {
            Ok(weights) => {
                self.weights.send_replace(Arc::new(weights));
                self.metrics.weights_published.inc();
            }
            Err(error) => tracing::error!(%error, "cannot export weights"),
        }
    }

    fn record(&mut self, version: i64, env_steps: u64, recent: f64, metrics: &Metrics) {
        if let Some(events) = self.events.as_mut() {
            let mut values: Vec<(&str, f64)> = metrics.0.iter().map(|(k, v)| (*k, *v)).collect();
            if recent.is_finite() {
                values.push(("episode_return", recent));
            }
            values.extend(self.demo_stats.scalars());
            if let Err(error) = events.scalars(env_steps as i64, &values) {
                tracing::warn!(%error, "cannot write TensorBoard events");
            }
        }
        if self.last_log.elapsed().as_secs_f64() >= 5.0 {
            self.last_log = Instant::now();
            if let Some(events) = self.events.as_mut() {
                let _ = events.flush();
            }
            let t = std::mem::take(&mut self.timing);
            let per_update = |secs: f64| 1e3 * secs / t.updates.max(1) as f64;
            tracing::info!(
                version,
                env_steps,
                recent_return = recent,
                update_ms = per_update(t.updating),
                wait_ms = per_update(t.waiting),
                policy_loss = metrics.get("policy_loss"),
                value_loss = metrics.get("value_loss"),
                approx_kl = metrics.get("approx_kl"),
                policy_lag = metrics.get("policy_lag"),
                "progress"
            );
        }
    }

    fn checkpoint(&mut self) -> Saved {
        let (version, env_steps) = {
            let stats = self.stats.lock().expect("stats lock poisoned");
            (stats.policy_version, stats.env_steps_trained)
        };
        let learned = Learned {
            params: self.algo.model().named_parameters(),
            state: self.algo.state(),
            updates: self.algo.updates(),
        };
        save_checkpoint(
            &self.checkpoint_dir,
            &self.config,
            learned,
            version,
            env_steps,
        )
    }
}

/// What a checkpoint keeps of an algorithm, on- or off-policy: the model's parameters, the
/// optimiser (and target network) state and the update count.
pub(crate) struct Learned {
    pub(crate) params: Vec<(String, tch::Tensor)>,
    pub(crate) state: Vec<(String, tch::Tensor)>,
    pub(crate) updates: u64,
}

/// Writes a checkpoint of policy `version` after `env_steps` (pruning old ones): the one
/// place both trainers save.
pub(crate) fn save_checkpoint(
    dir: &std::path::Path,
    config: &RunConfig,
    learned: Learned,
    version: i64,
    env_steps: u64,
) -> Saved {
    let meta = CheckpointMeta {
        policy_version: version,
        updates: learned.updates,
        env_steps,
        env_id: config.env.id.clone(),
    };
    let path = checkpoint::save_and_prune(dir, &learned.params, &learned.state, &meta, config)
        .map_err(|e| e.to_string())?;
    tracing::debug!(path = %path.display(), version, "checkpoint written");
    Ok((path, version))
}
