//! The learner's side of the broadcast: a version prepared once for every subscriber, cut into
//! chunk messages on tensor boundaries, and the stream each subscriber gets.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fleetrl_proto::v1::{Weights, WeightsSlice};
use fleetrl_proto::Dtype;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc::error::SendTimeoutError;
use tokio::sync::{mpsc, oneshot, watch, Mutex};
use tokio_stream::wrappers::ReceiverStream;

use super::narrow::{convert_with, HalfPool};
use super::BroadcastError;
use crate::config::BroadcastDtype;

/// One tensor of a prepared version: its bytes as they go on the wire.
#[derive(Debug, Clone)]
pub struct EncodedTensor {
    /// The variable-store path.
    pub name: String,
    /// The wire element type.
    pub dtype: Dtype,
    /// The shape.
    pub shape: Vec<i64>,
    /// Little-endian elements (shared by every subscriber's chunks, never copied).
    pub data: Bytes,
}

/// One published version, prepared once for every chunked subscriber.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The policy version.
    pub version: i64,
    /// When the learner published it.
    pub published_unix_nanos: i64,
    /// Every tensor, sorted by name (the order chunks are sent in).
    pub tensors: Vec<EncodedTensor>,
}

impl Encoded {
    /// Bytes of tensor data one subscriber receives.
    pub fn data_bytes(&self) -> usize {
        self.tensors.iter().map(|t| t.data.len()).sum()
    }
}

/// Prepares the params of `weights` in `dtype`. In f32 nothing is copied: the tensors' bytes
/// are shared with `weights`.
pub fn encode(weights: &Weights, dtype: BroadcastDtype) -> Result<Encoded, BroadcastError> {
    encode_with(weights, dtype, &HalfPool::default())
}

/// [`encode`], f16 tensors written into buffers of earlier versions from `pool`.
pub fn encode_with(
    weights: &Weights,
    dtype: BroadcastDtype,
    pool: &HalfPool,
) -> Result<Encoded, BroadcastError> {
    let params = weights
        .params
        .as_ref()
        .ok_or(BroadcastError::Empty(weights.version))?;
    let mut tensors = Vec::with_capacity(params.tensors.len());
    for (name, t) in convert_with(params, dtype, pool)?.tensors {
        tensors.push(EncodedTensor {
            dtype: t.validate()?,
            name,
            shape: t.shape,
            data: t.data,
        });
    }
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Encoded {
        version: weights.version,
        published_unix_nanos: weights.published_unix_nanos,
        tensors,
    })
}

/// The messages that carry `encoded`: each tensor in chunks of at most `chunk_bytes` (whole
/// elements; at least one element), tensors in order. No copies: each chunk is a slice of the
/// tensor's bytes. A version with no tensors is one message with `count` 0.
pub fn chunked(encoded: &Encoded, chunk_bytes: usize, subscribers: u32) -> Vec<Weights> {
    let message = |chunk: Bytes, slice: WeightsSlice| Weights {
        version: encoded.version,
        params: None,
        subscribers,
        published_unix_nanos: encoded.published_unix_nanos,
        chunk,
        slice: Some(slice),
    };
    let count = encoded.tensors.len() as u32;
    if count == 0 {
        return vec![message(Bytes::new(), WeightsSlice::default())];
    }
    let mut messages = Vec::new();
    for (index, t) in encoded.tensors.iter().enumerate() {
        let size = t.dtype.size();
        let step = (chunk_bytes / size).max(1) * size;
        let total = t.data.len();
        // A tensor with no elements still sends one (empty) chunk, so the receiver creates it.
        for start in (0..total.max(1)).step_by(step) {
            let slice = WeightsSlice {
                name: t.name.clone(),
                dtype: t.dtype as i32,
                shape: t.shape.clone(),
                offset: start as u64,
                index: index as u32,
                count,
            };
            messages.push(message(
                t.data.slice(start.min(total)..(start + step).min(total)),
                slice,
            ));
        }
    }
    messages
}

