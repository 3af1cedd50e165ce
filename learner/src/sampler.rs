//! The one sampling task: pulls batches from the replay shards ahead of the trainer through
//! the shared replay client (which reconnects lost shards while the others keep serving), for
//! every batch kind: single rollouts, transitions, sequences.

use fleetrl_core::replay_client::{sample_stream, SampleOptions};
use tokio::sync::mpsc;

use crate::setup::Table;
use crate::trainer::Work;

/// Why sampling stopped.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The trainer went away (shutdown, or its own failure).
    TrainerGone,
    /// The replay client gave up.
    Failed(String),
}

/// Streams samples from `table` on every shard into `work` until `work` closes or sampling
/// fails. The channel's capacity plus the table's prefetch is how far sampling runs ahead.
pub(crate) async fn run(shards: Vec<String>, table: Table, work: mpsc::Sender<Work>) -> Ended {
    let mut options = SampleOptions::new(&table.name, table.batch_size);
    if table.prefetch > 0 {
        options.prefetch = table.prefetch;
    }
    options.recreate = Some(table.spec.clone());
    let (mut batches, streams) = sample_stream(shards, options);
    tracing::info!(
        table = table.name,
        batch_size = table.batch_size,
        "sampling"
    );
    let ended = loop {
        match batches.recv().await {
            Some(Ok(batch)) => {
                if work.send(Work::Sample(batch)).await.is_err() {
                    break Ended::TrainerGone;
                }
            }
            Some(Err(error)) => break Ended::Failed(format!("{error:#}")),
            None => break Ended::Failed("the replay client closed".into()),
        }
    };
    for stream in streams {
        stream.abort();
    }
    ended
}
