//! The learner's side of the broadcast: a version prepared once for every subscriber, cut into
//! chunk messages on tensor boundaries, and the stream each subscriber gets.

use std::sync::Arc;

use bytes::Bytes;
use fleetrl_proto::v1::{Weights, WeightsSlice};
use fleetrl_proto::Dtype;
use futures::{Stream, StreamExt};
use tokio::sync::{watch, Mutex};
use tokio_stream::wrappers::WatchStream;

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

/// What one chunked subscriber receives: every version newer than `after` as it is published,
/// each whole and in chunks of `chunk_bytes`; whenever the subscriber is ready for the next
/// version it gets the newest one. `subscribers` reports the current subscriber count in each
/// message.
pub fn subscription(
    weights: watch::Receiver<Arc<Weights>>,
    cache: Arc<EncodedCache>,
    after: i64,
    chunk_bytes: usize,
    subscribers: impl Fn() -> u32 + Send + 'static,
) -> impl Stream<Item = Result<Weights, BroadcastError>> + Send {
    WatchStream::new(weights)
        .filter(move |w| std::future::ready(w.version > after))
        .then(move |w| {
            let cache = cache.clone();
            async move { cache.get(w).await }
        })
        .flat_map(move |encoded| {
            let messages = match encoded {
                Ok(e) => chunked(&e, chunk_bytes, subscribers())
                    .into_iter()
                    .map(Ok)
                    .collect(),
                Err(error) => vec![Err(error)],
            };
            futures::stream::iter(messages)
        })
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

    #[test]
    fn a_corrupt_published_tensor_is_refused() {
        let mut w = weights(1, &[1.0; 4]);
        let t = w.params.as_mut().unwrap().tensors.get_mut("pi.w").unwrap();
        t.data = t.data.slice(0..10);
        let error = encode(&w, BroadcastDtype::F32).unwrap_err();
        assert!(error.to_string().contains("needs 16 bytes"), "{error}");
    }
}
