//! Prometheus metrics: counters, gauges and latency histograms kept by the `prometheus-client`
//! crate, rendered in the OpenMetrics text format and served on `GET /metrics` over hyper (the
//! HTTP stack tonic already brings).
//!
//! Each binary creates one [`Registry`] at startup with its prefix (`fleetrl_actor`, ...) and
//! passes it down; its crate's `metrics.rs` registers what it counts, and [`serve_if`] exposes it
//! when the binary is given `--metrics-listen ADDR` (env `FLEETRL_METRICS_LISTEN`). Updating a
//! counter or gauge is one atomic operation and observing a histogram one short lock, so the hot
//! paths (acting, updating, inserting) pay nothing measurable.
//!
//! Names follow OpenMetrics: a counter registered as `x_total` is exposed as the sample
//! `<prefix>_x_total` of the family `<prefix>_x`; a histogram `h` as `<prefix>_h_bucket{le=..}`,
//! `<prefix>_h_sum` and `<prefix>_h_count`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::{counter, gauge, histogram};
use tokio::net::TcpListener;

/// A label set as stored: `(key, escaped value)` pairs in the caller's order.
type Labels = Vec<(String, String)>;

/// The environment variable every role reads its metrics address from (`--metrics-listen`).
pub const LISTEN_ENV: &str = "FLEETRL_METRICS_LISTEN";

/// A monotonically increasing total (Prometheus `counter`); rates come from `rate()`.
#[derive(Debug, Clone, Default)]
pub struct Counter(counter::Counter<f64, AtomicU64>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.inc();
    }

    /// Adds `delta` (negative or NaN deltas are ignored: a counter never goes down).
    pub fn add(&self, delta: f64) {
        if delta > 0.0 {
            self.0.inc_by(delta);
        }
    }

    /// Mirrors a total kept elsewhere (e.g. a table's `num_inserted`), if it grew.
    pub fn set_total(&self, total: f64) {
        let _ = self
            .0
            .inner()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                (total > f64::from_bits(bits)).then(|| total.to_bits())
            });
    }

    /// The current total.
    pub fn get(&self) -> f64 {
        self.0.get()
    }
}

/// A value that goes up and down (Prometheus `gauge`).
#[derive(Debug, Clone, Default)]
pub struct Gauge(gauge::Gauge<f64, AtomicU64>);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: f64) {
        self.0.set(value);
    }

    /// The current value.
    pub fn get(&self) -> f64 {
        self.0.get()
    }
}

/// A distribution of durations in seconds (Prometheus `histogram`), bucketed by
/// [`LATENCY_BUCKETS`].
#[derive(Debug, Clone)]
pub struct Histogram(histogram::Histogram);

impl Histogram {
    /// Records one observation, in seconds.
    pub fn observe(&self, seconds: f64) {
        self.0.observe(seconds);
    }

    /// Records one duration.
    pub fn observe_duration(&self, elapsed: Duration) {
        self.0.observe(elapsed.as_secs_f64());
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram(histogram::Histogram::new(LATENCY_BUCKETS))
    }
}

/// Bucket upper bounds for latencies, in seconds: 100 µs to a minute in 1-2.5-5 steps, so one
/// set fits an insert (sub-millisecond) and a slow update or weight swap (seconds) alike.
pub const LATENCY_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// Builds a family's histograms with [`LATENCY_BUCKETS`].
#[derive(Debug, Clone, Copy, Default)]
struct LatencyHistogram;

impl MetricConstructor<histogram::Histogram> for LatencyHistogram {
    fn new_metric(&self) -> histogram::Histogram {
        Histogram::default().0
    }
}

/// One registered name: a single series, or a family of label sets.
#[derive(Debug, Clone)]
enum Entry {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
    Counters(Family<Labels, counter::Counter<f64, AtomicU64>>),
    Gauges(Family<Labels, gauge::Gauge<f64, AtomicU64>>),
    Histograms(Family<Labels, histogram::Histogram, LatencyHistogram>),
}

