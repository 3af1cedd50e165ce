//! Inserting into K shards: a dispatcher hands items to per-shard sessions, each of which
//! coalesces what is queued into stacked requests and keeps a bounded window unacknowledged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleetrl_proto::v1::InsertRequest;
use fleetrl_proto::{Tensor, TensorMap};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use super::{connect, is_client_fault, RECONNECT_DELAY};

/// How a [`Writer`] batches and bounds its inserts.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Table to insert into (the same on every shard).
    pub table: String,
    /// Most items stacked into one request.
    pub max_items_per_request: usize,
    /// Most unacknowledged items per shard (the writer holds at most this many times the number
    /// of shards); [`Writer::insert`] waits beyond it, which is how a full table slows writers.
    pub max_in_flight: usize,
    /// How long to keep trying to reach a shard at first.
    pub connect_patience: Duration,
}

impl WriterOptions {
    /// One item per request and at most two in flight: what an actor sending whole rollouts wants.
    pub fn new(table: &str) -> WriterOptions {
        WriterOptions {
            table: table.to_string(),
            max_items_per_request: 1,
            max_in_flight: 2,
            connect_patience: Duration::from_secs(60),
        }
    }
}

/// One item to insert.
#[derive(Debug, Clone)]
struct Item {
    tensors: TensorMap,
    priority: f64,
}

/// Inserts items into a table spread over one or more shards. Cheap to clone; the items are
/// all acknowledged when every clone is dropped and [`Writer::finish`] returns.
#[derive(Debug, Clone)]
pub struct Writer {
    items: mpsc::Sender<Item>,
    acked: Arc<AtomicU64>,
    reconnects: Arc<AtomicU64>,
    permits: Arc<Semaphore>,
}

/// The background side of a [`Writer`]: finishes when every item is acknowledged.
#[derive(Debug)]
pub struct WriterTask {
    task: JoinHandle<anyhow::Result<()>>,
}

impl Writer {
    /// Starts a writer over `shards`; items are distributed round-robin over the shards that
    /// are up. Returns the writer and the task to await (after dropping the writer) for the
    /// final acknowledgement or the error that ended it.
    pub fn spawn(shards: Vec<String>, options: WriterOptions) -> (Writer, WriterTask) {
        let window = options.max_in_flight.max(1) * shards.len().max(1);
        let (items, inbox) = mpsc::channel(window);
        let counters = Counters {
            acked: Arc::new(AtomicU64::new(0)),
            reconnects: Arc::new(AtomicU64::new(0)),
            permits: Arc::new(Semaphore::new(window)),
        };
        let Counters {
            acked,
            reconnects,
            permits,
        } = counters.clone();
        // However the dispatcher ends, an insert waiting for a permit must hear of it: with
        // every permit held by items that will never be acknowledged, it would wait forever.
        let task = tokio::spawn({
            let permits = permits.clone();
            async move {
                let ended = dispatch(shards, options, inbox, counters).await;
                permits.close();
                ended
            }
        });
        (
            Writer {
                items,
                acked,
                reconnects,
                permits,
            },
            WriterTask { task },
        )
    }

    /// Queues one item (fields as the table's signature, unstacked). Waits while the shards'
    /// windows are full. Fails only if the writer ended with an error.
    pub async fn insert(&self, tensors: TensorMap, priority: f64) -> anyhow::Result<()> {
        let stopped = || anyhow::anyhow!("the replay writer stopped (see its error)");
        // A permit per unacknowledged item, returned by the shard session on the ack.
        self.permits
            .acquire()
            .await
            .map_err(|_| stopped())?
            .forget();
        self.items
            .send(Item { tensors, priority })
            .await
            .map_err(|_| stopped())
    }

    /// The writer's counters, readable while an insert waits (and after the writer is gone).
    pub fn progress(&self) -> WriterProgress {
        WriterProgress {
            acked: self.acked.clone(),
            reconnects: self.reconnects.clone(),
        }
    }
}

/// A [`Writer`]'s counters, without holding the writer open.
#[derive(Debug, Clone)]
pub struct WriterProgress {
    acked: Arc<AtomicU64>,
    reconnects: Arc<AtomicU64>,
}

impl WriterProgress {
    /// Items acknowledged so far, over all shards.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Times an insert stream to a shard broke and was reopened.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
}

impl WriterTask {
    /// Waits until every item queued before all [`Writer`]s were dropped is acknowledged, or
    /// returns the error that ended the writer.
    pub async fn finish(self) -> anyhow::Result<()> {
        self.task.await.context("replay writer task panicked")?
    }
}

