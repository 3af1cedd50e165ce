//! fleetrl's side of the replay benchmark (`bench/replay.sh` runs it beside DeepMind Reverb):
//! insert and sample throughput and latency over loopback gRPC against a real
//! `fleet-replay-server` process.
//!
//! ```text
//! cargo run --release -p fleet-replay-server --example replay_bench -- \
//!     [--seconds 5] [--warmup 1] [--items cartpole,atari] [--writers 1,8,64] [--samplers 1,8] \
//!     [--insert-method writer,sync,stream]
//! ```
//!
//! Items and tables are the same as `bench/reverb_replay.py`'s: `cartpole` is obs f32[4],
//! action i64, reward f32, next_obs f32[4], done bool (45 bytes); `atari` is obs u8[4,84,84],
//! action i64, reward f32 (28,236 bytes); uniform sampler, FIFO remover, min-size 1,
//! max_size 1,000,000 / 20,000.
//!
//! insert, by `--insert-method` (each method a case of its own; JSON key `method`):
//! - `writer` (default, as Reverb's `writer`): each client inserts one item at a time through
//!   the client library's [`Writer`] (what actors use), which stacks up to `--chunk` queued
//!   items a request (default 64 for cartpole, 1 for atari) and holds up to `--in-flight`
//!   items unacknowledged (default 100, as Reverb's side). Latency is one `Writer::insert`
//!   call as the client sees it: it waits only while the window is full. The case's time
//!   includes the final acknowledgement of every item.
//! - `sync` (as Reverb's `sync`): one item a request, one request in flight; latency is the
//!   confirmed round trip, send to acknowledgement.
//! - `stream`: a raw insert stream with requests of `--chunk` items, up to `--window` requests
//!   unacknowledged (default 8 for cartpole, 64 for atari); latency is per request, send to
//!   ack, so it grows with the window (Little's law: window / throughput).
//!
//! sample: each sampler owns one sample stream of 256-item batches; latency is the time the
//! client waits for the next batch. The table is pre-filled to max_size first (skipped, with
//! the memory figure, when `--samplers` is empty).
//!
//! memory: each item kind gets a fresh server; its resident memory (VmRSS) with the table full
//! minus its idle level, against the items' own bytes.
//!
//! Prints one JSON line per case on stdout (the keys Reverb's script prints), progress on stderr.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::replay_client::{Writer, WriterOptions};
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::{InsertRequest, ResetRequest, SampleRequest};
use fleetrl_proto::{Tensor, TensorMap};
use fleetrl_runtime::launch::Role;
use fleetrl_runtime::net::Channel;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const BATCH: u32 = 256;

struct Kind {
    name: &'static str,
    max_size: u64,
    default_chunk: usize,
    default_window: usize,
}

const KINDS: [Kind; 2] = [
    Kind {
        name: "cartpole",
        max_size: 1_000_000,
        default_chunk: 64,
        default_window: 8,
    },
    Kind {
        name: "atari",
        max_size: 20_000,
        default_chunk: 1,
        default_window: 64,
    },
];

fn tables_toml() -> String {
    let mut out = String::new();
    for kind in &KINDS {
        let signature = match kind.name {
            "cartpole" => {
                r#"[{ name = "obs", dtype = "f32", shape = [4] }, { name = "action", dtype = "i64", shape = [] }, { name = "reward", dtype = "f32", shape = [] }, { name = "next_obs", dtype = "f32", shape = [4] }, { name = "done", dtype = "bool", shape = [] }]"#
            }
            _ => {
                r#"[{ name = "obs", dtype = "u8", shape = [4, 84, 84] }, { name = "action", dtype = "i64", shape = [] }, { name = "reward", dtype = "f32", shape = [] }]"#
            }
        };
        out.push_str(&format!(
            "[[table]]\nname = \"{}\"\nmax_size = {}\nsampler = {{ kind = \"uniform\" }}\nremover = {{ kind = \"fifo\" }}\nrate_limiter = {{ kind = \"min_size\", min_size = 1 }}\nsignature = {signature}\n\n",
            kind.name, kind.max_size
        ));
    }
    out
}

/// `n` random items of `kind`, stacked, and their payload bytes.
fn stacked(kind: &str, n: usize) -> (TensorMap, usize) {
    let n64 = n as i64;
    let bytes = |count: usize| -> Vec<u8> { (0..count).map(|_| rand::random::<u8>()).collect() };
    let floats = |count: usize| -> Vec<f32> { (0..count).map(|_| rand::random::<f32>()).collect() };
    let map = match kind {
        "cartpole" => TensorMap::from_pairs([
            ("obs", Tensor::from_slice(&[n64, 4], &floats(4 * n))),
            ("action", Tensor::from_slice(&[n64], &vec![1i64; n])),
            ("reward", Tensor::from_slice(&[n64], &floats(n))),
            ("next_obs", Tensor::from_slice(&[n64, 4], &floats(4 * n))),
            ("done", Tensor::from_slice(&[n64], &vec![false; n])),
        ]),
        _ => TensorMap::from_pairs([
            (
                "obs",
                Tensor::from_slice(&[n64, 4, 84, 84], &bytes(4 * 84 * 84 * n)),
            ),
            ("action", Tensor::from_slice(&[n64], &vec![1i64; n])),
            ("reward", Tensor::from_slice(&[n64], &floats(n))),
        ]),
    };
    let payload = map.tensors.values().map(|t| t.data.len()).sum();
    (map, payload)
}

