//! Weight broadcast over loopback gRPC: how long a new version of a P-parameter model takes to
//! reach S subscribers (every tensor in place, in f32, in the subscriber's own tensors), and in
//! the same run the rate of plain TCP streams on loopback. Prints JSON lines. Run by
//! `bench/broadcast.sh`.
//!
//! The server streams with [`fleetrl_core::broadcast::subscription`] (what the learner's
//! `SubscribeWeights` runs for chunked subscribers) behind a real tonic server; each subscriber
//! is a task with its own connection that runs the actor's receive path: chunked subscription
//! into a [`Receiver`]. `--framing wire` (the default) frames the stream as the learner and
//! the actors do ([`fleetrl_core::broadcast::wire`]); `--framing tonic` through tonic's codec
//! and generated client, for comparison. Like an actor in a run, each subscriber first
//! receives two untimed versions of the same model, so the timed version is written into
//! tensors it already owns, and the learner's f16 version into buffers of a version everyone
//! is done with (the first versions of a run pay for fresh memory once). `--stages` times each
//! stage of the path for one
//! subscriber, without the network, including the swap an actor's env loop does (copying
//! into its model).
//!
//!   broadcast_bench --params 1000000,50000000 --subscribers 1,16,64 --dtype f32
//!   broadcast_bench --stages --params 50000000 --dtype f32,f16

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetrl_core::broadcast::wire::{LearnerRoutes, WeightsOnly};
use fleetrl_core::broadcast::{self, Receiver, DEFAULT_CHUNK_BYTES};
use fleetrl_core::config::BroadcastDtype;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::learner_service_server::LearnerServiceServer;
use fleetrl_proto::v1::{SubscribeWeightsRequest, Weights};
use fleetrl_proto::TensorMap;
use fleetrl_runtime::net::{self, MAX_MESSAGE_BYTES};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// A model of `params` f32 parameters in tensors of at most 1M elements.
fn model(params: usize, version: i64) -> Weights {
    let mut map = TensorMap::default();
    let mut left = params;
    let mut i = 0;
    while left > 0 {
        let n = left.min(1 << 20);
        let values = tch::Tensor::randn([n as i64], (tch::Kind::Float, tch::Device::Cpu)) * 0.05;
        map.tensors.insert(
            format!("layer{i:03}.weight"),
            fleetrl_core::models::weights::to_proto(&values).expect("f32 converts"),
        );
        left -= n;
        i += 1;
    }
    Weights {
        version,
        params: Some(map),
        published_unix_nanos: broadcast::now_unix_nanos(),
        ..Weights::default()
    }
}

/// How messages are framed on the wire: by tonic's codec (the generated server and client),
/// or by [`broadcast::wire`] (what the learner and the actors use).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    Tonic,
    Wire,
}

/// Where subscribers run: as tasks of this process, or each in a process of its own (this
/// program with `--subscriber ADDR`), as actors do.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Placement {
    Tasks,
    Processes,
}

/// One subscriber: the actor's receive path, until version `want` is in its tensors; calls
/// `ready` as each earlier version is complete. Returns when it finished (Unix nanoseconds)
/// and the bytes of version `want` it received.
async fn subscribe(
    addr: String,
    framing: Framing,
    want: i64,
    ready: impl Fn(),
) -> anyhow::Result<(i64, u64)> {
    let channel = net::connect_weights_subscriber(&addr, Duration::from_secs(10)).await?;
    let request = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: DEFAULT_CHUNK_BYTES,
        ..Default::default()
    };
    let mut receiver = Receiver::default();
    let mut bytes = 0u64;
    let mut stock = None;
    let mut wire = None;
    if framing == Framing::Tonic {
        let mut client =
            LearnerServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
        stock = Some(client.subscribe_weights(request).await?.into_inner());
    } else {
        wire = Some(broadcast::wire::subscribe(channel, request).await?);
    }
    loop {
        let (version, chunk, done) = if let Some(stream) = stock.as_mut() {
            let Some(message) = stream.message().await? else {
                break;
            };
            (
                message.version,
                message.chunk.len(),
                receiver.push(message)?,
            )
        } else {
            let stream = wire.as_mut().expect("one of the two");
            let Some(message) = stream.message().await? else {
                break;
            };
            let chunk = message.chunk_len();
            (message.header.version, chunk, receiver.push_wire(message)?)
        };
        if version == want {
            bytes += chunk as u64;
        }
        // Earlier versions are dropped at once: their tensors go back for the next to reuse.
        let Some(weights) = done else {
            continue;
        };
        if weights.version < want {
            ready();
            continue;
        }
        let finished = broadcast::now_unix_nanos();
        let floats = weights.with_tensors(|t| t.iter().all(|(_, t)| t.kind() == tch::Kind::Float));
        anyhow::ensure!(floats, "every tensor arrives as f32");
        return Ok((finished, bytes));
    }
    anyhow::bail!("stream ended before version {want}")
}

