//! The policy server's Prometheus metrics (prefix `fleetrl_serve`), served on
//! `--metrics-listen`.

use std::sync::Arc;

use fleetrl_runtime::telemetry::metrics::{Counter, Gauge, Histogram, Registry};

/// Everything the policy server counts.
pub(crate) struct ServeMetrics {
    /// Act calls answered with actions.
    pub(crate) requests: Counter,
    /// Observation rows answered.
    pub(crate) rows: Counter,
    /// Forward passes run (rows / batches is the mean batch).
    pub(crate) batches: Counter,
    /// Rows in the last forward pass.
    pub(crate) batch_rows: Gauge,
    /// Seconds from an Act call being queued to its answer (queueing and the forward pass).
    pub(crate) latency: Histogram,
    /// Rows waiting for the forward pass now.
    pub(crate) queued_rows: Gauge,
    /// Act calls refused for bad observations.
    pub(crate) refused_invalid: Counter,
    /// Act calls refused because the queue was full.
    pub(crate) refused_busy: Counter,
    /// Act calls refused before the first weights.
    pub(crate) refused_no_weights: Counter,
    /// The policy version served now.
    pub(crate) policy_version: Gauge,
    /// Weight versions received from the learner (`--follow`).
    pub(crate) weights_received: Counter,
}

impl ServeMetrics {
    fn new(r: &Registry) -> ServeMetrics {
        let refused = "Act calls refused, by reason";
        ServeMetrics {
            requests: r.counter("requests_total", "Act calls answered with actions."),
            rows: r.counter("rows_total", "Observation rows answered."),
            batches: r.counter(
                "batches_total",
                "Forward passes run (rows_total / batches_total is the mean batch).",
            ),
            batch_rows: r.gauge("batch_rows", "Rows in the last forward pass."),
            latency: r.histogram(
                "request_latency_seconds",
                "Seconds from an Act call being queued to its answer.",
            ),
            queued_rows: r.gauge("queued_rows", "Rows waiting for the forward pass."),
            refused_invalid: r.counter_with("refused_total", refused, &[("reason", "invalid")]),
            refused_busy: r.counter_with("refused_total", refused, &[("reason", "busy")]),
            refused_no_weights: r.counter_with(
                "refused_total",
                refused,
                &[("reason", "no_weights")],
            ),
            policy_version: r.gauge("policy_version", "Version of the policy served now."),
            weights_received: r.counter(
                "weights_received_total",
                "Weight versions received from the learner.",
            ),
        }
    }
}

/// The server's registry and metrics, shared by its tasks and its inference thread.
pub(crate) fn build() -> (Arc<Registry>, Arc<ServeMetrics>) {
    let registry = Registry::new("fleetrl_serve");
    let metrics = Arc::new(ServeMetrics::new(&registry));
    (registry, metrics)
}
