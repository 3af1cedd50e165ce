//! Pulls stacked batches from the replay server ahead of the trainer, reconnecting on errors.

use std::time::Duration;

use fleetrl_core::net::{self, MAX_MESSAGE_BYTES};
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::SampleRequest;
use tokio::sync::mpsc;

use crate::trainer::Work;

/// Streams rollouts from `table` into `work`, one at a time (the trainer assembles batches so
/// it can drop rollouts that lag too far behind), until `work` closes.
/// The channel's capacity (1) is the prefetch depth: one batch waits while one trains.
pub(crate) async fn run(addr: String, table: String, work: mpsc::Sender<Work>) {
    loop {
        match stream_rollouts(&addr, &table, &work).await {
            Ok(()) => return,
            Err(error) => {
                tracing::warn!(%error, replay = %addr, "sample stream ended; reconnecting");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Ok(()) when the trainer is gone; Err when the stream broke.
async fn stream_rollouts(addr: &str, table: &str, work: &mpsc::Sender<Work>) -> anyhow::Result<()> {
    let channel = net::connect(addr, Duration::from_secs(60)).await?;
    let mut client = ReplayServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let request = SampleRequest {
        table: table.to_string(),
        batch_size: 1,
        max_batches: 0,
    };
    let mut stream = client.sample(request).await?.into_inner();
    tracing::info!(replay = %addr, table, "sampling");
    while let Some(response) = stream.message().await? {
        let rollout = response.batch.unwrap_or_default();
        if work.send(Work::Rollout(rollout)).await.is_err() {
            return Ok(());
        }
    }
    anyhow::bail!("replay server closed the sample stream")
}
