//! The update loop, on its own OS thread, for every algorithm: sampled batches in, updates,
//! priorities back to the replay server (prioritized replay), weights out every
//! `publish_interval` updates, checkpoints.
//!
//! Everything tch runs here, never on the async runtime. The loop owns the algorithm; the
//! gRPC side talks to it only through the [`Work`] channel and reads what it publishes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fleetrl_core::algos::registry::{self, Family};
use fleetrl_core::algos::{self, Algorithm, Batch, BatchError, Metrics, TrainsOn};
use fleetrl_core::checkpoint::{self, CheckpointMeta};
use fleetrl_core::collective::CollectiveError;
use fleetrl_core::config::RunConfig;
use fleetrl_core::items::check::{check_items, check_task, ItemError};
use fleetrl_core::models::{weights, ModelError};
use fleetrl_core::replay_client::ShardBatch;
use fleetrl_proto::space::Space;
use fleetrl_proto::v1::{SetParameterResponse, Weights};
use fleetrl_proto::TensorMap;
use fleetrl_runtime::telemetry::EventWriter;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot, watch};

use crate::error::LearnerError;
use crate::fallback::Fallback;
use crate::fleet::Fleet;
use crate::metrics::LearnerMetrics;
use crate::priorities::{KeyChange, KeyUpdate};
use crate::screen::Refused;
use crate::stats::Stats;

mod ranks;
mod rollouts;
mod sampled;

pub(crate) use rollouts::Filling;

/// Where a saved checkpoint is and which version it holds.
pub(crate) type Saved = Result<(PathBuf, i64), LearnerError>;

/// What the trainer thread is asked to do, in arrival order.
pub(crate) enum Work {
    /// One sampled batch (a single rollout for on-policy algorithms).
    Sample(ShardBatch),
    /// Write a checkpoint now and say where.
    Checkpoint(oneshot::Sender<Saved>),
    /// Change a live hyperparameter (`key`, a TOML `value`) for the next updates.
    Set {
        key: String,
        value: String,
        reply: oneshot::Sender<Result<SetParameterResponse, LearnerError>>,
    },
}

/// The trainer thread's state.
pub(crate) struct Trainer {
    pub(crate) algo: Box<dyn Algorithm>,
    pub(crate) config: RunConfig,
    pub(crate) stats: Arc<Mutex<Stats>>,
    pub(crate) weights: watch::Sender<Arc<Weights>>,
    pub(crate) checkpoint_dir: PathBuf,
    pub(crate) events: Option<EventWriter>,
    /// What Prometheus scrapes.
    pub(crate) metrics: Arc<LearnerMetrics>,
    /// PPO+D's demo buffer state, logged with the scalars (empty without `[ppod]`).
    pub(crate) demo_stats: crate::demo_stats::DemoStats,
    /// Where changes to sampled items go: new priorities and deletions of refused items.
    pub(crate) key_updates: mpsc::UnboundedSender<KeyUpdate>,
    /// Replay is prioritized: updates send new priorities.
    pub(crate) prioritized: bool,
    /// Sampled items refused so far (off-policy), each counted once.
    pub(crate) refused: Refused,
    pub(crate) device: tch::Device,
    /// Items whose actions fall outside it (or hold non-finite values) are dropped.
    pub(crate) action_space: Space,
    pub(crate) last_log: Instant,
    /// Seconds spent waiting for batches and training on them since the last progress log.
    pub(crate) timing: Timing,
    /// Rollouts waiting for enough company to make a batch (on-policy).
    pub(crate) pending: Vec<TensorMap>,
    /// The actors acting: a version's batch is what they all send for it.
    pub(crate) fleet: Arc<Fleet>,
    /// When the last update ended, and when a batch that has `batch_rollouts` but not yet
    /// every actor's share is trained on anyway (on-policy).
    pub(crate) filling: Filling,
    /// Why training must stop: an update made the weights NaN or infinite (nothing is
    /// published or checkpointed from then on), or its CUDA graph failed.
    pub(crate) stopped: Option<TrainerStop>,
    /// The last finite weights and state, to undo an update that makes them non-finite.
    pub(crate) fallback: Fallback,
    /// The other learner processes (`learner.world_size > 1`); only rank 0 publishes and
    /// checkpoints.
    pub(crate) group: Option<Arc<fleetrl_core::collective::Group>>,
}

