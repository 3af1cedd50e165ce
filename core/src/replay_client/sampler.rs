//! Sampling from K shards: one sample stream per shard, merged into one channel of batches.

use std::time::Duration;

use fleetrl_proto::table::TableSpec;
use fleetrl_proto::v1::{SampleRequest, SampleResponse};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::Code;

use super::{connect, ensure_table, is_client_fault, RECONNECT_DELAY};

/// What to sample.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// Table to sample (the same on every shard).
    pub table: String,
    /// Items per batch; each batch comes whole from one shard.
    pub batch_size: u32,
    /// Batches buffered ahead of the consumer (over all shards), and asked for at a time from
    /// each shard: sampling runs ahead of the consumer by at most this channel's `prefetch`
    /// plus `prefetch` in flight per shard.
    pub prefetch: usize,
    /// How long to keep trying to reach a shard at first.
    pub connect_patience: Duration,
    /// The table's definition: a shard that answers NOT_FOUND (it restarted and lost it) gets
    /// it declared again (`EnsureTable`) and sampling goes on. Without it, NOT_FOUND is an error.
    pub recreate: Option<TableSpec>,
}

impl SampleOptions {
    /// Batches of `batch_size` from `table`, one batch buffered.
    pub fn new(table: &str, batch_size: u32) -> SampleOptions {
        SampleOptions {
            table: table.to_string(),
            batch_size,
            prefetch: 1,
            connect_patience: Duration::from_secs(60),
            recreate: None,
        }
    }
}

/// A batch and the shard it came from (its keys are that shard's keys: priority updates for
/// them go back to it).
#[derive(Debug, Clone)]
pub struct ShardBatch {
    /// Index of the shard in the list given to [`sample_stream`].
    pub shard: usize,
    /// The batch as the server sent it.
    pub response: SampleResponse,
}

/// Streams batches from every shard into one channel until the receiver is dropped. A shard
/// that fails is reconnected in the background while the others keep serving. A request the
/// servers reject (unknown table, impossible batch size) is returned as `Err` on the channel
/// and ends that shard's stream.
pub fn sample_stream(
    shards: Vec<String>,
    options: SampleOptions,
) -> (
    mpsc::Receiver<anyhow::Result<ShardBatch>>,
    Vec<JoinHandle<()>>,
) {
    let (tx, rx) = mpsc::channel(options.prefetch.max(1));
    let tasks = shards
        .into_iter()
        .enumerate()
        .map(|(shard, addr)| tokio::spawn(shard_loop(shard, addr, options.clone(), tx.clone())))
        .collect();
    (rx, tasks)
}

async fn shard_loop(
    shard: usize,
    addr: String,
    options: SampleOptions,
    tx: mpsc::Sender<anyhow::Result<ShardBatch>>,
) {
    let mut patience = options.connect_patience;
    loop {
        match stream(shard, &addr, &options, &tx, patience).await {
            Ok(()) => return, // the consumer is gone
            Err(status) if status.code() == Code::NotFound && options.recreate.is_some() => {
                let spec = options.recreate.as_ref().expect("checked");
                tracing::warn!(replay = %addr, table = %spec.name, "table missing (replay server restarted?); declaring it again");
                if let Err(error) =
                    ensure_table(std::slice::from_ref(&addr), spec, options.connect_patience).await
                {
                    let _ = tx.send(Err(error)).await;
                    return;
                }
            }
            Err(status) if is_client_fault(&status) => {
                let error = anyhow::anyhow!(
                    "replay server {addr} rejected sampling `{}`: {}",
                    options.table,
                    status.message()
                );
                let _ = tx.send(Err(error)).await;
                return;
            }
            Err(status) => {
                tracing::warn!(replay = %addr, error = %status.message(), "sample stream ended; reconnecting");
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
        patience = Duration::from_millis(100);
    }
}

/// Ok(()) when the consumer is gone; Err when the stream broke.
async fn stream(
    shard: usize,
    addr: &str,
    options: &SampleOptions,
    tx: &mpsc::Sender<anyhow::Result<ShardBatch>>,
    patience: Duration,
) -> Result<(), tonic::Status> {
    let mut client = connect(addr, patience)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    // Batches are asked for `prefetch` at a time. An open-ended stream would let the server
    // run as far ahead as HTTP/2's flow-control window allows (megabytes: thousands of small
    // batches), all counted as sampled by the rate limiter and none trained yet: updates would
    // trail the configured samples-per-insert ratio, and prioritized replay's new priorities
    // would come back for batches drawn long before.
    let chunk = options.prefetch.max(1) as u64;
    let request = SampleRequest {
        table: options.table.clone(),
        batch_size: options.batch_size,
        max_batches: chunk,
        rate_limiter_timeout_ms: 0,
    };
    tracing::debug!(replay = %addr, table = %options.table, chunk, "sampling");
    loop {
        let mut batches = client.sample(request.clone()).await?.into_inner();
        let mut received = 0;
        while let Some(response) = batches.message().await? {
            received += 1;
            if tx.send(Ok(ShardBatch { shard, response })).await.is_err() {
                return Ok(());
            }
        }
        if received < chunk {
            return Err(tonic::Status::unavailable(
                "the server closed the sample stream",
            ));
        }
    }
}