struct Args {
    seconds: f64,
    warmup: f64,
    items: Vec<String>,
    writers: Vec<usize>,
    samplers: Vec<usize>,
    chunk: Option<usize>,
    window: Option<usize>,
    in_flight: usize,
    methods: Vec<Method>,
}

/// How an insert case's clients insert (the doc comment above).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Method {
    Writer,
    Sync,
    Stream,
}

impl Method {
    fn parse(name: &str) -> anyhow::Result<Method> {
        Ok(match name {
            "writer" => Method::Writer,
            "sync" => Method::Sync,
            "stream" => Method::Stream,
            other => anyhow::bail!("unknown insert method `{other}` (writer, sync, stream)"),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Method::Writer => "writer",
            Method::Sync => "sync",
            Method::Stream => "stream",
        }
    }
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        seconds: 5.0,
        warmup: 1.0,
        items: vec!["cartpole".into(), "atari".into()],
        writers: vec![1, 8, 64],
        samplers: vec![1, 8],
        chunk: None,
        window: None,
        in_flight: 100,
        methods: vec![Method::Writer],
    };
    let list = |v: &str| -> anyhow::Result<Vec<usize>> {
        v.split(',')
            .filter(|x| !x.trim().is_empty())
            .map(|x| x.trim().parse().context("a list of numbers"))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seconds" => args.seconds = value.parse()?,
            "--warmup" => args.warmup = value.parse()?,
            "--items" => args.items = value.split(',').map(String::from).collect(),
            "--writers" => args.writers = list(&value)?,
            "--samplers" => args.samplers = list(&value)?,
            "--chunk" => args.chunk = Some(value.parse()?),
            "--window" => args.window = Some(value.parse()?),
            "--in-flight" => args.in_flight = value.parse()?,
            "--insert-method" => {
                args.methods = value
                    .split(',')
                    .map(Method::parse)
                    .collect::<Result<_, _>>()?
            }
            other => anyhow::bail!("unknown flag {other}; see the doc comment of replay_bench.rs"),
        }
    }
    for item in &args.items {
        anyhow::ensure!(
            KINDS.iter().any(|k| k.name == item),
            "unknown item kind `{item}`"
        );
    }
    Ok(args)
}

