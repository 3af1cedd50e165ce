//! `grpc.health.v1.Health` on a port of its own or beside a role's services, for Kubernetes
//! probes. The actor and the policy server report NOT_SERVING until the first weights arrive
//! and while the learner's weight stream is lost, SERVING while they act with current
//! weights, NOT_SERVING for good once one of their tasks has failed.

use std::future::Future;

use crate::{net, telemetry};
pub use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// Binds `listen` and announces the address; the reporter (NOT_SERVING for now) and the
/// server, to be run by the supervisor (it ends only on an error).
pub async fn bind(
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
pub async fn set(reporter: &HealthReporter, serving: bool) {
    let status = match serving {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    };
    reporter.set_service_status("", status).await;
}