/// Runs a part of the benchmark in a process of its own (`--subscriber` or `--tcp-reader`),
/// on the runtime an actor has (tokio's default): says `ready` on stdout for each untimed
/// version and `done NANOS BYTES` at the end.
fn child_process(args: &[String], framing: Framing) -> anyhow::Result<()> {
    // Ends with the benchmark, even one killed: its end closes our stdin.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(1);
    });
    let runtime = tokio::runtime::Runtime::new()?;
    let arg = |name: &str| list(args, name, "").pop().filter(|a| !a.is_empty());
    let (finished, bytes) = if let Some(addr) = arg("--tcp-reader") {
        runtime.block_on(read_stream(addr))?
    } else {
        let addr = arg("--subscriber").context("--subscriber ADDR or --tcp-reader ADDR")?;
        let want = list(args, "--want", "2")[0].parse()?;
        runtime.block_on(subscribe(addr, framing, want, || println!("ready")))?
    };
    println!("done {finished} {bytes}");
    Ok(())
}

/// Runs this program with `args` (a [`child_process`]); counts its `ready` lines into
/// `ready`; what it says when done.
async fn spawn_self(args: Vec<String>, ready: Arc<AtomicU32>) -> anyhow::Result<(i64, u64)> {
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().context("piped stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await? {
        if line == "ready" {
            ready.fetch_add(1, Ordering::SeqCst);
        } else if let Some(rest) = line.strip_prefix("done ") {
            let (nanos, bytes) = rest.split_once(' ').context("done NANOS BYTES")?;
            child.wait().await?;
            return Ok((nanos.parse()?, bytes.parse()?));
        }
    }
    anyhow::bail!("{args:?} ended without finishing: {}", child.wait().await?)
}

async fn broadcast_case(
    params: usize,
    subscribers: usize,
    dtype: BroadcastDtype,
    framing: Framing,
    placement: Placement,
) -> anyhow::Result<serde_json::Value> {
    let (tx, rx) = watch::channel(Arc::new(model(params, 0)));
    let service = WeightsOnly::new(rx, dtype);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let incoming = net::incoming(listener);
    let server = tokio::spawn(async move {
        let router = if framing == Framing::Tonic {
            net::server().expect("no TLS files set").add_service(
                LearnerServiceServer::new(service)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            )
        } else {
            net::server()
                .expect("no TLS files set")
                .add_service(LearnerRoutes::new(service))
        };
        router.serve_with_incoming(incoming).await
    });
    let ready = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..subscribers)
        .map(|_| {
            let (addr, ready) = (format!("http://{addr}"), ready.clone());
            match placement {
                Placement::Tasks => tokio::spawn(async move {
                    subscribe(addr, framing, 2, || {
                        ready.fetch_add(1, Ordering::SeqCst);
                    })
                    .await
                }),
                Placement::Processes => {
                    let framing = format!("{framing:?}").to_lowercase();
                    let args = ["--subscriber", &addr, "--framing", &framing, "--want", "2"];
                    tokio::spawn(spawn_self(args.map(String::from).to_vec(), ready))
                }
            }
        })
        .collect();
    // Every subscriber receives untimed versions 0 (its model) and 1 (as in a run, where the
    // version before the last is done with and its buffers are reused); then time version 2.
    for warmup in 1..=2 {
        while (ready.load(Ordering::SeqCst) as usize) < warmup * subscribers {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if warmup == 1 {
            tx.send_replace(Arc::new(model(params, 1)));
        }
    }
    let next = model(params, 2);
    let published = broadcast::now_unix_nanos();
    tx.send_replace(Arc::new(Weights {
        published_unix_nanos: published,
        ..Weights::clone(&next)
    }));
    drop(next);
    let mut times = Vec::new();
    let mut bytes = 0;
    for t in tasks {
        let (finished, b) = t.await??;
        times.push((finished - published) as f64 * 1e-9);
        bytes += b;
    }
    server.abort();
    times.sort_by(f64::total_cmp);
    let all = *times.last().expect("at least one subscriber");
    Ok(serde_json::json!({
        "kind": "grpc",
        "framing": format!("{framing:?}").to_lowercase(),
        "subscribers_as": format!("{placement:?}").to_lowercase(),
        "params": params,
        "subscribers": subscribers,
        "dtype": format!("{dtype:?}").to_lowercase(),
        "bytes_per_subscriber": bytes / subscribers as u64,
        "seconds_first": times[0],
        "seconds_median": times[times.len() / 2],
        "seconds_all": all,
        "aggregate_mb_per_s": bytes as f64 / all / 1e6,
        "f32_equivalent_mb_per_s": (params * 4 * subscribers) as f64 / all / 1e6,
    }))
}

