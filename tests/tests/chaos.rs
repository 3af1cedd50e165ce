//! One run through a bad day, with the real binaries: the replay server is SIGKILLed and comes
//! back empty, the learner is SIGTERMed and resumes from its final checkpoint (its actors
//! rejoin), and an actor is SIGKILLed; the run still learns CartPole, and its counters stay
//! consistent (updates, versions and env steps never go back beyond the last checkpoint).

use std::time::Duration;

use fleetrl_tests::Sandbox;

const GENEROUS: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_reaches_its_target_through_crashes_and_restarts() -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder("chaos")
        .actors(2)
        .set("seed=3")
        .set("stop.total_env_steps=10_000_000")
        .set("learner.checkpoint_interval=10")
        .start()
        .await?;
    let mut next_actor = 2;
    let mut last = sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 5)
        .await?;

    // 1. The replay server crashes (no checkpoint) and comes back empty.
    sandbox.crash_and_restart_replay().await?;
    let seen = last.updates;
    last = sandbox
        .wait_for("updates after the replay crash", GENEROUS, |s| {
            s.updates >= seen + 10
        })
        .await?;

    // 2. The learner is rolled: SIGTERM (final checkpoint), then resumed from it. Its actors
    // are refused by the new incarnation and exit; new ones join, as a supervisor would start.
    sandbox.restart_learner().await?;
    let resumed = sandbox.status().await?;
    assert!(
        resumed.updates >= last.updates,
        "the final checkpoint holds every update: {last:?} -> {resumed:?}"
    );
    assert!(resumed.env_steps_trained >= last.env_steps_trained);
    assert!(resumed.policy_version >= last.policy_version);
    for id in 0..2 {
        sandbox.wait_actor_exit(id, GENEROUS).await?;
    }
    for _ in 0..2 {
        sandbox.add_actor(next_actor).await?;
        next_actor += 1;
    }
    let seen = resumed.updates;
    last = sandbox
        .wait_for("updates after the learner's restart", GENEROUS, |s| {
            s.updates >= seen + 10
        })
        .await?;

    // 3. An actor crashes; the other carries on.
    sandbox.kill_actor(next_actor - 1).await?;
    let seen = last.updates;
    let before_target = sandbox
        .wait_for("updates with one actor", GENEROUS, |s| {
            s.updates >= seen + 5
        })
        .await?;

    // The run still learns: CartPole's training return reaches 475.
    let solved = sandbox
        .wait_for("a training return of 475", GENEROUS, |s| {
            s.recent_return >= 475.0
        })
        .await?;
    assert!(solved.updates >= before_target.updates);
    assert!(solved.env_steps_trained >= before_target.env_steps_trained);
    assert!(solved.policy_version >= before_target.policy_version);
    sandbox.check_servers()?;
    Ok(())
}
