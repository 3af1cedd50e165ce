//! The table RPCs over real gRPC on loopback: EnsureTable, priorities, delete, reset, info,
//! checkpoints, rate-limiter timeouts, and every kind of bad input.

use std::time::Duration;

use fleet_replay_server::{serve, ServerOptions, Tasks};
use fleetrl_proto::table::{FieldSpec, RateLimiterSpec, SelectorKind, Signature, TableSpec};
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::{
    CheckpointRequest, DeleteRequest, EnsureTableRequest, InfoRequest, InsertRequest, ResetRequest,
    SampleRequest, SampleResponse, TableConfig, UpdatePrioritiesRequest,
};
use fleetrl_proto::{Dtype, Tensor, TensorMap};
use fleetrl_runtime::net::Channel;
use tokio::sync::oneshot;
use tonic::Code;

const LIMIT: Duration = Duration::from_secs(30);

fn signature() -> Signature {
    Signature {
        fields: vec![
            FieldSpec::new("obs", Dtype::F32, &[4]),
            FieldSpec::new("action", Dtype::I64, &[]),
        ],
    }
}

fn prioritized(name: &str) -> TableSpec {
    let mut spec = TableSpec::replay(name, 100, 1.0, 1, signature());
    spec.sampler = SelectorKind::Prioritized { exponent: 1.0 };
    spec.rate_limiter = RateLimiterSpec::MinSize { min_size: 1 };
    spec
}

/// `n` items stacked, item i with action i.
fn items(first: i64, n: usize) -> TensorMap {
    let obs: Vec<f32> = (0..n * 4).map(|i| i as f32).collect();
    let actions: Vec<i64> = (first..first + n as i64).collect();
    TensorMap::from_pairs([
        ("obs", Tensor::from_slice(&[n as i64, 4], &obs)),
        ("action", Tensor::from_slice(&[n as i64], &actions)),
    ])
}

struct Server {
    client: ReplayServiceClient<Channel>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start(options: ServerOptions) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let task = tokio::spawn(serve(listener, options, shutdown, Tasks::new()));
    let channel = fleetrl_runtime::net::connect(&addr.to_string(), LIMIT)
        .await
        .unwrap();
    Server {
        client: ReplayServiceClient::new(channel),
        stop,
        task,
    }
}

