//! Inserting into K shards. [`Writer::insert`] places each item straight on a shard session's
//! queue (round-robin over the shards that are up and have room); each session coalesces what
//! is queued into stacked requests and keeps a bounded window unacknowledged. A session whose
//! stream breaks hands its unacknowledged items to the shards that are up, or keeps them for
//! its own reconnection when none is.
//!
//! One hop from the caller to the session that encodes the request: the earlier design passed
//! every item through a dispatcher task first, a third queue and a task wake-up per item that
//! cost the Atari insert path about half its throughput (docs/benchmarks.md, issue 59).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleetrl_proto::v1::InsertRequest;
use fleetrl_proto::{Tensor, TensorMap};
use tokio::sync::{mpsc, watch, Notify, Semaphore};
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
    shared: Arc<Shared>,
    /// Held by every clone: the supervisor hears the last one go when this channel closes.
    _open: mpsc::Sender<()>,
}

/// The background side of a [`Writer`]: finishes when every item is acknowledged.
#[derive(Debug)]
pub struct WriterTask {
    task: JoinHandle<anyhow::Result<()>>,
}

/// What the writers, the shard sessions and the supervisor share.
#[derive(Debug)]
struct Shared {
    shards: Vec<ShardQueue>,
    /// Where the round-robin goes next.
    next: AtomicUsize,
    /// Most items a shard takes before the next one is preferred.
    max_in_flight: usize,
    /// A permit per item the writer may still take; a session returns one per acknowledged item.
    permits: Semaphore,
    /// Items inserted but not yet acknowledged, over all shards.
    outstanding: AtomicU64,
    /// Woken when `outstanding` reaches zero.
    drained: Notify,
    acked: Arc<AtomicU64>,
    reconnects: Arc<AtomicU64>,
    /// The error that ends the writer (an item no shard will take).
    fatal: watch::Sender<Option<String>>,
}

/// One shard's queue as the writers see it.
#[derive(Debug)]
struct ShardQueue {
    items: mpsc::UnboundedSender<Item>,
    /// Whether the session's insert stream is open (true until its first attempt fails).
    up: AtomicBool,
    /// Items queued for the shard or in its window: the round-robin skips a shard at
    /// `max_in_flight`.
    load: AtomicUsize,
}

impl Shared {
    /// Puts `item` on the queue [`pick`] chooses.
    fn place(&self, item: Item) {
        let shard = &self.shards[self.pick()];
        shard.load.fetch_add(1, Ordering::SeqCst);
        // The receiver lives as long as the supervisor, which holds `Shared` too: a send fails
        // only once the writer has ended, when the item no longer matters.
        let _ = shard.items.send(item);
    }

    /// The shard for the next item (and advances the round-robin).
    fn pick(&self) -> usize {
        let state = |i: usize| {
            let shard = &self.shards[i];
            (
                shard.up.load(Ordering::SeqCst),
                shard.load.load(Ordering::SeqCst),
            )
        };
        let start = self.next.load(Ordering::Relaxed);
        let index = pick(self.shards.len(), start, self.max_in_flight, state);
        self.next
            .store((index + 1) % self.shards.len(), Ordering::Relaxed);
        index
    }
}

/// Round-robin from `start` over `(up, load)` shard states: the first shard that is up and
/// below `max_in_flight`; else the least loaded shard that is up (the permits bound the whole
/// writer, so a shard past its share only while another is down); else `start`, whose session
/// keeps the item until it, or another shard, is up.
fn pick(
    shards: usize,
    start: usize,
    max_in_flight: usize,
    state: impl Fn(usize) -> (bool, usize),
) -> usize {
    let order = || (0..shards).map(|offset| (start + offset) % shards);
    let has_room = |i: usize| {
        let (up, load) = state(i);
        up && load < max_in_flight
    };
    if let Some(index) = order().find(|&i| has_room(i)) {
        return index;
    }
    order()
        .filter(|&i| state(i).0)
        .min_by_key(|&i| state(i).1)
        .unwrap_or(start % shards)
}

