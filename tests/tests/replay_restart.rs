//! A replay server that crashes before its first checkpoint comes back empty: the learner
//! declares its table again when the server answers NOT_FOUND, the actors wait for that and
//! count the reconnects they make, and training goes on. Before, an off-policy learner logged
//! `unknown table` and stopped sampling for good, and its actors died on NOT_FOUND.

use std::time::Duration;

use fleetrl_tests::compose::metric_at_least;
use fleetrl_tests::Sandbox;

const GENEROUS: Duration = Duration::from_secs(180);

async fn survives_a_replay_crash(preset: &str) -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder(&format!("replay-restart-{preset}"))
        .preset(preset)
        .actors(1)
        .set("stop.total_env_steps=10_000_000")
        .set("learner.checkpoint_interval=0")
        .metrics()
        .start()
        .await?;
    let metrics = sandbox.metrics().expect("asked for");
    sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 2)
        .await?;
    sandbox.crash_and_restart_replay().await?;
    let updates = sandbox.status().await?.updates;
    sandbox
        .wait_for("updates after the replay server came back", GENEROUS, |s| {
            s.updates >= updates + 20
        })
        .await?;
    metric_at_least(
        metrics.actor,
        "fleetrl_actor_insert_reconnects_total",
        1.0,
        GENEROUS,
    )
    .await?;
    sandbox.check_servers()?;
    let actor = sandbox.actor_health_addrs()[0].0;
    assert!(
        sandbox
            .wait_actor_exit(actor, Duration::from_millis(100))
            .await
            .is_err(),
        "the actor exited"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_off_policy_run_survives_a_replay_crash_before_any_checkpoint() -> anyhow::Result<()> {
    survives_a_replay_crash("cartpole-dqn").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_policy_run_survives_a_replay_crash_before_any_checkpoint() -> anyhow::Result<()> {
    survives_a_replay_crash("cartpole-ppo").await
}