/// A shard's session state as the dispatcher sees it.
struct Shard {
    queue: mpsc::Sender<Item>,
    up: Arc<AtomicBool>,
}

async fn dispatch(
    addrs: Vec<String>,
    options: WriterOptions,
    mut inbox: mpsc::Receiver<Item>,
    counters: Counters,
) -> anyhow::Result<()> {
    let (requeue_tx, mut requeue) = mpsc::unbounded_channel::<Item>();
    let (fatal_tx, mut fatal) = watch::channel::<Option<String>>(None);
    let outstanding = Arc::new(AtomicU64::new(0));
    let mut shards = Vec::new();
    let mut sessions = Vec::new();
    for addr in &addrs {
        let (queue, queued) = mpsc::channel(options.max_in_flight.max(1));
        let up = Arc::new(AtomicBool::new(true));
        sessions.push(tokio::spawn(shard_loop(ShardLoop {
            addr: addr.clone(),
            options: options.clone(),
            queued,
            requeue: requeue_tx.clone(),
            up: up.clone(),
            counters: counters.clone(),
            outstanding: outstanding.clone(),
            fatal: fatal_tx.clone(),
        })));
        shards.push(Shard { queue, up });
    }
    drop(requeue_tx);
    let mut next = 0usize;
    let mut inbox_open = true;
    let result = loop {
        if let Some(message) = fatal.borrow().clone() {
            break Err(anyhow::anyhow!(message));
        }
        if !inbox_open && outstanding.load(Ordering::SeqCst) == 0 {
            break Ok(());
        }
        let item = tokio::select! {
            biased;
            _ = fatal.changed() => continue,
            Some(item) = requeue.recv() => item,
            item = inbox.recv(), if inbox_open => match item {
                Some(item) => {
                    outstanding.fetch_add(1, Ordering::SeqCst);
                    item
                }
                None => {
                    inbox_open = false;
                    continue;
                }
            },
            () = tokio::time::sleep(Duration::from_millis(50)) => continue,
        };
        // Round-robin over shards that are up; wait for room when all are busy or down.
        let mut pending = Some(item);
        while let Some(item) = pending.take() {
            pending = place(&shards, &mut next, item);
            if pending.is_none() || fatal.borrow().is_some() {
                break;
            }
            // Every shard is busy or down: wait for room on the next one that is up.
            let up = (0..shards.len())
                .map(|offset| (next + offset) % shards.len())
                .find(|&i| shards[i].up.load(Ordering::SeqCst));
            match up {
                Some(i) => {
                    let wait =
                        tokio::time::timeout(Duration::from_millis(20), shards[i].queue.reserve());
                    if let Ok(Ok(permit)) = wait.await {
                        permit.send(pending.take().expect("still pending"));
                        next = (i + 1) % shards.len();
                    }
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    for session in sessions {
        session.abort();
    }
    result
}

/// Hands `item` to the first shard from `next` on that is up and has room; gives it back if
/// none has.
fn place(shards: &[Shard], next: &mut usize, item: Item) -> Option<Item> {
    let mut item = item;
    for offset in 0..shards.len() {
        let index = (*next + offset) % shards.len();
        if !shards[index].up.load(Ordering::SeqCst) {
            continue;
        }
        match shards[index].queue.try_send(item) {
            Ok(()) => {
                *next = (index + 1) % shards.len();
                return None;
            }
            Err(mpsc::error::TrySendError::Full(back))
            | Err(mpsc::error::TrySendError::Closed(back)) => item = back,
        }
    }
    Some(item)
}

struct ShardLoop {
    addr: String,
    options: WriterOptions,
    queued: mpsc::Receiver<Item>,
    requeue: mpsc::UnboundedSender<Item>,
    up: Arc<AtomicBool>,
    counters: Counters,
    outstanding: Arc<AtomicU64>,
    fatal: watch::Sender<Option<String>>,
}

/// What shard sessions report back to the [`Writer`].
#[derive(Debug, Clone)]
struct Counters {
    acked: Arc<AtomicU64>,
    reconnects: Arc<AtomicU64>,
    permits: Arc<Semaphore>,
}

/// Requests sent to one shard but not yet acknowledged, oldest first.
type Window = VecDeque<Vec<Item>>;

fn in_window(window: &Window) -> usize {
    window.iter().map(Vec::len).sum()
}

async fn shard_loop(mut shard: ShardLoop) {
    let mut patience = shard.options.connect_patience;
    // Since when the shard has answered that the table does not exist.
    let mut missing_since: Option<std::time::Instant> = None;
    loop {
        let mut window = Window::new();
        let ended = session(&mut shard, &mut window, patience).await;
        // Whatever this shard never acknowledged goes to the others.
        shard.up.store(false, Ordering::SeqCst);
        let unacked = in_window(&window);
        for item in window.into_iter().flatten() {
            let _ = shard.requeue.send(item);
        }
        while let Ok(item) = shard.queued.try_recv() {
            let _ = shard.requeue.send(item);
        }
        // A shard that restarted without a checkpoint has lost its tables until the learner
        // declares them again: wait for that (within the connect patience), as for a restart.
        let missing = matches!(&ended, Err(status) if status.code() == tonic::Code::NotFound);
        let waited = match missing {
            true => missing_since
                .get_or_insert_with(std::time::Instant::now)
                .elapsed(),
            false => {
                missing_since = None;
                Duration::ZERO
            }
        };
        match ended {
            Err(status) if missing && waited < shard.options.connect_patience => {
                shard.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(replay = %shard.addr, table = %shard.options.table, error = %status.message(), "table missing (replay server restarted?); retrying until it is declared again");
            }
            Err(status) if is_client_fault(&status) => {
                let message = format!(
                    "replay server {} rejected an insert into `{}`: {}",
                    shard.addr,
                    shard.options.table,
                    status.message()
                );
                let _ = shard.fatal.send(Some(message));
                return;
            }
            Err(status) => {
                shard.counters.reconnects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(replay = %shard.addr, error = %status.message(), unacked, "insert stream broke; its items go to other shards while reconnecting")
            }
            Ok(()) => {}
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
        patience = Duration::from_millis(100);
    }
}

/// One insert stream to a shard, until it breaks.
async fn session(
    shard: &mut ShardLoop,
    window: &mut Window,
    patience: Duration,
) -> Result<(), tonic::Status> {
    let mut client = connect(&shard.addr, patience)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let (requests, outbound) = mpsc::channel(shard.options.max_in_flight + 1);
    let mut acks = client
        .insert(ReceiverStream::new(outbound))
        .await?
        .into_inner();
    shard.up.store(true, Ordering::SeqCst);
    loop {
        tokio::select! {
            first = shard.queued.recv(), if in_window(window) < shard.options.max_in_flight => {
                let Some(first) = first else { return Ok(()) };
                let mut batch = vec![first];
                let room = shard.options.max_in_flight - in_window(window);
                while batch.len() < shard.options.max_items_per_request.min(room) {
                    match shard.queued.try_recv() {
                        Ok(item) => batch.push(item),
                        Err(_) => break,
                    }
                }
                let request = stack(&shard.options.table, &batch)
                    .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
                window.push_back(batch);
                if requests.send(request).await.is_err() {
                    return Err(tonic::Status::unavailable("insert stream closed"));
                }
            }
            ack = acks.message() => match ack? {
                Some(response) => {
                    let batch = window.pop_front().ok_or_else(|| tonic::Status::internal("an ack for nothing sent"))?;
                    debug_assert_eq!(batch.len(), response.keys.len());
                    shard.counters.acked.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    shard.counters.permits.add_permits(batch.len());
                    shard.outstanding.fetch_sub(batch.len() as u64, Ordering::SeqCst);
                }
                None => return Err(tonic::Status::unavailable("the server ended the insert stream")),
            },
        }
    }
}

/// Stacks items into one request: every field gains a leading item dimension.
fn stack(table: &str, batch: &[Item]) -> anyhow::Result<InsertRequest> {
    let first = &batch[0].tensors;
    let mut items = TensorMap::default();
    for name in first.tensors.keys() {
        let parts: Vec<&Tensor> = batch
            .iter()
            .map(|item| item.tensors.field(name))
            .collect::<Result<_, _>>()
            .with_context(|| format!("stacking field `{name}`"))?;
        let stacked = Tensor::stack(&parts).with_context(|| format!("stacking field `{name}`"))?;
        items.tensors.insert(name.clone(), stacked);
    }
    let priorities = if batch.iter().all(|i| i.priority == batch[0].priority) {
        vec![batch[0].priority]
    } else {
        batch.iter().map(|i| i.priority).collect()
    };
    Ok(InsertRequest {
        table: table.to_string(),
        items: Some(items),
        priorities,
    })
}
