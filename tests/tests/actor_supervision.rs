//! An actor whose learner is gone does not act on for nothing: health turns NOT_SERVING as soon
//! as the weight stream breaks, and once the learner stays away longer than the actor's
//! `--connect-patience-s` the actor exits non-zero, so compose or Kubernetes restart it. An
//! actor still waiting for its learner stops at once on SIGTERM.

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

/// An actor still waiting for its learner (none answers; its patience is two minutes) stops at
/// once on SIGTERM and exits 0: it used to install its signal handler only once it acted, so as
/// a container's PID 1 it ignored the stop for the whole patience (and here died of it).
#[test]
fn an_actor_waiting_for_its_learner_stops_at_once_on_sigterm() -> anyhow::Result<()> {
    let free = || -> anyhow::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    };
    let (learner, replay) = (free()?, free()?);
    let dir = fleetrl_tests::scratch("fleetrl-actor-waits");
    std::fs::create_dir_all(&dir)?;
    let log_path = dir.join("actor.log");
    let log = std::fs::File::create(&log_path)?;
    let mut actor =
        std::process::Command::new(fleetrl_runtime::launch::bin_dir()?.join("fleet-actor"))
            .args(["--learner", &format!("127.0.0.1:{learner}")])
            .args(["--replay", &format!("127.0.0.1:{replay}")])
            .args([
                "--health-listen",
                "127.0.0.1:0",
                "--connect-patience-s",
                "120",
            ])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
    // Long enough to be in the wait (startup takes well under a second here).
    std::thread::sleep(Duration::from_secs(3));
    let sent = Instant::now();
    // Unsafe: a plain signal to a child this test started and has not reaped.
    unsafe {
        libc::kill(actor.id() as i32, libc::SIGTERM);
    }
    let status = loop {
        if let Some(status) = actor.try_wait()? {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = actor.kill();
            anyhow::bail!("the actor still waits 20 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(&log_path)?;
    assert!(status.success(), "the actor ended with {status}: {log}");
    assert!(
        log.contains("stopped while waiting for the learner"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
