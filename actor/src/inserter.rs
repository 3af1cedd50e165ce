//! Streams rollouts to the replay shards through the shared replay client, with at most
//! `max_in_flight` unacknowledged per shard; rollouts a shard never acknowledged are resent
//! (to another shard if it stays away): at-least-once, as the protocol says.

use std::sync::Arc;

use fleetrl_core::replay_client::{Writer, WriterOptions};
use fleetrl_proto::TensorMap;
use tokio::sync::mpsc;

/// How often the insert counters reach the metrics.
const PUBLISH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

use crate::metrics::ActorMetrics;

/// Where and how to insert.
pub(crate) struct Inserter {
    pub(crate) shards: Vec<String>,
    pub(crate) table: String,
    pub(crate) max_in_flight: usize,
    /// Items stacked into one insert request (1 for rollouts; many for transitions).
    pub(crate) max_items_per_request: usize,
    pub(crate) metrics: Arc<ActorMetrics>,
}

impl Inserter {
    /// Runs until `rollouts` closes and every rollout is acked. Errors the replay server
    /// reports as the client's fault (bad item, unknown table) are returned: retrying cannot
    /// fix them.
    pub(crate) async fn run(self, mut rollouts: mpsc::Receiver<TensorMap>) -> anyhow::Result<()> {
        let mut options = WriterOptions::new(&self.table);
        options.max_in_flight = self.max_in_flight.max(1);
        options.max_items_per_request = self.max_items_per_request.max(1);
        let (writer, task) = Writer::spawn(self.shards, options);
        // Published on a clock, not per insert: an insert can wait for seconds on a shard that
        // is down, which is exactly when the reconnect count matters.
        let progress = writer.progress();
        let metrics = self.metrics.clone();
        let publish = move || {
            metrics.rollouts_sent.set_total(progress.acked() as f64);
            metrics
                .insert_reconnects
                .set_total(progress.reconnects() as f64);
        };
        let publisher = tokio::spawn({
            let publish = publish.clone();
            async move {
                let mut tick = tokio::time::interval(PUBLISH_INTERVAL);
                loop {
                    tick.tick().await;
                    publish();
                }
            }
        });
        while let Some(rollout) = rollouts.recv().await {
            if writer.insert(rollout, 1.0).await.is_err() {
                break; // the writer ended; `finish` says why
            }
        }
        drop(writer);
        let result = task
            .finish()
            .await
            .map_err(|e| e.context("replay server rejected our rollouts"));
        publisher.abort();
        publish();
        result
    }
}
