//! Weight broadcast: each published version serialised once (optionally in f16) and streamed
//! to every subscriber in chunks, so no gRPC message-size limit caps the model size.
//!
//! The learner side keeps the newest encoding in an [`EncodedCache`] and turns it into a run
//! of `Weights` messages with [`chunked`]; [`subscription`] is the whole stream one
//! subscriber gets (only the newest version whenever it is ready for the next: a slow
//! subscriber skips versions instead of queueing them). The actor side feeds what arrives
//! into an [`Assembler`], which hands back a complete `Weights` with `params` per version.

use std::sync::Arc;

use bytes::Bytes;
use fleetrl_proto::v1::Weights;
use fleetrl_proto::{Dtype, Tensor as ProtoTensor, TensorError, TensorMap};
use futures::{Stream, StreamExt};
use prost::Message;
use tokio::sync::{watch, Mutex};
use tokio_stream::wrappers::WatchStream;

use crate::config::BroadcastDtype;

/// Bytes per chunk message actors ask for: large enough that per-message costs vanish, small
/// enough to interleave with other streams on one connection.
pub const DEFAULT_CHUNK_BYTES: u32 = 4 * 1024 * 1024;

/// Why weights could not be encoded or reassembled.
#[derive(Debug, thiserror::Error)]
pub enum BroadcastError {
    /// A chunk does not continue the version being assembled.
    #[error("weights chunk of version {version} at offset {offset}; expected offset {expected} of version {expected_version}")]
    OutOfOrder {
        /// The chunk's version.
        version: i64,
        /// The chunk's offset.
        offset: u64,
        /// The version being assembled.
        expected_version: i64,
        /// The next offset expected.
        expected: u64,
    },
    /// The chunks carry more bytes than announced.
    #[error("weights of version {version}: chunks exceed the announced {total} bytes")]
    Overrun {
        /// The version.
        version: i64,
        /// Announced size.
        total: u64,
    },
    /// The reassembled bytes are not a TensorMap.
    #[error("weights of version {version} do not decode: {message}")]
    Decode {
        /// The version.
        version: i64,
        /// What prost said.
        message: String,
    },
    /// A message with neither `params` nor a chunk.
    #[error("weights message of version {0} has neither params nor a chunk")]
    Empty(i64),
    /// A tensor could not be converted.
    #[error("weights tensor: {0}")]
    Tensor(#[from] TensorError),
    /// The encoding task died.
    #[error("weights encoding failed: {0}")]
    Encode(String),
}

/// Now as Unix time in nanoseconds (0 if the clock is before 1970).
pub fn now_unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Seconds from `published_unix_nanos` to now (0 when it is unset or in the future).
pub fn seconds_since(published_unix_nanos: i64) -> f64 {
    if published_unix_nanos <= 0 {
        return 0.0;
    }
    ((now_unix_nanos() - published_unix_nanos) as f64 * 1e-9).max(0.0)
}

/// Largest finite f16 value; f32 tensors with larger magnitudes (a running count in the
/// observation statistics) stay f32 rather than overflow.
const F16_MAX: f64 = 65504.0;

/// `params` with every f32 tensor in `dtype` (others, and f32 tensors f16 cannot hold,
/// unchanged).
pub fn convert(params: &TensorMap, dtype: BroadcastDtype) -> Result<TensorMap, TensorError> {
    if dtype == BroadcastDtype::F32 {
        return Ok(params.clone());
    }
    let mut out = TensorMap::default();
    for (name, t) in &params.tensors {
        let converted = if t.checked_dtype()? == Dtype::F32 {
            let full = tch::Tensor::try_from(t)?;
            let fits = full.numel() == 0 || full.abs().max().double_value(&[]) <= F16_MAX;
            if fits {
                ProtoTensor::try_from(&full.to_kind(tch::Kind::Half))?
            } else {
                t.clone()
            }
        } else {
            t.clone()
        };
        out.tensors.insert(name.clone(), converted);
    }
    Ok(out)
}

/// One published version, serialised once for every chunked subscriber.
#[derive(Debug, Clone)]
pub struct Encoded {
    /// The policy version.
    pub version: i64,
    /// When the learner published it.
    pub published_unix_nanos: i64,
    /// The serialised TensorMap.
    pub bytes: Bytes,
}

/// Serialises the params of `weights` in `dtype`.
pub fn encode(weights: &Weights, dtype: BroadcastDtype) -> Result<Encoded, BroadcastError> {
    let params = weights
        .params
        .as_ref()
        .ok_or(BroadcastError::Empty(weights.version))?;
    let params = convert(params, dtype)?;
    Ok(Encoded {
        version: weights.version,
        published_unix_nanos: weights.published_unix_nanos,
        bytes: Bytes::from(params.encode_to_vec()),
    })
}

/// The messages that carry `encoded` in chunks of at most `chunk_bytes` (no copies: each
/// chunk is a slice of the one encoding). At least one message, even for an empty map.
pub fn chunked(encoded: &Encoded, chunk_bytes: usize, subscribers: u32) -> Vec<Weights> {
    let total = encoded.bytes.len();
    let step = chunk_bytes.max(1);
    let mut offsets: Vec<usize> = (0..total).step_by(step).collect();
    if offsets.is_empty() {
        offsets.push(0);
    }
    offsets
        .into_iter()
        .map(|start| Weights {
            version: encoded.version,
            params: None,
            subscribers,
            published_unix_nanos: encoded.published_unix_nanos,
            chunk: encoded.bytes.slice(start..(start + step).min(total)),
            chunk_offset: start as u64,
            total_bytes: total as u64,
        })
        .collect()
}

/// The newest encoding, shared by all subscribers: the first to ask for a version encodes it
/// (on a blocking thread), the others wait for it and reuse it.
#[derive(Debug)]
pub struct EncodedCache {
    dtype: BroadcastDtype,
    newest: Mutex<Option<Arc<Encoded>>>,
}

impl EncodedCache {
    /// A cache that encodes in `dtype`.
    pub fn new(dtype: BroadcastDtype) -> EncodedCache {
        EncodedCache {
            dtype,
            newest: Mutex::new(None),
        }
    }

