//! PEARL's replay layout, measured against the alternative the design weighed: one table of
//! round items carrying their `task` id (what fleetrl declares) or one table per task (what
//! garage's per-task buffers would map to), on a real `fleet-replay-server` process over
//! loopback gRPC.
//!
//! ```text
//! cargo run --release -p fleet-replay-server --example pearl_layout -- \
//!     [--preset point-robot-sparse-pearl] [--rounds-per-task 5] [--seconds 5]
//! ```
//!
//! Both layouts hold the same rounds: the preset's round table (its signature, 1,000-step
//! rounds for the sparse robot) with a min-size limiter in place of the run's samples-per-insert
//! one, so that only the layout is timed, filled with `--rounds-per-task` rounds for each of
//! the preset's training tasks. One learner update needs `meta_batch_size` rounds of distinct
//! tasks:
//! - `one table`: one sample stream of `meta_batch_size`-round batches, as the learner reads
//!   it (uniform over rounds; rounds of one task may repeat in a batch);
//! - `per task, on demand`: `meta_batch_size` distinct tasks drawn, one single-batch request to
//!   each task's table, all in flight at once;
//! - `per task, streams`: a sample stream open on every task's table (1-round batches) and one
//!   batch read from each drawn task's stream: the fastest per-task reading, at the cost of a
//!   stream and its buffered rounds per task.
//!
//! Prints a markdown row per layout: updates/s and the p50/p99 time to get an update's
//! rounds, when rounds are all the learner waits for.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::config::RunConfig;
use fleetrl_core::items::round::{self, RoundBuilder, RoundStep};
use fleetrl_core::items::tables;
use fleetrl_core::replay_client::{self, Writer, WriterOptions};
use fleetrl_proto::table::{RateLimiterSpec, TableSpec};
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::{SampleRequest, SampleResponse};
use fleetrl_proto::TensorMap;
use fleetrl_runtime::launch::Role;
use fleetrl_runtime::net::Channel;
use rand::seq::index::sample;
use rand::Rng;
use tonic::Streaming;

struct Args {
    preset: String,
    rounds_per_task: usize,
    seconds: f64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        preset: "point-robot-sparse-pearl".into(),
        rounds_per_task: 5,
        seconds: 5.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--preset" => args.preset = value,
            "--rounds-per-task" => args.rounds_per_task = value.parse()?,
            "--seconds" => args.seconds = value.parse()?,
            other => anyhow::bail!("unknown flag {other}; see the doc comment of pearl_layout.rs"),
        }
    }
    Ok(args)
}

/// A round of `spec`'s shape with random rows, played on `task`.
fn random_round(spec: &TableSpec, task: u32) -> anyhow::Result<TensorMap> {
    let field = |name: &str| {
        spec.signature
            .fields
            .iter()
            .find(|f| f.name == name)
            .with_context(|| format!("the round signature has no `{name}`"))
    };
    let obs = field(round::field::OBS)?.shape.clone();
    let action = field(round::field::ACTION)?.shape.clone();
    let (steps, d, a) = (obs[0] as usize, obs[1] as usize, action[1] as usize);
    let mut rng = rand::rng();
    let mut row = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random::<f32>()).collect() };
    let mut builder = RoundBuilder::default();
    for _ in 0..steps {
        let (o, act, next) = (row(d), row(a), row(d));
        builder.push(RoundStep {
            obs: &o,
            action: &act,
            reward: -1.0,
            score: 0.0,
            terminated: false,
            next_obs: &next,
        });
    }
    Ok(builder.finish(task, 0))
}

async fn client(addr: &str) -> anyhow::Result<ReplayServiceClient<Channel>> {
    replay_client::connect(addr, Duration::from_secs(30)).await
}

/// Declares `spec` and inserts `rounds` into it, as actors do (the replay client's writer).
async fn fill(addr: &str, spec: &TableSpec, rounds: Vec<TensorMap>) -> anyhow::Result<()> {
    let shards = vec![addr.to_string()];
    replay_client::ensure_table(&shards, spec, Duration::from_secs(30)).await?;
    let (writer, task) = Writer::spawn(shards, WriterOptions::new(&spec.name));
    for round in rounds {
        writer.insert(round, 1.0).await?;
    }
    drop(writer);
    task.finish().await
}

async fn open(
    addr: &str,
    table: &str,
    batch_size: u32,
    max_batches: u64,
) -> anyhow::Result<Streaming<SampleResponse>> {
    let request = SampleRequest {
        table: table.into(),
        batch_size,
        max_batches,
        rate_limiter_timeout_ms: 0,
    };
    Ok(client(addr).await?.sample(request).await?.into_inner())
}

