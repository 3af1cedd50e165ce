//! The docker-compose deployment end to end: builds the runtime image from the release
//! binaries, starts `deploy/compose.yml` with 1 replay server, 1 learner and 2 actors, sees
//! training progress, scales to 4 actors without restarting the learner, kills an actor,
//! restarts the replay server (its checkpoint restored) and the learner (it resumes with its
//! step counter), and ends with a checkpoint whose 20-episode evaluation solves CartPole.
//! Every gRPC connection, the test's own included, is TLS (certificates from
//! `deploy/tls/make-certs.sh`) and carries the run's token.
//! Skipped, with a message saying why, where no Docker engine or compose is installed; a
//! failure instead under `CI=true` (see `fleetrl_tests::requires`).
//!
//! Prints the deployment timings: image size and build time, `up` to the first learner
//! update, env steps/s with 2 and with 4 actors.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::{GetStatusRequest, InfoRequest, SaveCheckpointRequest};
use fleetrl_tests::compose::{self, metric, poll, Compose};
use fleetrl_tests::requires::{self, Need};

const IMAGE: &str = "fleetrl:test";
const PRESET: &str = "compose-test";
const MINUTE: Duration = Duration::from_secs(60);

/// The learner's metrics series this scenario reads.
const UPDATES: &str = "fleetrl_learner_updates_total";
const RETURN: &str = "fleetrl_learner_episode_return_recent";
const STEPS: &str = "fleetrl_learner_env_steps_reported_total";
const TRAINED: &str = "fleetrl_learner_env_steps_trained_total";
const CONNECTED: &str = "fleetrl_learner_actors_connected";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_cluster_trains_scales_and_survives_restarts() -> anyhow::Result<()> {
    if !requires::should_run("compose_cluster", Need::Tool, compose::docker_unavailable())? {
        return Ok(());
    }
    let built = Instant::now();
    let image_bytes = tokio::task::spawn_blocking(|| compose::build_image(IMAGE)).await??;
    let build_s = built.elapsed().as_secs_f64();
    let config_dir = write_config()?;
    let project = format!("fleetrltest{}", std::process::id());
    let cluster = Compose::new(&project, IMAGE, &config_dir, PRESET);
    let result = scenario(&cluster).await;
    if result.is_err() {
        eprintln!("compose logs (tail):\n{}", cluster.all_logs_tail());
    }
    let timings = result?;
    eprintln!(
        "compose timings: image {:.0} MB built in {build_s:.1} s; up -> first learner update \
         {:.1} s; env steps/s with 2 actors {}, with 4 actors {}; solved after {:.0} s",
        image_bytes as f64 / 1e6,
        timings.first_update_s,
        timings.steps_per_s_2,
        timings.steps_per_s_4,
        timings.solved_s
    );
    let _ = std::fs::remove_dir_all(&config_dir);
    Ok(())
}

/// The preset with a step budget the scenario cannot exhaust, so training never stops early.
fn write_config() -> anyhow::Result<std::path::PathBuf> {
    let root = compose::repo_root();
    let config = fleetrl_core::config::RunConfig::load(
        &root.join("configs/cartpole-ppo.toml").display().to_string(),
        &["stop.total_env_steps=10_000_000".to_string()],
    )?;
    let dir = fleetrl_tests::scratch("fleetrl-compose");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(format!("{PRESET}.toml")), config.to_toml())?;
    Ok(dir)
}

struct Timings {
    first_update_s: f64,
    steps_per_s_2: Rate,
    steps_per_s_4: Rate,
    solved_s: f64,
}