    /// The encoding of `weights`, made now unless the cache holds this version already.
    pub async fn get(&self, weights: Arc<Weights>) -> Result<Arc<Encoded>, BroadcastError> {
        let mut newest = self.newest.lock().await;
        if let Some(e) = newest.as_ref().filter(|e| e.version == weights.version) {
            return Ok(e.clone());
        }
        let dtype = self.dtype;
        let encoded = tokio::task::spawn_blocking(move || encode(&weights, dtype))
            .await
            .map_err(|e| BroadcastError::Encode(e.to_string()))??;
        let encoded = Arc::new(encoded);
        *newest = Some(encoded.clone());
        Ok(encoded)
    }
}

/// What one chunked subscriber receives: every version newer than `after` as it is published,
/// each in chunks of `chunk_bytes`; whenever the subscriber is ready for the next version it
/// gets the newest one. `subscribers` reports the current subscriber count in each message.
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

/// Reassembles chunked versions; passes whole (unchunked) messages through.
#[derive(Debug, Default)]
pub struct Assembler {
    version: i64,
    total: u64,
    buf: Vec<u8>,
}

impl Assembler {
    /// Takes the next message of the stream; returns the version it completes, if any, as a
    /// `Weights` with `params` set. An error leaves the assembler ready for a fresh version.
    pub fn push(&mut self, msg: Weights) -> Result<Option<Weights>, BroadcastError> {
        if msg.params.is_some() {
            return Ok(Some(msg));
        }
        if msg.total_bytes == 0 && msg.chunk.is_empty() && msg.chunk_offset == 0 {
            return Err(BroadcastError::Empty(msg.version));
        }
        if msg.chunk_offset == 0 {
            self.version = msg.version;
            self.total = msg.total_bytes;
            self.buf = Vec::with_capacity(msg.total_bytes as usize);
        } else if msg.version != self.version || msg.chunk_offset != self.buf.len() as u64 {
            let error = BroadcastError::OutOfOrder {
                version: msg.version,
                offset: msg.chunk_offset,
                expected_version: self.version,
                expected: self.buf.len() as u64,
            };
            self.buf = Vec::new();
            return Err(error);
        }
        self.buf.extend_from_slice(&msg.chunk);
        let have = self.buf.len() as u64;
        if have > self.total {
            self.buf = Vec::new();
            return Err(BroadcastError::Overrun {
                version: self.version,
                total: self.total,
            });
        }
        if have < self.total {
            return Ok(None);
        }
        let bytes = Bytes::from(std::mem::take(&mut self.buf));
        let params = TensorMap::decode(bytes).map_err(|e| BroadcastError::Decode {
            version: msg.version,
            message: e.to_string(),
        })?;
        Ok(Some(Weights {
            version: msg.version,
            params: Some(params),
            subscribers: msg.subscribers,
            published_unix_nanos: msg.published_unix_nanos,
            chunk: Bytes::new(),
            chunk_offset: 0,
            total_bytes: 0,
        }))
    }
}

/// One received tensor as a tch tensor, f16 widened back to f32.
pub fn to_f32_tensor(t: &ProtoTensor) -> Result<tch::Tensor, TensorError> {
    let tensor = tch::Tensor::try_from(t)?;
    Ok(if tensor.kind() == tch::Kind::Half {
        tensor.to_kind(tch::Kind::Float)
    } else {
        tensor
    })
}

/// Every tensor of a weights map as a tch tensor, f16 widened back to f32 (what an actor's
/// model loads).
pub fn to_f32_tensors(params: &TensorMap) -> Result<Vec<(String, tch::Tensor)>, TensorError> {
    params
        .tensors
        .iter()
        .map(|(name, t)| Ok((name.clone(), to_f32_tensor(t)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(version: i64, values: &[f32]) -> Weights {
        let mut params = TensorMap::default();
        params.tensors.insert(
            "pi.w".into(),
            ProtoTensor::from_slice(&[values.len() as i64], values),
        );
        params
            .tensors
            .insert("steps".into(), ProtoTensor::from_slice(&[1], &[7i64]));
        Weights {
            version,
            params: Some(params),
            published_unix_nanos: 5,
            ..Weights::default()
        }
    }

    fn reassemble(messages: Vec<Weights>) -> Weights {
        let mut assembler = Assembler::default();
        let mut done = None;
        for (i, m) in messages.iter().enumerate() {
            let out = assembler.push(m.clone()).unwrap();
            assert_eq!(
                out.is_some(),
                i + 1 == messages.len(),
                "completes on the last chunk"
            );
            done = out.or(done);
        }
        done.unwrap()
    }

    #[test]
    fn chunks_reassemble_to_the_same_weights() {
        let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25 - 3.0).collect();
        let w = weights(4, &values);
        let encoded = encode(&w, BroadcastDtype::F32).unwrap();
        let messages = chunked(&encoded, 100, 3);
        assert!(messages.len() > 30, "{} chunks", messages.len());
        assert!(messages
            .iter()
            .all(|m| m.chunk.len() <= 100 && m.params.is_none()));
        let back = reassemble(messages);
        assert_eq!(
            (back.version, back.subscribers, back.published_unix_nanos),
            (4, 3, 5)
        );
        assert_eq!(back.params, w.params);
    }

    #[test]
    fn f16_halves_the_bytes_and_converts_back_within_half_precision() {
        let values: Vec<f32> = (0..4096).map(|i| (i as f32 * 0.37).sin() * 2.0).collect();
        let w = weights(1, &values);
        let full = encode(&w, BroadcastDtype::F32).unwrap().bytes.len();
        let half = encode(&w, BroadcastDtype::F16).unwrap();
        assert!(
            half.bytes.len() * 10 < full * 6,
            "{} vs {full}",
            half.bytes.len()
        );
        let back = reassemble(chunked(&half, 1000, 1));
        let tensors = to_f32_tensors(back.params.as_ref().unwrap()).unwrap();
        let (_, pi) = tensors.iter().find(|(n, _)| n == "pi.w").unwrap();
        assert_eq!(pi.kind(), tch::Kind::Float);
        let got = Vec::<f32>::try_from(pi).unwrap();
        for (g, v) in got.iter().zip(&values) {
            assert!((g - v).abs() <= 2e-3 * v.abs().max(1.0), "{g} vs {v}");
        }
        let (_, steps) = tensors.iter().find(|(n, _)| n == "steps").unwrap();
        assert_eq!(steps.kind(), tch::Kind::Int64, "integers are not converted");
        // A value f16 cannot hold keeps its tensor in f32.
        let big = weights(1, &[1.0, 1e6]);
        let half = convert(big.params.as_ref().unwrap(), BroadcastDtype::F16).unwrap();
        assert_eq!(half.tensors["pi.w"].dtype, Dtype::F32 as i32);
    }

    #[test]
    fn a_chunk_out_of_order_is_an_error_and_the_next_version_still_assembles() {
        let encoded = encode(&weights(2, &[1.0; 100]), BroadcastDtype::F32).unwrap();
        let messages = chunked(&encoded, 50, 1);
        let mut assembler = Assembler::default();
        assembler.push(messages[0].clone()).unwrap();
        let error = assembler.push(messages[2].clone()).unwrap_err();
        assert!(error.to_string().contains("expected offset 50"), "{error}");
        assert!(reassemble(messages).params.is_some());
    }

    async fn next_version(
        stream: &mut (impl Stream<Item = Result<Weights, BroadcastError>> + Unpin),
        assembler: &mut Assembler,
    ) -> i64 {
        loop {
            let msg = stream.next().await.unwrap().unwrap();
            if let Some(w) = assembler.push(msg).unwrap() {
                return w.version;
            }
        }
    }

    #[tokio::test]
    async fn a_slow_subscriber_gets_only_the_newest_version() {
        let (tx, rx) = watch::channel(Arc::new(weights(0, &[0.0; 10])));
        let cache = Arc::new(EncodedCache::new(BroadcastDtype::F32));
        let mut stream = Box::pin(subscription(rx, cache, -1, 16, || 1));
        let mut assembler = Assembler::default();
        assert_eq!(next_version(&mut stream, &mut assembler).await, 0);
        for v in 1..=5 {
            tx.send_replace(Arc::new(weights(v, &[v as f32; 10])));
        }
        let newest = next_version(&mut stream, &mut assembler).await;
        assert_eq!(newest, 5, "versions 1-4 are skipped");
    }
}