/// Why the trainer stopped training before its work queue closed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrainerStop {
    /// An update made the weights NaN or infinite; they were not published or checkpointed.
    #[error(
        "update {update} made the weights non-finite ({cause}); they were not published or \
         checkpointed and training stops; {newest}: resume with a smaller learning rate or \
         gradient clipping, or scale the env's rewards (env.reward_scale)"
    )]
    Diverged {
        /// The update's number.
        update: u64,
        /// Which tensor went non-finite.
        cause: String,
        /// What the user can resume from.
        newest: String,
    },
    /// A collective with the other learner processes failed: one died or stopped answering.
    #[error(
        "update {update}: {source}; every rank stops (restart them all: they resume from rank \
         0's newest checkpoint with --resume auto)"
    )]
    Collective {
        /// The update's number.
        update: u64,
        /// Which collective, and which rank stopped answering.
        source: CollectiveError,
    },
    /// Another learner rank left the group (a shutdown): not a failure.
    #[error("{0}")]
    Left(CollectiveError),
    /// The update's CUDA graph could not be captured or replayed.
    #[error("update {update}: {source}")]
    Graph {
        /// The update's number.
        update: u64,
        /// What the graph said.
        source: BatchError,
    },
}

/// What the trainer does next.
enum Next {
    Work(Work),
    /// The wait for the rest of a batch is over: train on what is pending.
    Flush,
    /// On-policy across learner ranks: agree with the others, and update when they are ready.
    Tick,
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
        // A rank other than 0 keeps no checkpoints: nothing failed.
        Ok(Ok(Err(LearnerError::NotLeader(rank)))) => {
            tracing::info!(rank, "no final checkpoint: rank 0 writes them")
        }
        other => tracing::error!(?other, "final checkpoint failed"),
    }
}

