//! Off-policy progress, counted from the data the replay server accepted: the sum over shards
//! of the run table's `num_inserted`, times the env steps one item adds. Actors' episode
//! reports never move the run's step count, so a forged report cannot end a run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetrl_core::config::RunConfig;
use fleetrl_core::replay_client;
use fleetrl_proto::v1::InfoRequest;

use crate::stats::Stats;

/// Time between two readings of the shards' insert counts.
const PERIOD: Duration = Duration::from_millis(250);

/// Env steps one inserted item stands for: one per transition; a sequence adds the steps it
/// does not share with the one before it (`sequence_length - sequence_overlap`); a PEARL
/// round its steps.
pub(crate) fn steps_per_item(config: &RunConfig) -> u64 {
    if let Some(pearl) = config.algo.as_pearl() {
        return pearl.round_steps().max(1);
    }
    config.sequence_replay().map_or(1, |sequences| {
        let replay = sequences.replay;
        u64::from(
            replay
                .sequence_length
                .saturating_sub(replay.sequence_overlap),
        )
        .max(1)
    })
}

/// The running count: the last insert count seen on each shard and the steps they added.
#[derive(Debug)]
pub(crate) struct InsertCount {
    last: Vec<Option<u64>>,
    /// The first reading of a shard is a baseline (not counted) when the learner resumed: the
    /// checkpoint's step count already holds what was inserted before.
    resumed: bool,
    /// Items still to leave uncounted: those the learner inserted itself (an off-policy
    /// table's initial demos), which no actor stepped.
    uncounted: u64,
}

impl InsertCount {
    pub(crate) fn new(shards: usize, resumed: bool, uncounted: u64) -> InsertCount {
        InsertCount {
            last: vec![None; shards],
            resumed,
            uncounted,
        }
    }

    /// Items newly inserted on `shard` since its last reading `inserted`. A count that went
    /// down means the shard restarted: its new count is the baseline from then on.
    pub(crate) fn observe(&mut self, shard: usize, inserted: u64) -> u64 {
        let new = match self.last[shard] {
            None if self.resumed => 0,
            None => inserted,
            Some(last) if inserted >= last => inserted - last,
            Some(_) => 0,
        };
        self.last[shard] = Some(inserted);
        let skipped = new.min(self.uncounted);
        self.uncounted -= skipped;
        new - skipped
    }
}

/// Reads every shard's insert count for `table` each [`PERIOD`] and adds the new items'
/// env steps to `stats`, leaving out the first `uncounted` items (the learner's own inserts);
/// shards that do not answer are read again next time.
pub(crate) async fn run(
    shards: Vec<String>,
    table: String,
    steps_per_item: u64,
    (resumed, uncounted): (bool, u64),
    stats: Arc<Mutex<Stats>>,
) {
    let mut count = InsertCount::new(shards.len(), resumed, uncounted);
    let mut clients = vec![None; shards.len()];
    loop {
        tokio::time::sleep(PERIOD).await;
        for (i, addr) in shards.iter().enumerate() {
            if clients[i].is_none() {
                clients[i] = replay_client::connect(addr, PERIOD).await.ok();
            }
            let Some(client) = clients[i].as_mut() else {
                continue;
            };
            let inserted = match client.info(InfoRequest {}).await {
                Ok(info) => info
                    .into_inner()
                    .tables
                    .iter()
                    .find(|t| t.name == table)
                    .map(|t| t.num_inserted),
                Err(status) => {
                    tracing::debug!(shard = %addr, %status, "insert count not readable");
                    clients[i] = None;
                    None
                }
            };
            if let Some(inserted) = inserted {
                let items = count.observe(i, inserted);
                if items > 0 {
                    stats
                        .lock()
                        .expect("stats lock poisoned")
                        .add_env_steps_collected(items.saturating_mul(steps_per_item));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_learners_own_inserts_are_not_env_steps() {
        let mut count = InsertCount::new(2, false, 150);
        assert_eq!(count.observe(0, 100), 0);
        assert_eq!(count.observe(1, 80), 30);
        assert_eq!(count.observe(0, 110), 10);
    }

    #[test]
    fn counts_new_items_across_restarts() {
        let mut fresh = InsertCount::new(2, false, 0);
        assert_eq!(fresh.observe(0, 100), 100);
        assert_eq!(fresh.observe(1, 5), 5);
        assert_eq!(fresh.observe(0, 130), 30);
        // Shard 0 restarted and restored 80 items: nothing is counted twice.
        assert_eq!(fresh.observe(0, 80), 0);
        assert_eq!(fresh.observe(0, 90), 10);
        let mut resumed = InsertCount::new(1, true, 0);
        assert_eq!(resumed.observe(0, 5_000), 0);
        assert_eq!(resumed.observe(0, 5_010), 10);
    }
}