impl Writer {
    /// Starts a writer over `shards`; items are distributed round-robin over the shards that
    /// are up. Returns the writer and the task to await (after dropping the writer) for the
    /// final acknowledgement or the error that ended it.
    pub fn spawn(shards: Vec<String>, options: WriterOptions) -> (Writer, WriterTask) {
        let max_in_flight = options.max_in_flight.max(1);
        let window = max_in_flight * shards.len().max(1);
        let mut queues = Vec::new();
        let mut receivers = Vec::new();
        for _ in &shards {
            let (items, queued) = mpsc::unbounded_channel();
            queues.push(ShardQueue {
                items,
                up: AtomicBool::new(true),
                load: AtomicUsize::new(0),
            });
            receivers.push(queued);
        }
        let shared = Arc::new(Shared {
            shards: queues,
            next: AtomicUsize::new(0),
            max_in_flight,
            permits: Semaphore::new(window),
            outstanding: AtomicU64::new(0),
            drained: Notify::new(),
            acked: Arc::new(AtomicU64::new(0)),
            reconnects: Arc::new(AtomicU64::new(0)),
            fatal: watch::channel(None).0,
        });
        let sessions = shards
            .into_iter()
            .zip(receivers)
            .enumerate()
            .map(|(index, (addr, queued))| {
                tokio::spawn(shard_loop(ShardLoop {
                    index,
                    addr,
                    options: WriterOptions {
                        max_in_flight,
                        ..options.clone()
                    },
                    queued,
                    backlog: VecDeque::new(),
                    shared: shared.clone(),
                }))
            })
            .collect();
        let (open, closed) = mpsc::channel(1);
        let task = tokio::spawn(supervise(shared.clone(), sessions, closed));
        (
            Writer {
                shared,
                _open: open,
            },
            WriterTask { task },
        )
    }

    /// Queues one item (fields as the table's signature, unstacked). Waits while the shards'
    /// windows are full. Fails only if the writer ended with an error.
    pub async fn insert(&self, tensors: TensorMap, priority: f64) -> anyhow::Result<()> {
        let stopped = || anyhow::anyhow!("the replay writer stopped (see its error)");
        // A permit per unacknowledged item, returned by the shard session on the ack.
        self.shared
            .permits
            .acquire()
            .await
            .map_err(|_| stopped())?
            .forget();
        if self.shared.fatal.borrow().is_some() {
            return Err(stopped());
        }
        self.shared.outstanding.fetch_add(1, Ordering::SeqCst);
        self.shared.place(Item { tensors, priority });
        Ok(())
    }