/// What was registered, and the name lookup that returns the same series on a second call.
#[derive(Debug)]
struct Inner {
    registry: prometheus_client::registry::Registry,
    entries: HashMap<String, Entry>,
}

/// The metrics of one process, all under one name prefix. Registration takes `&self`, so
/// metrics can be created where they are first needed (a table's size, an algorithm's loss).
#[derive(Debug)]
pub struct Registry {
    inner: Mutex<Inner>,
}

impl Registry {
    /// An empty registry whose metric names start with `prefix` and `_`.
    pub fn new(prefix: &str) -> Arc<Registry> {
        let registry = prometheus_client::registry::Registry::with_prefix(sanitize(prefix));
        let registry = Arc::new(Registry {
            inner: Mutex::new(Inner {
                registry,
                entries: HashMap::new(),
            }),
        });
        // Every server checks tokens in the same layer; its refusals reach every registry.
        crate::net::refusals::register(&registry);
        registry
    }

    /// The counter `<prefix>_<name>`, created on first use. `name` ends in `_total` (added if
    /// missing, as OpenMetrics requires of counters).
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        match self.entry(&sanitize(counter_family(name)), help, || {
            Entry::Counter(Counter::default())
        }) {
            Entry::Counter(c) => c,
            other => mismatch(name, &other, Counter::default()),
        }
    }

    /// The gauge `<prefix>_<name>`, created on first use.
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        match self.entry(&sanitize(name), help, || Entry::Gauge(Gauge::default())) {
            Entry::Gauge(g) => g,
            other => mismatch(name, &other, Gauge::default()),
        }
    }

    /// The latency histogram `<prefix>_<name>` (seconds), created on first use.
    pub fn histogram(&self, name: &str, help: &str) -> Histogram {
        match self.entry(&sanitize(name), help, || {
            Entry::Histogram(Histogram::default())
        }) {
            Entry::Histogram(h) => h,
            other => mismatch(name, &other, Histogram::default()),
        }
    }

    /// The counter `<prefix>_<name>{labels}`, created on first use (see [`Registry::counter`]).
    pub fn counter_with(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Counter {
        match self.entry(&sanitize(counter_family(name)), help, || {
            Entry::Counters(Family::default())
        }) {
            Entry::Counters(f) => Counter(f.get_or_create_owned(&label_set(labels))),
            other => mismatch(name, &other, Counter::default()),
        }
    }

    /// The gauge `<prefix>_<name>{labels}`, created on first use.
    pub fn gauge_with(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Gauge {
        match self.entry(&sanitize(name), help, || Entry::Gauges(Family::default())) {
            Entry::Gauges(f) => Gauge(f.get_or_create_owned(&label_set(labels))),
            other => mismatch(name, &other, Gauge::default()),
        }
    }

    /// The latency histogram `<prefix>_<name>{labels}` (seconds), created on first use.
    pub fn histogram_with(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Histogram {
        match self.entry(&sanitize(name), help, || {
            Entry::Histograms(Family::new_with_constructor(LatencyHistogram))
        }) {
            Entry::Histograms(f) => Histogram(f.get_or_create_owned(&label_set(labels))),
            other => mismatch(name, &other, Histogram::default()),
        }
    }

    /// The entry registered as `name`, or a new one from `make`, registered with `help`.
    fn entry(&self, name: &str, help: &str, make: impl FnOnce() -> Entry) -> Entry {
        let mut inner = self.inner.lock().expect("metrics lock poisoned");
        if let Some(entry) = inner.entries.get(name) {
            return entry.clone();
        }
        let entry = make();
        // The encoder appends the full stop itself.
        let help = help.trim_end().trim_end_matches('.').replace('\n', " ");
        let registry = &mut inner.registry;
        match entry.clone() {
            Entry::Counter(c) => registry.register(name, help, c.0),
            Entry::Gauge(g) => registry.register(name, help, g.0),
            Entry::Histogram(h) => registry.register(name, help, h.0),
            Entry::Counters(f) => registry.register(name, help, f),
            Entry::Gauges(f) => registry.register(name, help, f),
            Entry::Histograms(f) => registry.register(name, help, f),
        }
        inner.entries.insert(name.to_string(), entry.clone());
        entry
    }

    /// Every series in the OpenMetrics text format (ending in `# EOF`), in registration order.
    pub fn render(&self) -> String {
        let inner = self.inner.lock().expect("metrics lock poisoned");
        let mut out = String::new();
        // Writing into a String cannot fail, and every label value was escaped on the way in.
        if let Err(error) = encode(&mut out, &inner.registry) {
            tracing::warn!(%error, "metrics: encoding failed");
        }
        out
    }
}

/// A name registered twice as different kinds is a programming error: flagged in debug builds;
/// in release the second caller gets a series that is never exported.
fn mismatch<M>(name: &str, existing: &Entry, detached: M) -> M {
    debug_assert!(false, "metric {name} registered as two kinds");
    tracing::warn!(metric = name, existing = ?existing, "metric registered as two kinds");
    detached
}

/// A counter's family name: `name` without its `_total` suffix, which the encoder adds.
fn counter_family(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}

/// Metric and label names allow `[a-zA-Z0-9_:]`; anything else becomes `_`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `labels` with sanitized keys and escaped values (the encoder writes values verbatim).
fn label_set(labels: &[(&str, &str)]) -> Labels {
    labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            (sanitize(k), v)
        })
        .collect()
}