async fn scenario(cluster: &Compose) -> anyhow::Result<Timings> {
    let up = Instant::now();
    cluster.run(&["up", "-d"])?;
    let metrics = cluster.port("learner", 1, 9100)?;
    poll("the first learner update", 3 * MINUTE, || async move {
        Ok((metric(metrics, UPDATES).await? >= 1.0).then_some(()))
    })
    .await?;
    let first_update_s = up.elapsed().as_secs_f64();

    // Progress: more updates, and the actors' episode returns rising.
    let first_return = poll("a first episode return", 2 * MINUTE, || async move {
        let r = metric(metrics, RETURN).await?;
        Ok((r > 0.0).then_some(r))
    })
    .await?;
    let updates = metric(metrics, UPDATES).await?;
    let target = (first_return * 2.0).max(first_return + 50.0);
    poll("episode returns to double", 5 * MINUTE, || async move {
        let (u, r) = (
            metric(metrics, UPDATES).await?,
            metric(metrics, RETURN).await?,
        );
        Ok((u >= updates + 10.0 && r >= target).then_some(()))
    })
    .await?;
    let steps_per_s_2 = steps_per_second(metrics).await?;
    // The other roles' metrics endpoints count the same run.
    let replay_metrics = cluster.port("replay", 1, 9100)?;
    let inserted = metric(
        replay_metrics,
        "fleetrl_replay_inserted_total{table=\"rollouts\"}",
    )
    .await?;
    ensure!(
        inserted > 0.0,
        "the replay server's metrics count no inserts"
    );
    let actor_metrics = cluster.port("actor", 1, 9100)?;
    let acted = metric(actor_metrics, "fleetrl_actor_env_steps_total").await?;
    ensure!(acted > 0.0, "actor 1's metrics count no env steps");

    // Scale out: the new actors join the running learner.
    let learner = cluster
        .containers("learner")?
        .pop()
        .context("no learner container")?;
    let started = compose::inspect(&learner, "{{.State.StartedAt}}")?;
    cluster.run(&["up", "-d", "--no-recreate", "--scale", "actor=4"])?;
    let grpc = cluster.port("learner", 1, 50052)?;
    poll(
        "4 actors connected and reporting",
        3 * MINUTE,
        || async move {
            let connected = metric(metrics, CONNECTED).await?;
            Ok((connected == 4.0 && reporting_actors(grpc).await? == 4).then_some(()))
        },
    )
    .await?;
    ensure!(
        compose::inspect(&learner, "{{.State.StartedAt}}")? == started,
        "scaling the actors restarted the learner"
    );
    let steps_per_s_4 = steps_per_second(metrics).await?;

    // An actor crashes: training goes on.
    let actors = cluster.containers("actor")?;
    ensure!(
        actors.len() == 4,
        "expected 4 actor containers, got {actors:?}"
    );
    let out = std::process::Command::new("docker")
        .args(["kill", &actors[3]])
        .output()?;
    ensure!(out.status.success(), "docker kill failed: {out:?}");
    training_continues(metrics, "an actor was killed").await?;

    restart_replay(cluster, metrics).await?;
    restart_learner(cluster, metrics).await?;

    let solved = poll(
        "a checkpoint whose 20-episode evaluation reaches 475",
        10 * MINUTE,
        || solved_checkpoint(cluster),
    )
    .await?;
    eprintln!("solved: {solved}");
    Ok(Timings {
        first_update_s,
        steps_per_s_2,
        steps_per_s_4,
        solved_s: up.elapsed().as_secs_f64(),
    })
}

/// Env steps per second over 10 s: those the actors took (as reported to the learner), and
/// those the learner trained on (surplus actors' rollouts beyond a batch are dropped as stale).
async fn steps_per_second(metrics: SocketAddr) -> anyhow::Result<Rate> {
    let read = || async move {
        let acted = metric(metrics, STEPS).await?;
        anyhow::Ok((acted, metric(metrics, TRAINED).await?, Instant::now()))
    };
    let (a0, r0, t0) = read().await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (a1, r1, t1) = read().await?;
    let secs = (t1 - t0).as_secs_f64();
    Ok(Rate {
        acted: (a1 - a0) / secs,
        trained: (r1 - r0) / secs,
    })
}

/// Env steps per second.
struct Rate {
    acted: f64,
    trained: f64,
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.0} acted, {:.0} trained", self.acted, self.trained)
    }
}

/// Actors whose last episode report reached the learner within the last 3 s.
async fn reporting_actors(learner: SocketAddr) -> anyhow::Result<usize> {
    let channel =
        fleetrl_runtime::net::connect(&learner.to_string(), Duration::from_secs(5)).await?;
    let status = LearnerServiceClient::new(channel)
        .get_status(GetStatusRequest {})
        .await?
        .into_inner();
    Ok(status
        .actors
        .iter()
        .filter(|a| a.seconds_since_report < 3.0)
        .count())
}

