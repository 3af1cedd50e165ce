//! Who the learner counts on: the weight subscriptions open now, and the actors acting.
//!
//! An on-policy batch is every acting actor's share of a version, and each actor sizes its
//! share by the count that comes with the weights ([`Fleet::acting`]), so that count must be
//! the actors that will send rollouts, not the streams that are open: any gRPC client can
//! subscribe and then read slowly or not at all. Rollouts do not say which actor sent them, so
//! an actor is counted by its subscription, which names it (`actor_id`), while its episode
//! reports (sent at least every 2 s, heartbeats included) say it is alive: within
//! [`HEARD_WITHIN`] of its last report, or of subscribing (before its first). A subscription
//! that names no actor is sent the weights but never waited for; an actor that went away
//! stops counting as soon as its subscription closes. A subscription that reads nothing for
//! `learner.subscriber_timeout_s` is dropped, and no longer counted as open.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fleetrl_core::broadcast::SubscriberEvents;
use fleetrl_runtime::net::conn::Throttled;

use crate::metrics::LearnerMetrics;
use crate::stats::Stats;

/// The warning for a dropped subscriber, at most every 10 s (`held_back` counts the others;
/// the metric counts every one): a token holder opening thousands of subscriptions that never
/// read cannot flood the log.
static DROPPED_LOG: Throttled = Throttled::new(Duration::from_secs(10));

/// How recently an actor must have reported (or subscribed) to count as acting: five of its
/// heartbeats, the window `fleetrl train` counts its "actors" in.
pub(crate) const HEARD_WITHIN: Duration = Duration::from_secs(10);

/// How long a count of the acting actors is reused while no subscription opens or closes:
/// every weights message and every rollout asks, and a count looks at every subscription.
const RECOUNT_EVERY: Duration = Duration::from_millis(200);

/// The open weight subscriptions and what the actors reported, shared by the service (which
/// opens subscriptions) and the trainer (which sizes batches by [`Fleet::acting`]).
pub(crate) struct Fleet {
    open: Mutex<Open>,
    stats: Arc<Mutex<Stats>>,
    metrics: Arc<LearnerMetrics>,
}

/// The subscriptions open now, by serial number, and the last count of the acting actors.
#[derive(Default)]
struct Open {
    next: u64,
    subscriptions: HashMap<u64, Opened>,
    counted: Option<(Instant, u32)>,
}

/// One open subscription: the actor it names, and when it opened.
struct Opened {
    actor: Option<u32>,
    at: Instant,
}

impl Fleet {
    /// A fleet with no subscription yet, whose actors' reports are recorded in `stats`.
    pub(crate) fn new(stats: Arc<Mutex<Stats>>, metrics: Arc<LearnerMetrics>) -> Arc<Fleet> {
        Arc::new(Fleet {
            open: Mutex::new(Open::default()),
            stats,
            metrics,
        })
    }

    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().expect("fleet lock poisoned")
    }

    /// The actors an on-policy batch waits for, at least 1: the distinct actors named by open
    /// subscriptions that reported, or subscribed, within [`HEARD_WITHIN`].
    pub(crate) fn acting(&self) -> u32 {
        let mut open = self.open();
        if let Some((_, count)) = open.counted.filter(|(at, _)| at.elapsed() < RECOUNT_EVERY) {
            return count;
        }
        let stats = self.stats.lock().expect("stats lock poisoned");
        let actors: HashSet<u32> = open
            .subscriptions
            .values()
            .filter_map(|s| s.actor.map(|id| (id, s.at)))
            .filter(|&(id, at)| at.elapsed() < HEARD_WITHIN || stats.heard_from(id, HEARD_WITHIN))
            .map(|(id, _)| id)
            .collect();
        drop(stats);
        let count = (actors.len() as u32).max(1);
        open.counted = Some((Instant::now(), count));
        self.metrics.actors_acting.set(f64::from(count));
        count
    }

    /// Counts one more open subscription, from `peer` and naming `actor`, until the returned
    /// events are dropped.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        actor: Option<u32>,
        peer: Option<SocketAddr>,
    ) -> Subscriber {
        let mut open = self.open();
        let key = open.next;
        open.next += 1;
        let at = Instant::now();
        open.subscriptions.insert(key, Opened { actor, at });
        open.counted = None;
        self.metrics
            .actors_connected
            .set(open.subscriptions.len() as f64);
        Subscriber {
            fleet: self.clone(),
            key,
            peer,
        }
    }
}

