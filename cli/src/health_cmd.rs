//! `fleetrl health ADDR`: one `grpc.health.v1.Health/Check`, for container health checks
//! (docker-compose `healthcheck`, images without a shell or grpc_health_probe).

use std::time::Duration;

use anyhow::{bail, Context};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Succeeds if the server at `addr` reports SERVING for `service` ("" = the whole server)
/// within `timeout`.
pub(crate) async fn run(addr: &str, service: &str, timeout: Duration) -> anyhow::Result<()> {
    let check = async {
        let channel = fleetrl_runtime::net::connect(addr, timeout).await?;
        let request = HealthCheckRequest {
            service: service.to_string(),
        };
        let response = HealthClient::new(channel).check(request).await?;
        anyhow::Ok(response.into_inner().status)
    };
    let status = tokio::time::timeout(timeout, check)
        .await
        .with_context(|| format!("no health answer from {addr} within {timeout:?}"))?
        .with_context(|| format!("health check of {addr}"))?;
    let status = ServingStatus::try_from(status).unwrap_or(ServingStatus::Unknown);
    if status != ServingStatus::Serving {
        bail!("{addr} reports {}", status.as_str_name());
    }
    println!("{addr}: SERVING");
    Ok(())
}