    /// The writer's counters, readable while an insert waits (and after the writer is gone).
    pub fn progress(&self) -> WriterProgress {
        WriterProgress {
            acked: self.shared.acked.clone(),
            reconnects: self.shared.reconnects.clone(),
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

/// Ends the writer: with the error a session reported, or once every writer is dropped and
/// every item acknowledged. Either way it stops the sessions, and closes the permits so that
/// an insert waiting for one hears of it (with every permit held by items that will never be
/// acknowledged, it would wait forever).
async fn supervise(
    shared: Arc<Shared>,
    sessions: Vec<JoinHandle<()>>,
    mut closed: mpsc::Receiver<()>,
) -> anyhow::Result<()> {
    let mut fatal = shared.fatal.subscribe();
    let mut writers_open = true;
    let result = loop {
        if let Some(message) = fatal.borrow_and_update().clone() {
            break Err(anyhow::anyhow!(message));
        }
        if !writers_open && shared.outstanding.load(Ordering::SeqCst) == 0 {
            break Ok(());
        }
        tokio::select! {
            _ = fatal.changed() => {}
            _ = closed.recv(), if writers_open => writers_open = false,
            () = shared.drained.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    };
    shared.permits.close();
    for session in sessions {
        session.abort();
    }
    result
}

struct ShardLoop {
    index: usize,
    addr: String,
    options: WriterOptions,
    queued: mpsc::UnboundedReceiver<Item>,
    /// Items this shard's broken stream never acknowledged, sent first once it is back (when
    /// no other shard was up to take them).
    backlog: VecDeque<Item>,
    shared: Arc<Shared>,
}

impl ShardLoop {
    fn queue(&self) -> &ShardQueue {
        &self.shared.shards[self.index]
    }

    /// The next item to send: the backlog's first, then the queue's.
    fn next_ready(&mut self) -> Option<Item> {
        self.backlog
            .pop_front()
            .or_else(|| self.queued.try_recv().ok())
    }

    /// Hands this shard's backlog and queue to the shards that are up; keeps them when no
    /// other shard is.
    fn requeue(&mut self) {
        while let Ok(item) = self.queued.try_recv() {
            self.backlog.push_back(item);
        }
        let others_up = self
            .shared
            .shards
            .iter()
            .enumerate()
            .any(|(i, s)| i != self.index && s.up.load(Ordering::SeqCst));
        if !others_up {
            return;
        }
        let moved = self.backlog.len();
        self.queue().load.fetch_sub(moved, Ordering::SeqCst);
        for item in self.backlog.drain(..) {
            self.shared.place(item);
        }
    }

    /// Counts `n` items of this shard's window acknowledged.
    fn acknowledge(&self, n: usize) {
        let shared = &self.shared;
        shared.acked.fetch_add(n as u64, Ordering::Relaxed);
        self.queue().load.fetch_sub(n, Ordering::SeqCst);
        shared.permits.add_permits(n);
        if shared.outstanding.fetch_sub(n as u64, Ordering::SeqCst) == n as u64 {
            shared.drained.notify_one();
        }
    }
}

/// Requests sent to one shard but not yet acknowledged, oldest first, and their item count.
#[derive(Default)]
struct Window {
    requests: VecDeque<Vec<Item>>,
    items: usize,
}

async fn shard_loop(mut shard: ShardLoop) {
    let mut patience = shard.options.connect_patience;
    // Since when the shard has answered that the table does not exist.
    let mut missing_since: Option<std::time::Instant> = None;
    loop {
        let mut window = Window::default();
        let ended = session(&mut shard, &mut window, patience).await;
        // Whatever this shard never acknowledged goes to the others (or waits for this one).
        shard.queue().up.store(false, Ordering::SeqCst);
        let unacked = window.items;
        let mut unsent = std::mem::take(&mut shard.backlog);
        shard.backlog = window.requests.into_iter().flatten().collect();
        shard.backlog.append(&mut unsent);
        shard.requeue();
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
                shard.shared.reconnects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(replay = %shard.addr, table = %shard.options.table, error = %status.message(), "table missing (replay server restarted?); retrying until it is declared again");
            }
            Err(status) if is_client_fault(&status) => {
                let message = format!(
                    "replay server {} rejected an insert into `{}`: {}",
                    shard.addr,
                    shard.options.table,
                    status.message()
                );
                let _ = shard.shared.fatal.send(Some(message));
                return;
            }
            Err(status) => {
                shard.shared.reconnects.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(replay = %shard.addr, error = %status.message(), unacked, "insert stream broke; its items go to other shards while reconnecting")
            }
            Ok(()) => {}
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
        // Items placed here while it was down go to a shard that came up meanwhile.
        shard.requeue();
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
    shard.queue().up.store(true, Ordering::SeqCst);
    let max_in_flight = shard.options.max_in_flight;
    loop {
        // Send what is ready while the window has room, then wait for an item or an ack.
        while window.items < max_in_flight {
            let Some(first) = shard.next_ready() else {
                break;
            };
            send(shard, window, &requests, first).await?;
        }
        tokio::select! {
            first = shard.queued.recv(), if window.items < max_in_flight => {
                // The writer holds a sender as long as this session runs.
                let Some(first) = first else { return Ok(()) };
                send(shard, window, &requests, first).await?;
            }
            ack = acks.message() => match ack? {
                Some(response) => {
                    let batch = window.requests.pop_front().ok_or_else(|| tonic::Status::internal("an ack for nothing sent"))?;
                    debug_assert_eq!(batch.len(), response.keys.len());
                    window.items -= batch.len();
                    shard.acknowledge(batch.len());
                }
                None => return Err(tonic::Status::unavailable("the server ended the insert stream")),
            },
        }
    }
}

/// Stacks `first` and whatever else is ready (up to a request's size and the window's room)
/// into one request and sends it.
async fn send(
    shard: &mut ShardLoop,
    window: &mut Window,
    requests: &mpsc::Sender<InsertRequest>,
    first: Item,
) -> Result<(), tonic::Status> {
    let room = shard.options.max_in_flight - window.items;
    let mut batch = vec![first];
    while batch.len() < shard.options.max_items_per_request.min(room) {
        match shard.next_ready() {
            Some(item) => batch.push(item),
            None => break,
        }
    }
    let request = stack(&shard.options.table, &batch)
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
    window.items += batch.len();
    window.requests.push_back(batch);
    if requests.send(request).await.is_err() {
        return Err(tonic::Status::unavailable("insert stream closed"));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::pick;

    fn pick_in(states: &[(bool, usize)], start: usize) -> usize {
        pick(states.len(), start, 2, |i| states[i])
    }

    #[test]
    fn round_robin_skips_shards_that_are_down_or_full() {
        let states = [(true, 0), (false, 0), (true, 2), (true, 1)];
        assert_eq!(pick_in(&states, 0), 0);
        assert_eq!(pick_in(&states, 1), 3, "1 is down, 2 is at its window");
        assert_eq!(pick_in(&states, 2), 3);
        assert_eq!(pick_in(&states, 3), 3);
    }

    #[test]
    fn with_every_shard_full_the_least_loaded_one_that_is_up_takes_it() {
        let states = [(true, 4), (false, 0), (true, 3)];
        assert_eq!(pick_in(&states, 0), 2);
    }

    #[test]
    fn with_no_shard_up_the_item_waits_on_the_next_in_turn() {
        let states = [(false, 0), (false, 5)];
        assert_eq!(pick_in(&states, 1), 1);
    }
}
