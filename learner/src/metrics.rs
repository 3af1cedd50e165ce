//! The learner's Prometheus metrics (prefix `fleetrl_learner`), served on
//! `--metrics-listen`. Totals restored from a checkpoint (updates, env steps, policy version)
//! continue across restarts; the rest count from the process start.

use std::sync::Arc;
use std::time::Instant;

use fleetrl_core::algos::Metrics;
use fleetrl_runtime::telemetry::metrics::{self, Counter, Gauge, Histogram, Registry};

use crate::stats::Stats;

/// The learner's metrics, starting from the counters it resumed with, served on `listen`
/// when one is given.
pub(crate) async fn start(
    listen: Option<&str>,
    stats: &Stats,
) -> anyhow::Result<Arc<LearnerMetrics>> {
    let registry = Registry::new("fleetrl_learner");
    let learner = Arc::new(LearnerMetrics::new(registry.clone()));
    learner.updates.set_total(stats.updates as f64);
    learner
        .env_steps_trained
        .set_total(stats.env_steps_trained as f64);
    learner.policy_version.set(stats.policy_version as f64);
    metrics::serve_if(listen, &registry).await?;
    Ok(learner)
}

/// Everything the learner counts.
pub(crate) struct LearnerMetrics {
    registry: Arc<Registry>,
    pub(crate) updates: Counter,
    pub(crate) env_steps_trained: Counter,
    pub(crate) policy_version: Gauge,
    pub(crate) updates_per_second: Gauge,
    pub(crate) batch_wait_seconds: Counter,
    pub(crate) update_seconds: Histogram,
    pub(crate) weights_published: Counter,
    pub(crate) updates_undone_nonfinite: Counter,
    pub(crate) rollouts_received: Counter,
    pub(crate) rollouts_dropped: Counter,
    /// Items (rollouts, or sampled items, each once) dropped for failing the learner's checks.
    pub(crate) items_rejected: Counter,
    pub(crate) policy_lag: Gauge,
    /// Per rollout on arrival: versions between the policy that acted and the current one
    /// (the last, and the sum over `rollouts_received_total`).
    pub(crate) rollout_policy_lag: Gauge,
    pub(crate) rollout_policy_lag_sum: Counter,
    pub(crate) episodes: Counter,
    pub(crate) env_steps_reported: Counter,
    pub(crate) episode_return_recent: Gauge,
    pub(crate) actors_connected: Gauge,
    /// Actors an on-policy batch waits for (see `crate::fleet`).
    pub(crate) actors_acting: Gauge,
    /// Weight subscriptions dropped for reading nothing for `learner.subscriber_timeout_s`.
    pub(crate) weight_subscribers_dropped: Counter,
    /// Versions never sent to a subscriber because a newer one was ready when it was.
    pub(crate) weight_versions_skipped: Counter,
    /// When and at what update count the current rate window started.
    rate_window: std::sync::Mutex<Option<(Instant, f64)>>,
}

impl LearnerMetrics {
    pub(crate) fn new(registry: Arc<Registry>) -> LearnerMetrics {
        let r = &registry;
        LearnerMetrics {
            updates: r.counter(
                "updates_total",
                "Policy updates done (restored across restarts).",
            ),
            env_steps_trained: r.counter(
                "env_steps_trained_total",
                "Env steps in the batches trained on (restored across restarts).",
            ),
            policy_version: r.gauge("policy_version", "Version of the newest published weights."),
            updates_per_second: r.gauge(
                "updates_per_second",
                "Updates per second over the last few seconds.",
            ),
            batch_wait_seconds: r.counter(
                "batch_wait_seconds_total",
                "Seconds the trainer waited for rollouts from the replay server.",
            ),
            update_seconds: r.histogram("update_seconds", "Seconds each update took."),
            weights_published: r.counter(
                "weights_published_total",
                "Weight versions published to the actors.",
            ),
            updates_undone_nonfinite: r.counter(
                "updates_undone_nonfinite_total",
                "Updates whose weights came out NaN or infinite, undone by restoring the last \
                 finite parameters and optimiser state.",
            ),
            rollouts_received: r.counter(
                "rollouts_received_total",
                "Rollouts sampled from the replay server.",
            ),
            items_rejected: r.counter(
                "items_rejected_total",
                "Rollouts or sampled items dropped because they failed the learner's checks \
                 (action outside the space, a value that is not finite); a refused sampled item \
                 is deleted from its table and counted once.",
            ),
            rollouts_dropped: r.counter(
                "rollouts_dropped_total",
                "Rollouts dropped for lagging more than actors.max_policy_lag versions.",
            ),
            policy_lag: r.gauge(
                "policy_lag",
                "Mean versions between the acting policy and the updated one, last batch.",
            ),
            rollout_policy_lag: r.gauge(
                "rollout_policy_lag",
                "Versions between the policy that acted in the last rollout received and the current one.",
            ),
            rollout_policy_lag_sum: r.counter(
                "rollout_policy_lag_versions_total",
                "Sum of rollout_policy_lag over every rollout received.",
            ),
            episodes: r.counter("episodes_total", "Episodes the actors reported."),
            env_steps_reported: r.counter(
                "env_steps_reported_total",
                "Env steps the actors reported (acted, whether trained on or not).",
            ),
            episode_return_recent: r.gauge(
                "episode_return_recent",
                "Mean return of the last 100 reported episodes.",
            ),
            actors_connected: r.gauge(
                "actors_connected",
                "Open weight subscriptions: the actors connected now (a subscriber dropped for \
                 reading nothing no longer counts).",
            ),
            actors_acting: r.gauge(
                "actors_acting",
                "Actors an on-policy batch waits for: weight subscriptions that name their \
                 actor, whose actor reported in the last 10 s or subscribed within them.",
            ),
            weight_subscribers_dropped: r.counter(
                "weight_subscribers_dropped_total",
                "Weight subscribers dropped for reading nothing for learner.subscriber_timeout_s.",
            ),
            weight_versions_skipped: r.counter(
                "weight_versions_skipped_total",
                "Versions a weight subscriber was never sent: published while it was still \
                 taking an older one (it gets the newest instead).",
            ),
            rate_window: std::sync::Mutex::new(None),
            registry,
        }
    }

    /// Records one finished update: totals, the algorithm's metrics (one gauge each, e.g.
    /// `fleetrl_learner_policy_loss`) and the update rate.
    pub(crate) fn record_update(&self, updates: u64, env_steps: u64, version: i64, m: &Metrics) {
        self.updates.set_total(updates as f64);
        self.env_steps_trained.set_total(env_steps as f64);
        self.policy_version.set(version as f64);
        for (name, value) in &m.0 {
            self.registry
                .gauge(name, "Last update's value of this algorithm metric.")
                .set(*value);
        }
        let mut window = self.rate_window.lock().expect("metrics lock poisoned");
        let now = (Instant::now(), updates as f64);
        let Some((since, at)) = *window else {
            *window = Some(now);
            return;
        };
        let elapsed = since.elapsed().as_secs_f64();
        if elapsed >= 2.0 {
            self.updates_per_second
                .set((updates as f64 - at).max(0.0) / elapsed);
            *window = Some(now);
        }
    }
}
