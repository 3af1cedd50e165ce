//! The replay server's Prometheus metrics (prefix `fleetrl_replay`), served on
//! `--metrics-listen`.
//!
//! Table sizes and insert/sample totals come from the server's own `Info` RPC, polled once a
//! second over loopback: the exporter reads exactly what clients see and needs no hooks inside
//! the tables. Rate-limiter waits are timed where the service awaits the table
//! ([`INSERT_WAITS`], [`SAMPLE_WAITS`]); they are process-wide, like the server's tables.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::InfoRequest;
use fleetrl_runtime::telemetry::metrics::Registry;

/// A wait longer than this counts as a rate-limiter wait (a free table answers in microseconds).
const WAIT_THRESHOLD: Duration = Duration::from_millis(1);

/// Time spent waiting on a table's rate limiter, and how many calls had to wait.
#[derive(Debug)]
pub(crate) struct Waits {
    nanos: AtomicU64,
    count: AtomicU64,
}

impl Waits {
    const fn new() -> Waits {
        Waits {
            nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one insert or sample that took `elapsed` from call to completion.
    pub(crate) fn record(&self, elapsed: Duration) {
        if elapsed >= WAIT_THRESHOLD {
            self.count.fetch_add(1, Ordering::Relaxed);
            let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
            self.nanos.fetch_add(nanos, Ordering::Relaxed);
        }
    }

    fn seconds(&self) -> f64 {
        self.nanos.load(Ordering::Relaxed) as f64 * 1e-9
    }

    fn count(&self) -> f64 {
        self.count.load(Ordering::Relaxed) as f64
    }
}

/// Inserts that waited for room (a full queue).
pub(crate) static INSERT_WAITS: Waits = Waits::new();
/// Samples that waited for items (an empty queue).
pub(crate) static SAMPLE_WAITS: Waits = Waits::new();

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
        mirror_waits(&registry);
        if let Err(error) = poll(&registry, target, &mut last).await {
            tracing::debug!(%error, "metrics: cannot read table info");
        }
    }
}

fn mirror_waits(r: &Registry) {
    for (kind, waits) in [("insert", &INSERT_WAITS), ("sample", &SAMPLE_WAITS)] {
        let labels = [("op", kind)];
        r.counter_with(
            "rate_limiter_waits_total",
            "Inserts (op=insert) and samples (op=sample) that waited on a table's rate limiter.",
            &labels,
        )
        .set_total(waits.count());
        r.counter_with(
            "rate_limiter_wait_seconds_total",
            "Seconds inserts and samples spent waiting on a table's rate limiter.",
            &labels,
        )
        .set_total(waits.seconds());
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