/// One open weight subscription: counted in `actors_connected` (and, if it names an actor
/// that reports, among the acting actors) while it lives.
pub(crate) struct Subscriber {
    fleet: Arc<Fleet>,
    key: u64,
    peer: Option<SocketAddr>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let mut open = self.fleet.open();
        open.subscriptions.remove(&self.key);
        open.counted = None;
        let connected = open.subscriptions.len() as f64;
        self.fleet.metrics.actors_connected.set(connected);
    }
}

impl SubscriberEvents for Subscriber {
    fn subscribers(&self) -> u32 {
        self.fleet.acting()
    }

    fn skipped(&self, versions: u64) {
        self.fleet
            .metrics
            .weight_versions_skipped
            .add(versions as f64);
    }

    fn dropped(&self, stalled: Duration) {
        self.fleet.metrics.weight_subscribers_dropped.inc();
        let peer = self.peer.map(|p| p.to_string());
        DROPPED_LOG.log(|held_back| {
            tracing::warn!(
                peer = peer.as_deref().unwrap_or("unknown"),
                stalled_s = stalled.as_secs_f64(),
                held_back,
                "dropped a weight subscriber that read nothing"
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetrl_proto::v1::ReportEpisodesRequest;
    use fleetrl_runtime::telemetry::metrics::Registry;

    fn fleet() -> Arc<Fleet> {
        let metrics = Arc::new(LearnerMetrics::new(Registry::new("test")));
        Fleet::new(Arc::new(Mutex::new(Stats::new(None))), metrics)
    }

    /// Makes every subscription look `age` old, and forgets the last count.
    fn age(fleet: &Fleet, age: Duration) {
        let mut open = fleet.open();
        for s in open.subscriptions.values_mut() {
            s.at -= age;
        }
        open.counted = None;
    }

    fn report(fleet: &Fleet, actor_id: u32) {
        let report = ReportEpisodesRequest {
            actor_id,
            ..Default::default()
        };
        fleet.stats.lock().unwrap().record_report(&report);
        fleet.open().counted = None;
    }

    /// Subscriptions that name no actor are never waited for; one that names an actor counts
    /// from the start, and after [`HEARD_WITHIN`] only while its actor reports; a closed one
    /// stops counting at once.
    #[test]
    fn only_subscribed_actors_that_report_count() {
        let fleet = fleet();
        let anonymous: Vec<_> = (0..50).map(|_| fleet.subscribe(None, None)).collect();
        assert_eq!(fleet.acting(), 1, "no actor: one, at least");
        let a = fleet.subscribe(Some(7), None);
        let b = fleet.subscribe(Some(8), None);
        let again = fleet.subscribe(Some(8), None);
        assert_eq!(fleet.acting(), 2, "actors 7 and 8, each once");
        assert_eq!(fleet.metrics.actors_connected.get(), 53.0);
        age(&fleet, HEARD_WITHIN * 2);
        report(&fleet, 7);
        assert_eq!(fleet.acting(), 1, "actor 8 has not reported");
        report(&fleet, 8);
        assert_eq!(fleet.acting(), 2);
        assert_eq!(fleet.metrics.actors_acting.get(), 2.0);
        drop((a, b));
        assert_eq!(fleet.acting(), 1, "actor 8's second subscription is left");
        drop((anonymous, again));
        assert_eq!(fleet.metrics.actors_connected.get(), 0.0);
    }

    #[test]
    fn drops_and_skips_are_counted() {
        let fleet = fleet();
        let subscriber = fleet.subscribe(Some(1), "127.0.0.1:9".parse().ok());
        subscriber.skipped(3);
        subscriber.skipped(2);
        subscriber.dropped(Duration::from_secs(60));
        assert_eq!(fleet.metrics.weight_versions_skipped.get(), 5.0);
        assert_eq!(fleet.metrics.weight_subscribers_dropped.get(), 1.0);
        drop(subscriber);
        assert_eq!(fleet.metrics.actors_connected.get(), 0.0);
    }
}
