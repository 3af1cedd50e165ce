//! What the learner knows about the run's progress, shared by the trainer and the service.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use fleetrl_core::checkpoint::{CheckpointMeta, RunProgress};
use fleetrl_proto::v1::{ActorStatus, LearnerStatus, ReportEpisodesRequest};

/// Episodes kept for the recent-return mean.
const RECENT_EPISODES: usize = 100;

/// Actors whose reports the learner keeps apart (`GetStatus` lists them): past it, the one
/// heard from least recently is forgotten. Actor ids are the actors' word; without a bound,
/// forged ids grew the map and the status message until the launcher's 4 MiB limit failed
/// the run (about 140k ids). 4,096 rows are about 120 KB of status.
const MAX_TRACKED_ACTORS: usize = 4096;

#[derive(Debug)]
struct ActorStats {
    episodes: u64,
    env_steps: u64,
    last_report: Instant,
}

/// Counters and recent returns; one mutex, held for microseconds.
#[derive(Debug)]
pub(crate) struct Stats {
    started: Instant,
    /// Env steps trained before this process started (the resumed checkpoint's).
    env_steps_at_start: u64,
    pub(crate) policy_version: i64,
    pub(crate) updates: u64,
    pub(crate) env_steps_trained: u64,
    pub(crate) policy_lag: f64,
    /// Sum of every update's policy lag since start, and the number of updates summed.
    policy_lag_sum: (f64, u64),
    pub(crate) rollouts_dropped: u64,
    pub(crate) rollouts_trained: u64,
    env_steps_reported: u64,
    env_steps_collected: u64,
    /// Env steps of sampled items the learner refused (off-policy).
    env_steps_refused: u64,
    episodes: u64,
    recent: VecDeque<f64>,
    actors: HashMap<u32, ActorStats>,
}

impl Stats {
    /// Counters of a fresh run, or of a resumed one going on from its checkpoint's.
    pub(crate) fn new(meta: Option<&CheckpointMeta>) -> Stats {
        let meta = meta.cloned().unwrap_or_default();
        let progress = &meta.progress;
        let skip = progress
            .recent_returns
            .len()
            .saturating_sub(RECENT_EPISODES);
        Stats {
            started: Instant::now(),
            env_steps_at_start: meta.env_steps,
            policy_version: meta.policy_version,
            updates: meta.updates,
            env_steps_trained: meta.env_steps,
            policy_lag: 0.0,
            policy_lag_sum: (progress.policy_lag_sum, progress.policy_lag_updates),
            rollouts_dropped: progress.rollouts_dropped,
            rollouts_trained: progress.rollouts_trained,
            env_steps_reported: progress.env_steps_reported,
            env_steps_collected: meta.env_steps,
            env_steps_refused: 0,
            episodes: progress.episodes,
            recent: progress.recent_returns.iter().skip(skip).copied().collect(),
            actors: HashMap::new(),
        }
    }

    /// The counters a checkpoint keeps beside version, updates and env steps.
    pub(crate) fn progress(&self) -> RunProgress {
        RunProgress {
            episodes: self.episodes,
            env_steps_reported: self.env_steps_reported,
            rollouts_trained: self.rollouts_trained,
            rollouts_dropped: self.rollouts_dropped,
            policy_lag_sum: self.policy_lag_sum.0,
            policy_lag_updates: self.policy_lag_sum.1,
            recent_returns: self.recent.iter().copied().collect(),
        }
    }

    pub(crate) fn record_report(&mut self, report: &ReportEpisodesRequest) {
        for &r in &report.returns {
            if self.recent.len() == RECENT_EPISODES {
                self.recent.pop_front();
            }
            self.recent.push_back(r);
        }
        let n = report.returns.len() as u64;
        self.episodes = self.episodes.saturating_add(n);
        // Saturating: reports are the actors' word, and no sum of them may wrap.
        self.env_steps_reported = self.env_steps_reported.saturating_add(report.env_steps);
        if !self.actors.contains_key(&report.actor_id) && self.actors.len() >= MAX_TRACKED_ACTORS {
            self.forget_quietest_actor();
        }
        let actor = self.actors.entry(report.actor_id).or_insert(ActorStats {
            episodes: 0,
            env_steps: 0,
            last_report: Instant::now(),
        });
        actor.episodes = actor.episodes.saturating_add(n);
        actor.env_steps = actor.env_steps.saturating_add(report.env_steps);
        actor.last_report = Instant::now();
    }

