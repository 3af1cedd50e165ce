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
use fleetrl_core::net::{self, MAX_MESSAGE_BYTES};
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::learner_service_server::LearnerServiceServer;
use fleetrl_proto::v1::{SubscribeWeightsRequest, Weights};
use fleetrl_proto::{Tensor as ProtoTensor, TensorMap};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
            ProtoTensor::try_from(&values).expect("f32 converts"),
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

/// One subscriber: the actor's receive path, until version `want` is in its tensors. Returns
/// the seconds from `start` and the bytes of the timed version it received.
async fn subscribe(
    addr: String,
    framing: Framing,
    want: i64,
    start: watch::Receiver<Option<Instant>>,
    ready: Arc<AtomicU32>,
) -> anyhow::Result<(f64, u64)> {
    let channel = net::connect_weights_subscriber(&addr, Duration::from_secs(10)).await?;
    let request = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: DEFAULT_CHUNK_BYTES,
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
            ready.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        let floats = weights.with_tensors(|t| t.iter().all(|(_, t)| t.kind() == tch::Kind::Float));
        anyhow::ensure!(floats, "every tensor arrives as f32");
        let started = start.borrow().context("measured before the start")?;
        return Ok((started.elapsed().as_secs_f64(), bytes));
    }
    anyhow::bail!("stream ended before version {want}")
}

async fn broadcast_case(
    params: usize,
    subscribers: usize,
    dtype: BroadcastDtype,
    framing: Framing,
) -> anyhow::Result<serde_json::Value> {
    let (tx, rx) = watch::channel(Arc::new(model(params, 0)));
    let service = WeightsOnly::new(rx, dtype);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let incoming = net::incoming(listener);
    let server = tokio::spawn(async move {
        let router = if framing == Framing::Tonic {
            net::server().add_service(
                LearnerServiceServer::new(service)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES),
            )
        } else {
            net::server().add_service(LearnerRoutes::new(service))
        };
        router.serve_with_incoming(incoming).await
    });
    let (start_tx, start_rx) = watch::channel(None);
    let ready = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..subscribers)
        .map(|_| {
            let addr = format!("http://{addr}");
            tokio::spawn(subscribe(addr, framing, 2, start_rx.clone(), ready.clone()))
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
    start_tx.send_replace(Some(Instant::now()));
    tx.send_replace(Arc::new(Weights {
        published_unix_nanos: broadcast::now_unix_nanos(),
        ..Weights::clone(&next)
    }));
    drop(next);
    let mut times = Vec::new();
    let mut bytes = 0;
    for t in tasks {
        let (seconds, b) = t.await??;
        times.push(seconds);
        bytes += b;
    }
    server.abort();
    times.sort_by(f64::total_cmp);
    let all = *times.last().expect("at least one subscriber");
    Ok(serde_json::json!({
        "kind": "grpc",
        "framing": format!("{framing:?}").to_lowercase(),
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

/// `streams` plain TCP connections on loopback, each carrying `bytes`; aggregate rate.
async fn tcp_case(bytes: usize, streams: usize) -> anyhow::Result<serde_json::Value> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let sender = tokio::spawn(async move {
        let block = vec![7u8; 4 << 20];
        let mut writers = Vec::new();
        for _ in 0..streams {
            let (mut socket, _) = listener.accept().await?;
            let block = block.clone();
            writers.push(tokio::spawn(async move {
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(block.len());
                    socket.write_all(&block[..n]).await?;
                    left -= n;
                }
                socket.shutdown().await
            }));
        }
        for w in writers {
            w.await??;
        }
        anyhow::Ok(())
    });
    let mut sockets = Vec::new();
    for _ in 0..streams {
        sockets.push(tokio::net::TcpStream::connect(addr).await?);
    }
    let start = Instant::now();
    let readers: Vec<_> = sockets
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4 << 20];
                let mut got = 0usize;
                loop {
                    let n = s.read(&mut buf).await?;
                    if n == 0 {
                        return anyhow::Ok(got);
                    }
                    got += n;
                }
            })
        })
        .collect();
    let mut total = 0;
    for r in readers {
        total += r.await??;
    }
    let seconds = start.elapsed().as_secs_f64();
    sender.await??;
    Ok(serde_json::json!({
        "kind": "tcp",
        "streams": streams,
        "bytes_per_stream": bytes,
        "seconds": seconds,
        "aggregate_mb_per_s": total as f64 / seconds / 1e6,
    }))
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    tch::set_num_threads(1);
    let params: Vec<usize> = list(&args, "--params", "1000000,50000000")
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let subscribers: Vec<usize> = list(&args, "--subscribers", "1,16,64")
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let dtypes: Vec<BroadcastDtype> = list(&args, "--dtype", "f32")
        .iter()
        .map(|d| match d.as_str() {
            "f16" => Ok(BroadcastDtype::F16),
            "f32" => Ok(BroadcastDtype::F32),
            other => Err(anyhow::anyhow!("--dtype must be f32 or f16, got `{other}`")),
        })
        .collect::<anyhow::Result<_>>()?;
    if args.iter().any(|a| a == "--stages") {
        for &p in &params {
            for &dtype in &dtypes {
                println!("{}", stages_case(p, dtype)?);
            }
        }
        return Ok(());
    }
    let framings: Vec<Framing> = list(&args, "--framing", "wire")
        .iter()
        .map(|f| match f.as_str() {
            "wire" => Ok(Framing::Wire),
            "tonic" => Ok(Framing::Tonic),
            other => Err(anyhow::anyhow!(
                "--framing must be wire or tonic, got `{other}`"
            )),
        })
        .collect::<anyhow::Result<_>>()?;
    let tcp_bytes: usize = list(&args, "--tcp-bytes", "1000000000")[0].parse()?;
    println!("{}", tcp_case(tcp_bytes, 1).await?);
    for &s in &subscribers {
        if s > 1 {
            println!("{}", tcp_case(tcp_bytes / s, s).await?);
        }
    }
    for &p in &params {
        for &dtype in &dtypes {
            for &s in &subscribers {
                // The physical limit for this case: as many TCP streams as subscribers, each
                // carrying what one subscriber receives, right before and right after the
                // case (the machine's load varies); the faster of the two is the limit.
                let each = p * if dtype == BroadcastDtype::F16 { 2 } else { 4 };
                for &framing in &framings {
                    let before = tcp_case(each, s).await?;
                    let mut case = broadcast_case(p, s, dtype, framing).await?;
                    let after = tcp_case(each, s).await?;
                    let rate =
                        |r: &serde_json::Value| r["aggregate_mb_per_s"].as_f64().unwrap_or(0.0);
                    case["tcp_mb_per_s"] = rate(&before).max(rate(&after)).into();
                    println!("{case}");
                }
            }
        }
    }
    Ok(())
}
