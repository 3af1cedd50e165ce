//! The `fleetrl.v1.ReplayService` handlers: thin adapters from gRPC streams to [`Table`]s.
//!
//! Both streaming RPCs produce their responses lazily with `futures::stream::unfold`: the next
//! item is read and stored, or the next batch taken, only when tonic polls for the next
//! response. So a full table stops the server reading an insert stream, a slow learner gets
//! no batch built ahead of it, and a client going away drops the pending step, which leaves
//! the table untouched (the table's waits are cancel-safe).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::buffers::Table;
use crate::Limits;
use fleetrl_proto::table::{difference, split_stacked, ReplayError, TableSpec};
use fleetrl_proto::v1::replay_service_server::ReplayService;
use fleetrl_proto::v1::{
    CheckpointRequest, CheckpointResponse, DeleteRequest, DeleteResponse, EnsureTableRequest,
    EnsureTableResponse, InfoRequest, InfoResponse, InsertRequest, InsertResponse, ResetRequest,
    ResetResponse, SampleRequest, SampleResponse, UpdatePrioritiesRequest,
    UpdatePrioritiesResponse,
};
use futures::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, info_span, instrument, warn, Instrument, Span};

use crate::error::{to_status, ServiceError};
use crate::metrics::ReplayMetrics;
use crate::persistence::Checkpointer;

/// A boxed response stream, as tonic wants for streaming RPCs.
type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The server's tables by name, shared by every RPC; tables can be added while it serves
/// (`EnsureTable`). The lock guards only the map and is never held across an `.await`.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    map: Arc<RwLock<BTreeMap<String, Arc<Table>>>>,
    limits: Limits,
    /// Where inserts and samples record their latency.
    metrics: ReplayMetrics,
}

impl Tables {
    /// An empty registry whose items and sampled batches stay within `limits`, recording
    /// inserts and samples in `metrics`.
    pub(crate) fn new(limits: Limits, metrics: ReplayMetrics) -> Tables {
        Tables {
            map: Arc::default(),
            limits,
            metrics,
        }
    }

    /// Creates the table `spec` declares, or checks that the existing one of that name has the
    /// same definition. Returns whether it was created.
    pub(crate) fn ensure(&self, spec: &TableSpec) -> Result<bool, ReplayError> {
        spec.check(self.limits.max_item_bytes)?;
        let mut map = self.map.write().expect("table registry lock poisoned");
        if let Some(existing) = map.get(&spec.name) {
            return match difference(existing.spec(), spec) {
                None => Ok(false),
                Some(message) => Err(ReplayError::Conflict(message)),
            };
        }
        map.insert(spec.name.clone(), Arc::new(Table::from_spec(spec)?));
        Ok(true)
    }

    /// Adds a restored table, replacing nothing: a name already present is an error.
    pub(crate) fn adopt(&self, table: Table) -> Result<(), ReplayError> {
        let mut map = self.map.write().expect("table registry lock poisoned");
        if map.contains_key(table.name()) {
            return Err(ReplayError::InvalidRequest(format!(
                "table `{}` is declared twice",
                table.name()
            )));
        }
        map.insert(table.name().to_string(), Arc::new(table));
        Ok(())
    }