/// Latencies in milliseconds -> (p50, p99).
fn percentiles(mut ms: Vec<f64>) -> (f64, f64) {
    if ms.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn report(
    (op, method): (&str, &str),
    item: &str,
    clients: usize,
    items: u64,
    payload: f64,
    seconds: f64,
    ms: Vec<f64>,
) {
    let (p50, p99) = percentiles(ms);
    let line = serde_json::json!({
        "system": "fleetrl", "op": op, "method": method, "item": item, "clients": clients,
        "items_per_s": items as f64 / seconds,
        "mb_per_s": items as f64 * payload / seconds / 1e6,
        "p50_ms": p50, "p99_ms": p99,
    });
    println!("{line}");
    eprintln!(
        "[fleetrl] {op} ({method}) {item} x{clients}: {:.0} items/s, p50 {p50:.3} ms, p99 {p99:.3} ms",
        items as f64 / seconds
    );
}

async fn client(addr: &str) -> anyhow::Result<ReplayServiceClient<Channel>> {
    fleetrl_core::replay_client::connect(addr, Duration::from_secs(30)).await
}

/// One writer: keeps `window` requests of `chunk` items in flight until `until`; returns items
/// acked and per-request latencies.
async fn writer(
    addr: String,
    request: Arc<InsertRequest>,
    chunk: usize,
    window: usize,
    until: Instant,
) -> anyhow::Result<(u64, Vec<f64>)> {
    let mut c = client(&addr).await?;
    let (tx, rx) = mpsc::channel(window + 1);
    let mut acks = c.insert(ReceiverStream::new(rx)).await?.into_inner();
    let mut sent: VecDeque<Instant> = VecDeque::new();
    let mut latencies = Vec::new();
    let mut acked = 0u64;
    loop {
        let open = Instant::now() < until;
        while open && sent.len() < window {
            sent.push_back(Instant::now());
            tx.send(InsertRequest::clone(&request))
                .await
                .context("insert stream closed")?;
        }
        if sent.is_empty() {
            break;
        }
        let ack = acks.message().await?.context("server ended the stream")?;
        anyhow::ensure!(ack.keys.len() == chunk, "short ack");
        let start = sent.pop_front().expect("one in flight");
        latencies.push(start.elapsed().as_secs_f64() * 1e3);
        acked += chunk as u64;
    }
    drop(tx);
    Ok((acked, latencies))
}

/// One client of the library's [`Writer`]: inserts one item a call until `until`, then waits
/// for every item's acknowledgement; returns items acked and per-call latencies.
async fn library_writer(
    addr: String,
    (table, item): (String, TensorMap),
    chunk: usize,
    in_flight: usize,
    until: Instant,
) -> anyhow::Result<(u64, Vec<f64>)> {
    let options = WriterOptions {
        max_items_per_request: chunk,
        max_in_flight: in_flight,
        ..WriterOptions::new(&table)
    };
    let (writer, task) = Writer::spawn(vec![addr], options);
    let progress = writer.progress();
    let mut latencies = Vec::new();
    while Instant::now() < until {
        let call = Instant::now();
        writer.insert(item.clone(), 1.0).await?;
        latencies.push(call.elapsed().as_secs_f64() * 1e3);
    }
    drop(writer);
    task.finish().await?;
    anyhow::ensure!(
        progress.acked() == latencies.len() as u64,
        "{} items acknowledged of {} inserted",
        progress.acked(),
        latencies.len()
    );
    Ok((progress.acked(), latencies))
}

/// One item of `kind`, unstacked (the fields as the table's signature has them).
fn single(kind: &str) -> TensorMap {
    let (mut map, _) = stacked(kind, 1);
    for tensor in map.tensors.values_mut() {
        tensor.shape.remove(0);
    }
    map
}

/// The insert case's clients, by method; returns items acked and latencies.
async fn insert_clients(
    addr: &str,
    kind: &Kind,
    (method, writers, chunk, window, in_flight): (Method, usize, usize, usize, usize),
    until: Instant,
) -> anyhow::Result<(u64, Vec<f64>)> {
    let (items, _) = stacked(kind.name, chunk);
    let request = Arc::new(InsertRequest {
        table: kind.name.into(),
        items: Some(items),
        priorities: vec![],
    });
    let (one, _) = stacked(kind.name, 1);
    let sync = Arc::new(InsertRequest {
        table: kind.name.into(),
        items: Some(one),
        priorities: vec![],
    });
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let addr = addr.to_string();
            match method {
                Method::Writer => tokio::spawn(library_writer(
                    addr,
                    (kind.name.into(), single(kind.name)),
                    chunk,
                    in_flight,
                    until,
                )),
                Method::Sync => tokio::spawn(writer(addr, sync.clone(), 1, 1, until)),
                Method::Stream => tokio::spawn(writer(addr, request.clone(), chunk, window, until)),
            }
        })
        .collect();
    let mut total = 0;
    let mut latencies = Vec::new();
    for task in tasks {
        let (n, ms) = task.await??;
        total += n;
        latencies.extend(ms);
    }
    Ok((total, latencies))
}

async fn insert_case(
    addr: &str,
    kind: &Kind,
    clients: (Method, usize, usize, usize, usize),
    (warmup, seconds): (f64, f64),
) -> anyhow::Result<()> {
    client(addr)
        .await?
        .reset(ResetRequest {
            table: kind.name.into(),
        })
        .await?;
    let (_, payload) = stacked(kind.name, 1);
    // Unmeasured warm-up (connections, allocator, the table's first fill), as Reverb's side does.
    let until = Instant::now() + Duration::from_secs_f64(warmup);
    insert_clients(addr, kind, clients, until).await?;
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    let (total, latencies) = insert_clients(addr, kind, clients, until).await?;
    let elapsed = start.elapsed().as_secs_f64();
    let (method, writers, ..) = clients;
    report(
        ("insert", method.name()),
        kind.name,
        writers,
        total,
        payload as f64,
        elapsed,
        latencies,
    );
    Ok(())
}

async fn sampler(addr: String, table: String, until: Instant) -> anyhow::Result<(u64, Vec<f64>)> {
    let mut c = client(&addr).await?;
    let request = SampleRequest {
        table,
        batch_size: BATCH,
        max_batches: 0,
        rate_limiter_timeout_ms: 0,
    };
    let mut stream = c.sample(request).await?.into_inner();
    let mut latencies = Vec::new();
    let mut items = 0;
    while Instant::now() < until {
        let asked = Instant::now();
        let batch = stream.message().await?.context("server ended the stream")?;
        latencies.push(asked.elapsed().as_secs_f64() * 1e3);
        items += batch.keys.len() as u64;
    }
    Ok((items, latencies))
}

