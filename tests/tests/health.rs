//! Every role serves `grpc.health.v1.Health` (what Kubernetes probes), and reports SERVING
//! once it does its job.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fleetrl_tests::Sandbox;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

async fn wait_serving(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    let channel = fleetrl_runtime::net::connect(&addr.to_string(), Duration::from_secs(60)).await?;
    let mut client = HealthClient::new(channel);
    let started = Instant::now();
    loop {
        let request = HealthCheckRequest {
            service: String::new(),
        };
        let status = client.check(request).await?.into_inner().status;
        if status == ServingStatus::Serving as i32 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "{what} never reported SERVING"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_reports_serving() -> anyhow::Result<()> {
    let sandbox = Sandbox::builder("health")
        .actors(2)
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    wait_serving(sandbox.replay_addr, "the replay server").await?;
    wait_serving(sandbox.learner_addr, "the learner").await?;
    for (id, addr) in sandbox.actor_health_addrs() {
        wait_serving(addr, &format!("actor {id}")).await?;
    }
    Ok(())
}
