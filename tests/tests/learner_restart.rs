//! A learner that crashes and resumes from its checkpoint starts a new incarnation (a new run
//! id): its versions restart below what the actors acted with, so an actor that was following
//! the old one is refused (FAILED_PRECONDITION) when it resubscribes and exits to rejoin, rather
//! than acting on for a lost policy; a rejoining actor trains with the resumed learner, whose
//! counters (updates, version, env steps, episodes, recent returns, rollouts trained and dropped,
//! policy lag) continue from the checkpoint. Before, actors ignored every version up to the last
//! they had seen, DQN's env-step count restarted near zero and episodes restarted at zero.

use std::time::Duration;

use fleetrl_proto::v1::GetRunSpecRequest;
use fleetrl_tests::Sandbox;

const GENEROUS: Duration = Duration::from_secs(180);

async fn run_id(sandbox: &Sandbox) -> anyhow::Result<String> {
    let spec = sandbox
        .learner()
        .await?
        .get_run_spec(GetRunSpecRequest {})
        .await?;
    Ok(spec.into_inner().run_id)
}

async fn resumes(preset: &str) -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder(&format!("learner-restart-{preset}"))
        .preset(preset)
        .actors(1)
        .set("stop.total_env_steps=10_000_000")
        .set("learner.checkpoint_interval=5")
        .start()
        .await?;
    let counted = sandbox
        .wait_for("updates and reported episodes", GENEROUS, |s| {
            s.updates >= 20 && s.env_steps_trained > 0 && s.episodes > 0
        })
        .await?;
    // A checkpoint (every 5 updates) written after episodes were counted.
    let before = sandbox
        .wait_for("a checkpoint after that", GENEROUS, |s| {
            s.updates >= counted.updates + 6
        })
        .await?;
    let old_run = run_id(&sandbox).await?;
    sandbox.crash_and_resume_learner().await?;
    let resumed = sandbox.status().await?;
    let new_run = run_id(&sandbox).await?;
    assert_ne!(old_run, new_run, "a resumed learner is a new incarnation");
    // The checkpoint was at most 5 updates before the crash.
    assert!(
        resumed.updates + 5 >= before.updates && resumed.updates > 0,
        "updates {} -> {}",
        before.updates,
        resumed.updates
    );
    assert!(
        resumed.env_steps_trained > 0
            && resumed.env_steps_trained <= before.env_steps_trained + 10_000,
        "env steps {} -> {}",
        before.env_steps_trained,
        resumed.env_steps_trained
    );
    // The run's other counters continue too (episodes and the recent return).
    assert!(
        resumed.episodes >= counted.episodes,
        "episodes {} (counted {}) -> {}",
        before.episodes,
        counted.episodes,
        resumed.episodes
    );
    assert!(
        resumed.recent_return.is_finite(),
        "the recent return restarted empty"
    );
    // The old actor is refused and exits to rejoin.
    let status = sandbox.wait_actor_exit(0, GENEROUS).await?;
    assert!(!status.success(), "the actor exited with {status}");
    let log = std::fs::read_to_string(sandbox.dir.join("actor-0.log")).unwrap_or_default();
    assert!(log.contains("the learner restarted"), "actor log: {log}");
    // A rejoining actor trains with the resumed learner.
    sandbox.add_actor(1).await?;
    let steps = resumed.env_steps_trained;
    let after = sandbox
        .wait_for("training after the resume", GENEROUS, |s| {
            s.updates >= resumed.updates + 10 && s.env_steps_trained > steps
        })
        .await?;
    assert!(after.policy_version >= resumed.policy_version);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_policy_learner_resumes_and_its_actors_rejoin() -> anyhow::Result<()> {
    resumes("cartpole-ppo").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_off_policy_learner_resumes_with_its_step_count() -> anyhow::Result<()> {
    resumes("cartpole-dqn").await
}
