//! Load on a running policy server (`fleet-serve`): C concurrent callers, each on its own
//! connection, sending one-observation Act requests back to back for a few seconds; then the
//! same checkpoint's policy acting in this process on the same observations (tch, one row a
//! call, no network), for comparison. One JSON line per case: requests/s, p50 and p99
//! latency in ms, and the server's mean batch (rows per forward pass, from its metrics).
//!
//! ```text
//! cargo run --release -p fleet-serve --example serve_bench -- --addr HOST:PORT \
//!     --checkpoint CKPT [--metrics HOST:PORT] [--clients 1,16,64] [--seconds 5]
//! ```
//! `bench/serve.sh` starts the server and prints the table.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::acting::policy_loader::load_policy;
use fleetrl_proto::v1::policy_service_client::PolicyServiceClient;
use fleetrl_proto::v1::{ActRequest, DescribeRequest};
use fleetrl_proto::Tensor;
use fleetrl_runtime::telemetry::metrics::parse_value;

struct Args {
    addr: String,
    checkpoint: PathBuf,
    metrics: Option<String>,
    clients: Vec<usize>,
    seconds: f64,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        addr: String::new(),
        checkpoint: PathBuf::new(),
        metrics: None,
        clients: vec![1, 16, 64],
        seconds: 5.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--addr" => args.addr = value,
            "--checkpoint" => args.checkpoint = value.into(),
            "--metrics" => args.metrics = Some(value),
            "--clients" => {
                args.clients = value
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .context("--clients")?
            }
            "--seconds" => args.seconds = value.parse().context("--seconds")?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    anyhow::ensure!(!args.addr.is_empty(), "--addr is required");
    Ok(args)
}

/// Observation `i` of a fixed pseudo-random sequence (CartPole-sized ranges).
fn observation(i: u64, dim: usize) -> Vec<f32> {
    (0..dim)
        .map(|j| {
            let x = (i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(j as u64 * 1442695040888963407)
                >> 40) as f32;
            (x / (1u64 << 24) as f32 - 0.5) * 0.4
        })
        .collect()
}

/// p-th percentile (0..=100) of sorted `ms`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let at = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn report(case: &str, clients: usize, mut ms: Vec<f64>, elapsed: f64, batch: Option<f64>) {
    ms.sort_by(f64::total_cmp);
    let line = format!(
        "{{\"case\":\"{case}\",\"clients\":{clients},\"requests\":{},\"requests_per_s\":{:.1},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"mean_batch\":{}}}",
        ms.len(),
        ms.len() as f64 / elapsed,
        percentile(&ms, 50.0),
        percentile(&ms, 99.0),
        batch.map_or("null".to_string(), |b| format!("{b:.2}")),
    );
    println!("{line}");
}

/// The server's rows_total and batches_total now.
async fn batches(metrics: Option<&str>) -> Option<(f64, f64)> {
    let text = scrape(metrics?).await?;
    let rows = parse_value(&text, "fleetrl_serve_rows_total")?;
    let batches = parse_value(&text, "fleetrl_serve_batches_total")?;
    Some((rows, batches))
}

/// `GET /metrics` from `addr` with a bare HTTP/1.0 request.
async fn scrape(addr: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await.ok()?;
    Some(body)
}

async fn served(args: &Args, clients: usize, dim: usize) -> anyhow::Result<()> {
    let mut callers = Vec::new();
    for _ in 0..clients {
        let channel = fleetrl_runtime::net::connect(&args.addr, Duration::from_secs(30)).await?;
        callers.push(PolicyServiceClient::new(channel));
    }
    let before = batches(args.metrics.as_deref()).await;
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut client) in callers.into_iter().enumerate() {
        tasks.spawn(async move {
            let mut ms = Vec::new();
            let mut i = c as u64 * 1_000_000;
            while Instant::now() < deadline {
                let obs = Tensor::from_slice(&[1, dim as i64], &observation(i, dim));
                let request = ActRequest {
                    observations: Some(obs),
                    state: None,
                };
                let sent = Instant::now();
                client.act(request).await?;
                ms.push(sent.elapsed().as_secs_f64() * 1e3);
                i += 1;
            }
            anyhow::Ok(ms)
        });
    }
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = batches(args.metrics.as_deref()).await;
    let batch = match (before, after) {
        (Some((r0, b0)), Some((r1, b1))) if b1 > b0 => Some((r1 - r0) / (b1 - b0)),
        _ => None,
    };
    report("fleet-serve", clients, all, elapsed, batch);
    Ok(())
}

/// The same policy, in this process: one row a call, back to back, for `seconds`.
fn in_process(args: &Args, dim: usize) -> anyhow::Result<()> {
    tch::set_num_threads(1);
    let (policy, _) = load_policy(&args.checkpoint)?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let mut ms = Vec::new();
    let mut i = 0u64;
    while Instant::now() < deadline {
        let sent = Instant::now();
        let obs = tch::Tensor::from_slice(&observation(i, dim)).view([1, dim as i64]);
        let action = policy.act(&obs, true).action;
        let _: Vec<i64> = Vec::try_from(&action.to_kind(tch::Kind::Int64).reshape([-1]))?;
        ms.push(sent.elapsed().as_secs_f64() * 1e3);
        i += 1;
    }
    report(
        "in-process tch",
        1,
        ms,
        started.elapsed().as_secs_f64(),
        Some(1.0),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let channel = fleetrl_runtime::net::connect(&args.addr, Duration::from_secs(30)).await?;
    let described = PolicyServiceClient::new(channel)
        .describe(DescribeRequest {})
        .await?
        .into_inner();
    let space = described
        .observation_space
        .context("an observation space")?;
    let dim = fleetrl_proto::space::Space::try_from(&space)?.flat_dim();
    for &clients in &args.clients {
        served(&args, clients, dim).await?;
    }
    in_process(&args, dim)?;
    Ok(())
}
