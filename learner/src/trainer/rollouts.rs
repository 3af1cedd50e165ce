//! On-policy batches: rollouts admitted unless they lag too far, a version's batch made of
//! every acting actor's share, and one update on each batch.

use std::time::{Duration, Instant};

use fleetrl_core::algos::Batch;
use fleetrl_core::items::rollout::RolloutBatch;
use fleetrl_core::replay_client::ShardBatch;
use fleetrl_proto::TensorMap;

use super::Trainer;

/// Longest wait for the next of a version's rollouts once `batch_rollouts` have arrived.
const MAX_SHARE_WAIT: Duration = Duration::from_millis(250);
/// Shortest such wait: arrivals come in bursts (the queue, the sampler, the scheduler).
const MIN_SHARE_WAIT: Duration = Duration::from_millis(20);

/// What one on-policy update trained on, over every learner rank.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counted {
    pub(super) env_steps: u64,
    pub(super) rollouts: u64,
}

/// Whether a rollout acted by policy `version` (from the wire) is one the learner trains on
/// while at `current`: not negative, at most `max_lag` behind, and not from further ahead
/// than a restarted learner's actors can be (`max_lag`); the arithmetic cannot overflow
/// whatever the actor sent.
fn plausible_version(version: i64, current: i64, max_lag: i64) -> bool {
    version >= 0
        && version <= current.saturating_add(max_lag)
        && current.saturating_sub(version) <= max_lag
}

/// The on-policy batch being filled: when filling began (the last update's end) and, once
/// `batch_rollouts` are pending but not every actor's share, when to stop waiting for the rest.
#[derive(Debug)]
pub(crate) struct Filling {
    pub(super) since: Instant,
    pub(super) until: Option<Instant>,
}

impl Filling {
    /// `arrived` rollouts (at least `batch_rollouts`, not yet every actor's share) are
    /// pending: wait on while they keep coming, up to four of their mean gaps so far after
    /// each one (a big fleet's shares trickle through the queue for a while).
    pub(super) fn wait_for_more(&mut self, arrived: usize) {
        let now = Instant::now();
        let gap = (now - self.since) / arrived.max(1) as u32;
        let wait = (gap * 4).clamp(MIN_SHARE_WAIT, MAX_SHARE_WAIT);
        self.until = Some(now + wait);
    }
}

impl Default for Filling {
    fn default() -> Self {
        Filling {
            since: Instant::now(),
            until: None,
        }
    }
}

impl Trainer {
    /// Keeps `rollout` unless it lags the current policy by more than `max_policy_lag`
    /// versions; returns a batch once every actor's share of this version is waiting.
    ///
    /// Each of the `S` acting actors ([`crate::fleet::Fleet::acting`], the count every weights message
    /// carries) sends `ceil(batch_rollouts / S)` rollouts per version (see the actor's acting
    /// loop), so the batch is all of them: it grows with the fleet and
    /// nothing the fleet acted for this version is left to go stale. Once `batch_rollouts` are
    /// pending, the learner waits for the rest while they keep coming, up to four mean gaps
    /// between arrivals after each (an actor that stopped sending, or a subscriber that never
    /// sends, costs one such wait, never a stall).
    fn admit(&mut self, rollout: TensorMap) -> Option<RolloutBatch> {
        self.keep(rollout);
        let least = self.config.learner.batch_rollouts.max(1) as usize;
        if self.pending.len() < least {
            return None;
        }
        if self.pending.len() < self.batch_target() {
            self.filling.wait_for_more(self.pending.len());
            return None;
        }
        self.take_pending()
    }