    /// Whether actor `id`'s last report (episodes or a heartbeat) is younger than `window`.
    pub(crate) fn heard_from(&self, id: u32, window: std::time::Duration) -> bool {
        self.actors
            .get(&id)
            .is_some_and(|a| a.last_report.elapsed() < window)
    }

    /// Drops the actor whose last report is the oldest.
    fn forget_quietest_actor(&mut self) {
        let quietest = self
            .actors
            .iter()
            .min_by_key(|(_, a)| a.last_report)
            .map(|(&id, _)| id);
        if let Some(id) = quietest {
            self.actors.remove(&id);
        }
    }

    /// Records the policy lag of the update just done.
    pub(crate) fn record_lag(&mut self, lag: f64) {
        self.policy_lag = lag;
        self.policy_lag_sum.0 += lag;
        self.policy_lag_sum.1 += 1;
    }

    /// Env steps of the data the replay server accepted since start (off-policy progress),
    /// plus what a resumed checkpoint had, less the items the learner refused.
    pub(crate) fn env_steps_collected(&self) -> u64 {
        self.env_steps_collected
            .saturating_sub(self.env_steps_refused)
    }

    /// Takes the env steps of items the learner refused off [`Stats::env_steps_collected`]
    /// (kept apart: an item can be refused before its insert is counted).
    pub(crate) fn refuse_env_steps(&mut self, steps: u64) {
        self.env_steps_refused = self.env_steps_refused.saturating_add(steps);
    }

    pub(crate) fn add_env_steps_collected(&mut self, steps: u64) {
        self.env_steps_collected = self.env_steps_collected.saturating_add(steps);
    }

    /// Mean of the recent returns, NaN before the first episode.
    pub(crate) fn recent_return(&self) -> f64 {
        if self.recent.is_empty() {
            return f64::NAN;
        }
        self.recent.iter().sum::<f64>() / self.recent.len() as f64
    }

    pub(crate) fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    pub(crate) fn to_proto(&self) -> LearnerStatus {
        let mut actors: Vec<ActorStatus> = self
            .actors
            .iter()
            .map(|(&actor_id, a)| ActorStatus {
                actor_id,
                episodes: a.episodes,
                env_steps: a.env_steps,
                seconds_since_report: a.last_report.elapsed().as_secs_f64(),
            })
            .collect();
        actors.sort_by_key(|a| a.actor_id);
        LearnerStatus {
            policy_version: self.policy_version,
            updates: self.updates,
            env_steps_trained: self.env_steps_trained,
            env_steps_reported: self.env_steps_reported,
            episodes: self.episodes,
            recent_return: self.recent_return(),
            seconds_since_start: self.seconds(),
            actors,
            policy_lag: self.policy_lag,
            rollouts_dropped: self.rollouts_dropped,
            mean_policy_lag: self.policy_lag_sum.0 / self.policy_lag_sum.1.max(1) as f64,
            rollouts_trained: self.rollouts_trained,
            env_steps_at_start: self.env_steps_at_start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(actor_id: u32) -> ReportEpisodesRequest {
        ReportEpisodesRequest {
            actor_id,
            returns: vec![1.0],
            lengths: vec![1],
            env_steps: 1,
        }
    }

    /// Forged actor ids cannot grow the status without bound; the newest actors stay.
    #[test]
    fn tracked_actors_are_bounded_and_the_quietest_go_first() {
        let mut stats = Stats::new(None);
        let total = MAX_TRACKED_ACTORS as u32 + 500;
        for id in 0..total {
            stats.record_report(&report(id));
        }
        let listed = stats.to_proto().actors;
        assert_eq!(listed.len(), MAX_TRACKED_ACTORS);
        assert!(listed.iter().any(|a| a.actor_id == total - 1));
        assert_eq!(
            stats.episodes,
            u64::from(total),
            "every episode still counts"
        );
    }
}
