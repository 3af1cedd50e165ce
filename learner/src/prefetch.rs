//! Pulls rollouts from the replay shards ahead of the trainer, through the shared replay client
//! (which reconnects lost shards while the others keep serving).

use fleetrl_core::replay_client::{sample_stream, SampleOptions};
use tokio::sync::mpsc;

use crate::trainer::Work;

/// Streams rollouts from `table` on every shard into `work`, one at a time (the trainer
/// assembles batches so it can drop rollouts that lag too far behind), until `work` closes.
/// The channel's capacity (1) is the prefetch depth: one batch waits while one trains.
pub(crate) async fn run(shards: Vec<String>, table: String, work: mpsc::Sender<Work>) {
    let (mut batches, tasks) = sample_stream(shards, SampleOptions::new(&table, 1));
    tracing::info!(table, "sampling");
    while let Some(batch) = batches.recv().await {
        match batch {
            Ok(batch) => {
                let rollout = batch.response.batch.unwrap_or_default();
                if work.send(Work::Rollout(rollout)).await.is_err() {
                    break;
                }
            }
            Err(error) => {
                tracing::error!(error = format!("{error:#}"), "cannot sample rollouts");
                break;
            }
        }
    }
    for task in tasks {
        task.abort();
    }
}