/// `streams` plain TCP connections on loopback, each carrying `bytes`, read by tasks of this
/// process or by processes of their own; aggregate rate from the first byte written to the
/// last byte read.
async fn tcp_case(
    bytes: usize,
    streams: usize,
    placement: Placement,
) -> anyhow::Result<serde_json::Value> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let readers: Vec<_> = (0..streams)
        .map(|_| match placement {
            Placement::Tasks => tokio::spawn(read_stream(addr.clone())),
            Placement::Processes => tokio::spawn(spawn_self(
                vec!["--tcp-reader".into(), addr.clone()],
                Arc::default(),
            )),
        })
        .collect();
    let mut sockets = Vec::new();
    for _ in 0..streams {
        sockets.push(listener.accept().await?.0);
    }
    let start = broadcast::now_unix_nanos();
    let block = Arc::new(vec![7u8; 4 << 20]);
    let writers: Vec<_> = sockets
        .into_iter()
        .map(|mut socket| {
            let block = block.clone();
            tokio::spawn(async move {
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(block.len());
                    socket.write_all(&block[..n]).await?;
                    left -= n;
                }
                socket.shutdown().await
            })
        })
        .collect();
    for w in writers {
        w.await??;
    }
    let (mut total, mut last) = (0, start);
    for r in readers {
        let (finished, got) = r.await??;
        total += got;
        last = last.max(finished);
    }
    let seconds = (last - start) as f64 * 1e-9;
    Ok(serde_json::json!({
        "kind": "tcp",
        "streams": streams,
        "readers_as": format!("{placement:?}").to_lowercase(),
        "bytes_per_stream": bytes,
        "seconds": seconds,
        "aggregate_mb_per_s": total as f64 / seconds / 1e6,
    }))
}

/// Reads one TCP stream to its end; when it ended (Unix nanoseconds) and its bytes.
async fn read_stream(addr: String) -> anyhow::Result<(i64, u64)> {
    let mut socket = tokio::net::TcpStream::connect(addr).await?;
    let mut buf = vec![0u8; 4 << 20];
    let mut got = 0u64;
    loop {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Ok((broadcast::now_unix_nanos(), got));
        }
        got += n as u64;
    }
}

/// Whether `subscribers` processes, each holding a `params`-parameter f32 model and the
/// version arriving into its spare tensors, plus what libtorch and the runtime allocate
/// (RssAnon peaked at 188 MB in a 1M-parameter subscriber), fit in three quarters of the
/// memory the kernel says is available.
fn fits_in_memory(params: usize, subscribers: usize) -> bool {
    let available_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m
                .lines()
                .find(|l| l.starts_with("MemAvailable:"))?
                .to_string();
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .unwrap_or(0);
    let each = params * 4 * 2 + (200 << 20);
    subscribers * each <= available_kb * 1024 / 4 * 3
}

/// Seconds `f` takes, and what it returns.
fn timed<R>(f: impl FnOnce() -> R) -> (f64, R) {
    let start = Instant::now();
    let out = f();
    (start.elapsed().as_secs_f64(), out)
}

/// Each stage of one version's way to one subscriber, without the network (which the
/// broadcast cases measure): the learner's preparation (once per version, into the buffers of a finished one), what each
/// subscriber's stream costs the learner (framing the messages: [`broadcast::wire::frames`]),
/// the actor's writing into its tensors (a second version, so the tensors are reused), and
/// the env loop's swap into the model.
fn stages_case(params: usize, dtype: BroadcastDtype) -> anyhow::Result<serde_json::Value> {
    let (old, new) = (model(params, 0), model(params, 1));
    let mut receiver = Receiver::default();
    let pool = broadcast::HalfPool::default();
    for m in broadcast::chunked(
        &broadcast::encode_with(&old, dtype, &pool)?,
        DEFAULT_CHUNK_BYTES as usize,
        1,
    ) {
        receiver.push(m)?;
    }
    let (encode_s, encoded) = timed(|| broadcast::encode_with(&new, dtype, &pool));
    let messages = broadcast::chunked(&encoded?, DEFAULT_CHUNK_BYTES as usize, 1);
    let (send_s, framed) = timed(|| {
        messages
            .iter()
            .map(|m| broadcast::wire::frames(m.clone()))
            .collect::<Vec<_>>()
    });
    let (receive_s, received) = timed(|| -> anyhow::Result<_> {
        let mut done = None;
        for (m, (_, chunk)) in messages.into_iter().zip(framed) {
            let header = Weights {
                chunk: Default::default(),
                ..m
            };
            let wire = broadcast::wire::WireWeights {
                header,
                chunk: vec![chunk],
            };
            done = receiver.push_wire(wire)?.or(done);
        }
        done.context("the version completes")
    });
    let received = received?;
    let model: Vec<tch::Tensor> =
        received.with_tensors(|t| t.iter().map(|(_, t)| t.zeros_like()).collect());
    let (swap_s, ()) = timed(|| {
        let _guard = tch::no_grad_guard();
        received.with_tensors(|t| {
            for (mut m, (_, t)) in model.iter().map(tch::Tensor::shallow_clone).zip(t) {
                m.copy_(t);
            }
        })
    });
    Ok(serde_json::json!({
        "kind": "stages",
        "params": params,
        "dtype": format!("{dtype:?}").to_lowercase(),
        "learner_encode_s": encode_s,
        "per_subscriber_framing_s": send_s,
        "receive_into_tensors_s": receive_s,
        "swap_into_model_s": swap_s,
    }))
}

