//! Every role serves Prometheus metrics on `--metrics-listen`, and they count the run: the
//! replay server's inserts, the learner's updates and connected actors, the actor's steps,
//! rollouts and weights (on- and off-policy actors alike). Real processes on loopback, a few
//! seconds of training.

use std::net::SocketAddr;
use std::time::Duration;

use fleetrl_core::launch::Role;
use fleetrl_tests::compose::{metric, poll};

const PATIENCE: Duration = Duration::from_secs(120);

/// A loopback address with a port that was free a moment ago.
fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

async fn at_least(addr: SocketAddr, series: &str, min: f64) -> anyhow::Result<()> {
    let what = format!("{series} >= {min} at {addr}");
    poll(&what, PATIENCE, || async move {
        Ok((metric(addr, series).await? >= min).then_some(()))
    })
    .await
}

/// The three roles of one run of `preset`, each serving metrics.
struct Run {
    dir: std::path::PathBuf,
    roles: Vec<Role>,
    replay: SocketAddr,
    learner: SocketAddr,
    actor: SocketAddr,
}

impl Run {
    async fn start(preset: &str) -> anyhow::Result<Run> {
        let dir =
            std::env::temp_dir().join(format!("fleetrl-metrics-{preset}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let config = fleetrl_tests::compose::repo_root().join(format!("configs/{preset}.toml"));
        let config = config.display().to_string();
        let (replay_m, learner_m, actor_m) = (free_addr()?, free_addr()?, free_addr()?);
        let s = |x: &str| x.to_string();

        let log = dir.join("replay.log");
        let replay_args = [
            s("--listen"),
            s("127.0.0.1:0"),
            s("--config"),
            config.clone(),
            s("--metrics-listen"),
            replay_m.to_string(),
        ];
        let mut replay = Role::start("replay", "fleet-replay-server", &replay_args, &log).await?;
        let replay_addr = replay.listening_addr(PATIENCE, &log).await?;

        let log = dir.join("learner.log");
        let learner_args = [
            s("--listen"),
            s("127.0.0.1:0"),
            s("--replay"),
            replay_addr.to_string(),
            s("--config"),
            config,
            s("--run-dir"),
            dir.display().to_string(),
            s("--metrics-listen"),
            learner_m.to_string(),
        ];
        let mut learner = Role::start("learner", "fleet-learner", &learner_args, &log).await?;
        let learner_addr = learner.listening_addr(PATIENCE, &log).await?;

        let log = dir.join("actor.log");
        let actor_args = [
            s("--learner"),
            learner_addr.to_string(),
            s("--replay"),
            replay_addr.to_string(),
            s("--health-listen"),
            s("127.0.0.1:0"),
            s("--metrics-listen"),
            actor_m.to_string(),
        ];
        let mut actor = Role::start("actor", "fleet-actor", &actor_args, &log).await?;
        actor.listening_addr(PATIENCE, &log).await?;
        Ok(Run {
            dir,
            roles: vec![actor, learner, replay],
            replay: replay_m,
            learner: learner_m,
            actor: actor_m,
        })
    }

    async fn stop(mut self) {
        for role in &mut self.roles {
            role.stop(Duration::from_secs(30)).await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_serves_its_metrics() -> anyhow::Result<()> {
    let run = Run::start("cartpole-ppo").await?;
    let (replay_m, learner_m, actor_m) = (run.replay, run.learner, run.actor);
    at_least(actor_m, "fleetrl_actor_env_steps_total", 2000.0).await?;
    at_least(actor_m, "fleetrl_actor_rollouts_sent_total", 5.0).await?;
    at_least(actor_m, "fleetrl_actor_weights_received_total", 2.0).await?;
    at_least(actor_m, "fleetrl_actor_weights_applied_total", 2.0).await?;
    at_least(actor_m, "fleetrl_actor_episodes_total", 1.0).await?;
    at_least(learner_m, "fleetrl_learner_updates_total", 2.0).await?;
    at_least(learner_m, "fleetrl_learner_weights_published_total", 2.0).await?;
    at_least(learner_m, "fleetrl_learner_episode_return_recent", 1.0).await?;
    assert_eq!(
        metric(learner_m, "fleetrl_learner_actors_connected").await?,
        1.0
    );
    let loss = metric(learner_m, "fleetrl_learner_value_loss").await?;
    assert!(loss.is_finite() && loss > 0.0, "value loss {loss}");
    let table = "{table=\"rollouts\"}";
    at_least(
        replay_m,
        &format!("fleetrl_replay_inserted_total{table}"),
        5.0,
    )
    .await?;
    at_least(
        replay_m,
        &format!("fleetrl_replay_sampled_total{table}"),
        5.0,
    )
    .await?;
    assert_eq!(
        metric(replay_m, &format!("fleetrl_replay_table_max_size{table}")).await?,
        2.0
    );
    run.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_off_policy_actor_reports_its_weight_swaps() -> anyhow::Result<()> {
    let run = Run::start("cartpole-dqn").await?;
    at_least(run.learner, "fleetrl_learner_weights_published_total", 3.0).await?;
    at_least(run.actor, "fleetrl_actor_weights_applied_total", 2.0).await?;
    let latency = metric(
        run.actor,
        "fleetrl_actor_weights_apply_latency_seconds_total",
    )
    .await?;
    let swap = metric(run.actor, "fleetrl_actor_weights_swap_seconds").await?;
    assert!(
        latency > 0.0 && latency.is_finite(),
        "latency sum {latency}"
    );
    assert!(swap > 0.0 && swap < 10.0, "last swap {swap} s");
    run.stop().await;
    Ok(())
}
