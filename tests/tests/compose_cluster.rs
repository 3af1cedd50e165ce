//! The docker-compose deployment end to end: builds the runtime image from the release
//! binaries, starts `deploy/compose.yml` with 1 replay server, 1 learner, 2 actors and the
//! policy server, sees training progress and the policy server answering with the learner's
//! weights, scales to 4 actors without restarting the learner, kills an actor, restarts the
//! replay server (its checkpoint restored) and the learner (it resumes with its step counter;
//! the policy server follows it again), and ends with a checkpoint whose 20-episode evaluation
//! solves CartPole.
//! Every gRPC connection, the test's own included, is TLS (certificates from
//! `deploy/tls/make-certs.sh`) and carries the run's token.
//! Skipped, with a message saying why, where no Docker engine or compose is installed; a
//! failure instead under `CI=true` (see `fleetrl_tests::requires`).
//!
//! Prints the deployment timings: image size and build time, `up` to the first learner
//! update, env steps/s with 2 and with 4 actors.
//!
//! A second scenario runs two learner ranks (`deploy/compose.ranks.yml`, pendulum-sac): both
//! train in step, weights reach the actors, and a SIGKILL of rank 1 makes rank 0 stop naming
//! it; compose restarts both and they go on from rank 0's checkpoint. The two scenarios take
//! turns (each loads this host's cores).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::policy_service_client::PolicyServiceClient;
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::{ActRequest, GetStatusRequest, InfoRequest, SaveCheckpointRequest};
use fleetrl_proto::Tensor;
use fleetrl_tests::compose::{self, metric, metric_at_least, poll, Compose};
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

