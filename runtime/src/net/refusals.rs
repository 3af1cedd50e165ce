//! Refused calls you can watch: each one counted by reason in every metrics registry of the
//! process (`<prefix>_auth_refused_total{reason="missing"|"wrong"}`), logged at most every
//! 10 s with the peer's address, and answered later and later for a peer that keeps failing,
//! so guessing tokens from one address costs time, not just requests.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::conn::Throttled;
use crate::telemetry::metrics::{Counter, Registry};

/// Why a call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No `authorization` header.
    Missing,
    /// A header with another token.
    Wrong,
}

impl Reason {
    fn label(self) -> &'static str {
        match self {
            Reason::Missing => "missing",
            Reason::Wrong => "wrong",
        }
    }
}

/// Failures a peer may make before its refusals are delayed.
const FREE_FAILURES: u32 = 20;
/// The delay of the first delayed refusal; it doubles with each further failure.
const FIRST_DELAY: Duration = Duration::from_millis(50);
/// The longest delay.
const MAX_DELAY: Duration = Duration::from_secs(1);
/// A peer quiet this long starts afresh.
const FORGIVEN_AFTER: Duration = Duration::from_secs(60);
/// Peers remembered at most (the oldest forgotten first), so a spoofing flood cannot grow it.
const MAX_PEERS: usize = 4096;

/// Every registry's refusal counters, by reason.
static COUNTERS: Mutex<Vec<(Reason, Counter)>> = Mutex::new(Vec::new());
/// Failures per peer address: how many, and when the last was.
static PEERS: Mutex<Option<HashMap<IpAddr, (u32, Instant)>>> = Mutex::new(None);
static LOG: Throttled = Throttled::new(Duration::from_secs(10));

/// Adds the refusal counters to `registry` (every binary's registry has them).
pub(crate) fn register(registry: &Registry) {
    let help = "Calls refused for a missing or wrong token, by reason";
    let mut counters = COUNTERS.lock().expect("refusal counters lock poisoned");
    for reason in [Reason::Missing, Reason::Wrong] {
        let counter =
            registry.counter_with("auth_refused_total", help, &[("reason", reason.label())]);
        counters.push((reason, counter));
    }
}

/// Counts and logs a refusal of a call to `path` from `peer`, and says how long to wait
/// before answering it.
pub(crate) fn refused(peer: Option<IpAddr>, reason: Reason, path: &str) -> Duration {
    for (r, counter) in COUNTERS
        .lock()
        .expect("refusal counters lock poisoned")
        .iter()
    {
        if *r == reason {
            counter.inc();
        }
    }
    let failures = peer.map_or(0, record);
    LOG.log(|held_back| {
        let peer = peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
        tracing::warn!(
            %peer, path, reason = reason.label(), failures, held_back,
            "refused a call without this run's token"
        );
    });
    delay(failures)
}

/// Records one more failure of `peer`; returns its failures in a row.
fn record(peer: IpAddr) -> u32 {
    let now = Instant::now();
    let mut peers = PEERS.lock().expect("refusal peers lock poisoned");
    let peers = peers.get_or_insert_with(HashMap::new);
    if peers.len() >= MAX_PEERS && !peers.contains_key(&peer) {
        peers.retain(|_, (_, last)| now.duration_since(*last) < FORGIVEN_AFTER);
        if peers.len() >= MAX_PEERS {
            let oldest = peers
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(p, _)| *p);
            oldest.map(|p| peers.remove(&p));
        }
    }
    let entry = peers.entry(peer).or_insert((0, now));
    if now.duration_since(entry.1) >= FORGIVEN_AFTER {
        entry.0 = 0;
    }
    entry.0 = entry.0.saturating_add(1);
    entry.1 = now;
    entry.0
}

/// How long the refusal after `failures` failures in a row waits.
fn delay(failures: u32) -> Duration {
    if failures <= FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (failures - FREE_FAILURES - 1).min(16);
    (FIRST_DELAY * 2u32.pow(doublings)).min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_that_keeps_failing_waits_longer_up_to_a_cap() {
        assert_eq!(delay(1), Duration::ZERO);
        assert_eq!(delay(FREE_FAILURES), Duration::ZERO);
        assert_eq!(delay(FREE_FAILURES + 1), FIRST_DELAY);
        assert_eq!(delay(FREE_FAILURES + 2), FIRST_DELAY * 2);
        assert_eq!(delay(1000), MAX_DELAY);
    }

    #[test]
    fn failures_are_counted_per_peer_and_by_reason() {
        let registry = Registry::new("t");
        register(&registry);
        let peer: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        for _ in 0..FREE_FAILURES + 2 {
            refused(Some(peer), Reason::Wrong, "/x");
        }
        assert!(refused(Some(peer), Reason::Wrong, "/x") >= FIRST_DELAY * 2);
        assert_eq!(refused(Some(other), Reason::Missing, "/x"), Duration::ZERO);
        let text = registry.render();
        let wrong =
            crate::telemetry::metrics::parse_value(&text, "t_auth_refused_total{reason=\"wrong\"}");
        assert!(
            wrong.is_some_and(|n| n >= (FREE_FAILURES + 3) as f64),
            "{text}"
        );
    }
}
