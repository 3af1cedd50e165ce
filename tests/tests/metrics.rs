//! Every role serves Prometheus metrics on `--metrics-listen`, and they count the run: the
//! replay server's inserts, the learner's updates and connected actors, the actor's steps,
//! rollouts and weights (on- and off-policy actors alike). Real processes on loopback, a few
//! seconds of training.

use std::net::SocketAddr;
use std::time::Duration;

use fleetrl_tests::compose::{metric, metric_at_least};
use fleetrl_tests::{Metrics, Sandbox};

const PATIENCE: Duration = Duration::from_secs(120);

async fn at_least(addr: SocketAddr, series: &str, min: f64) -> anyhow::Result<()> {
    metric_at_least(addr, series, min, PATIENCE).await
}

/// A run of `preset` with one actor, every role serving metrics.
async fn start(preset: &str) -> anyhow::Result<(Sandbox, Metrics)> {
    let sandbox = Sandbox::builder(&format!("metrics-{preset}"))
        .preset(preset)
        .actors(1)
        .metrics()
        .start()
        .await?;
    let metrics = sandbox.metrics().expect("asked for");
    Ok((sandbox, metrics))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_serves_its_metrics() -> anyhow::Result<()> {
    let (sandbox, run) = start("cartpole-ppo").await?;
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
    // The latency histograms: one observation per update, insert and sampled batch.
    at_least(learner_m, "fleetrl_learner_update_seconds_count", 2.0).await?;
    let update_s = metric(learner_m, "fleetrl_learner_update_seconds_sum").await?;
    assert!(
        update_s > 0.0 && update_s.is_finite(),
        "update time {update_s}"
    );
    for op in ["insert", "sample"] {
        let series = format!("fleetrl_replay_{op}_seconds_count{table}");
        at_least(replay_m, &series, 5.0).await?;
        let all = format!("fleetrl_replay_{op}_seconds_bucket{{le=\"+Inf\",table=\"rollouts\"}}");
        at_least(replay_m, &all, 5.0).await?;
    }
    drop(sandbox);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_off_policy_actor_reports_its_weight_swaps() -> anyhow::Result<()> {
    let (sandbox, run) = start("cartpole-dqn").await?;
    at_least(run.learner, "fleetrl_learner_weights_published_total", 3.0).await?;
    at_least(run.actor, "fleetrl_actor_weights_applied_total", 2.0).await?;
    let latency = metric(run.actor, "fleetrl_actor_weights_apply_latency_seconds_sum").await?;
    let swaps = metric(
        run.actor,
        "fleetrl_actor_weights_apply_latency_seconds_count",
    )
    .await?;
    assert!(swaps >= 2.0, "{swaps} swaps in the latency histogram");
    let swap = metric(run.actor, "fleetrl_actor_weights_swap_seconds").await?;
    assert!(
        latency > 0.0 && latency.is_finite(),
        "latency sum {latency}"
    );
    assert!(swap > 0.0 && swap < 10.0, "last swap {swap} s");
    drop(sandbox);
    Ok(())
}

/// `fleetrl train` starts every role on one host, so a metrics address in its environment
/// (what compose gives each role) cannot go to all of them: it once made every role but the
/// first fail to bind (`Address already in use`) and the run end. The launcher says it
/// ignores it, and the run trains.
#[test]
fn train_ignores_a_metrics_address_in_its_environment() -> anyhow::Result<()> {
    let out = fleetrl_tests::scratch("metrics-env");
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let run = fleetrl_tests::cli::fleetrl_command(&[
        "train",
        "--config",
        "cartpole-ppo",
        "--set",
        "stop.total_env_steps=3000",
    ])
    .env("FLEETRL_METRICS_LISTEN", taken.local_addr()?.to_string())
    .arg("--out")
    .arg(&out)
    .output()?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "fleetrl train failed: {stderr}");
    assert!(
        stderr.contains("FLEETRL_METRICS_LISTEN is ignored"),
        "{stderr}"
    );
    assert!(out.join("summary.json").exists());
    Ok(())
}

/// The first of `len` loopback ports in a row that were free a moment ago.
fn free_port_run(len: u16) -> anyhow::Result<u16> {
    for _ in 0..50 {
        let first = std::net::TcpListener::bind("127.0.0.1:0")?;
        let base = first.local_addr()?.port();
        if base.checked_add(len).is_none() {
            continue;
        }
        let rest: Result<Vec<_>, _> = (1..len)
            .map(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)))
            .collect();
        if rest.is_ok() {
            return Ok(base);
        }
    }
    anyhow::bail!("no {len} free loopback ports in a row in 50 tries")
}

/// `fleetrl train --metrics-listen HOST:PORT` gives each role its own port from PORT up (the
/// replay server, the learner, then the actor), says which, and each serves its own series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn train_serves_each_roles_metrics_from_one_base_port() -> anyhow::Result<()> {
    let out = fleetrl_tests::scratch("metrics-train");
    let base = free_port_run(3)?;
    let log = out.with_extension("stderr");
    let mut run = fleetrl_tests::cli::fleetrl_command(&[
        "train",
        "--config",
        "cartpole-ppo",
        "--set",
        "actors.count=1",
        "--set",
        "stop.total_env_steps=10000000",
        "--set",
        "stop.target_return=100000",
        "--metrics-listen",
        &format!("127.0.0.1:{base}"),
    ])
    .arg("--out")
    .arg(&out)
    .stderr(std::fs::File::create(&log)?)
    .spawn()?;
    let addr = |offset: u16| SocketAddr::from(([127, 0, 0, 1], base + offset));
    let scraped = async {
        at_least(
            addr(0),
            "fleetrl_replay_inserted_total{table=\"rollouts\"}",
            2.0,
        )
        .await?;
        at_least(addr(1), "fleetrl_learner_updates_total", 2.0).await?;
        at_least(addr(2), "fleetrl_actor_env_steps_total", 1000.0).await
    }
    .await;
    let _ = run.kill();
    let _ = run.wait();
    let stderr = std::fs::read_to_string(&log)?;
    scraped.map_err(|e| e.context(format!("fleetrl train's stderr:\n{stderr}")))?;
    let listed = format!(
        "[fleetrl] metrics: replay-server {}, learner {}, actor-0 {}",
        addr(0),
        addr(1),
        addr(2)
    );
    assert!(stderr.contains(&listed), "no `{listed}` in:\n{stderr}");
    Ok(())
}
