//! Sends new priorities back to the shard each sampled batch came from.

use fleetrl_core::replay_client;
use fleetrl_proto::v1::UpdatePrioritiesRequest;
use std::time::Duration;
use tokio::sync::mpsc;

/// New priorities for keys of one shard.
#[derive(Debug)]
pub(crate) struct PriorityUpdate {
    /// Index of the shard the keys belong to.
    pub(crate) shard: usize,
    /// Item keys.
    pub(crate) keys: Vec<u64>,
    /// Their new priorities.
    pub(crate) priorities: Vec<f64>,
}

/// Applies updates in arrival order until the channel closes; a failed update is logged and
/// dropped (the items keep their old priorities, which only costs sampling efficiency).
pub(crate) async fn run(
    shards: Vec<String>,
    table: String,
    mut updates: mpsc::UnboundedReceiver<PriorityUpdate>,
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
            tracing::warn!(shard = update.shard, "no connection to send priorities to");
            continue;
        };
        let request = UpdatePrioritiesRequest {
            table: table.clone(),
            keys: update.keys,
            priorities: update.priorities,
        };
        if let Err(status) = client.update_priorities(request).await {
            tracing::warn!(error = %status.message(), "priority update failed");
        }
    }
}
