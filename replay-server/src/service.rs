//! The `fleetrl.v1.ReplayService` handlers: thin adapters from gRPC streams to [`Table`]s.
//!
//! Both streaming RPCs produce their responses lazily with `futures::stream::unfold`: the next
//! item is read and stored, or the next batch taken, only when tonic polls for the next
//! response. So a full table stops the server reading an insert stream, a slow learner gets
//! no batch built ahead of it, and a client going away drops the pending step, which leaves
//! the table untouched (the table's waits are cancel-safe).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use fleetrl_core::buffers::{ReplayError, Table, TableSpec};
use fleetrl_proto::v1::replay_service_server::ReplayService;
use fleetrl_proto::v1::{
    InfoRequest, InfoResponse, InsertRequest, InsertResponse, SampleRequest, SampleResponse,
};
use futures::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info_span, instrument, warn, Instrument, Span};

use crate::error::{task_failed, to_status};

/// A boxed response stream, as tonic wants for streaming RPCs.
type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The server's tables by name, shared by every RPC.
#[derive(Debug, Clone)]
pub(crate) struct Tables(Arc<BTreeMap<String, Arc<Table>>>);

impl Tables {
    /// Builds one table per spec; names must be unique.
    pub(crate) fn build(specs: &[TableSpec]) -> Result<Tables, ReplayError> {
        let mut tables = BTreeMap::new();
        for spec in specs {
            let table = Arc::new(Table::from_spec(spec)?);
            if tables.insert(spec.name.clone(), table).is_some() {
                let message = format!("table `{}` is declared twice", spec.name);
                return Err(ReplayError::InvalidRequest(message));
            }
        }
        Ok(Tables(Arc::new(tables)))
    }

    /// The table called `name`.
    pub(crate) fn get(&self, name: &str) -> Result<&Arc<Table>, ReplayError> {
        self.0
            .get(name)
            .ok_or_else(|| ReplayError::UnknownTable(name.to_string()))
    }

    /// Table names, in order.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }

    /// Closes every table, waking all waiting inserts and samples with `Closed`.
    pub(crate) fn close_all(&self) {
        for table in self.0.values() {
            table.close();
        }
    }
}

/// The `ReplayService` implementation.
#[derive(Debug)]
pub(crate) struct Replay {
    tables: Tables,
    /// Becomes `true` when the server shuts down, ending idle insert streams.
    stop: watch::Receiver<bool>,
}

impl Replay {
    /// A service over `tables` that ends its streams once `stop` turns `true`.
    pub(crate) fn new(tables: Tables, stop: watch::Receiver<bool>) -> Replay {
        Replay { tables, stop }
    }
}

#[tonic::async_trait]
impl ReplayService for Replay {
    type InsertStream = ResponseStream<InsertResponse>;
    type SampleStream = ResponseStream<SampleResponse>;

    async fn insert(
        &self,
        request: Request<Streaming<InsertRequest>>,
    ) -> Result<Response<Self::InsertStream>, Status> {
        let span = info_span!("replay.insert", peer = ?request.remote_addr());
        let stream = InsertStream {
            tables: self.tables.clone(),
            inbound: request.into_inner(),
            stop: self.stop.clone(),
            acked: 0,
            done: false,
        };
        Ok(Response::new(Box::pin(stream.into_acks(span))))
    }

    async fn sample(
        &self,
        request: Request<SampleRequest>,
    ) -> Result<Response<Self::SampleStream>, Status> {
        let request = request.into_inner();
        let span = info_span!(
            "replay.sample",
            table = %request.table,
            batch_size = request.batch_size,
            max_batches = request.max_batches,
        );
        let stream = span.in_scope(|| SampleStream::open(&self.tables, &request))?;
        Ok(Response::new(Box::pin(stream.into_batches(span))))
    }

    #[instrument(skip_all, name = "replay.info")]
    async fn info(&self, _request: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        let tables = self
            .tables
            .0
            .values()
            .map(|table| (&table.info()).into())
            .collect();
        Ok(Response::new(InfoResponse { tables }))
    }
}

/// One client's insert stream: reads an item, stores it, acks its key, in order.
struct InsertStream {
    tables: Tables,
    inbound: Streaming<InsertRequest>,
    stop: watch::Receiver<bool>,
    acked: u64,
    done: bool,
}

