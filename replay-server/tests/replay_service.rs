//! The replay service over real gRPC on loopback: `serve` in-process, real tonic clients.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use fleet_replay_server::{serve, ServerOptions, Tasks};
use fleetrl_proto::table::{FieldSpec, Signature, TableSpec};
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::{
    InfoRequest, InsertRequest, InsertResponse, SampleRequest, SampleResponse,
};
use fleetrl_proto::{Dtype, Tensor, TensorMap};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::{Code, Streaming};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const TABLE: &str = "rollouts";
const LIMIT: Duration = Duration::from_secs(30);

/// Fails the test instead of hanging it.
async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(LIMIT, future)
        .await
        .expect("timed out")
}

fn signature() -> Signature {
    Signature {
        fields: vec![
            FieldSpec::new("obs", Dtype::F32, &[4, 3]),
            FieldSpec::new("action", Dtype::I64, &[4]),
            FieldSpec::new("done", Dtype::Bool, &[4]),
        ],
    }
}

fn item(value: i64) -> TensorMap {
    TensorMap::from_pairs([
        ("obs", Tensor::from_slice(&[4, 3], &[value as f32; 12])),
        ("action", Tensor::from_slice(&[4], &[value; 4])),
        (
            "done",
            Tensor::from_slice(&[4], &[false, false, false, value % 2 == 0]),
        ),
    ])
}

/// One item as a stacked insert of one: every field gains a leading dimension of 1.
fn stacked(item: TensorMap) -> TensorMap {
    let mut out = TensorMap::default();
    for (name, tensor) in item.tensors {
        out.tensors.insert(name, Tensor::stack(&[&tensor]).unwrap());
    }
    out
}

fn request(value: i64) -> InsertRequest {
    InsertRequest {
        table: TABLE.into(),
        items: Some(stacked(item(value))),
        priorities: vec![],
    }
}

struct TestServer {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl TestServer {
    async fn start(max_size: u64) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let tables = vec![TableSpec::queue(TABLE, max_size, signature())];
        let shutdown = async {
            let _ = stopped.await;
        };
        let options = ServerOptions::in_memory(tables);
        let task = tokio::spawn(serve(listener, options, shutdown, Tasks::new()));
        TestServer { addr, stop, task }
    }

    async fn channel(&self) -> Channel {
        let endpoint = format!("http://{}", self.addr);
        bounded(Channel::from_shared(endpoint).unwrap().connect())
            .await
            .unwrap()
    }

    async fn client(&self) -> ReplayServiceClient<Channel> {
        ReplayServiceClient::new(self.channel().await)
    }

    async fn shutdown(self) {
        self.stop.send(()).unwrap();
        bounded(self.task).await.unwrap().unwrap();
    }
}

/// Inserts all `values` on one stream and returns the acked keys.
async fn insert_all(client: &mut ReplayServiceClient<Channel>, values: &[i64]) -> Vec<u64> {
    let requests = futures::stream::iter(values.iter().map(|&v| request(v)).collect::<Vec<_>>());
    let acks = bounded(client.insert(requests)).await.unwrap().into_inner();
    let acks: Vec<InsertResponse> = bounded(acks.map(|a| a.unwrap()).collect()).await;
    acks.iter().flat_map(|a| a.keys.clone()).collect()
}

async fn sample(
    client: &mut ReplayServiceClient<Channel>,
    batch_size: u32,
    max_batches: u64,
) -> Result<Streaming<SampleResponse>, tonic::Status> {
    let request = SampleRequest {
        table: TABLE.into(),
        batch_size,
        max_batches,
        rate_limiter_timeout_ms: 0,
    };
    bounded(client.sample(request))
        .await
        .map(|r| r.into_inner())
}

async fn sample_one(client: &mut ReplayServiceClient<Channel>, batch_size: u32) -> SampleResponse {
    let mut batches = sample(client, batch_size, 1).await.unwrap();
    let batch = bounded(batches.message())
        .await
        .unwrap()
        .expect("one batch");
    assert!(
        bounded(batches.message()).await.unwrap().is_none(),
        "max_batches ends the stream"
    );
    batch
}

fn actions(response: &SampleResponse) -> Vec<i64> {
    let batch = response.batch.as_ref().unwrap();
    batch.field("action").unwrap().to_vec::<i64>().unwrap()
}

