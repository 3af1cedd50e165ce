//! fleet-replay-server: named replay tables served over gRPC.
//!
//! [`serve`] runs `fleetrl.v1.ReplayService` (stream protocols in
//! `proto/proto/fleetrl/v1/replay.proto`) and `grpc.health.v1.Health` until a shutdown future
//! resolves. The tables themselves live in `fleetrl_core::buffers`; `service` only
//! adapts them to gRPC and `error` maps their errors to status codes. The binary is
//! `src/main.rs`.

mod error;
pub mod metrics;
mod service;

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use anyhow::Context;
use fleetrl_core::buffers::TableSpec;
use fleetrl_proto::v1::replay_service_server::ReplayServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::Server;
use tracing::{info, warn};

use service::{Replay, Tables};

/// Largest gRPC message the server decodes or encodes: a batch of image rollouts is large.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// How long open streams get to finish after shutdown before their connections are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// HTTP/2 pings that detect clients which vanished without closing their streams.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Serves `tables` on `listener` until `shutdown` resolves.
///
/// On shutdown the health status turns NOT_SERVING, every table closes (waiting inserts and
/// samples end with UNAVAILABLE), idle streams end, and open connections get
/// [`SHUTDOWN_GRACE`] to finish before they are dropped. Fails if a table spec is invalid or
/// the server cannot run.
pub async fn serve(
    listener: TcpListener,
    tables: Vec<TableSpec>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let tables = Tables::build(&tables).context("invalid table specs")?;
    let addr = listener
        .local_addr()
        .context("listener has no local address")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let replay = ReplayServiceServer::new(Replay::new(tables.clone(), stop_rx.clone()))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<ReplayServiceServer<Replay>>().await;

    let mut server_stop = stop_rx;
    let incoming = fleetrl_core::net::incoming(listener);
    let server = Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(health_service)
        .add_service(replay)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = server_stop.wait_for(|&stopped| stopped).await;
        });
    let mut server = pin!(server);
    info!(%addr, tables = ?tables.names(), "replay server serving");

    tokio::select! {
        result = &mut server => return result.context("replay server failed"),
        () = shutdown => {}
    }
    info!("replay server shutting down");
    health
        .set_not_serving::<ReplayServiceServer<Replay>>()
        .await;
    stop_tx.send_replace(true);
    tables.close_all();
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(result) => result.context("replay server failed while draining"),
        Err(_) => {
            warn!(
                grace_s = SHUTDOWN_GRACE.as_secs(),
                "streams still open after the grace period; dropping them"
            );
            Ok(())
        }
    }
}
