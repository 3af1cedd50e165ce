//! Every role serves `grpc.health.v1.Health` (what Kubernetes probes), and reports SERVING
//! once it does its job.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use fleetrl_tests::{wait_health, Sandbox};
use tonic_health::pb::health_check_response::ServingStatus;

async fn wait_serving(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    wait_health(addr, ServingStatus::Serving, Duration::from_secs(120))
        .await
        .with_context(|| format!("{what} never reported SERVING"))
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