impl InsertStream {
    fn into_acks(self, span: Span) -> impl Stream<Item = Result<InsertResponse, Status>> {
        futures::stream::unfold(self, move |mut stream| {
            async move {
                let ack = stream.next_ack().await?;
                Some((ack, stream))
            }
            .instrument(span.clone())
        })
    }

    /// The next ack, the error that ends the stream, or `None` once it ended.
    async fn next_ack(&mut self) -> Option<Result<InsertResponse, Status>> {
        if self.done {
            return None;
        }
        let result = self.receive_and_store().await;
        match &result {
            Some(Ok(_)) => self.acked += 1,
            Some(Err(status)) => {
                self.done = true;
                warn!(acked = self.acked, error = %status.message(), "insert stream failed");
            }
            None => debug!(acked = self.acked, "insert stream closed by the client"),
        }
        result
    }

    async fn receive_and_store(&mut self) -> Option<Result<InsertResponse, Status>> {
        let received = tokio::select! {
            message = self.inbound.message() => message,
            () = stopped(&mut self.stop) => return Some(Err(to_status(ReplayError::Closed))),
        };
        match received {
            Ok(Some(request)) => Some(self.store(request).await),
            Ok(None) => None,
            Err(status) => Some(Err(status)),
        }
    }

    async fn store(&self, request: InsertRequest) -> Result<InsertResponse, Status> {
        let table = self.tables.get(&request.table).map_err(to_status)?;
        let item = request.item.unwrap_or_default();
        let started = std::time::Instant::now();
        let key = table
            .insert(item, request.priority)
            .await
            .map_err(to_status)?;
        crate::metrics::INSERT_WAITS.record(started.elapsed());
        Ok(InsertResponse { key })
    }
}

/// One learner's sample stream: a batch at a time, each built when the previous was taken.
struct SampleStream {
    table: Arc<Table>,
    batch_size: usize,
    /// Batches still to send; `None` streams until the client cancels.
    remaining: Option<u64>,
    sent: u64,
    done: bool,
}

impl SampleStream {
    /// Checks the request up front, so a bad one fails the call rather than its first message.
    fn open(tables: &Tables, request: &SampleRequest) -> Result<SampleStream, Status> {
        let check = || -> Result<SampleStream, ReplayError> {
            let table = tables.get(&request.table)?.clone();
            let batch_size = request.batch_size as usize;
            table.check_batch_size(batch_size)?;
            let remaining = (request.max_batches > 0).then_some(request.max_batches);
            Ok(SampleStream {
                table,
                batch_size,
                remaining,
                sent: 0,
                done: false,
            })
        };
        check().map_err(|err| {
            warn!(error = %err, "sample request rejected");
            to_status(err)
        })
    }

    fn into_batches(self, span: Span) -> impl Stream<Item = Result<SampleResponse, Status>> {
        futures::stream::unfold(self, move |mut stream| {
            async move {
                let batch = stream.next_batch().await?;
                Some((batch, stream))
            }
            .instrument(span.clone())
        })
    }

    /// The next batch, the error that ends the stream, or `None` once it ended.
    async fn next_batch(&mut self) -> Option<Result<SampleResponse, Status>> {
        if self.done || self.remaining == Some(0) {
            return None;
        }
        match self.build_batch().await {
            Ok(response) => {
                self.sent += 1;
                self.remaining = self.remaining.map(|n| n - 1);
                Some(Ok(response))
            }
            Err(status) => {
                self.done = true;
                warn!(sent = self.sent, error = %status.message(), "sample stream failed");
                Some(Err(status))
            }
        }
    }

    /// Takes the items, then stacks them on a blocking thread: stacking copies every tensor,
    /// which can take milliseconds for image rollouts.
    async fn build_batch(&self) -> Result<SampleResponse, Status> {
        let started = std::time::Instant::now();
        let taken = self.table.take(self.batch_size).await.map_err(to_status)?;
        crate::metrics::SAMPLE_WAITS.record(started.elapsed());
        let table = self.table.clone();
        let stacked = tokio::task::spawn_blocking(move || taken.stack(table.signature()))
            .await
            .map_err(task_failed)?;
        Ok(stacked.map_err(to_status)?.into())
    }
}

/// Resolves once the server shuts down (or its stop sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&stopped| stopped).await;
}