async fn next(stream: &mut Streaming<SampleResponse>) -> anyhow::Result<SampleResponse> {
    stream.message().await?.context("server ended the stream")
}

/// Latencies in milliseconds -> (p50, p99).
fn percentiles(mut ms: Vec<f64>) -> (f64, f64) {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// One row: the updates timed since `start`, and their latencies' percentiles.
fn report(layout: &str, latencies: Vec<f64>, start: Instant) {
    let rate = latencies.len() as f64 / start.elapsed().as_secs_f64();
    let (p50, p99) = percentiles(latencies);
    println!("| {layout} | {rate:.0} | {p50:.2} | {p99:.2} |");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let config = RunConfig::load(&args.preset, &[])?;
    let pearl = config
        .algo
        .as_pearl()
        .with_context(|| format!("{} is not a PEARL preset", args.preset))?;
    let mut spec = tables::rounds(&config, pearl)?;
    let tasks = config.tasks.num_train;
    let k = pearl.meta_batch_size;
    spec.rate_limiter = RateLimiterSpec::MinSize { min_size: 1 };
    spec.max_size = (u64::from(tasks) * args.rounds_per_task as u64).max(spec.max_size);
    let dir = std::env::temp_dir().join(format!("fleetrl-pearl-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log: PathBuf = dir.join("replay-server.log");
    let listen = ["--listen", "127.0.0.1:0"].map(String::from);
    let mut server = Role::start("replay-server", "fleet-replay-server", &listen, &log).await?;
    let addr = server
        .listening_addr(Duration::from_secs(60), &log)
        .await?
        .to_string();
    eprintln!(
        "[pearl-layout] {}: {tasks} tasks x {} rounds of {} steps, {k} rounds an update",
        args.preset,
        args.rounds_per_task,
        pearl.round_steps()
    );
    let per_task = |task: u32| -> anyhow::Result<Vec<TensorMap>> {
        (0..args.rounds_per_task)
            .map(|_| random_round(&spec, task))
            .collect()
    };
    let mut all = Vec::new();
    let mut task_specs = Vec::new();
    for task in 0..tasks {
        let rounds = per_task(task)?;
        let mut own = spec.clone();
        own.name = format!("{}-task-{task}", spec.name);
        own.max_size = spec.max_size.div_ceil(u64::from(tasks));
        fill(&addr, &own, rounds.clone()).await?;
        task_specs.push(own);
        all.extend(rounds);
    }
    fill(&addr, &spec, all).await?;
    let seconds = Duration::from_secs_f64(args.seconds);
    println!("| layout | updates/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|");

    let mut stream = open(&addr, &spec.name, k, 0).await?;
    let (mut latencies, start) = (Vec::new(), Instant::now());
    while start.elapsed() < seconds {
        let asked = Instant::now();
        let batch = next(&mut stream).await?;
        anyhow::ensure!(batch.keys.len() == k as usize, "a short batch");
        latencies.push(asked.elapsed().as_secs_f64() * 1e3);
    }
    drop(stream);
    report("one table", latencies, start);

    let draw = || sample(&mut rand::rng(), tasks as usize, k as usize).into_vec();
    let (mut latencies, start) = (Vec::new(), Instant::now());
    while start.elapsed() < seconds {
        let asked = Instant::now();
        let requests = draw().into_iter().map(|t| {
            let (addr, table) = (addr.clone(), task_specs[t].name.clone());
            async move { next(&mut open(&addr, &table, 1, 1).await?).await }
        });
        for batch in futures::future::try_join_all(requests).await? {
            anyhow::ensure!(batch.keys.len() == 1, "a short batch");
        }
        latencies.push(asked.elapsed().as_secs_f64() * 1e3);
    }
    report("per task, on demand", latencies, start);

    let mut streams = Vec::new();
    for own in &task_specs {
        streams.push(open(&addr, &own.name, 1, 0).await?);
    }
    let (mut latencies, start) = (Vec::new(), Instant::now());
    while start.elapsed() < seconds {
        let asked = Instant::now();
        let picked = draw();
        let reads = streams
            .iter_mut()
            .enumerate()
            .filter(|(t, _)| picked.contains(t))
            .map(|(_, s)| next(s));
        for batch in futures::future::try_join_all(reads).await? {
            anyhow::ensure!(batch.keys.len() == 1, "a short batch");
        }
        latencies.push(asked.elapsed().as_secs_f64() * 1e3);
    }
    report("per task, streams", latencies, start);
    drop(streams);
    server.stop(Duration::from_secs(10)).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