/// The exposition's media type (OpenMetrics; Prometheus scrapers ask for it).
const CONTENT_TYPE_OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a client gets to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `addr` and serves `registry` on `GET /metrics` (any other path: 404) in the
/// background; returns the bound address (port 0 picks a free one).
pub async fn serve(addr: &str, registry: Arc<Registry>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(accept_loop(listener, registry));
    tracing::info!(addr = %local, "serving Prometheus metrics on /metrics");
    Ok(local)
}

/// Serves `registry` on `addr` if one is given; a bind failure is an error naming the address.
pub async fn serve_if(addr: Option<&str>, registry: &Arc<Registry>) -> anyhow::Result<()> {
    let Some(addr) = addr.filter(|a| !a.is_empty()) else {
        return Ok(());
    };
    serve(addr, registry.clone())
        .await
        .map_err(|e| anyhow::anyhow!("serving metrics on {addr}: {e}"))?;
    Ok(())
}

/// Accepts scrapers forever, one HTTP/1.1 connection task each; a connection serves one
/// request, then closes.
async fn accept_loop(listener: TcpListener, registry: Arc<Registry>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let response = respond(&registry, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            // One exchange per connection, as scrapers expect; an idle one would otherwise
            // stay open for good.
            let served = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%error, "metrics endpoint: connection failed");
            }
        });
    }
}