/// The newest prepared version, shared by all subscribers: the first to ask for a version
/// prepares it (on a blocking thread: f16 conversion is tensor work), the others reuse it.
/// f16 versions are written into the buffers of versions every subscriber is done with.
#[derive(Debug)]
pub struct EncodedCache {
    dtype: BroadcastDtype,
    newest: Mutex<Option<Arc<Encoded>>>,
    pool: HalfPool,
}

impl EncodedCache {
    /// A cache that encodes in `dtype`.
    pub fn new(dtype: BroadcastDtype) -> EncodedCache {
        EncodedCache {
            dtype,
            newest: Mutex::new(None),
            pool: HalfPool::default(),
        }
    }

    /// The encoding of `weights`, made now unless the cache holds this version already.
    pub async fn get(&self, weights: Arc<Weights>) -> Result<Arc<Encoded>, BroadcastError> {
        let mut newest = self.newest.lock().await;
        if let Some(e) = newest.as_ref().filter(|e| e.version == weights.version) {
            return Ok(e.clone());
        }
        let (dtype, pool) = (self.dtype, self.pool.clone());
        let encoded = tokio::task::spawn_blocking(move || encode_with(&weights, dtype, &pool))
            .await
            .map_err(|e| BroadcastError::Encode(e.to_string()))??;
        let encoded = Arc::new(encoded);
        *newest = Some(encoded.clone());
        Ok(encoded)
    }
}

/// Messages a subscription's producer may queue ahead of what its stream has taken: a couple,
/// so that a subscriber that stops reading holds almost nothing of a version once it is dropped.
pub const QUEUED_MESSAGES: usize = 2;

/// How each version reaches a subscriber.
#[derive(Debug, Clone)]
pub enum Framing {
    /// One message a version, every parameter in `params` (f32): what simple clients ask for.
    Whole,
    /// [`chunked`] messages of at most `chunk_bytes` each, encoded once in `cache`.
    Chunked {
        /// The encoding shared by every chunked subscriber.
        cache: Arc<EncodedCache>,
        /// The most tensor bytes a message carries.
        chunk_bytes: usize,
    },
}

impl Framing {
    /// The messages that carry `weights`, announcing `subscribers`.
    async fn messages(
        &self,
        weights: Arc<Weights>,
        subscribers: u32,
    ) -> Result<Vec<Weights>, BroadcastError> {
        match self {
            Framing::Whole => Ok(vec![Weights {
                subscribers,
                ..Weights::clone(&weights)
            }]),
            Framing::Chunked { cache, chunk_bytes } => {
                let encoded = cache.get(weights).await?;
                Ok(chunked(&encoded, *chunk_bytes, subscribers))
            }
        }
    }
}

/// What a subscription tells the server that runs it. It lives in the subscription's producer
/// task and is dropped when the subscription ends, whatever the reason (the subscriber went
/// away, was dropped, the learner is closing): a guard that counts open subscriptions belongs
/// here. Its methods are called from that task and must not block.
pub trait SubscriberEvents: Send + 'static {
    /// The subscriber count to announce in the messages of the version about to be sent.
    fn subscribers(&self) -> u32;
    /// `versions` versions were published while the subscriber was still taking an older one,
    /// and it will never be sent them (it gets the newest instead).
    fn skipped(&self, versions: u64);
    /// The subscriber took no message for `stalled`: the subscription ends now.
    fn dropped(&self, stalled: Duration);
}