async fn sample_case(
    addr: &str,
    kind: &Kind,
    samplers: usize,
    (warmup, seconds): (f64, f64),
) -> anyhow::Result<()> {
    let (_, payload) = stacked(kind.name, 1);
    let until = Instant::now() + Duration::from_secs_f64(warmup);
    let warming: Vec<_> = (0..samplers)
        .map(|_| tokio::spawn(sampler(addr.into(), kind.name.into(), until)))
        .collect();
    for task in warming {
        task.await??;
    }
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..samplers)
        .map(|_| tokio::spawn(sampler(addr.into(), kind.name.into(), until)))
        .collect();
    let mut total = 0;
    let mut latencies = Vec::new();
    for task in tasks {
        let (n, ms) = task.await??;
        total += n;
        latencies.extend(ms);
    }
    report(
        ("sample", "stream"),
        kind.name,
        samplers,
        total,
        payload as f64,
        start.elapsed().as_secs_f64(),
        latencies,
    );
    Ok(())
}

/// Fills the table to max_size with chunked inserts over 4 streams.
async fn prefill(addr: &str, kind: &Kind) -> anyhow::Result<()> {
    client(addr)
        .await?
        .reset(ResetRequest {
            table: kind.name.into(),
        })
        .await?;
    let chunk = kind.default_chunk * 4;
    let (items, _) = stacked(kind.name, chunk);
    let request = Arc::new(InsertRequest {
        table: kind.name.into(),
        items: Some(items),
        priorities: vec![],
    });
    let per_stream = (kind.max_size as usize).div_ceil(chunk * 4);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (addr, request) = (addr.to_string(), request.clone());
            tokio::spawn(async move {
                let mut c = client(&addr).await?;
                let requests = futures::stream::iter(
                    (0..per_stream).map(move |_| InsertRequest::clone(&request)),
                );
                let mut acks = c.insert(requests).await?.into_inner();
                while acks.message().await?.is_some() {}
                anyhow::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// The server's resident memory in MB.
fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    fleetrl_runtime::launch::resident_mb(pid).context("VmRSS in /proc/PID/status")
}

/// One JSON line for the memory table: the server's resident memory over its idle level with
/// the table full, against the items' own bytes.
fn emit_memory(kind: &Kind, idle_mb: f64, full_mb: f64) {
    let (_, payload) = stacked(kind.name, 1);
    let payload_mb = payload as f64 * kind.max_size as f64 / 1e6;
    let over = full_mb - idle_mb;
    println!(
        "{}",
        serde_json::json!({
            "system": "fleetrl", "op": "memory", "item": kind.name, "clients": 0,
            "items": kind.max_size, "payload_mb": payload_mb, "rss_idle_mb": idle_mb,
            "rss_full_mb": full_mb, "mb_over_idle": over, "per_payload": over / payload_mb,
        })
    );
    eprintln!(
        "[fleetrl] {}: {} items ({payload_mb:.0} MB of payload) take {over:.0} MB over idle \
         ({:.2}x the payload)",
        kind.name,
        kind.max_size,
        over / payload_mb
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let dir = std::env::temp_dir().join(format!("fleetrl-replay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tables = dir.join("tables.toml");
    std::fs::write(&tables, tables_toml())?;
    for kind in KINDS
        .iter()
        .filter(|k| args.items.iter().any(|i| i == k.name))
    {
        // A fresh server per item kind (as Reverb's side does), so its idle memory is a baseline.
        let log: PathBuf = dir.join(format!("replay-server-{}.log", kind.name));
        let server_args = [
            "--listen",
            "127.0.0.1:0",
            "--tables",
            &tables.display().to_string(),
        ]
        .map(String::from);
        let mut server =
            Role::start("replay-server", "fleet-replay-server", &server_args, &log).await?;
        let addr = server
            .listening_addr(Duration::from_secs(60), &log)
            .await?
            .to_string();
        let pid = server.pid().context("the replay server's pid")?;
        let idle_mb = rss_mb(pid)?;
        eprintln!("[fleetrl] replay server on {addr} (log {})", log.display());
        let chunk = args.chunk.unwrap_or(kind.default_chunk);
        let window = args.window.unwrap_or(kind.default_window);
        for &method in &args.methods {
            for &writers in &args.writers {
                let clients = (method, writers, chunk, window, args.in_flight);
                insert_case(&addr, kind, clients, (args.warmup, args.seconds)).await?;
            }
        }
        if !args.samplers.is_empty() {
            prefill(&addr, kind).await?;
            emit_memory(kind, idle_mb, rss_mb(pid)?);
        }
        for &samplers in &args.samplers {
            sample_case(&addr, kind, samplers, (args.warmup, args.seconds)).await?;
        }
        server.stop(Duration::from_secs(10)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
