//! SIGTERM stops a learner promptly even while actors are subscribed to its weights: it writes
//! its final checkpoint, ends every weight stream with UNAVAILABLE and exits 0, instead of
//! training on until the actors leave (which made compose and Kubernetes reach their SIGKILL
//! grace). The actors stay up and retry, so a restarted learner gets them back.

use std::time::Duration;

use fleetrl_tests::Sandbox;

const GENEROUS: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_learner_with_actors_connected() -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder("sigterm-learner")
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    sandbox
        .wait_for("updates with both actors", GENEROUS, |s| {
            s.updates >= 3 && s.actors.len() == 2
        })
        .await?;
    // An orchestrator's grace (Kubernetes' default is 30 s); before, the learner was still
    // training when it ran out.
    let took = sandbox.terminate_learner(Duration::from_secs(30)).await;
    let status = sandbox.learner_exited().expect("the learner has exited");
    assert!(
        status.success(),
        "the learner was killed or failed ({status}) after {took:?}; logs in {}",
        sandbox.dir.display()
    );
    assert!(
        took < Duration::from_secs(20),
        "SIGTERM took {took:?} with actors connected"
    );
    let log = std::fs::read_to_string(sandbox.dir.join("learner.log"))?;
    assert!(
        log.contains("final checkpoint"),
        "no final checkpoint in the learner's log"
    );
    // The actors outlive it, waiting for a learner to come back.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (id, _) in sandbox.actor_health_addrs() {
        assert!(
            sandbox
                .wait_actor_exit(id, Duration::from_millis(200))
                .await
                .is_err(),
            "actor {id} exited with its learner"
        );
    }
    Ok(())
}
