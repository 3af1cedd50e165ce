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

/// An actor in the middle of a long rollout has nothing finished to report, yet the learner's
/// status (what `fleetrl train` prints as "actors N") keeps it fresh: the actor reports, empty,
/// every couple of seconds. A 500,000-step rollout of one CartPole takes several seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_between_reports_stays_alive_in_the_status() -> anyhow::Result<()> {
    let sandbox = Sandbox::builder("heartbeat")
        .actors(1)
        .set("actors.envs_per_actor=1")
        .set("actors.rollout_length=500_000")
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    sandbox
        .wait_for("the actor's first report", Duration::from_secs(120), |s| {
            !s.actors.is_empty()
        })
        .await?;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let status = sandbox.status().await?;
        let actor = &status.actors[0];
        if status.env_steps_trained > 0 {
            break; // the rollout is in: the quiet spell is over
        }
        assert!(
            actor.seconds_since_report < 5.0,
            "{:.1} s since the actor's last report: {status:?}",
            actor.seconds_since_report
        );
    }
    Ok(())
}
