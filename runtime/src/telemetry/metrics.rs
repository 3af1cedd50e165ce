//! Prometheus metrics: a registry of counters and gauges, rendered in the text exposition
//! format (version 0.0.4), and a tiny HTTP endpoint that serves it on `GET /metrics`.
//!
//! Each binary creates one [`Registry`] in `main` with its prefix (`fleetrl_actor`, ...), its
//! crate's `metrics.rs` registers what it counts, and [`serve`] exposes it when the binary is
//! given `--metrics-listen ADDR` (env `FLEETRL_METRICS_LISTEN`). Updating a metric is one
//! atomic operation, so the hot paths (acting, updating) pay nothing measurable.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An `f64` that threads update without locks.
#[derive(Debug, Default)]
struct AtomicF64(AtomicU64);

impl AtomicF64 {
    fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }

    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }

    fn add(&self, delta: f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + delta).to_bits())
            });
    }
}

/// A monotonically increasing total (Prometheus `counter`); rates come from `rate()`.
#[derive(Debug, Clone)]
pub struct Counter(Arc<AtomicF64>);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.add(1.0);
    }

    /// Adds `delta` (negative deltas are ignored: a counter never goes down).
    pub fn add(&self, delta: f64) {
        if delta > 0.0 {
            self.0.add(delta);
        }
    }

    /// Mirrors a total kept elsewhere (e.g. a table's `num_inserted`), if it grew.
    pub fn set_total(&self, total: f64) {
        if total > self.0.get() {
            self.0.set(total);
        }
    }

    /// The current total.
    pub fn get(&self) -> f64 {
        self.0.get()
    }
}

/// A value that goes up and down (Prometheus `gauge`).
#[derive(Debug, Clone)]
pub struct Gauge(Arc<AtomicF64>);

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

#[derive(Debug)]
struct Series {
    /// Full name, prefix included.
    name: String,
    help: String,
    kind: Kind,
    /// Rendered label set, `{k="v",...}`, or empty.
    labels: String,
    value: Arc<AtomicF64>,
}

/// The metrics of one process, all under one name prefix.
#[derive(Debug)]
pub struct Registry {
    prefix: String,
    series: Mutex<Vec<Series>>,
}

impl Registry {
    /// An empty registry whose metric names start with `prefix` and `_`.
    pub fn new(prefix: &str) -> Arc<Registry> {
        Arc::new(Registry {
            prefix: prefix.to_string(),
            series: Mutex::new(Vec::new()),
        })
    }

    /// The counter `<prefix>_<name>`, created on first use.
    pub fn counter(&self, name: &str, help: &str) -> Counter {
        Counter(self.register(name, help, Kind::Counter, &[]))
    }

    /// The gauge `<prefix>_<name>`, created on first use.
    pub fn gauge(&self, name: &str, help: &str) -> Gauge {
        Gauge(self.register(name, help, Kind::Gauge, &[]))
    }