impl Server {
    async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(LIMIT, self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

async fn insert(
    client: &mut ReplayServiceClient<Channel>,
    request: InsertRequest,
) -> Result<Vec<u64>, tonic::Status> {
    let mut acks = client
        .insert(futures::stream::iter([request]))
        .await?
        .into_inner();
    let ack = tokio::time::timeout(LIMIT, acks.message()).await.unwrap()?;
    Ok(ack.expect("an ack").keys)
}

async fn sample_once(
    client: &mut ReplayServiceClient<Channel>,
    table: &str,
    batch_size: u32,
    timeout_ms: u64,
) -> Result<SampleResponse, tonic::Status> {
    let request = SampleRequest {
        table: table.into(),
        batch_size,
        max_batches: 1,
        rate_limiter_timeout_ms: timeout_ms,
    };
    let mut stream = client.sample(request).await?.into_inner();
    let batch = tokio::time::timeout(LIMIT, stream.message())
        .await
        .unwrap()?;
    Ok(batch.expect("a batch"))
}

fn ensure(spec: &TableSpec) -> EnsureTableRequest {
    EnsureTableRequest {
        table: Some(spec.into()),
    }
}

#[tokio::test]
async fn ensure_table_is_idempotent_and_refuses_conflicts() {
    let mut server = start(ServerOptions::in_memory(vec![])).await;
    let spec = prioritized("replay");
    let first = server
        .client
        .ensure_table(ensure(&spec))
        .await
        .unwrap()
        .into_inner();
    assert!(first.created);
    let again = server
        .client
        .ensure_table(ensure(&spec))
        .await
        .unwrap()
        .into_inner();
    assert!(!again.created);
    let mut other = spec.clone();
    other.max_size = 50;
    let status = server
        .client
        .ensure_table(ensure(&other))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists);
    assert!(
        status
            .message()
            .contains("max_size 100; the request asks for 50"),
        "{}",
        status.message()
    );
    let mut stalls = spec.clone();
    stalls.name = "stalls".into();
    stalls.rate_limiter = RateLimiterSpec::SamplesPerInsert {
        samples_per_insert: 4.0,
        min_size_to_sample: 10,
        error_buffer: 1.0,
    };
    let status = server
        .client
        .ensure_table(ensure(&stalls))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("error_buffer"),
        "{}",
        status.message()
    );
    let status = server
        .client
        .ensure_table(EnsureTableRequest {
            table: Some(TableConfig {
                name: "half".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("is missing"),
        "{}",
        status.message()
    );
    server.stop().await;
}

#[tokio::test]
async fn priorities_steer_sampling_and_delete_reset_and_info_work() {
    let mut server = start(ServerOptions::in_memory(vec![prioritized("replay")])).await;
    let c = &mut server.client;
    let keys = insert(
        c,
        InsertRequest {
            table: "replay".into(),
            items: Some(items(0, 4)),
            priorities: vec![1.0, 1.0, 1.0, 1.0],
        },
    )
    .await
    .unwrap();
    assert_eq!(keys, vec![1, 2, 3, 4]);
    // All the mass on key 3.
    let update = UpdatePrioritiesRequest {
        table: "replay".into(),
        keys: vec![1, 2, 3, 4, 77],
        priorities: vec![0.0, 0.0, 5.0, 0.0, 1.0],
    };
    assert_eq!(
        c.update_priorities(update)
            .await
            .unwrap()
            .into_inner()
            .updated,
        4
    );
    let batch = sample_once(c, "replay", 16, 0).await.unwrap();
    assert_eq!(batch.keys, vec![3; 16]);
    assert_eq!(batch.probabilities, vec![1.0; 16]);
    assert_eq!(batch.table_size, 4);
    assert_eq!(batch.times_sampled.last(), Some(&16));
    let actions = batch
        .batch
        .unwrap()
        .field("action")
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    assert_eq!(actions, vec![2; 16]);

    let deleted = c
        .delete(DeleteRequest {
            table: "replay".into(),
            keys: vec![3, 3, 99],
        })
        .await
        .unwrap()
        .into_inner()
        .deleted;
    assert_eq!(deleted, 1);
    let info = c
        .info(InfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .tables
        .remove(0);
    assert_eq!(
        (
            info.current_size,
            info.num_inserted,
            info.num_sampled,
            info.num_deleted
        ),
        (3, 4, 16, 1)
    );
    assert_eq!(info.bytes, 3 * 24);
    assert_eq!(info.sampler, "prioritized");
    assert_eq!(info.config.unwrap().max_size, 100);

    c.reset(ResetRequest {
        table: "replay".into(),
    })
    .await
    .unwrap();
    let info = c
        .info(InfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .tables
        .remove(0);
    assert_eq!((info.current_size, info.num_inserted), (0, 0));
    server.stop().await;
}

#[tokio::test]
async fn bad_requests_name_the_problem_and_leave_the_server_up() {
    let mut server = start(ServerOptions::in_memory(vec![prioritized("replay")])).await;
    let c = &mut server.client;
    let request = |items: TensorMap, priorities: Vec<f64>| InsertRequest {
        table: "replay".into(),
        items: Some(items),
        priorities,
    };
    let cases: Vec<(InsertRequest, Code, &str)> = vec![
        (
            request(items(0, 2), vec![-1.0]),
            Code::InvalidArgument,
            "priority must be finite and >= 0",
        ),
        (
            request(items(0, 2), vec![1.0, 2.0, 3.0]),
            Code::InvalidArgument,
            "3 priorities for 2 items",
        ),
        (
            request(items(0, 0), vec![]),
            Code::InvalidArgument,
            "at least one item",
        ),
        (
            request(
                {
                    let mut m = items(0, 1);
                    m.tensors.insert(
                        "obs".into(),
                        Tensor::from_slice(&[1, 4], &[0.0f32, f32::INFINITY, 0.0, 0.0]),
                    );
                    m
                },
                vec![],
            ),
            Code::InvalidArgument,
            "field `obs`: holds NaN or infinity",
        ),
        (
            request(
                {
                    let mut m = items(0, 1);
                    m.tensors
                        .insert("action".into(), Tensor::from_slice(&[1], &[1.0f32]));
                    m
                },
                vec![],
            ),
            Code::InvalidArgument,
            "field `action`: dtype F32 does not match signature I64",
        ),
        (
            request(
                {
                    let mut m = items(0, 1);
                    m.tensors.remove("action");
                    m
                },
                vec![],
            ),
            Code::InvalidArgument,
            "field `action`: missing from the request",
        ),
        (
            InsertRequest {
                table: "nope".into(),
                items: Some(items(0, 1)),
                priorities: vec![],
            },
            Code::NotFound,
            "unknown table `nope`",
        ),
    ];
    for (request, code, message) in cases {
        let status = insert(c, request).await.unwrap_err();
        assert_eq!(status.code(), code, "{}", status.message());
        assert!(
            status.message().contains(message),
            "{} (wanted {message})",
            status.message()
        );
    }
    let status = sample_once(c, "replay", 0, 0).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("batch_size must be in 1..="),
        "{}",
        status.message()
    );
    let status = c
        .update_priorities(UpdatePrioritiesRequest {
            table: "replay".into(),
            keys: vec![1],
            priorities: vec![],
        })
        .await
        .unwrap_err();
    assert!(status.message().contains("1 keys but 0 priorities"));
    // Backpressure is its own status: an empty table with a timeout.
    let status = sample_once(c, "replay", 1, 50).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    // Nothing bad was stored and the server still serves.
    assert_eq!(
        insert(c, request(items(5, 1), vec![])).await.unwrap(),
        vec![1]
    );
    assert_eq!(sample_once(c, "replay", 1, 0).await.unwrap().keys, vec![1]);
    let status = c.checkpoint(CheckpointRequest {}).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    server.stop().await;
}

#[tokio::test]
async fn checkpoint_rpc_and_restart_restore_everything() {
    let dir = std::env::temp_dir().join(format!("fleetrl-replay-rpc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = ServerOptions {
        checkpoint_dir: Some(dir.clone()),
        ..ServerOptions::in_memory(vec![prioritized("replay")])
    };
    let mut server = start(options.clone()).await;
    let c = &mut server.client;
    insert(
        c,
        InsertRequest {
            table: "replay".into(),
            items: Some(items(0, 5)),
            priorities: vec![1.0, 2.0, 3.0, 4.0, 5.0],
        },
    )
    .await
    .unwrap();
    sample_once(c, "replay", 3, 0).await.unwrap();
    let path = c
        .checkpoint(CheckpointRequest {})
        .await
        .unwrap()
        .into_inner()
        .path;
    assert!(path.ends_with("replay-00000001"), "{path}");
    let before = c.info(InfoRequest {}).await.unwrap().into_inner();
    server.stop().await; // writes a second checkpoint at shutdown

    let mut server = start(options).await;
    let after = server
        .client
        .info(InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after, before);
    let next = insert(
        &mut server.client,
        InsertRequest {
            table: "replay".into(),
            items: Some(items(9, 1)),
            priorities: vec![],
        },
    )
    .await
    .unwrap();
    assert_eq!(next, vec![6], "keys continue after a restore");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A supervised task that panics stops the server: it still writes its final checkpoint and
/// `serve` returns the panic as its error (the binary then exits non-zero).
#[tokio::test]
async fn a_panicking_task_stops_the_server_after_a_final_checkpoint() {
    let dir = std::env::temp_dir().join(format!("fleetrl-replay-fault-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = ServerOptions {
        checkpoint_dir: Some(dir.clone()),
        ..ServerOptions::in_memory(vec![prioritized("fault")])
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (fault, faulted) = oneshot::channel::<()>();
    let mut tasks = Tasks::new();
    tasks.spawn(async move {
        let _ = faulted.await;
        panic!("injected fault");
    });
    let task = tokio::spawn(serve(listener, options, std::future::pending(), tasks));
    let channel = fleetrl_runtime::net::connect(&addr.to_string(), LIMIT)
        .await
        .unwrap();
    let mut client = ReplayServiceClient::new(channel);
    let request = InsertRequest {
        table: "fault".into(),
        items: Some(items(0, 3)),
        priorities: vec![1.0; 3],
    };
    insert(&mut client, request).await.unwrap();
    fault.send(()).unwrap();
    let result = tokio::time::timeout(LIMIT, task).await.unwrap().unwrap();
    let error = format!("{:#}", result.unwrap_err());
    assert!(error.contains("panicked"), "{error}");
    let restored = start(ServerOptions {
        checkpoint_dir: Some(dir.clone()),
        ..ServerOptions::in_memory(Vec::new())
    })
    .await;
    let info = restored
        .client
        .clone()
        .info(fleetrl_proto::v1::InfoRequest::default())
        .await
        .unwrap()
        .into_inner();
    let table = info.tables.iter().find(|t| t.name == "fault").unwrap();
    assert_eq!(
        table.current_size, 3,
        "the final checkpoint kept every item"
    );
    restored.stop().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two server processes on one `--checkpoint-dir` would overwrite each other's tables: the
/// second is refused at start with an error naming the directory and the first one's pid, and
/// the first keeps serving.
#[test]
fn a_second_server_on_a_checkpoint_dir_is_refused() {
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("fleetrl-replay-twice-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleet-replay-server"));
        cmd.args(["--listen", "127.0.0.1:0", "--checkpoint-dir"])
            .arg(&dir);
        cmd
    };
    let mut first = server()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = first.id().to_string();
    let started = std::time::Instant::now();
    while std::fs::read_to_string(dir.join("replay.lock")).map_or(true, |l| l.trim() != pid) {
        assert!(
            started.elapsed() < LIMIT,
            "the first server never took its lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = server().output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} is in use by another replay server (pid {pid})",
            dir.display()
        )),
        "{stderr}"
    );
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first server stopped"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