/// One cluster at a time: the scenarios share this host's cores and the image.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Builds the image once for both scenarios: its size in bytes, or why it failed.
async fn image() -> anyhow::Result<u64> {
    static BUILT: std::sync::OnceLock<Result<u64, String>> = std::sync::OnceLock::new();
    let built = tokio::task::spawn_blocking(|| {
        BUILT
            .get_or_init(|| compose::build_image(IMAGE).map_err(|e| format!("{e:#}")))
            .clone()
    })
    .await?;
    built.map_err(anyhow::Error::msg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_cluster_trains_scales_and_survives_restarts() -> anyhow::Result<()> {
    if !requires::should_run("compose_cluster", Need::Tool, compose::docker_unavailable())? {
        return Ok(());
    }
    let _one = ONE_CLUSTER.lock().await;
    let built = Instant::now();
    let image_bytes = image().await?;
    let build_s = built.elapsed().as_secs_f64();
    let config_dir = write_config("cartpole-ppo", PRESET, &[])?;
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

/// `configs/<preset>.toml` with `overrides` and a step budget the scenario cannot exhaust (so
/// training never stops early), written as `<name>.toml` in a directory of its own.
fn write_config(
    preset: &str,
    name: &str,
    overrides: &[&str],
) -> anyhow::Result<std::path::PathBuf> {
    let root = compose::repo_root();
    let mut sets = vec!["stop.total_env_steps=10_000_000".to_string()];
    sets.extend(overrides.iter().map(|o| o.to_string()));
    let config = fleetrl_core::config::RunConfig::load(
        &root
            .join(format!("configs/{preset}.toml"))
            .display()
            .to_string(),
        &sets,
    )?;
    let dir = fleetrl_tests::scratch("fleetrl-compose");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(format!("{name}.toml")), config.to_toml())?;
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
    let version = poll("the policy server to answer", 2 * MINUTE, || {
        served(cluster)
    })
    .await?;
    eprintln!("the policy server answered with policy version {version}");

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
            // The policy server's weight subscription counts beside the actors'.
            let connected = metric(metrics, CONNECTED).await?;
            Ok((connected == 5.0 && reporting_actors(grpc).await? == 4).then_some(()))
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
    // The learner's restart began a new run for the policy server: compose restarted it, and
    // it follows the learner again.
    let version = poll(
        "the policy server to follow the restarted learner",
        2 * MINUTE,
        || served(cluster),
    )
    .await?;
    eprintln!("after the learner's restart the policy server answered with version {version}");
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

/// The policy version the policy server acts with, asked through `Act` on two CartPole
/// observations; `None` while it has no weights (UNAVAILABLE) or restarts.
async fn served(cluster: &Compose) -> anyhow::Result<Option<i64>> {
    let addr = cluster.port("serve", 1, 50055)?;
    let channel = fleetrl_runtime::net::connect(&addr.to_string(), Duration::from_secs(5)).await?;
    let request = ActRequest {
        observations: Some(Tensor::from_slice(&[2, 4], &[0.0f32; 8])),
        state: None,
    };
    let answer = PolicyServiceClient::new(channel)
        .act(request)
        .await?
        .into_inner();
    let actions = answer.actions.context("an answer without actions")?;
    ensure!(actions.shape == [2], "actions of shape {:?}", actions.shape);
    Ok((answer.policy_version >= 1).then_some(answer.policy_version))
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

const RANKS_PRESET: &str = "compose-ranks-test";
/// Updates one rank may be ahead of the other when both are read at once: every update is a
/// collective, so they differ by one, plus what a scrape's latency lets through.
const IN_STEP: f64 = 10.0;

/// Two learner ranks over `deploy/compose.ranks.yml`: they join and train pendulum-sac in
/// step; a SIGKILL of rank 1 stops rank 0 with an error naming it, compose restarts both, and
/// they train on from rank 0's newest checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_learner_ranks_train_and_restart_together() -> anyhow::Result<()> {
    if !requires::should_run("compose_cluster", Need::Tool, compose::docker_unavailable())? {
        return Ok(());
    }
    let _one = ONE_CLUSTER.lock().await;
    let started = Instant::now();
    image().await?;
    let build_s = started.elapsed().as_secs_f64();
    let config_dir = write_config("pendulum-sac", RANKS_PRESET, &[])?;
    let project = format!("fleetrlranks{}", std::process::id());
    let cluster =
        Compose::new(&project, IMAGE, &config_dir, RANKS_PRESET).with_override("compose.ranks.yml");
    let result = ranks_scenario(&cluster).await;
    if result.is_err() {
        eprintln!("compose logs (tail):\n{}", cluster.all_logs_tail());
    }
    let timings = result?;
    let down = Instant::now();
    drop(cluster);
    eprintln!(
        "compose ranks timings: image {build_s:.1} s (built once for both scenarios); up -> \
         both ranks past {JOINED_UPDATES} updates {:.1} s ({:.0} updates/s in step); SIGKILL \
         of rank 1 -> both ranks training again {:.1} s; `down` {:.1} s; whole test {:.1} s",
        timings.joined_s,
        timings.updates_per_s,
        timings.recovered_s,
        down.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&config_dir);
    Ok(())
}

/// Updates both ranks reach before the scenario calls them joined and training.
const JOINED_UPDATES: f64 = 20.0;

struct RankTimings {
    joined_s: f64,
    updates_per_s: f64,
    recovered_s: f64,
}

async fn ranks_scenario(cluster: &Compose) -> anyhow::Result<RankTimings> {
    let up = Instant::now();
    cluster.run(&["up", "-d"])?;
    both_ranks_train(cluster, JOINED_UPDATES).await?;
    let joined_s = up.elapsed().as_secs_f64();
    ensure!(
        cluster.logs("learner-rank1")?.contains("joined"),
        "rank 1 did not log joining rank 0"
    );
    // Rank 0 alone publishes: the actors act with its weights.
    let actor = cluster.port("actor", 1, 9100)?;
    metric_at_least(actor, "fleetrl_actor_policy_version", 1.0, MINUTE).await?;
    let rank0 = cluster.port("learner", 1, 9100)?;
    let (u0, t0) = (metric(rank0, UPDATES).await?, Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = in_step(cluster).await?;
    let updates_per_s = (before - u0) / t0.elapsed().as_secs_f64();

    // Rank 1 dies as if the kernel killed it: rank 0's next collective fails naming it, rank 0
    // exits non-zero, and compose's restart policy brings both back. Rank 0 may hear of it only
    // at its collective timeout (compose.ranks.yml: 30 s): a killed container's connections
    // can vanish without a reset (a run of 2026-12-06 waited the then 60 s default).
    let leader = cluster.containers("learner")?.pop().context("no rank 0")?;
    let follower = cluster
        .containers("learner-rank1")?
        .pop()
        .context("no rank 1")?;
    let crashed = Instant::now();
    compose::crash(&follower)?;
    for (container, rank) in [(&leader, 0), (&follower, 1)] {
        let what = format!("compose to restart learner rank {rank}");
        poll(&what, 2 * MINUTE, || async move {
            let restarts: u32 = compose::inspect(container, "{{.RestartCount}}")?.parse()?;
            Ok((restarts >= 1).then_some(()))
        })
        .await?;
    }
    let logs = cluster.logs("learner")?;
    ensure!(
        logs.contains("rank 1") && logs.contains("every rank stops"),
        "rank 0 did not stop naming rank 1"
    );
    // Back from rank 0's checkpoint, then past where the crash stopped them.
    both_ranks_train(cluster, before + 10.0).await?;
    let recovered_s = crashed.elapsed().as_secs_f64();
    ensure!(
        cluster.logs("learner")?.contains("resumed"),
        "rank 0 did not resume from its checkpoint"
    );
    in_step(cluster).await?;
    Ok(RankTimings {
        joined_s,
        updates_per_s,
        recovered_s,
    })
}

/// Waits until both ranks have made `updates` updates (ports are asked again: a restarted
/// container may publish on new ones).
async fn both_ranks_train(cluster: &Compose, updates: f64) -> anyhow::Result<()> {
    let what = format!("both learner ranks past {updates} updates");
    poll(&what, 3 * MINUTE, || async move {
        let rank0 = metric(cluster.port("learner", 1, 9100)?, UPDATES).await?;
        let rank1 = metric(cluster.port("learner-rank1", 1, 9100)?, UPDATES).await?;
        Ok((rank0 >= updates && rank1 >= updates).then_some(()))
    })
    .await
}

/// Both ranks' update counts read at once agree within [`IN_STEP`]; returns rank 0's.
async fn in_step(cluster: &Compose) -> anyhow::Result<f64> {
    let (rank0, rank1) = (
        cluster.port("learner", 1, 9100)?,
        cluster.port("learner-rank1", 1, 9100)?,
    );
    let (u0, u1) = tokio::join!(metric(rank0, UPDATES), metric(rank1, UPDATES));
    let (u0, u1) = (u0?, u1?);
    ensure!(
        (u0 - u1).abs() <= IN_STEP,
        "the ranks are not in step: rank 0 at {u0} updates, rank 1 at {u1}"
    );
    Ok(u0)
}
