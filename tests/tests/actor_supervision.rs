//! An actor whose learner is gone does not act on for nothing: health turns NOT_SERVING as soon
//! as the weight stream breaks, and once the learner stays away longer than the actor's
//! `--connect-patience-s` the actor exits non-zero, so compose or Kubernetes restart it. (An
//! actor still waiting for its learner stops at once on SIGTERM: `shutdown.rs`.)

use std::time::{Duration, Instant};

use fleetrl_tests::{wait_health, Sandbox};
use tonic_health::pb::health_check_response::ServingStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actor_exits_non_zero_when_the_learner_is_gone() -> anyhow::Result<()> {
    let patience_s = 3;
    let mut sandbox = Sandbox::builder("actor-supervision")
        .actors(1)
        .actor_arg("--connect-patience-s")
        .actor_arg(&patience_s.to_string())
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    let (id, health) = sandbox.actor_health_addrs()[0];
    wait_health(health, ServingStatus::Serving, Duration::from_secs(120)).await?;
    sandbox
        .wait_for("the first update", Duration::from_secs(120), |s| {
            s.updates >= 1
        })
        .await?;

    sandbox.kill_learner().await;
    let killed = Instant::now();
    wait_health(health, ServingStatus::NotServing, Duration::from_secs(30)).await?;
    let status = sandbox.wait_actor_exit(id, Duration::from_secs(60)).await?;
    assert!(
        !status.success(),
        "the actor exited with {status} after losing its learner"
    );
    assert!(
        killed.elapsed() >= Duration::from_secs(patience_s),
        "the actor gave up after {:?}, before its patience of {patience_s} s",
        killed.elapsed()
    );
    let log = std::fs::read_to_string(sandbox.dir.join(format!("actor-{id}.log")))?;
    assert!(
        log.contains("the weight subscription failed") && log.contains("the learner is gone"),
        "the actor's log does not say why it stopped:\n{log}"
    );
    Ok(())
}
