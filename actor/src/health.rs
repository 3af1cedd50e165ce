//! `grpc.health.v1.Health` for the actor, for Kubernetes probes: NOT_SERVING until the first
//! weights arrive, SERVING while acting.

use fleetrl_runtime::{net, telemetry};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Binds `listen`, announces the address and serves health in the background.
pub(crate) async fn serve(listen: &str) -> anyhow::Result<HealthReporter> {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    telemetry::announce_listening(listener.local_addr()?);
    let server = fleetrl_runtime::net::server().add_service(service);
    tokio::spawn(async move {
        if let Err(error) = server.serve_with_incoming(net::incoming(listener)).await {
            tracing::error!(%error, "health server stopped");
        }
    });
    Ok(reporter)
}
