//! Killing an actor mid-run does not stop training, and a new actor joins the run.

use std::time::Duration;

use fleetrl_tests::Sandbox;

const GENEROUS: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn training_survives_a_killed_actor_and_a_new_one_joins() -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder("actor-churn")
        .actors(2)
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    let before = sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 5)
        .await?;

    sandbox.kill_actor(0).await?;
    let target = before.env_steps_trained + 5_000;
    let after_kill = sandbox
        .wait_for("training to continue with one actor", GENEROUS, |s| {
            s.env_steps_trained >= target
        })
        .await?;
    sandbox.check_servers()?;

    sandbox.add_actor(7).await?;
    let joined = sandbox
        .wait_for("actor 7 to report", GENEROUS, |s| {
            s.actors.iter().any(|a| a.actor_id == 7 && a.env_steps > 0)
        })
        .await?;
    assert!(joined.policy_version > after_kill.policy_version);
    let target = joined.env_steps_trained + 2_000;
    sandbox
        .wait_for("training with the new actor", GENEROUS, |s| {
            s.env_steps_trained >= target
        })
        .await?;
    sandbox.check_servers()?;
    Ok(())
}
