//! Logs and metrics: tracing to stderr for every binary, Prometheus metrics over HTTP for every
//! binary ([`metrics`]), TensorBoard event files for learners, and how `main` reports a failure
//! ([`exit_code`]).

mod exit;
pub mod metrics;
mod tensorboard;

use std::io::Write;
use std::net::SocketAddr;

pub use exit::exit_code;
pub use metrics::Registry;
pub use tensorboard::EventWriter;

/// Starts structured logging to stderr. `RUST_LOG` (e.g. `info,fleet_learner=debug`) filters;
/// `FLEETRL_LOG_FORMAT=json` switches to one JSON object per line.
pub fn init(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let json = std::env::var("FLEETRL_LOG_FORMAT").is_ok_and(|v| v == "json");
    // A second init in one process (tests) is harmless: the first subscriber stays.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Tells whoever started this process where it listens: one line on stdout,
/// `listening on <addr>`, which the launcher and the test sandbox wait for.
pub fn announce_listening(addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on {addr}");
    let _ = out.flush();
}

/// Parses a line written by [`announce_listening`].
pub fn parse_listening(line: &str) -> Option<SocketAddr> {
    line.trim().strip_prefix("listening on ")?.parse().ok()
}