    /// The table called `name`.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<Table>, ReplayError> {
        self.map
            .read()
            .expect("table registry lock poisoned")
            .get(name)
            .cloned()
            .ok_or_else(|| ReplayError::UnknownTable(name.to_string()))
    }

    /// Every table, in name order.
    pub(crate) fn all(&self) -> Vec<Arc<Table>> {
        let map = self.map.read().expect("table registry lock poisoned");
        map.values().cloned().collect()
    }

    /// Table names, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.all().iter().map(|t| t.name().to_string()).collect()
    }

    /// Closes every table, waking all waiting inserts and samples with `Closed`.
    pub(crate) fn close_all(&self) {
        for table in self.all() {
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
    checkpointer: Option<Arc<Checkpointer>>,
}

impl Replay {
    /// A service over `tables` that ends its streams once `stop` turns `true`, and writes
    /// checkpoints on request through `checkpointer` (if the server has a checkpoint directory).
    pub(crate) fn new(
        tables: Tables,
        stop: watch::Receiver<bool>,
        checkpointer: Option<Arc<Checkpointer>>,
    ) -> Replay {
        Replay {
            tables,
            stop,
            checkpointer,
        }
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

    #[instrument(skip_all, name = "replay.update_priorities")]
    async fn update_priorities(
        &self,
        request: Request<UpdatePrioritiesRequest>,
    ) -> Result<Response<UpdatePrioritiesResponse>, Status> {
        let request = request.into_inner();
        let table = self.tables.get(&request.table).map_err(to_status)?;
        if request.keys.len() != request.priorities.len() {
            return Err(to_status(ReplayError::InvalidRequest(format!(
                "{} keys but {} priorities",
                request.keys.len(),
                request.priorities.len()
            ))));
        }
        let updates: Vec<(u64, f64)> = request.keys.into_iter().zip(request.priorities).collect();
        let updated = table.update_priorities(&updates).map_err(to_status)?;
        Ok(Response::new(UpdatePrioritiesResponse {
            updated: updated as u64,
        }))
    }

    #[instrument(skip_all, name = "replay.delete")]
    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let request = request.into_inner();
        let table = self.tables.get(&request.table).map_err(to_status)?;
        let deleted = table.delete(&request.keys) as u64;
        Ok(Response::new(DeleteResponse { deleted }))
    }

    #[instrument(skip_all, name = "replay.reset")]
    async fn reset(
        &self,
        request: Request<ResetRequest>,
    ) -> Result<Response<ResetResponse>, Status> {
        let table = self
            .tables
            .get(&request.into_inner().table)
            .map_err(to_status)?;
        table.reset();
        info!(table = table.name(), "table reset");
        Ok(Response::new(ResetResponse {}))
    }

    #[instrument(skip_all, name = "replay.ensure_table")]
    async fn ensure_table(
        &self,
        request: Request<EnsureTableRequest>,
    ) -> Result<Response<EnsureTableResponse>, Status> {
        let config = request.into_inner().table.ok_or_else(|| {
            ServiceError::InvalidRequest("EnsureTable needs a table definition".into())
        })?;
        let spec = TableSpec::try_from(&config).map_err(to_status)?;
        let created = self.tables.ensure(&spec).map_err(|err| {
            warn!(table = %spec.name, error = %err, "EnsureTable refused");
            to_status(err)
        })?;
        if created {
            info!(table = %spec.name, sampler = spec.sampler.name(), rate_limiter = spec.rate_limiter.name(), max_size = spec.max_size, "table created");
        }
        Ok(Response::new(EnsureTableResponse { created }))
    }

    #[instrument(skip_all, name = "replay.checkpoint")]
    async fn checkpoint(
        &self,
        _request: Request<CheckpointRequest>,
    ) -> Result<Response<CheckpointResponse>, Status> {
        let checkpointer = self
            .checkpointer
            .clone()
            .ok_or(ServiceError::NoCheckpointDir)?;
        let path = checkpointer
            .write(&self.tables)
            .await
            .map_err(|e| ServiceError::Internal(format!("checkpoint failed: {e:#}")))?;
        Ok(Response::new(CheckpointResponse {
            path: path.display().to_string(),
        }))
    }

    #[instrument(skip_all, name = "replay.info")]
    async fn info(&self, _request: Request<InfoRequest>) -> Result<Response<InfoResponse>, Status> {
        let tables = self
            .tables
            .all()
            .iter()
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
        let stacked = request.items.unwrap_or_default();
        let items = split_stacked(&stacked, table.signature()).map_err(to_status)?;
        let priorities = match request.priorities.len() {
            0 => vec![1.0; items.len()],
            1 => vec![request.priorities[0]; items.len()],
            n if n == items.len() => request.priorities,
            n => {
                return Err(to_status(ReplayError::InvalidRequest(format!(
                    "{n} priorities for {} items: give none, one, or one per item",
                    items.len()
                ))))
            }
        };
        let started = std::time::Instant::now();
        let keys = table
            .insert_many(items.into_iter().zip(priorities).collect())
            .await
            .map_err(to_status)?;
        self.tables
            .metrics
            .record_insert(table.name(), started.elapsed());
        Ok(InsertResponse { keys })
    }
}

/// One learner's sample stream: a batch at a time, each built when the previous was taken.
struct SampleStream {
    table: Arc<Table>,
    metrics: ReplayMetrics,
    batch_size: usize,
    timeout: Option<Duration>,
    /// Batches still to send; `None` streams until the client cancels.
    remaining: Option<u64>,
    sent: u64,
    done: bool,
}

impl SampleStream {
    /// Checks the request up front, so a bad one fails the call rather than its first message.
    fn open(tables: &Tables, request: &SampleRequest) -> Result<SampleStream, Status> {
        let check = || -> Result<SampleStream, ReplayError> {
            let table = tables.get(&request.table)?;
            let batch_size = request.batch_size as usize;
            table.check_batch_size(batch_size)?;
            check_batch_limits(&tables.limits, &table, u64::from(request.batch_size))?;
            let remaining = (request.max_batches > 0).then_some(request.max_batches);
            let timeout = (request.rate_limiter_timeout_ms > 0)
                .then(|| Duration::from_millis(request.rate_limiter_timeout_ms));
            Ok(SampleStream {
                table,
                metrics: tables.metrics.clone(),
                batch_size,
                timeout,
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

    /// Takes a stacked batch (the table copies the rows once, into the batch's tensors).
    async fn build_batch(&self) -> Result<SampleResponse, Status> {
        let started = std::time::Instant::now();
        let batch = self
            .table
            .take(self.batch_size, self.timeout)
            .await
            .map_err(to_status)?;
        self.metrics
            .record_sample(self.table.name(), started.elapsed());
        Ok(batch.into())
    }
}

/// Refuses a batch over the server-wide limits before anything is allocated for it.
fn check_batch_limits(limits: &Limits, table: &Table, batch_size: u64) -> Result<(), ReplayError> {
    if batch_size > limits.max_batch_items {
        return Err(ReplayError::InvalidRequest(format!(
            "batch_size {batch_size} is over this server's limit of {} items per batch \
             (--max-batch-items)",
            limits.max_batch_items
        )));
    }
    let item_bytes = table.signature().item_bytes();
    let bytes = batch_size.saturating_mul(item_bytes);
    if bytes > limits.max_batch_bytes {
        return Err(ReplayError::InvalidRequest(format!(
            "a batch of {batch_size} items of table `{}` takes {bytes} bytes ({item_bytes} per \
             item), over this server's limit of {} bytes per batch (--max-batch-bytes)",
            table.name(),
            limits.max_batch_bytes
        )));
    }
    Ok(())
}

/// Resolves once the server shuts down (or its stop sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|&stopped| stopped).await;
}
