//! SIGTERM stops a learner promptly even while actors are subscribed to its weights: it writes
//! its final checkpoint, ends every weight stream with UNAVAILABLE and exits 0, instead of
//! training on until the actors leave (which made compose and Kubernetes reach their SIGKILL
//! grace). The actors stay up and retry, so a restarted learner gets them back.
//!
//! An actor, and a policy server following a learner, still waiting for their learner at
//! startup stop at once on SIGTERM and exit 0 ([`fleetrl_tests::stopping`]; a learner rank
//! waiting at the rendezvous: `learner_ranks.rs`).

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

/// An actor and a policy server whose learner never answers (their patience is two minutes)
/// stop at once on SIGTERM while they wait for it.
#[test]
fn roles_waiting_for_their_learner_stop_at_once_on_sigterm() -> anyhow::Result<()> {
    let free = || -> anyhow::Result<String> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .to_string())
    };
    let dir = fleetrl_tests::scratch("fleetrl-roles-wait");
    std::fs::create_dir_all(&dir)?;
    let (learner, replay, followed) = (free()?, free()?, free()?);
    let patience = ["--connect-patience-s", "120"];
    let roles = [
        (
            "fleet-actor",
            vec![
                "--learner",
                &learner,
                "--replay",
                &replay,
                "--health-listen",
                "127.0.0.1:0",
            ],
            "stopped before acting",
        ),
        (
            "fleet-serve",
            vec!["--follow", &followed, "--listen", "127.0.0.1:0"],
            "stopped while waiting for the learner",
        ),
    ];
    for (bin, mut args, stopped) in roles {
        args.extend(patience);
        fleetrl_tests::stopping::stops_at_once_while_waiting(
            bin,
            &args,
            &dir.join(format!("{bin}.log")),
            fleetrl_tests::stopping::WAITING_FOR_THE_LEARNER,
            stopped,
        )?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