#[tokio::test]
async fn insert_then_sample_round_trips_stacked_batches_in_fifo_order() {
    let server = TestServer::start(8).await;
    let mut client = server.client().await;
    assert_eq!(insert_all(&mut client, &[10, 11, 12]).await, vec![1, 2, 3]);

    let first = sample_one(&mut client, 2).await;
    assert_eq!(first.keys, vec![1, 2]);
    let batch = first.batch.as_ref().unwrap();
    assert_eq!(batch.field("obs").unwrap().shape, vec![2, 4, 3]);
    assert_eq!(batch.field("action").unwrap().shape, vec![2, 4]);
    assert_eq!(batch.field("done").unwrap().shape, vec![2, 4]);
    assert_eq!(actions(&first), vec![10, 10, 10, 10, 11, 11, 11, 11]);
    assert_eq!(sample_one(&mut client, 1).await.keys, vec![3]);

    let info = bounded(client.info(InfoRequest {}))
        .await
        .unwrap()
        .into_inner();
    let table = &info.tables[0];
    assert_eq!(
        (table.name.as_str(), table.sampler.as_str()),
        (TABLE, "fifo")
    );
    assert_eq!(
        (table.current_size, table.num_inserted, table.num_sampled),
        (0, 3, 3)
    );
    assert_eq!(table.signature.len(), 3);
    server.shutdown().await;
}

#[tokio::test]
async fn a_bad_item_ends_only_its_stream_and_keeps_acked_items() {
    let server = TestServer::start(8).await;
    let mut bad_client = server.client().await;
    let (mut sender, requests) = mpsc::channel(4);
    let mut acks = bounded(bad_client.insert(requests))
        .await
        .unwrap()
        .into_inner();
    sender.send(request(1)).await.unwrap();
    assert_eq!(bounded(acks.message()).await.unwrap().unwrap().keys[0], 1);

    let mut bad = request(2);
    let obs = Tensor::from_slice(&[1, 4, 2], &[0.0f32; 8]);
    bad.items
        .as_mut()
        .unwrap()
        .tensors
        .insert("obs".into(), obs);
    sender.send(bad).await.unwrap();
    let status = bounded(acks.message()).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("field `obs`"),
        "{}",
        status.message()
    );

    let mut good_client = server.client().await;
    assert_eq!(insert_all(&mut good_client, &[3, 4]).await, vec![2, 3]);
    let batch = sample_one(&mut good_client, 3).await;
    assert_eq!(batch.keys, vec![1, 2, 3]);
    assert_eq!(actions(&batch)[..4], [1, 1, 1, 1]);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_table_is_not_found() {
    let server = TestServer::start(4).await;
    let mut client = server.client().await;
    let request = SampleRequest {
        table: "nope".into(),
        batch_size: 1,
        max_batches: 1,
        rate_limiter_timeout_ms: 0,
    };
    let status = bounded(client.sample(request)).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    assert!(status.message().contains("nope"));

    let insert = InsertRequest {
        table: "nope".into(),
        items: Some(stacked(item(0))),
        priorities: vec![],
    };
    let mut acks = bounded(client.insert(futures::stream::iter([insert])))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        bounded(acks.message()).await.unwrap_err().code(),
        Code::NotFound
    );

    let status = sample(&mut client, 5, 1).await.unwrap_err();
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "batch larger than the table"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn health_reports_serving() {
    let server = TestServer::start(4).await;
    let mut health = HealthClient::new(server.channel().await);
    for service in ["", "fleetrl.v1.ReplayService"] {
        let request = HealthCheckRequest {
            service: service.into(),
        };
        let response = bounded(health.check(request)).await.unwrap().into_inner();
        assert_eq!(
            response.status(),
            ServingStatus::Serving,
            "service `{service}`"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_full_table_holds_the_ack_until_a_sample_makes_room() {
    let server = TestServer::start(1).await;
    let mut client = server.client().await;
    let (mut sender, requests) = mpsc::channel(4);
    let mut acks = bounded(client.insert(requests)).await.unwrap().into_inner();
    sender.send(request(1)).await.unwrap();
    sender.send(request(2)).await.unwrap();
    assert_eq!(bounded(acks.message()).await.unwrap().unwrap().keys[0], 1);
    let early = tokio::time::timeout(Duration::from_millis(300), acks.message()).await;
    assert!(
        early.is_err(),
        "the second item waits while the queue is full"
    );

    let mut learner = server.client().await;
    assert_eq!(sample_one(&mut learner, 1).await.keys, vec![1]);
    assert_eq!(bounded(acks.message()).await.unwrap().unwrap().keys[0], 2);
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_waiting_streams_with_unavailable() {
    let server = TestServer::start(2).await;
    let mut client = server.client().await;
    let mut batches = sample(&mut client, 1, 0).await.unwrap();
    let (stop, task) = (server.stop, server.task);
    stop.send(()).unwrap();
    let status = bounded(batches.message()).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    bounded(task).await.unwrap().unwrap();
}