/// The weights message for the algorithm's current parameters: the one publication path.
pub(crate) fn weights_message(algo: &dyn Algorithm, version: i64) -> Result<Weights, LearnerError> {
    let params = algo.trained().model().export()?;
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
    /// Runs until every sender of `work` is gone (Ok), or until an update makes the weights
    /// NaN or infinite (Err, saying so): those weights are never published or checkpointed.
    pub(crate) fn run(mut self, mut work: mpsc::Receiver<Work>) -> Result<(), TrainerStop> {
        fleetrl_core::cpu::flush_denormals();
        loop {
            let waited = Instant::now();
            let Some(next) = self.next(&mut work) else {
                break;
            };
            let waited = waited.elapsed().as_secs_f64();
            self.timing.waiting += waited;
            self.metrics.batch_wait_seconds.add(waited);
            let started = Instant::now();
            let trained = match next {
                Next::Work(Work::Sample(sample)) => match self.algo.trains_on() {
                    TrainsOn::Rollouts => self.train_rollout(sample),
                    _ => self.train_sampled(sample),
                },
                Next::Flush => self
                    .take_pending()
                    .is_some_and(|b| self.train_rollouts(b, None)),
                Next::Tick => match self.group.clone() {
                    Some(group) => self.tick(&group),
                    None => false,
                },
                Next::Work(Work::Checkpoint(reply)) => {
                    let _ = reply.send(self.checkpoint());
                    false
                }
                Next::Work(Work::Set { key, value, reply }) => {
                    let _ = reply.send(self.set_parameter(&key, &value));
                    false
                }
            };
            if trained {
                let updating = started.elapsed().as_secs_f64();
                self.timing.updating += updating;
                self.metrics.update_seconds.observe(updating);
                self.timing.updates += 1;
                self.filling = Filling::default();
            }
            if self.stopped.is_some() {
                break;
            }
        }
        if let Some(events) = self.events.as_mut() {
            let _ = events.flush();
        }
        if let (None, Some(group)) = (&self.stopped, &self.group) {
            // The work queue closed (a shutdown): the other ranks stop at their next agreement
            // instead of losing this one in a collective.
            if let Err(error) = group.leave() {
                tracing::info!(%error, "the other learner ranks were gone first");
            }
        }
        self.stopped.take().map_or(Ok(()), Err)
    }

    /// An update made the weights non-finite: restores the last finite ones and goes on, or
    /// stops training when that cannot be done ([`Fallback::restore`]). Whether it restored.
    fn undo(&mut self, error: &LearnerError) -> bool {
        let update = self.algo.trained().updates();
        let limit = self.config.learner.max_nonfinite_updates;
        match self.fallback.restore(self.algo.as_mut(), limit) {
            Ok(in_row) => {
                self.metrics.updates_undone_nonfinite.inc();
                tracing::warn!(
                    update,
                    in_row,
                    limit,
                    cause = %error,
                    "an update made the weights non-finite: it is undone (the last finite \
                     weights and optimiser state are restored) and training goes on"
                );
                true
            }
            Err(why) => {
                tracing::error!(%why, "a non-finite update cannot be undone");
                self.diverge(error);
                false
            }
        }
    }

    /// Stops training on weights an update made NaN or infinite (`error`), naming what the
    /// user can resume from.
    fn diverge(&mut self, error: &LearnerError) {
        let newest = checkpoint::latest(&self.checkpoint_dir).map_or_else(
            || "there is no checkpoint yet".to_string(),
            |path| {
                format!(
                    "the newest checkpoint, {}, holds finite weights",
                    path.display()
                )
            },
        );
        let stop = TrainerStop::Diverged {
            update: self.algo.trained().updates(),
            cause: error.to_string(),
            newest,
        };
        tracing::error!(cause = %stop, "training diverged");
        self.stopped = Some(stop);
    }

    /// The next piece of work; while a batch waits for the rest of the actors' shares, a
    /// [`Next::Flush`] when that wait is over. `None` once every sender is gone.
    fn next(&mut self, work: &mut mpsc::Receiver<Work>) -> Option<Next> {
        if self.ticks() {
            return self.next_tick(work);
        }
        let Some(until) = self.filling.until else {
            return work.blocking_recv().map(Next::Work);
        };
        loop {
            match work.try_recv() {
                Ok(item) => return Some(Next::Work(item)),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if Instant::now() >= until => return Some(Next::Flush),
                Err(TryRecvError::Empty) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }

    fn stats(&self) -> MutexGuard<'_, Stats> {
        self.stats.lock().expect("stats lock poisoned")
    }

    fn on_policy(&self) -> bool {
        registry::spec(&self.config).family == Family::OnPolicy
    }

    /// Whether `items` may be trained on ([`check_items`]); a refused one is counted and logged
    /// with the field at fault, and training goes on without it.
    fn accepts(&self, items: &TensorMap) -> bool {
        match self.check(items) {
            Ok(()) => true,
            Err(error) => {
                self.metrics.items_rejected.inc();
                tracing::warn!(field = %error.field, %error, "dropping items that fail the learner's checks");
                false
            }
        }
    }

    /// [`check_items`], and [`check_task`] for meta-RL items.
    fn check(&self, items: &TensorMap) -> Result<(), ItemError> {
        check_items(items, &self.action_space)?;
        match self.config.item_tasks() {
            Some(tasks) => check_task(items, &tasks),
            None => Ok(()),
        }
    }

    /// One update; sends new priorities for `keys` (shard, keys, epsilon) when the algorithm
    /// has TD errors and replay is prioritized; bumps and publishes the policy version every
    /// `publish_interval` updates.
    fn update(&mut self, batch: &Batch, keys: Option<(usize, Vec<u64>, f64)>) -> Option<Metrics> {
        let span = tracing::info_span!("update", step = self.algo.trained().updates() + 1);
        if let Some(group) = &self.group {
            let weighed = group.weigh_rows(batch.rows());
            if let Err(source) = weighed.and_then(|_| group.failure().map_or(Ok(()), Err)) {
                self.stop_collective(source);
                return None;
            }
        }
        let trained = span.in_scope(|| algos::train_on(self.algo.as_mut(), batch));
        if let Some(source) = self.group.as_ref().and_then(|g| g.failure()) {
            self.stop_collective(source);
            return None;
        }
        let update = match trained {
            Ok(update) => update,
            Err(source @ BatchError::Graph(_)) => {
                let update = self.algo.trained().updates() + 1;
                let stop = TrainerStop::Graph { update, source };
                tracing::error!(cause = %stop, "training stops");
                self.stopped = Some(stop);
                return None;
            }
            Err(error) => {
                tracing::error!(%error, "dropping a batch the algorithm cannot train on");
                return None;
            }
        };
        if let (true, Some(td), Some((shard, keys, eps))) =
            (self.prioritized, update.td_errors, keys)
        {
            let _ = self.key_updates.send(KeyUpdate {
                shard,
                keys,
                change: KeyChange::Priorities(td.iter().map(|d| d + eps).collect()),
            });
        }
        let updates = self.algo.trained().updates();
        let publish = updates.is_multiple_of(registry::spec(&self.config).publish_interval);
        let version = {
            let mut stats = self.stats();
            stats.updates = updates;
            if publish {
                stats.policy_version += 1;
            }
            stats.policy_version
        };
        if publish && self.leads() {
            self.publish(version);
        }
        Some(update.metrics)
    }

    /// Rank 0, or the only learner: it publishes weights and writes checkpoints.
    fn leads(&self) -> bool {
        self.group.as_ref().is_none_or(|g| g.rank() == 0)
    }

    /// A collective failed: no rank can go on alone.
    fn stop_collective(&mut self, source: CollectiveError) {
        if let CollectiveError::Left { .. } = source {
            // A shutdown: rank 0 keeps where the group got to.
            if self.leads() {
                if let Err(error) = self.checkpoint() {
                    tracing::error!(%error, "checkpoint failed");
                }
            }
            tracing::info!(cause = %source, "training stops");
            self.stopped = Some(TrainerStop::Left(source));
            return;
        }
        let update = self.algo.trained().updates() + 1;
        let stop = TrainerStop::Collective { update, source };
        tracing::error!(cause = %stop, "training stops");
        self.stopped = Some(stop);
    }

    /// Metrics, events, logs and the periodic (or budget-end) checkpoint after an update.
    fn after_update(&mut self, version: i64, env_steps: u64, metrics: &Metrics) {
        let updates = self.algo.trained().updates();
        self.metrics
            .record_update(updates, env_steps, version, metrics);
        self.record(version, env_steps, metrics);
        let interval = self.config.learner.checkpoint_interval;
        let budget_done = self.on_policy() && env_steps >= self.config.stop.total_env_steps;
        if ((interval > 0 && updates.is_multiple_of(interval)) || budget_done) && self.leads() {
            match self.checkpoint() {
                Ok((path, _)) if budget_done => {
                    tracing::info!(env_steps, checkpoint = %path.display(), "step budget reached; training stops")
                }
                Ok(_) => {}
                Err(error) => tracing::error!(%error, "checkpoint failed"),
            }
        }
    }

    /// Hands `weights` to every subscriber.
    fn send(&mut self, weights: Weights) {
        self.weights.send_replace(Arc::new(weights));
        self.metrics.weights_published.inc();
    }

    fn publish(&mut self, version: i64) {
        match weights_message(self.algo.as_ref(), version) {
            Ok(weights) => {
                self.send(weights);
                self.fallback.keep(self.algo.as_ref());
            }
            Err(error @ LearnerError::Export(ModelError::NonFinite(_))) => {
                if !self.undo(&error) {
                    return;
                }
                // Actors wait for this version: the restored weights are it. Not kept again,
                // so that undone updates in a row still count up to the limit.
                match weights_message(self.algo.as_ref(), version) {
                    Ok(weights) => self.send(weights),
                    Err(error) => tracing::error!(%error, "cannot export the restored weights"),
                }
            }
            Err(error) => tracing::error!(%error, "cannot export weights"),
        }
    }

    fn record(&mut self, version: i64, env_steps: u64, metrics: &Metrics) {
        let recent = self.stats().recent_return();
        // Off-policy updates are many and small: their scalars are written every 50th.
        let every = if self.on_policy() { 1 } else { 50 };
        if let Some(events) = self.events.as_mut() {
            if self.algo.trained().updates().is_multiple_of(every) {
                let mut values: Vec<(&str, f64)> =
                    metrics.0.iter().map(|(k, v)| (*k, *v)).collect();
                if recent.is_finite() {
                    values.push(("episode_return", recent));
                }
                values.extend(self.demo_stats.scalars());
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
        let t = std::mem::take(&mut self.timing);
        let per_update = |secs: f64| 1e3 * secs / t.updates.max(1) as f64;
        // Time in the collectives with the other ranks (waiting for them included).
        let collective = self.group.as_ref().map_or(0.0, |g| g.take_busy_seconds());
        tracing::info!(
            version,
            env_steps,
            updates = self.algo.trained().updates(),
            recent_return = recent,
            update_ms = per_update(t.updating),
            wait_ms = per_update(t.waiting),
            collective_ms = per_update(collective),
            metrics = ?metrics.0,
            "progress"
        );
    }

    /// Applies `fleetrl set`: the whole config validated with `key` changed, then taken by
    /// the algorithm; checkpoints from now on record the new value.
    fn set_parameter(
        &mut self,
        key: &str,
        value: &str,
    ) -> Result<SetParameterResponse, LearnerError> {
        let bad = |e: String| LearnerError::BadParameter(e);
        let (changed, previous, now) = self
            .config
            .with_live_change(key, value)
            .map_err(|e| bad(e.to_string()))?;
        self.algo
            .reconfigure(&changed.algo)
            .map_err(|e| bad(e.to_string()))?;
        self.config = changed;
        let policy_version = self.stats().policy_version;
        tracing::info!(key, %previous, value = %now, policy_version, "parameter changed");
        Ok(SetParameterResponse {
            previous,
            value: now,
            policy_version,
        })
    }

    fn checkpoint(&mut self) -> Saved {
        let (version, env_steps, progress) = {
            let stats = self.stats();
            let steps = if self.on_policy() {
                stats.env_steps_trained
            } else {
                stats.env_steps_collected()
            };
            (stats.policy_version, steps, stats.progress())
        };
        if self.stopped.is_some() {
            return Err(LearnerError::TrainerStopped);
        }
        if let Some(group) = self.group.as_ref().filter(|g| g.rank() != 0) {
            return Err(LearnerError::NotLeader(group.rank()));
        }
        let trained = self.algo.trained();
        let named = trained.model().named_parameters();
        if let Err(error) = named
            .iter()
            .try_for_each(|(name, t)| weights::check_finite(name, t))
        {
            // Weights gone non-finite since the last publication: undone here too, so the
            // checkpoint holds the restored ones.
            let error = LearnerError::Export(error);
            if !self.undo(&error) {
                return Err(error);
            }
        }
        let trained = self.algo.trained();
        let meta = CheckpointMeta {
            policy_version: version,
            updates: trained.updates(),
            env_steps,
            env_id: self.config.env.id.clone(),
            progress,
        };
        let path = checkpoint::save_and_prune(
            &self.checkpoint_dir,
            &named,
            &self.algo.state(),
            &meta,
            &self.config,
        )?;
        tracing::debug!(path = %path.display(), version, "checkpoint written");
        Ok((path, version))
    }
}
