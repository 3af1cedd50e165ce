//! The actor's Prometheus metrics (prefix `fleetrl_actor`), served on `--metrics-listen`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetrl_core::envs::Episode;
use fleetrl_runtime::telemetry::metrics::{Counter, Gauge, Histogram, Registry};

/// Episodes kept for the recent-return mean.
const RECENT_EPISODES: usize = 100;

/// Everything the actor counts.
pub(crate) struct ActorMetrics {
    pub(crate) env_steps: Counter,
    env_steps_per_second: Gauge,
    episodes: Counter,
    episode_return_sum: Gauge,
    episode_return_recent: Gauge,
    pub(crate) rollouts_sent: Counter,
    pub(crate) insert_reconnects: Counter,
    pub(crate) weights_received: Counter,
    /// Seconds from the learner publishing a version to this actor acting with it.
    weights_apply_latency: Histogram,
    weights_applied: Counter,
    /// Seconds the env loop paused for the last swap (copying weights into the model).
    weights_swap: Gauge,
    policy_version: Gauge,
    policy_lag: Gauge,
    /// Recent returns, and the start of the current steps/s window with its step count.
    window: Mutex<(VecDeque<f64>, Instant, f64)>,
}

impl ActorMetrics {
    pub(crate) fn new(registry: &Registry) -> ActorMetrics {
        let r = registry;
        ActorMetrics {
            env_steps: r.counter("env_steps_total", "Env steps taken."),
            env_steps_per_second: r.gauge(
                "env_steps_per_second",
                "Env steps per second over the last few seconds.",
            ),
            episodes: r.counter("episodes_total", "Episodes finished."),
            // A gauge: returns can be negative, and a counter never goes down.
            episode_return_sum: r.gauge(
                "episode_return_sum",
                "Sum of finished episodes' returns (with episodes_total: the mean over any window).",
            ),
            episode_return_recent: r.gauge(
                "episode_return_recent",
                "Mean return of this actor's last 100 episodes.",
            ),
            rollouts_sent: r.counter(
                "rollouts_sent_total",
                "Rollouts the replay server acknowledged.",
            ),
            insert_reconnects: r.counter(
                "insert_reconnects_total",
                "Times the insert stream to the replay server broke and was reopened.",
            ),
            weights_received: r.counter(
                "weights_received_total",
                "Weight versions received from the learner.",
            ),
            policy_version: r.gauge("policy_version", "Version of the policy acting now."),
            weights_apply_latency: r.histogram(
                "weights_apply_latency_seconds",
                "Seconds from the learner publishing the acting policy to this actor swapping it in.",
            ),
            weights_applied: r.counter("weights_applied_total", "Weight versions swapped in."),
            weights_swap: r.gauge(
                "weights_swap_seconds",
                "Seconds the env loop paused for the last weight swap (reassembly happens off it).",
            ),
            policy_lag: r.gauge(
                "policy_lag",
                "Versions between the newest published policy and the one that acted in the last rollout.",
            ),
            window: Mutex::new((VecDeque::new(), Instant::now(), 0.0)),
        }
    }

    /// Copies the received weights `w` into the acting model with `load`, timing the env
    /// loop's pause, and records the swap; `w`'s version, or `load`'s error.
    pub(crate) fn apply_weights<E>(
        &self,
        w: &fleetrl_core::broadcast::Received,
        load: impl FnOnce(&[(String, tch::Tensor)]) -> Result<(), E>,
    ) -> Result<i64, E> {
        let swap = std::time::Instant::now();
        w.with_tensors(load)?;
        self.record_weights_applied(w.published_unix_nanos, swap.elapsed());
        Ok(w.version)
    }

    /// Records a swap to weights the learner published at `published_unix_nanos`, which
    /// paused the env loop for `swap`.
    fn record_weights_applied(&self, published_unix_nanos: i64, swap: Duration) {
        self.weights_swap.set(swap.as_secs_f64());
        let latency = fleetrl_core::broadcast::seconds_since(published_unix_nanos);
        self.weights_apply_latency.observe(latency);
        self.weights_applied.inc();
    }

    /// Records a finished rollout: its steps and episodes, the version that acted and the
    /// newest version this actor has heard of.
    pub(crate) fn record_rollout(
        &self,
        env_steps: u64,
        episodes: &[Episode],
        acted: i64,
        newest: i64,
    ) {
        self.env_steps.add(env_steps as f64);
        self.episodes.add(episodes.len() as f64);
        self.policy_version.set(acted as f64);
        self.policy_lag.set((newest - acted).max(0) as f64);
        let mut window = self.window.lock().expect("metrics lock poisoned");
        for e in episodes {
            self.episode_return_sum
                .set(self.episode_return_sum.get() + e.return_);
            if window.0.len() == RECENT_EPISODES {
                window.0.pop_front();
            }
            window.0.push_back(e.return_);
        }
        if !window.0.is_empty() {
            let mean = window.0.iter().sum::<f64>() / window.0.len() as f64;
            self.episode_return_recent.set(mean);
        }
        let elapsed = window.1.elapsed().as_secs_f64();
        if elapsed >= 2.0 {
            let steps = self.env_steps.get();
            self.env_steps_per_second.set((steps - window.2) / elapsed);
            window.1 = Instant::now();
            window.2 = steps;
        }
    }
}

/// The actor's registry and metrics, shared by its tasks.
pub(crate) fn build() -> (Arc<Registry>, Arc<ActorMetrics>) {
    let registry = Registry::new("fleetrl_actor");
    let metrics = Arc::new(ActorMetrics::new(&registry));
    (registry, metrics)
}