/// The answer to one request: the exposition on `GET /metrics`, else 404 or 405.
fn respond<B>(registry: &Registry, request: &Request<B>) -> Response<Full<Bytes>> {
    let (status, body, content_type) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, registry.render(), CONTENT_TYPE_OPENMETRICS),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "not found; metrics are on /metrics\n".into(),
            "text/plain; charset=utf-8",
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET\n".into(),
            "text/plain; charset=utf-8",
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Reads one value from a text exposition: the series whose name and label set (as rendered,
/// e.g. `fleetrl_replay_table_size{table="rollouts"}`) match `series`.
pub fn parse_value(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    #[test]
    fn renders_help_type_and_labels() {
        let r = Registry::new("fleetrl_test");
        r.counter("steps_total", "Env steps.").add(5.0);
        r.gauge_with("size", "Items.", &[("table", "a")]).set(2.0);
        r.gauge_with("size", "Items.", &[("table", "b\"x")])
            .set(3.5);
        let text = r.render();
        let head = "# HELP fleetrl_test_steps Env steps.\n\
                    # TYPE fleetrl_test_steps counter\n\
                    fleetrl_test_steps_total 5.0\n\
                    # HELP fleetrl_test_size Items.\n\
                    # TYPE fleetrl_test_size gauge\n";
        // Every registry starts with the token layer's refusal counters.
        assert!(text.contains(head), "{text}");
        assert!(
            text.contains("fleetrl_test_size{table=\"a\"} 2.0\n"),
            "{text}"
        );
        assert!(
            text.contains("fleetrl_test_size{table=\"b\\\"x\"} 3.5\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(parse_value(&text, "fleetrl_test_steps_total"), Some(5.0));
        assert_eq!(
            parse_value(&text, "fleetrl_test_size{table=\"a\"}"),
            Some(2.0)
        );
        assert_eq!(parse_value(&text, "fleetrl_test_missing"), None);
    }

    #[test]
    fn same_name_and_labels_share_one_series() {
        let r = Registry::new("p");
        r.counter("n_total", "N.").inc();
        r.counter("n_total", "N.").inc();
        let c = r.counter("n_total", "N.");
        c.add(-4.0);
        c.add(f64::NAN);
        assert_eq!(c.get(), 2.0);
        c.set_total(10.0);
        c.set_total(7.0);
        assert_eq!(c.get(), 10.0);
        let labelled = r.counter_with("m_total", "M.", &[("op", "insert")]);
        labelled.add(3.0);
        r.counter_with("m_total", "M.", &[("op", "insert")]).inc();
        let text = r.render();
        // n, m, and the token layer's refusal counters every registry has.
        assert_eq!(text.matches("# TYPE").count(), 3, "{text}");
        assert_eq!(parse_value(&text, "p_m_total{op=\"insert\"}"), Some(4.0));
    }

    #[test]
    fn histograms_count_sum_and_bucket() {
        let r = Registry::new("p");
        let h = r.histogram("update_seconds", "Update time.");
        h.observe(0.002);
        h.observe_duration(Duration::from_millis(30));
        r.histogram_with("insert_seconds", "Insert time.", &[("table", "t")])
            .observe(5e-5);
        let text = r.render();
        assert!(
            text.contains("# TYPE p_update_seconds histogram\n"),
            "{text}"
        );
        assert_eq!(parse_value(&text, "p_update_seconds_count"), Some(2.0));
        let sum = parse_value(&text, "p_update_seconds_sum").expect("a sum");
        assert!((sum - 0.032).abs() < 1e-12, "{sum}");
        // Cumulative buckets: 100 µs holds none, 2.5 ms the first, +Inf both.
        assert_eq!(
            parse_value(&text, "p_update_seconds_bucket{le=\"0.0001\"}"),
            Some(0.0)
        );
        assert_eq!(
            parse_value(&text, "p_update_seconds_bucket{le=\"0.0025\"}"),
            Some(1.0)
        );
        assert_eq!(
            parse_value(&text, "p_update_seconds_bucket{le=\"+Inf\"}"),
            Some(2.0)
        );
        assert_eq!(
            parse_value(&text, "p_insert_seconds_count{table=\"t\"}"),
            Some(1.0)
        );
    }

    #[test]
    fn special_values_and_names() {
        let r = Registry::new("p");
        r.gauge("a-b.c", "x").set(f64::NAN);
        r.gauge("inf", "x").set(f64::INFINITY);
        let text = r.render();
        assert!(
            parse_value(&text, "p_a_b_c").is_some_and(f64::is_nan),
            "{text}"
        );
        assert_eq!(parse_value(&text, "p_inf"), Some(f64::INFINITY), "{text}");
    }

    #[tokio::test]
    async fn serves_over_http() {
        let r = Registry::new("p");
        r.counter("hits_total", "Hits.").add(3.0);
        let addr = serve("127.0.0.1:0", r).await.unwrap();
        let get = |path: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            // No `Connection: close`: the server closes after one exchange anyway.
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let ok = get("/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("\r\n\r\n"), "{ok}");
        assert!(ok.contains("\np_hits_total 3.0\n"), "{ok}");
        assert!(ok.ends_with("# EOF\n"), "{ok}");
        assert!(get("/other").await.starts_with("HTTP/1.1 404"));
    }
}
