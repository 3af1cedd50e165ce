//! `grpc.health.v1.Health` for the actor, for Kubernetes probes: NOT_SERVING until the first
//! weights arrive and while the learner's weight stream is lost, SERVING while acting with
//! current weights, NOT_SERVING for good once a task of the actor has failed.

use std::future::Future;

use fleetrl_runtime::{net, telemetry};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Binds `listen` and announces the address; the reporter (NOT_SERVING for now) and the
/// server, to be run by the supervisor (it ends only on an error).
pub(crate) async fn bind(
    listen: &str,
) -> std::io::Result<(
    HealthReporter,
    impl Future<Output = Result<(), tonic::transport::Error>>,
)> {
    let (reporter, service) = tonic_health::server::health_reporter();
    set(&reporter, false).await;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    telemetry::announce_listening(listener.local_addr()?);
    let server = net::server()
        .map_err(std::io::Error::other)?
        .add_service(service)
        .serve_with_incoming(net::incoming(listener));
    Ok((reporter, server))
}

/// Reports SERVING when `serving`, NOT_SERVING otherwise.
pub(crate) async fn set(reporter: &HealthReporter, serving: bool) {
    let status = match serving {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    };
    reporter.set_service_status("", status).await;
}
