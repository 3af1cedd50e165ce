//! The off-policy update loop, on its own OS thread: sampled batches in, gradient updates,
//! priorities back to the replay server, weights out every `publish_interval` updates.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fleetrl_core::algos::offpolicy::{publish_interval, OffPolicyAlgorithm};
use fleetrl_core::algos::Metrics;
use fleetrl_core::config::{ReplayOptions, RunConfig};
use fleetrl_core::items::transition::importance_weights;
use fleetrl_core::replay_client::ShardBatch;
use fleetrl_proto::v1::Weights;
use fleetrl_runtime::telemetry::EventWriter;
use tokio::sync::{mpsc, oneshot, watch};

use super::priorities::PriorityUpdate;
use crate::metrics::LearnerMetrics;
use crate::stats::Stats;
use crate::trainer::{save_checkpoint, Learned, Saved};

/// What the trainer thread is asked to do, in arrival order.
pub(crate) enum Task {
    /// A sampled batch of transitions.
    Batch(ShardBatch),
    /// Write a checkpoint now and say where.
    Checkpoint(oneshot::Sender<Saved>),
}

/// The weights message for the model's current parameters.
pub(crate) fn weights_message(
    algo: &dyn OffPolicyAlgorithm,
    version: i64,
) -> anyhow::Result<Weights> {
    Ok(Weights {
        version,
        params: Some(algo.model().export()?),
        subscribers: 0,
        published_unix_nanos: fleetrl_core::broadcast::now_unix_nanos(),
        ..Weights::default()
    })
}

/// The trainer thread's state.
pub(crate) struct OffPolicyTrainer {
    pub(crate) algo: Box<dyn OffPolicyAlgorithm>,
    pub(crate) config: RunConfig,
    pub(crate) replay: ReplayOptions,
    pub(crate) stats: Arc<Mutex<Stats>>,
    pub(crate) weights: watch::Sender<Arc<Weights>>,
    pub(crate) checkpoint_dir: PathBuf,
    pub(crate) events: Option<EventWriter>,
    pub(crate) metrics: Arc<LearnerMetrics>,
    /// Where new priorities go (prioritized replay only).
    pub(crate) priorities: Option<mpsc::UnboundedSender<PriorityUpdate>>,
    pub(crate) last_log: Instant,
    pub(crate) device: tch::Device,
}

impl OffPolicyTrainer {
    /// Runs until every sender of `tasks` is gone.
    pub(crate) fn run(mut self, mut tasks: mpsc::Receiver<Task>) {
        while let Some(task) = tasks.blocking_recv() {
            match task {
                Task::Batch(batch) => self.train(batch),
                Task::Checkpoint(reply) => {
                    let _ = reply.send(self.checkpoint());
                }
            }
        }
        if let Some(events) = self.events.as_mut() {
            let _ = events.flush();
        }
    }

    /// The env steps the actors reported: off-policy training has no batches of env steps, so
    /// the run's progress is what was collected (and inserted).
    fn env_steps(&self) -> u64 {
        self.stats
            .lock()
            .expect("stats lock poisoned")
            .env_steps_reported()
    }

    /// Importance-sampling exponent beta, annealed linearly to 1 over the step budget.
    fn beta(&self, env_steps: u64) -> f64 {
        let b0 = self.replay.importance_exponent;
        let frac = (env_steps as f64 / self.config.stop.total_env_steps.max(1) as f64).min(1.0);
        b0 + frac * (1.0 - b0)
    }

    fn train(&mut self, sampled: ShardBatch) {
        let started = Instant::now();
        let env_steps = self.env_steps();
        let response = &sampled.response;
        let Some(stacked) = response.batch.as_ref() else {
            tracing::error!("a sample response without a batch");
            return;
        };
        let weights = self.replay.prioritized.then(|| {
            importance_weights(
                &response.probabilities,
                response.table_size,
                self.beta(env_steps),
            )
        });
        let span = tracing::info_span!(
            "update",
            step = self.algo.updates() + 1,
            batch_size = response.keys.len()
        );
        // Transitions, or stored sequences for a recurrent DQN: the algorithm reads its batch.
        let update = match span.in_scope(|| {
            self.algo
                .update_sampled(stacked, weights.as_deref(), self.device)
        }) {
            Ok(update) => update,
            Err(error) => {
                tracing::error!(%error, "dropping a batch the algorithm cannot read");
                return;
            }
        };
        if let (Some(tx), Some(td)) = (&self.priorities, update.td_errors) {
            let eps = self.replay.priority_eps;
            let _ = tx.send(PriorityUpdate {
                shard: sampled.shard,
                keys: response.keys.clone(),
                priorities: td.iter().map(|d| d + eps).collect(),
            });
        }
        let updates = self.algo.updates();
        let version = {
            let mut stats = self.stats.lock().expect("stats lock poisoned");
            if updates.is_multiple_of(publish_interval(&self.config.algo)) {
                stats.policy_version += 1;
            }
            stats.updates = updates;
            stats.env_steps_trained = env_steps;
            stats.policy_version
        };
        if updates.is_multiple_of(publish_interval(&self.config.algo)) {
            self.publish(version);
        }
        self.metrics
            .update_seconds
            .observe_duration(started.elapsed());
        self.metrics
            .record_update(updates, env_steps, version, &update.metrics);
        self.record(version, env_steps, &update.metrics);
        let interval = self.config.learner.checkpoint_interval;
        if interval > 0 && updates.is_multiple_of(interval) {
            if let Err(error) = self.checkpoint() {
                tracing::error!(%error, "checkpoint failed");
            }
        }
    }

    fn publish(&mut self, version: i64) {
        match weights_message(self.algo.as_ref(), version) {
            Ok(weights) => {
                self.weights.send_replace(Arc::new(weights));
                self.metrics.weights_published.inc();
            }
            Err(error) => tracing::error!(error = format!("{error:#}"), "cannot export weights"),
        }
    }

    fn record(&mut self, version: i64, env_steps: u64, metrics: &Metrics) {
        if let Some(events) = self.events.as_mut() {
            if self.algo.updates().is_multiple_of(50) {
                let values: Vec<(&str, f64)> = metrics.0.iter().map(|(k, v)| (*k, *v)).collect();
                if let Err(error) = events.scalars(env_steps as i64, &values) {
                    tracing::warn!(%error, "cannot write TensorBoard events");
                }
            }
        }
        if self.last_log.elapsed().as_secs_f64() < 5.0 {
            return;
        }
        self.last_log = Instant::now();
        if let Some(events) = self.events.as_mut() {
            let _ = events.flush();
        }
        let recent = self
            .stats
            .lock()
            .expect("stats lock poisoned")
            .recent_return();
        tracing::info!(
            version,
            env_steps,
            updates = self.algo.updates(),
            recent_return = recent,
            q_loss = metrics.get("q_loss"),
            policy_loss = metrics.get("policy_loss"),
            alpha = metrics.get("alpha"),
            bc_loss = metrics.get("bc_loss"),
            "progress"
        );
    }

    fn checkpoint(&mut self) -> Saved {
        let (version, env_steps) = {
            let stats = self.stats.lock().expect("stats lock poisoned");
            (stats.policy_version, stats.env_steps_reported())
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
