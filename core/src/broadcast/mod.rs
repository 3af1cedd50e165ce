//! Weight broadcast: each published version prepared once (optionally in f16) and streamed to
//! every subscriber in chunks cut on tensor boundaries, so no gRPC message-size limit caps
//! the model size and a receiver writes each chunk straight into its own tensor.
//!
//! The learner side ([`send`]) keeps the newest version in an [`EncodedCache`] and turns it
//! into a run of `Weights` messages with [`chunked`]; [`subscription`] is the whole stream one
//! subscriber gets (only the newest version whenever it is ready for the next: a slow
//! subscriber skips versions instead of queueing them, and one that reads nothing for a while
//! is dropped). The actor side ([`receive`], [`follow_weights`]) feeds
//! what arrives into a [`Receiver`], which writes every chunk into f32 tensors it reuses from
//! version to version (f16 widened as it arrives) and hands back a whole [`Received`] version:
//! no reassembly buffer, no decode pass, no fresh model-sized allocation per version.

mod follow;
mod narrow;
mod receive;
mod send;
pub mod wire;

pub use follow::{follow_weights, Follower, LearnerLost};
pub use narrow::{convert, convert_with, HalfPool};
pub use receive::{Received, Receiver};
pub use send::{
    chunked, encode, encode_with, subscription, Counts, Encoded, EncodedCache, EncodedTensor,
    Framing, SubscriberEvents, QUEUED_MESSAGES,
};

// Tensor bytes go on the wire as they lie in memory: little-endian.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "the weight broadcast assumes a little-endian machine"
);

use fleetrl_proto::TensorError;

/// Bytes per chunk message actors ask for: large enough that per-message costs vanish (1 MiB
/// is one HTTP/2 frame at [`fleetrl_runtime::net::MAX_FRAME_BYTES`]), small enough that writing one
/// chunk into place keeps the receiving async task well under a millisecond.
pub const DEFAULT_CHUNK_BYTES: u32 = 1024 * 1024;

/// Why weights could not be encoded or received.
#[derive(Debug, thiserror::Error)]
pub enum BroadcastError {
    /// A chunk does not continue the version being received.
    #[error(
        "weights chunk of version {version} (tensor {index} at byte {offset}); expected tensor \
         {expected_index} at byte {expected_offset} of version {expected_version}"
    )]
    OutOfOrder {
        /// The chunk's version.
        version: i64,
        /// The chunk's tensor index.
        index: u32,
        /// The chunk's byte offset within its tensor.
        offset: u64,
        /// The version being received (-1: none, a version must start at tensor 0, byte 0).
        expected_version: i64,
        /// The tensor expected next.
        expected_index: u32,
        /// The byte offset expected next.
        expected_offset: u64,
    },
    /// A chunk runs past the end of its tensor.
    #[error("weights of version {version}: chunk of `{name}` ends at byte {end}, past the tensor's {size} bytes")]
    Overrun {
        /// The version.
        version: i64,
        /// The tensor.
        name: String,
        /// Where the chunk ends.
        end: u64,
        /// The tensor's size on the wire.
        size: u64,
    },
    /// A chunk's header is unusable (unknown dtype, bad shape, split element, bad index).
    #[error("weights of version {version}: bad chunk of `{name}`: {message}")]
    BadSlice {
        /// The version.
        version: i64,
        /// The tensor.
        name: String,
        /// What is wrong.
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
    /// The subscriber took no message for this long (its HTTP/2 window stayed full), so the
    /// learner dropped it; subscribe again to get the newest version.
    #[error("this weight subscriber read nothing for {0:?} and was dropped; subscribe again")]
    Stalled(std::time::Duration),
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

/// A version with an f32 tensor `pi.w` of shape `[2, values.len() / 2]` and an i64 `steps`.
#[cfg(test)]
pub(crate) fn test_weights(version: i64, values: &[f32]) -> fleetrl_proto::v1::Weights {
    use fleetrl_proto::{Tensor, TensorMap};
    let mut params = TensorMap::default();
    let shape = [2, values.len() as i64 / 2];
    params
        .tensors
        .insert("pi.w".into(), Tensor::from_slice(&shape, values));
    params
        .tensors
        .insert("steps".into(), Tensor::from_slice(&[1], &[7i64]));
    fleetrl_proto::v1::Weights {
        version,
        params: Some(params),
        published_unix_nanos: 5,
        ..Default::default()
    }
}