/// What one subscriber receives: every version newer than `after` as it is published, each
/// whole and framed by `framing`; whenever the subscriber is ready for the next version it gets
/// the newest one (the versions in between are skipped, and counted by `events`).
///
/// A task of its own pushes the messages into a channel of [`QUEUED_MESSAGES`] that the
/// returned stream reads, so that a subscriber that stops reading is noticed: HTTP/2 stops
/// polling a stream whose peer's window is full, so nothing inside the stream would ever run
/// again. Once a message has waited `stall_timeout` for room the task gives up
/// ([`SubscriberEvents::dropped`]), lets go of the version and drops `events`; the stream then
/// ends with [`BroadcastError::Stalled`] after what it already holds, whenever it is read. It
/// also ends when the stream is dropped, or `weights`' sender.
pub fn subscription(
    weights: watch::Receiver<Arc<Weights>>,
    after: i64,
    framing: Framing,
    stall_timeout: Duration,
    events: impl SubscriberEvents,
) -> impl Stream<Item = Result<Weights, BroadcastError>> + Send {
    let (out, messages) = mpsc::channel(QUEUED_MESSAGES);
    let (end, ended) = oneshot::channel();
    let producer = Producer {
        weights,
        framing,
        stall_timeout,
        events,
        out,
    };
    tokio::spawn(async move {
        if let Some(error) = producer.run(after).await {
            let _ = end.send(error);
        }
    });
    let last = futures::stream::once(ended).filter_map(|e| std::future::ready(e.ok().map(Err)));
    ReceiverStream::new(messages).chain(last)
}

/// Subscription counts kept in atomics, readable while the subscriptions run: the
/// [`SubscriberEvents`] of servers that need no more (benchmarks, tests).
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Subscriptions open now.
    pub open: Arc<AtomicU32>,
    /// Subscriptions dropped for reading nothing for the stall timeout.
    pub dropped: Arc<AtomicU64>,
    /// Versions subscribers were never sent because a newer one was ready first.
    pub skipped: Arc<AtomicU64>,
}

impl Counts {
    /// Counts one more open subscription; its events, which uncount it when dropped.
    pub fn open(&self) -> impl SubscriberEvents {
        self.open.fetch_add(1, Ordering::Relaxed);
        Counted {
            counts: self.clone(),
            open: AtomicBool::new(true),
        }
    }
}

/// One subscription of a [`Counts`], open until it is dropped or reports itself dropped.
struct Counted {
    counts: Counts,
    open: AtomicBool,
}

impl Counted {
    fn close(&self) {
        if self.open.swap(false, Ordering::Relaxed) {
            self.counts.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.close();
    }
}

impl SubscriberEvents for Counted {
    fn subscribers(&self) -> u32 {
        self.counts.open.load(Ordering::Relaxed).max(1)
    }

    fn skipped(&self, versions: u64) {
        self.counts.skipped.fetch_add(versions, Ordering::Relaxed);
    }