    /// The counter `<prefix>_<name>{labels}`, created on first use.
    pub fn counter_with(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Counter {
        Counter(self.register(name, help, Kind::Counter, labels))
    }

    /// The gauge `<prefix>_<name>{labels}`, created on first use.
    pub fn gauge_with(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Gauge {
        Gauge(self.register(name, help, Kind::Gauge, labels))
    }

    fn register(
        &self,
        name: &str,
        help: &str,
        kind: Kind,
        labels: &[(&str, &str)],
    ) -> Arc<AtomicF64> {
        let name = format!("{}_{}", self.prefix, sanitize(name));
        let labels = render_labels(labels);
        let mut series = self.series.lock().expect("metrics lock poisoned");
        if let Some(s) = series.iter().find(|s| s.name == name && s.labels == labels) {
            debug_assert_eq!(s.kind, kind, "metric {name} registered as two kinds");
            return s.value.clone();
        }
        let value = Arc::new(AtomicF64::default());
        series.push(Series {
            name,
            help: help.to_string(),
            kind,
            labels,
            value: value.clone(),
        });
        value
    }

    /// Every series in the text exposition format; series of one name are grouped under one
    /// `# HELP` and `# TYPE` line, in registration order.
    pub fn render(&self) -> String {
        let series = self.series.lock().expect("metrics lock poisoned");
        let mut names: Vec<&str> = Vec::new();
        for s in series.iter() {
            if !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
        let mut out = String::new();
        for name in names {
            let mut members = series.iter().filter(|s| s.name == name).peekable();
            if let Some(first) = members.peek() {
                let _ = writeln!(out, "# HELP {name} {}", first.help.replace('\n', " "));
                let _ = writeln!(out, "# TYPE {name} {}", first.kind.as_str());
            }
            for s in members {
                let _ = writeln!(out, "{name}{} {}", s.labels, format_value(s.value.get()));
            }
        }
        out
    }
}

/// Metric names allow `[a-zA-Z0-9_:]`; anything else becomes `_`.
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

fn render_labels(labels: &[(&str, &str)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{}=\"{v}\"", sanitize(k))
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Binds `addr` and serves `registry` on `GET /metrics` (any other path: 404) in the
/// background; returns the bound address (port 0 picks a free one).
pub async fn serve(addr: &str, registry: Arc<Registry>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, registry.clone()));
                }
                Err(error) => {
                    tracing::warn!(%error, "metrics endpoint: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    });
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

/// Largest request head read; scrapers send a few hundred bytes.
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// One HTTP/1.x exchange, then the connection closes.
async fn answer(mut stream: TcpStream, registry: Arc<Registry>) {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_BYTES {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<(), std::io::Error>(())
    };
    if tokio::time::timeout(std::time::Duration::from_secs(5), read)
        .await
        .is_err()
    {
        return;
    }
    let request_line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let request_line = String::from_utf8_lossy(request_line);
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", registry.render()),
        ("GET", _) => (
            "404 Not Found",
            "not found; metrics are on /metrics\n".into(),
        ),
        _ => ("405 Method Not Allowed", "only GET\n".into()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
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

    #[test]
    fn renders_help_type_and_labels() {
        let r = Registry::new("fleetrl_test");
        r.counter("steps_total", "Env steps.").add(5.0);
        r.gauge_with("size", "Items.", &[("table", "a")]).set(2.0);
        r.gauge_with("size", "Items.", &[("table", "b\"x")])
            .set(3.5);
        let text = r.render();
        let expected = "# HELP fleetrl_test_steps_total Env steps.\n\
                        # TYPE fleetrl_test_steps_total counter\n\
                        fleetrl_test_steps_total 5\n\
                        # HELP fleetrl_test_size Items.\n\
                        # TYPE fleetrl_test_size gauge\n\
                        fleetrl_test_size{table=\"a\"} 2\n\
                        fleetrl_test_size{table=\"b\\\"x\"} 3.5\n";
        assert_eq!(text, expected);
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
        r.counter("n", "N.").inc();
        r.counter("n", "N.").inc();
        let c = r.counter("n", "N.");
        c.add(-4.0);
        assert_eq!(c.get(), 2.0);
        c.set_total(10.0);
        c.set_total(7.0);
        assert_eq!(c.get(), 10.0);
        assert_eq!(r.render().matches("# TYPE").count(), 1);
    }

    #[test]
    fn special_values_and_names() {
        let r = Registry::new("p");
        r.gauge("a-b.c", "x").set(f64::NAN);
        r.gauge("inf", "x").set(f64::INFINITY);
        let text = r.render();
        assert!(text.contains("p_a_b_c NaN\n"), "{text}");
        assert!(text.contains("p_inf +Inf\n"), "{text}");
    }

    #[tokio::test]
    async fn serves_over_http() {
        let r = Registry::new("p");
        r.counter("hits_total", "Hits.").add(3.0);
        let addr = serve("127.0.0.1:0", r).await.unwrap();
        let get = |path: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let ok = get("/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.ends_with("p_hits_total 3\n"), "{ok}");
        assert!(get("/other").await.starts_with("HTTP/1.1 404"));
    }
}
