//! The replay server's Prometheus metrics (prefix `fleetrl_replay`), served on
//! `--metrics-listen`.
//!
//! Table sizes and insert/sample totals come from the server's own `Info` RPC, polled once a
//! second over loopback: the exporter reads exactly what clients see and needs no hooks inside
//! the tables. What only the service sees (insert and sample latency, rate-limiter waits) is
//! observed where it awaits the table, through [`ReplayMetrics`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::InfoRequest;
use fleetrl_runtime::telemetry::metrics::{Counter, Registry};

/// A wait longer than this counts as a rate-limiter wait (a free table answers in microseconds).
const WAIT_THRESHOLD: Duration = Duration::from_millis(1);

/// Calls that waited on a table's rate limiter, and the seconds they waited, for one op.
#[derive(Debug, Clone)]
struct Waits {
    count: Counter,
    seconds: Counter,
}

impl Waits {
    fn new(r: &Registry, op: &str) -> Waits {
        let labels = [("op", op)];
        Waits {
            count: r.counter_with(
                "rate_limiter_waits_total",
                "Inserts (op=insert) and samples (op=sample) that waited on a table's rate limiter.",
                &labels,
            ),
            seconds: r.counter_with(
                "rate_limiter_wait_seconds_total",
                "Seconds inserts and samples spent waiting on a table's rate limiter.",
                &labels,
            ),
        }
    }

    fn record(&self, elapsed: Duration) {
        if elapsed >= WAIT_THRESHOLD {
            self.count.inc();
            self.seconds.add(elapsed.as_secs_f64());
        }
    }
}

/// What the service observes per call, in the server's registry.
#[derive(Debug, Clone)]
pub struct ReplayMetrics {
    registry: Arc<Registry>,
    insert_waits: Waits,
    sample_waits: Waits,
}

impl ReplayMetrics {
    /// Registers the service's metrics in `registry` (prefix `fleetrl_replay`).
    pub fn new(registry: Arc<Registry>) -> ReplayMetrics {
        ReplayMetrics {
            insert_waits: Waits::new(&registry, "insert"),
            sample_waits: Waits::new(&registry, "sample"),
            registry,
        }
    }

    /// Records one insert into `table` that took `elapsed`, rate-limiter wait included.
    pub(crate) fn record_insert(&self, table: &str, elapsed: Duration) {
        self.insert_waits.record(elapsed);
        self.registry
            .histogram_with(
                "insert_seconds",
                "Seconds from an insert reaching its table to its items stored (rate-limiter waits included).",
                &[("table", table)],
            )
            .observe_duration(elapsed);
    }

    /// Records one batch sampled from `table`: `elapsed` from asking to the batch stacked
    /// (rate-limiter waits included).
    pub(crate) fn record_sample(&self, table: &str, elapsed: Duration) {
        self.sample_waits.record(elapsed);
        self.registry
            .histogram_with(
                "sample_seconds",
                "Seconds from asking a table for a batch to the batch stacked (rate-limiter waits included).",
                &[("table", table)],
            )
            .observe_duration(elapsed);
    }
}

/// Polls the server at `server` once a second and mirrors its tables into `registry`; runs
/// until dropped (the server supervises it).
pub async fn export(registry: Arc<Registry>, server: SocketAddr) {
    let mut target = server;
    if target.ip().is_unspecified() {
        target.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let mut last: HashMap<String, (Instant, u64, u64)> = HashMap::new();
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    loop {
        ticker.tick().await;
        if let Err(error) = poll(&registry, target, &mut last).await {
            tracing::debug!(%error, "metrics: cannot read table info");
        }
    }
}

async fn poll(
    r: &Registry,
    server: SocketAddr,
    last: &mut HashMap<String, (Instant, u64, u64)>,
) -> anyhow::Result<()> {
    let channel =
        fleetrl_runtime::net::connect(&server.to_string(), Duration::from_secs(1)).await?;
    let info = ReplayServiceClient::new(channel)
        .info(InfoRequest {})
        .await?
        .into_inner();
    for table in info.tables {
        let labels = [("table", table.name.as_str())];
        r.gauge_with("table_size", "Items the table holds now.", &labels)
            .set(table.current_size as f64);
        r.gauge_with("table_max_size", "Items the table can hold.", &labels)
            .set(table.max_size as f64);
        r.counter_with("inserted_total", "Items ever inserted.", &labels)
            .set_total(table.num_inserted as f64);
        r.counter_with("sampled_total", "Items ever sampled.", &labels)
            .set_total(table.num_sampled as f64);
        let now = (Instant::now(), table.num_inserted, table.num_sampled);
        if let Some((since, inserted, sampled)) = last.insert(table.name.clone(), now) {
            let secs = since.elapsed().as_secs_f64().max(1e-3);
            let rate = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
            r.gauge_with(
                "inserts_per_second",
                "Inserts per second, last second.",
                &labels,
            )
            .set(rate(table.num_inserted, inserted));
            r.gauge_with(
                "samples_per_second",
                "Samples per second, last second.",
                &labels,
            )
            .set(rate(table.num_sampled, sampled));
        }
    }
    Ok(())
}