    /// Uncounts the subscription before counting the drop, so that whoever reads `dropped`
    /// then `open` never sees the dropped subscriber as still open.
    fn dropped(&self, _: Duration) {
        self.close();
        self.counts.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// The task behind one [`subscription`].
struct Producer<E> {
    weights: watch::Receiver<Arc<Weights>>,
    framing: Framing,
    stall_timeout: Duration,
    events: E,
    out: mpsc::Sender<Result<Weights, BroadcastError>>,
}

impl<E: SubscriberEvents> Producer<E> {
    /// Sends the versions newer than `after` until the subscriber goes away or the weights'
    /// sender does (`None`), or until the subscription fails (the error to end it with).
    async fn run(mut self, after: i64) -> Option<BroadcastError> {
        let mut sent: Option<i64> = None;
        loop {
            let newest = self.weights.borrow_and_update().clone();
            if newest.version > sent.unwrap_or(after) {
                if let Some(last) = sent {
                    let skipped = newest.version.saturating_sub(last).saturating_sub(1);
                    if skipped > 0 {
                        self.events.skipped(skipped as u64);
                    }
                }
                let version = newest.version;
                if let Err(end) = self.send(newest).await {
                    return end;
                }
                sent = Some(version);
            }
            tokio::select! {
                changed = self.weights.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
                () = self.out.closed() => return None,
            }
        }
    }

    /// Hands every message of `weights` to the stream; `Err` ends the subscription (with the
    /// error to end its stream with, if any).
    async fn send(&mut self, weights: Arc<Weights>) -> Result<(), Option<BroadcastError>> {
        let messages = self
            .framing
            .messages(weights, self.events.subscribers())
            .await
            .map_err(Some)?;
        for message in messages {
            match self.out.send_timeout(Ok(message), self.stall_timeout).await {
                Ok(()) => {}
                Err(SendTimeoutError::Timeout(_)) => {
                    self.events.dropped(self.stall_timeout);
                    return Err(Some(BroadcastError::Stalled(self.stall_timeout)));
                }
                Err(SendTimeoutError::Closed(_)) => return Err(None),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broadcast::convert;
    use crate::broadcast::test_weights as weights;
    use fleetrl_proto::TensorMap;

    #[test]
    fn chunks_follow_tensor_boundaries_in_whole_elements() {
        let w = weights(4, &[0.5; 100]);
        let encoded = encode(&w, BroadcastDtype::F32).unwrap();
        assert_eq!(encoded.data_bytes(), 408);
        let messages = chunked(&encoded, 90, 3);
        // pi.w: 400 bytes in 88-byte chunks (22 f32), then steps: one 8-byte chunk.
        let layout: Vec<(u32, u64, usize)> = messages
            .iter()
            .map(|m| {
                let s = m.slice.as_ref().unwrap();
                (s.index, s.offset, m.chunk.len())
            })
            .collect();
        assert_eq!(
            layout,
            vec![
                (0, 0, 88),
                (0, 88, 88),
                (0, 176, 88),
                (0, 264, 88),
                (0, 352, 48),
                (1, 0, 8)
            ]
        );
        let first = messages[0].slice.as_ref().unwrap();
        assert_eq!((first.name.as_str(), first.count), ("pi.w", 2));
        assert!(messages.iter().all(|m| m.params.is_none()
            && m.subscribers == 3
            && m.version == 4
            && m.published_unix_nanos == 5));
    }

    #[test]
    fn f32_shares_the_published_bytes_and_f16_halves_them() {
        let values: Vec<f32> = (0..4096).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
        let w = weights(1, &values);
        let full = encode(&w, BroadcastDtype::F32).unwrap();
        let published = w.params.as_ref().unwrap().tensors["pi.w"].data.as_ptr();
        assert_eq!(full.tensors[0].data.as_ptr(), published, "no copy in f32");
        let half = encode(&w, BroadcastDtype::F16).unwrap();
        assert_eq!(half.tensors[0].dtype, Dtype::F16);
        assert_eq!(half.tensors[0].data.len() * 2, full.tensors[0].data.len());
        assert_eq!(
            half.tensors[1].dtype,
            Dtype::I64,
            "integers are not converted"
        );
        // A value f16 cannot hold keeps its tensor in f32.
        let big = weights(1, &[1.0, 1e6]);
        let half = convert(big.params.as_ref().unwrap(), BroadcastDtype::F16).unwrap();
        assert_eq!(half.tensors["pi.w"].dtype, Dtype::F32 as i32);
    }

    #[test]
    fn empty_versions_and_empty_tensors_still_send_a_message() {
        let none = Weights {
            version: 2,
            params: Some(TensorMap::default()),
            ..Weights::default()
        };
        let messages = chunked(&encode(&none, BroadcastDtype::F32).unwrap(), 64, 1);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].slice.as_ref().unwrap().count, 0);
        let empty = weights(3, &[]);
        let messages = chunked(&encode(&empty, BroadcastDtype::F32).unwrap(), 64, 1);
        assert_eq!(messages.len(), 2, "one empty chunk for the empty tensor");
        assert!(messages[0].chunk.is_empty());
    }

    /// Polls `done` every 5 ms, failing after 10 s (far more than any wait below needs).
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Version 0 of 100 f32 values published, an f32 cache and fresh counts.
    fn one_version() -> (watch::Sender<Arc<Weights>>, Arc<EncodedCache>, Counts) {
        let tx = watch::Sender::new(Arc::new(weights(0, &[1.0; 100])));
        let cache = Arc::new(EncodedCache::new(BroadcastDtype::F32));
        (tx, cache, Counts::default())
    }

    fn chunked_in(cache: &Arc<EncodedCache>, chunk_bytes: usize) -> Framing {
        Framing::Chunked {
            cache: cache.clone(),
            chunk_bytes,
        }
    }

    /// A version of 14 chunks that nobody reads: the producer queues two, waits the stall
    /// timeout for room, then gives up and uncounts itself; the stream, read at last, holds the
    /// two and ends with `Stalled`.
    #[tokio::test]
    async fn a_subscriber_that_reads_nothing_is_dropped() {
        let (tx, cache, counts) = one_version();
        let rx = tx.subscribe();
        let stall = Duration::from_millis(50);
        let stream = subscription(rx, -1, chunked_in(&cache, 32), stall, counts.open());
        assert_eq!(counts.open.load(Ordering::Relaxed), 1);
        eventually("the subscriber is dropped", || {
            counts.dropped.load(Ordering::Relaxed) == 1
        })
        .await;
        eventually("it stops counting", || {
            counts.open.load(Ordering::Relaxed) == 0
        })
        .await;
        let got: Vec<_> = stream.collect().await;
        assert_eq!(got.len(), QUEUED_MESSAGES + 1, "{got:?}");
        assert!(got[..QUEUED_MESSAGES].iter().all(|m| m.is_ok()));
        let last = got.last().unwrap().as_ref().unwrap_err();
        assert!(
            matches!(last, BroadcastError::Stalled(s) if *s == stall),
            "{last}"
        );
    }

    /// Progress resets the clock: a subscriber that takes a message every 20 ms keeps a
    /// subscription whose stall timeout is 1 s, through 14 chunks (280 ms).
    #[tokio::test]
    async fn a_slow_reader_is_not_dropped() {
        let (tx, cache, counts) = one_version();
        let rx = tx.subscribe();
        let stall = Duration::from_secs(1);
        let mut stream = Box::pin(subscription(
            rx,
            -1,
            chunked_in(&cache, 32),
            stall,
            counts.open(),
        ));
        let chunks = chunked(
            &encode(&weights(0, &[1.0; 100]), BroadcastDtype::F32).unwrap(),
            32,
            1,
        );
        assert_eq!(chunks.len(), 14);
        for _ in 0..chunks.len() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            stream.next().await.unwrap().unwrap();
        }
        assert_eq!(counts.dropped.load(Ordering::Relaxed), 0);
        assert_eq!(counts.open.load(Ordering::Relaxed), 1);
    }

    /// A subscriber that goes away while the producer waits for the next version stops
    /// counting at once, not at the next version.
    #[tokio::test]
    async fn a_subscriber_that_leaves_between_versions_stops_counting() {
        let (_tx, rx) = watch::channel(Arc::new(weights(3, &[1.0; 4])));
        let counts = Counts::default();
        let stall = Duration::from_secs(60);
        let mut stream = Box::pin(subscription(rx, -1, Framing::Whole, stall, counts.open()));
        let _second = counts.open();
        let whole = stream.next().await.unwrap().unwrap();
        assert_eq!((whole.version, whole.subscribers), (3, 2));
        assert!(whole.params.is_some() && whole.slice.is_none());
        drop(stream);
        eventually("the subscription stops counting", || {
            counts.open.load(Ordering::Relaxed) == 1
        })
        .await;
    }

    /// A subscriber that asked for versions after the newest gets nothing until a newer one.
    #[tokio::test]
    async fn versions_up_to_after_are_not_sent() {
        let (tx, rx) = watch::channel(Arc::new(weights(5, &[1.0; 4])));
        let counts = Counts::default();
        let stall = Duration::from_secs(60);
        let mut stream = Box::pin(subscription(rx, 5, Framing::Whole, stall, counts.open()));
        let early = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        assert!(early.is_err(), "version 5 was sent: {early:?}");
        tx.send_replace(Arc::new(weights(6, &[1.0; 4])));
        assert_eq!(stream.next().await.unwrap().unwrap().version, 6);
        assert_eq!(counts.skipped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_corrupt_published_tensor_is_refused() {
        let mut w = weights(1, &[1.0; 4]);
        let t = w.params.as_mut().unwrap().tensors.get_mut("pi.w").unwrap();
        t.data = t.data.slice(0..10);
        let error = encode(&w, BroadcastDtype::F32).unwrap_err();
        assert!(error.to_string().contains("needs 16 bytes"), "{error}");
    }
}
