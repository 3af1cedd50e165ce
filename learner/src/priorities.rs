//! Sends changes to sampled items back to the shard they came from: new priorities
//! (prioritized replay) and deletions of items the learner refused.

use fleetrl_core::replay_client;
use fleetrl_proto::v1::{DeleteRequest, UpdatePrioritiesRequest};
use std::time::Duration;
use tokio::sync::mpsc;

/// A change to items of one shard, by key.
#[derive(Debug)]
pub(crate) struct KeyUpdate {
    /// Index of the shard the keys belong to.
    pub(crate) shard: usize,
    /// Item keys.
    pub(crate) keys: Vec<u64>,
    /// What happens to them.
    pub(crate) change: KeyChange,
}

/// What a [`KeyUpdate`] does to its items.
#[derive(Debug)]
pub(crate) enum KeyChange {
    /// New priorities, one per key.
    Priorities(Vec<f64>),
    /// Deleted: they failed the learner's checks, and would be sampled again.
    Delete,
}

/// Applies updates in arrival order until the channel closes; a failed update is logged and
/// dropped (the items keep their old priorities, which only costs sampling efficiency; a
/// refused item left in the table is refused again when it is sampled).
pub(crate) async fn run(
    shards: Vec<String>,
    table: String,
    mut updates: mpsc::UnboundedReceiver<KeyUpdate>,
) {
    let mut clients = Vec::with_capacity(shards.len());
    for addr in &shards {
        clients.push(
            replay_client::connect(addr, Duration::from_secs(60))
                .await
                .ok(),
        );
    }
    while let Some(update) = updates.recv().await {
        let Some(Some(client)) = clients.get_mut(update.shard) else {
            tracing::warn!(
                shard = update.shard,
                "no connection to send item updates to"
            );
            continue;
        };
        let (table, keys) = (table.clone(), update.keys);
        let sent = match update.change {
            KeyChange::Priorities(priorities) => client
                .update_priorities(UpdatePrioritiesRequest {
                    table,
                    keys,
                    priorities,
                })
                .await
                .map(drop),
            KeyChange::Delete => client.delete(DeleteRequest { table, keys }).await.map(drop),
        };
        if let Err(status) = sent {
            tracing::warn!(error = %status.message(), "item update failed");
        }
    }
}
