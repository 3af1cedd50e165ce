//! A simulated fleet: N lightweight actors in one process against a real replay server and a
//! real learner (`cartpole-ppo`), to see whether the servers stay healthy as the fleet grows.
//!
//! ```text
//! cargo run --release -p fleetrl-tests --example fleet_sim -- [--actors 64,256,1000] [--seconds 30]
//! ```
//!
//! Each simulated actor opens its own connections (its own TCP connection to the learner and
//! one to the replay server, as a real actor does), follows the weight stream with the actor's
//! own receiver (chunked, written into f32 tensors) and, for every version it receives, inserts
//! one real rollout item (32 steps x 4 envs of random CartPole data, tagged with that version:
//! its share of a batch, as a synchronous PPO actor sends it). It acts no env and runs no
//! model, so one process can stand in for a thousand actors.
//!
//! Per fleet size, one line: updates and rollouts trained per second, rollouts dropped, how
//! many actors got weights, the weight-apply latency (publish to received, p50/p99) and the
//! learner's and replay server's resident memory, and whether both stayed healthy (every
//! status poll answered within 5 s, both processes alive, updates kept coming).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::broadcast::{now_unix_nanos, wire, Receiver, DEFAULT_CHUNK_BYTES};
use fleetrl_core::items::rollout::{Actions, Bootstrap, RolloutBuilder, StepRecord};
use fleetrl_core::replay_client::{Writer, WriterOptions};
use fleetrl_proto::v1::{GetRunSpecRequest, SubscribeWeightsRequest};
use fleetrl_proto::TensorMap;
use fleetrl_tests::Sandbox;

const T: usize = 32;
const M: usize = 4;
const OBS: usize = 4;

/// What the simulated actors saw, shared by all of them.
#[derive(Default)]
struct Seen {
    latencies_ms: Mutex<Vec<f64>>,
    inserted: AtomicU64,
    with_weights: AtomicU64,
    errors: AtomicU64,
}