    /// Adds `rollout` to the pending ones if it passes the learner's checks, and drops those
    /// that now lag the current policy by more than `max_policy_lag` versions.
    pub(super) fn keep(&mut self, rollout: TensorMap) {
        self.metrics.rollouts_received.inc();
        if !self.accepts(&rollout) {
            return;
        }
        let max_lag = self.config.actors.max_policy_lag as i64;
        let mut stats = self.stats.lock().expect("stats lock poisoned");
        let current = stats.policy_version;
        let before = self.pending.len() + 1;
        if let Some(version) = RolloutBatch::version_of(&rollout) {
            let lag = current.saturating_sub(version).max(0) as f64;
            self.metrics.rollout_policy_lag.set(lag);
            self.metrics.rollout_policy_lag_sum.add(lag);
        }
        self.pending.push(rollout);
        self.pending.retain(|r| {
            let version = RolloutBatch::version_of(r);
            let keep = version.is_some_and(|v| plausible_version(v, current, max_lag));
            if !keep {
                tracing::debug!(current, ?version, "dropping a stale rollout");
            }
            keep
        });
        let dropped = (before - self.pending.len()) as u64;
        stats.rollouts_dropped += dropped;
        self.metrics.rollouts_dropped.add(dropped as f64);
    }

    /// Every actor's share of a version: `ceil(batch_rollouts / S) * S` for `S` acting actors
    /// (actors subscribed by name that report: a subscriber that names no actor, or whose
    /// actor stopped reporting, is not waited for).
    pub(super) fn batch_target(&self) -> usize {
        let least = self.config.learner.batch_rollouts.max(1);
        let actors = self.fleet.acting();
        (least.div_ceil(actors) * actors) as usize
    }

    /// The pending rollouts as one batch.
    pub(super) fn take_pending(&mut self) -> Option<RolloutBatch> {
        self.filling.until = None;
        if self.pending.is_empty() {
            return None;
        }
        let parts = std::mem::take(&mut self.pending);
        match RolloutBatch::from_parts(&parts) {
            Ok(mut batch) => {
                if !self.config.actors.mid_batch_reset {
                    batch.mark_padding();
                }
                Some(batch)
            }
            Err(error) => {
                tracing::error!(%error, "dropping rollouts that do not form a batch");
                None
            }
        }
    }

    /// On-policy: one rollout joins the pending batch; a full batch is trained on unless the
    /// step budget is spent. True when an update ran.
    pub(super) fn train_rollout(&mut self, sample: ShardBatch) -> bool {
        let rollout = sample.response.batch.unwrap_or_default();
        self.admit(rollout)
            .is_some_and(|batch| self.train_rollouts(batch, None))
    }

    /// On-policy: one update on `batch` unless the step budget is spent. True when it ran.
    /// `union` counts the update's env steps and rollouts over every learner rank (`None`:
    /// this learner's batch is the whole update).
    pub(super) fn train_rollouts(&mut self, batch: RolloutBatch, union: Option<Counted>) -> bool {
        if self.stats().env_steps_trained >= self.config.stop.total_env_steps {
            return false;
        }
        let Counted {
            env_steps,
            rollouts,
        } = union.unwrap_or(Counted {
            env_steps: batch.env_steps(),
            rollouts: batch.policy_version.len() as u64,
        });
        let behaviour = batch.policy_version.iter().map(|&v| v as f64).sum::<f64>()
            / batch.policy_version.len().max(1) as f64;
        let Some(mut metrics) = self.update(&Batch::Rollouts(Box::new(batch)), None) else {
            return false;
        };
        let (version, steps) = {
            let mut stats = self.stats();
            stats.env_steps_trained += env_steps;
            stats.rollouts_trained += rollouts;
            (stats.policy_version, stats.env_steps_trained)
        };
        let lag = version as f64 - behaviour;
        self.stats().record_lag(lag);
        self.metrics.policy_lag.set(lag);
        metrics.0.push(("policy_lag", lag));
        self.after_update(version, steps, &metrics);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::plausible_version;

    /// Versions from the wire are bounded before any subtraction: i64::MIN once wrapped the
    /// staleness test and was trained on.
    #[test]
    fn implausible_policy_versions_are_dropped() {
        assert!(plausible_version(10, 10, 2));
        assert!(plausible_version(8, 10, 2));
        assert!(
            plausible_version(12, 10, 2),
            "a restarted learner's actors may be ahead"
        );
        assert!(!plausible_version(7, 10, 2));
        assert!(!plausible_version(13, 10, 2));
        assert!(!plausible_version(-1, 10, 2));
        assert!(!plausible_version(i64::MIN, 10, 2));
        assert!(!plausible_version(i64::MAX, 10, 2));
        assert!(!plausible_version(i64::MIN, i64::MAX, 2));
    }
}
