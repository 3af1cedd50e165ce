//! The replay client used by actors, learners and benchmarks: inserts spread over K replay
//! servers (shards) and samples merged from all of them.
//!
//! Losing a shard degrades throughput, not correctness: a [`Writer`] sends the items a broken
//! shard never acknowledged to the other shards (at-least-once delivery) and keeps trying to
//! reconnect; a [`sample_stream`] keeps the batches of the live shards flowing and reconnects
//! the lost one in the background. Errors that retrying cannot fix (an unknown table, an item
//! that does not match the signature) end the writer with that error.

mod sampler;
mod sequence;
mod writer;

pub use sampler::{sample_stream, SampleOptions, ShardBatch};
pub use sequence::{SequenceBuilder, SequenceError};
pub use writer::{Writer, WriterOptions};

use std::time::Duration;

use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_runtime::net::Channel;
use tonic::Code;

use fleetrl_proto::table::TableSpec;
use fleetrl_runtime::net::{self, MAX_MESSAGE_BYTES};

/// Time between reconnection attempts to a shard that went away.
pub const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// A client of one shard with fleetrl's message size limits.
pub async fn connect(
    addr: &str,
    patience: Duration,
) -> anyhow::Result<ReplayServiceClient<Channel>> {
    let channel = net::connect(addr, patience).await?;
    Ok(ReplayServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// Creates `spec` on every shard, or checks that each already has exactly this definition.
pub async fn ensure_table(
    addrs: &[String],
    spec: &TableSpec,
    patience: Duration,
) -> anyhow::Result<()> {
    for addr in addrs {
        let mut client = connect(addr, patience).await?;
        let request = fleetrl_proto::v1::EnsureTableRequest {
            table: Some(spec.into()),
        };
        let created = client
            .ensure_table(request)
            .await
            .map_err(|status| {
                anyhow::anyhow!(
                    "replay server {addr} refused table `{}`: {}",
                    spec.name,
                    status.message()
                )
            })?
            .into_inner()
            .created;
        tracing::info!(replay = %addr, table = %spec.name, created, "replay table ensured");
    }
    Ok(())
}

/// Splits a comma-separated list of shard addresses, rejecting an empty one.
pub fn parse_shards(list: &str) -> anyhow::Result<Vec<String>> {
    let addrs: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(String::from)
        .collect();
    anyhow::ensure!(
        !addrs.is_empty(),
        "no replay server address given in `{list}`"
    );
    Ok(addrs)
}

/// Whether a status is the client's fault (retrying cannot help) rather than the shard's.
pub(crate) fn is_client_fault(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition | Code::AlreadyExists
    )
}