/// One rollout of random CartPole-shaped data acted by `version`.
fn rollout(version: i64, seed: u64) -> TensorMap {
    let mut builder = RolloutBuilder::new(T, M, OBS);
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        ((x >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    };
    for step in 0..T {
        let obs: Vec<f32> = (0..M * OBS).map(|_| next()).collect();
        let action = Actions::Discrete((0..M).map(|_| i64::from(next() > 0.0)).collect());
        let done: Vec<bool> = (0..M).map(|_| step % 20 == 19).collect();
        builder.push(StepRecord {
            obs: &obs,
            action: &action,
            log_prob: &[-0.69; M],
            value: &[next(); M],
            reward: &[1.0; M],
            terminated: &done,
            truncated: &[false; M],
            final_value: &[0.0; M],
        });
    }
    let bootstrap = Bootstrap {
        value: vec![0.0; M],
        obs: vec![0.0; M * OBS],
    };
    builder.finish(&bootstrap, version)
}

/// One simulated actor: follows the weights and inserts a rollout per version received.
async fn actor(
    id: u64,
    learner: String,
    replay: String,
    run_id: String,
    seen: Arc<Seen>,
) -> anyhow::Result<()> {
    let patience = Duration::from_secs(60);
    let channel = fleetrl_runtime::net::connect(&learner, patience).await?;
    let (writer, _task) = Writer::spawn(vec![replay], WriterOptions::new("rollouts"));
    let request = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: DEFAULT_CHUNK_BYTES,
        run_id,
        ..Default::default()
    };
    let mut stream = wire::subscribe(channel, request).await?;
    let mut receiver = Receiver::default();
    let mut first = true;
    while let Some(message) = stream.message().await? {
        let Some(weights) = receiver.push_wire(message)? else {
            continue;
        };
        let ms = (now_unix_nanos() - weights.published_unix_nanos) as f64 / 1e6;
        seen.latencies_ms.lock().expect("lock").push(ms);
        if first {
            seen.with_weights.fetch_add(1, Ordering::Relaxed);
            first = false;
        }
        let version = weights.version;
        drop(weights);
        writer.insert(rollout(version, id), 1.0).await?;
        seen.inserted.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

fn rss_mb(pid: Option<u32>) -> f64 {
    pid.and_then(fleetrl_runtime::launch::resident_mb)
        .unwrap_or(f64::NAN)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn simulate(n: usize, seconds: f64) -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder(&format!("fleet-sim-{n}"))
        .preset("cartpole-ppo")
        .actors(0)
        .set("stop.total_env_steps=1000000000000")
        .start()
        .await?;
    let learner = sandbox.learner_addr.to_string();
    let replay = sandbox.replay_addr.to_string();
    let run_id = sandbox
        .learner()
        .await?
        .get_run_spec(GetRunSpecRequest {})
        .await?
        .into_inner()
        .run_id;
    let seen = Arc::new(Seen::default());
    let started = Instant::now();
    let mut fleet = tokio::task::JoinSet::new();
    for id in 0..n {
        let (learner, replay, run_id, seen) = (
            learner.clone(),
            replay.clone(),
            run_id.clone(),
            seen.clone(),
        );
        fleet.spawn(async move {
            if let Err(error) = actor(id as u64, learner, replay, run_id, seen.clone()).await {
                seen.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("[fleet-sim] actor {id}: {error:#}");
            }
        });
    }
    // Measure from when every actor has weights (or 60 s), for `seconds`.
    while seen.with_weights.load(Ordering::Relaxed) < n as u64
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let joined = started.elapsed().as_secs_f64();
    let first = sandbox.status().await?;
    seen.latencies_ms.lock().expect("lock").clear();
    let window = Instant::now();
    let mut healthy = true;
    let mut slowest_poll = 0.0f64;
    let mut peak = (0.0f64, 0.0f64);
    while window.elapsed().as_secs_f64() < seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let asked = Instant::now();
        let status = tokio::time::timeout(Duration::from_secs(5), sandbox.status()).await;
        slowest_poll = slowest_poll.max(asked.elapsed().as_secs_f64());
        healthy &= matches!(status, Ok(Ok(_))) && sandbox.check_servers().is_ok();
        let (learner_pid, replay_pid) = sandbox.pids();
        peak.0 = peak.0.max(rss_mb(learner_pid));
        peak.1 = peak.1.max(rss_mb(replay_pid));
    }
    let last = sandbox.status().await?;
    let elapsed = window.elapsed().as_secs_f64();
    let updates = last.updates - first.updates;
    healthy &= updates > 0;
    let trained = last.rollouts_trained - first.rollouts_trained;
    let mut lat = seen.latencies_ms.lock().expect("lock").clone();
    lat.sort_by(f64::total_cmp);
    println!(
        "| {n} | {} | {:.1} | {:.2} | {:.0} | {} | {:.1} / {:.1} | {:.0} / {:.0} | {:.2} | {} |",
        seen.with_weights.load(Ordering::Relaxed),
        joined,
        updates as f64 / elapsed,
        trained as f64 / elapsed,
        last.rollouts_dropped - first.rollouts_dropped,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        peak.0,
        peak.1,
        slowest_poll,
        if healthy && seen.errors.load(Ordering::Relaxed) == 0 {
            "yes"
        } else {
            "NO"
        },
    );
    fleet.abort_all();
    drop(sandbox);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut actors = vec![64usize, 256, 1000];
    let mut seconds = 30.0;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--actors" => {
                actors = value
                    .split(',')
                    .map(|v| v.trim().parse().context("--actors takes numbers"))
                    .collect::<anyhow::Result<_>>()?
            }
            "--seconds" => seconds = value.parse().context("--seconds takes a number")?,
            other => anyhow::bail!("unknown flag {other} (--actors 64,256,1000 --seconds 30)"),
        }
    }
    println!(
        "| actors | with weights | s to join | updates/s | rollouts trained/s | dropped | \
         weight apply p50 / p99 ms | learner / replay peak MB | slowest status poll s | healthy |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for n in actors {
        simulate(n, seconds).await?;
    }
    Ok(())
}