async fn training_continues(metrics: SocketAddr, after: &str) -> anyhow::Result<()> {
    let before = poll("the learner's metrics", 2 * MINUTE, || async move {
        Ok(Some(metric(metrics, UPDATES).await?))
    })
    .await?;
    let what = format!("10 more updates after {after}");
    poll(&what, 3 * MINUTE, || async move {
        Ok((metric(metrics, UPDATES).await? >= before + 10.0).then_some(()))
    })
    .await
}

async fn replay_inserted(replay: SocketAddr) -> anyhow::Result<u64> {
    let channel =
        fleetrl_runtime::net::connect(&replay.to_string(), Duration::from_secs(5)).await?;
    let info = ReplayServiceClient::new(channel)
        .info(InfoRequest {})
        .await?
        .into_inner();
    Ok(info.tables.iter().map(|t| t.num_inserted).sum())
}

/// Whether this build's replay server persists its tables (`--checkpoint-dir`).
fn replay_persists() -> anyhow::Result<bool> {
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", IMAGE, "fleet-replay-server", "--help"])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).contains("--checkpoint-dir"))
}

/// SIGTERM the replay server (it checkpoints), start it again, and check it restored.
async fn restart_replay(cluster: &Compose, metrics: SocketAddr) -> anyhow::Result<()> {
    let replay = cluster.port("replay", 1, 50051)?;
    let inserted = replay_inserted(replay).await?;
    ensure!(
        inserted > 0,
        "the replay server holds no inserts before its restart"
    );
    cluster.run(&["restart", "-t", "60", "replay"])?;
    let replay = cluster.port("replay", 1, 50051)?;
    let after = poll("the restarted replay server", 2 * MINUTE, || async move {
        Ok(Some(replay_inserted(replay).await?))
    })
    .await?;
    if replay_persists()? {
        let logs = cluster.logs("replay")?;
        ensure!(
            logs.contains("restored"),
            "the replay server did not log a restore"
        );
        ensure!(
            after >= inserted,
            "num_inserted fell from {inserted} to {after} across the restart"
        );
    } else {
        eprintln!(
            "NOTE: this build's replay server has no --checkpoint-dir; restore not checked \
             (num_inserted {inserted} before, {after} after)"
        );
    }
    training_continues(metrics, "the replay server restarted").await
}

/// SIGTERM the learner (it checkpoints), start it again, and check it resumed its counters.
async fn restart_learner(cluster: &Compose, metrics: SocketAddr) -> anyhow::Result<()> {
    let before = metric(metrics, UPDATES).await?;
    cluster.run(&["restart", "-t", "60", "learner"])?;
    let metrics = cluster.port("learner", 1, 9100)?;
    let resumed = poll(
        "the restarted learner's metrics",
        2 * MINUTE,
        || async move { Ok(Some(metric(metrics, UPDATES).await?)) },
    )
    .await?;
    ensure!(
        resumed >= before,
        "the learner restarted at {resumed} updates, below the {before} it had"
    );
    let logs = cluster.logs("learner")?;
    ensure!(logs.contains("resumed"), "the learner did not log a resume");
    training_continues(metrics, "the learner restarted").await
}

/// Asks the learner for a checkpoint and evaluates it in the learner's container.
async fn solved_checkpoint(cluster: &Compose) -> anyhow::Result<Option<String>> {
    let grpc = cluster.port("learner", 1, 50052)?;
    let channel = fleetrl_runtime::net::connect(&grpc.to_string(), Duration::from_secs(5)).await?;
    let saved = LearnerServiceClient::new(channel)
        .save_checkpoint(SaveCheckpointRequest {})
        .await?
        .into_inner();
    let out = cluster.run(&[
        "exec",
        "-T",
        "learner",
        "fleetrl",
        "eval",
        "--checkpoint",
        &saved.path,
        "--episodes",
        "20",
    ])?;
    let mean: f64 = out
        .split_whitespace()
        .skip_while(|w| *w != "return")
        .nth(1)
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("unexpected eval output: {out}"))?;
    eprintln!(
        "checkpoint {} (version {}): mean return {mean}",
        saved.path, saved.policy_version
    );
    if mean >= 475.0 {
        return Ok(Some(format!("{} scored {mean}", saved.path)));
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(None)
}