fn list(args: &[String], name: &str, default: &str) -> Vec<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, String::as_str)
        .split(',')
        .map(str::to_string)
        .collect()
}

/// The values of option `name` (comma-separated, `default` when absent), each one of `options`.
fn choices<T: Copy>(
    args: &[String],
    name: &str,
    default: &str,
    options: &[(&str, T)],
) -> anyhow::Result<Vec<T>> {
    list(args, name, default)
        .iter()
        .map(|v| {
            let found = options.iter().find(|(o, _)| o == v).map(|(_, t)| *t);
            found.ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(o, _)| *o).collect();
                anyhow::anyhow!("{name} must be one of {}, got `{v}`", names.join(", "))
            })
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    tch::set_num_threads(1);
    let framings = choices(
        &args,
        "--framing",
        "wire",
        &[("wire", Framing::Wire), ("tonic", Framing::Tonic)],
    )?;
    if args
        .iter()
        .any(|a| a == "--subscriber" || a == "--tcp-reader")
    {
        return child_process(&args, framings[0]);
    }
    tokio::runtime::Runtime::new()?.block_on(benchmark(&args, &framings))
}

async fn benchmark(args: &[String], framings: &[Framing]) -> anyhow::Result<()> {
    let args = args.to_vec();
    let params: Vec<usize> = list(&args, "--params", "1000000,50000000")
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let subscribers: Vec<usize> = list(&args, "--subscribers", "1,16,64")
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let dtypes = choices(
        &args,
        "--dtype",
        "f32",
        &[("f32", BroadcastDtype::F32), ("f16", BroadcastDtype::F16)],
    )?;
    if args.iter().any(|a| a == "--stages") {
        for &p in &params {
            for &dtype in &dtypes {
                println!("{}", stages_case(p, dtype)?);
            }
        }
        return Ok(());
    }
    let placements = choices(
        &args,
        "--subscribers-as",
        "processes",
        &[
            ("processes", Placement::Processes),
            ("tasks", Placement::Tasks),
        ],
    )?;
    let tcp_bytes: usize = list(&args, "--tcp-bytes", "1000000000")[0].parse()?;
    for &placement in &placements {
        println!("{}", tcp_case(tcp_bytes, 1, placement).await?);
        for &s in &subscribers {
            if s > 1 {
                println!("{}", tcp_case(tcp_bytes / s, s, placement).await?);
            }
        }
    }
    for &p in &params {
        for &dtype in &dtypes {
            for &s in &subscribers {
                // The physical limit for this case: as many TCP streams as subscribers, each
                // carrying what one subscriber receives, right before and right after the
                // case (the machine's load varies); the faster of the two is the limit.
                let each = p * if dtype == BroadcastDtype::F16 { 2 } else { 4 };
                for &placement in &placements {
                    if placement == Placement::Processes && !fits_in_memory(p, s) {
                        let skipped = serde_json::json!({
                            "kind": "skipped", "params": p, "subscribers": s,
                            "why": "subscriber processes would not fit in the available memory",
                        });
                        println!("{skipped}");
                        continue;
                    }
                    for &framing in framings {
                        let before = tcp_case(each, s, placement).await?;
                        let mut case = broadcast_case(p, s, dtype, framing, placement).await?;
                        let after = tcp_case(each, s, placement).await?;
                        let rate =
                            |r: &serde_json::Value| r["aggregate_mb_per_s"].as_f64().unwrap_or(0.0);
                        case["tcp_mb_per_s"] = rate(&before).max(rate(&after)).into();
                        println!("{case}");
                    }
                }
            }
        }
    }
    Ok(())
}
