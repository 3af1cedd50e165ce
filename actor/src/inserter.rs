//! Streams rollouts to the replay server with at most `max_in_flight` unacknowledged, and
//! resends the unacknowledged ones after a reconnect (at-least-once, as the protocol says).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use fleetrl_core::net::{self, MAX_MESSAGE_BYTES};
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::InsertRequest;
use fleetrl_proto::TensorMap;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use crate::metrics::ActorMetrics;

/// Where and how to insert.
pub(crate) struct Inserter {
    pub(crate) addr: String,
    pub(crate) table: String,
    pub(crate) max_in_flight: usize,
    pub(crate) metrics: Arc<ActorMetrics>,
}

enum Ended {
    /// The acting thread is gone and everything sent was acked.
    Done,
    /// The stream broke; reconnect.
    Broken(anyhow::Error),
}

impl Inserter {
    /// Runs until `rollouts` closes and every rollout is acked. Errors the replay server
    /// reports as the client's fault (bad item, unknown table) are returned: retrying cannot fix them.
    pub(crate) async fn run(self, mut rollouts: mpsc::Receiver<TensorMap>) -> anyhow::Result<()> {
        let mut pending = VecDeque::new();
        loop {
            match self.session(&mut rollouts, &mut pending).await {
                Ok(Ended::Done) => return Ok(()),
                Ok(Ended::Broken(error)) => {
                    self.metrics.insert_reconnects.inc();
                    tracing::warn!(%error, replay = %self.addr, unacked = pending.len(), "insert stream broke; reconnecting");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(status) => {
                    return Err(anyhow::anyhow!(
                        "replay server rejected our rollouts: {status}"
                    ))
                }
            }
        }
    }

    fn request(&self, item: &TensorMap) -> InsertRequest {
        InsertRequest {
            table: self.table.clone(),
            item: Some(item.clone()),
            priority: 0.0,
        }
    }

    async fn session(
        &self,
        rollouts: &mut mpsc::Receiver<TensorMap>,
        pending: &mut VecDeque<TensorMap>,
    ) -> Result<Ended, tonic::Status> {
        let channel = match net::connect(&self.addr, Duration::from_secs(60)).await {
            Ok(channel) => channel,
            Err(e) => return Ok(Ended::Broken(e.into())),
        };
        let mut client =
            ReplayServiceClient::new(channel).max_encoding_message_size(MAX_MESSAGE_BYTES);
        let (tx, rx) = mpsc::channel(self.max_in_flight + 1);
        for item in pending.iter() {
            let _ = tx.send(self.request(item)).await;
        }
        let mut acks = match client.insert(ReceiverStream::new(rx)).await {
            Ok(response) => response.into_inner(),
            Err(status) => return classify(status),
        };
        let mut open = true;
        loop {
            tokio::select! {
                next = rollouts.recv(), if open && pending.len() < self.max_in_flight => match next {
                    Some(item) => {
                        if tx.send(self.request(&item)).await.is_err() {
                            pending.push_back(item);
                            return Ok(Ended::Broken(anyhow::anyhow!("insert stream closed")));
                        }
                        pending.push_back(item);
                    }
                    None if pending.is_empty() => return Ok(Ended::Done),
                    None => open = false,
                },
                ack = acks.message() => match ack {
                    Ok(Some(_)) => {
                        pending.pop_front();
                        self.metrics.rollouts_sent.inc();
                        if !open && pending.is_empty() {
                            return Ok(Ended::Done);
                        }
                    }
                    Ok(None) => return Ok(Ended::Broken(anyhow::anyhow!("server ended the insert stream"))),
                    Err(status) => return classify(status),
                },
            }
        }
    }
}

/// Client faults are final; everything else is worth a reconnect.
fn classify(status: tonic::Status) -> Result<Ended, tonic::Status> {
    match status.code() {
        Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition => Err(status),
        _ => Ok(Ended::Broken(status.into())),
    }
}
