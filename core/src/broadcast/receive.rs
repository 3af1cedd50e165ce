//! The actor's side of the broadcast: chunks written straight into f32 tensors that are reused
//! from version to version, so receiving a version allocates nothing once the first arrived
//! and nothing is left for the env loop but copying the finished tensors into its model.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fleetrl_proto::v1::{Weights, WeightsSlice};
use fleetrl_proto::{Dtype, Tensor as ProtoTensor};
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use tch::{Kind, Tensor};

use super::wire::WireWeights;
use super::BroadcastError;

/// Sets of tensors that finished versions gave back, for the next versions to write into.
/// Two spares cover the usual case: one version being received while the env loop holds
/// another (more are allocated, then dropped, when an actor holds several versions back).
#[derive(Debug, Default, Clone)]
struct Pool(Arc<Mutex<Vec<TensorSet>>>);

/// A version's worth of named tensors.
type TensorSet = Vec<(String, Tensor)>;

const POOL_SPARES: usize = 2;

impl Pool {
    fn take(&self) -> TensorSet {
        self.0
            .lock()
            .map(|mut p| p.pop())
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    fn give(&self, set: TensorSet) {
        if let Ok(mut pool) = self.0.lock() {
            if pool.len() < POOL_SPARES && !set.is_empty() {
                pool.push(set);
            }
        }
    }
}

/// One whole received version, every tensor in f32 (f16 on the wire widened) or its own
/// integer type, sorted by name. Its tensors go back to the [`Receiver`] that filled them
/// when it is dropped.
#[derive(Debug)]
pub struct Received {
    /// The policy version.
    pub version: i64,
    /// Subscribers when the learner sent it.
    pub subscribers: u32,
    /// When the learner published it.
    pub published_unix_nanos: i64,
    /// A mutex only to make the version shareable across threads (tch tensors are `Send`, not
    /// `Sync`); nobody writes to them until they are back in the pool.
    tensors: Mutex<Vec<(String, Tensor)>>,
    pool: Pool,
}

impl Received {
    /// Runs `f` on the named tensors (to copy them into a model: keep no handle to them
    /// past `f`, they are overwritten by a later version once this one is dropped).
    pub fn with_tensors<R>(&self, f: impl FnOnce(&[(String, Tensor)]) -> R) -> R {
        let tensors = self.tensors.lock().unwrap_or_else(|e| e.into_inner());
        f(&tensors)
    }
}

impl Drop for Received {
    fn drop(&mut self) {
        let tensors = self.tensors.get_mut().unwrap_or_else(|e| e.into_inner());
        self.pool.give(std::mem::take(tensors));
    }
}

/// The most tensors a version's announced count reserves room for before any arrive (a
/// count of `u32::MAX` once reserved ~170 GB and aborted the actor).
const MAX_RESERVED_TENSORS: usize = 1024;

/// The version being received: tensors finished so far and where the next chunk must go.
#[derive(Debug)]
struct Partial {
    version: i64,
    count: u32,
    /// The tensor being written and the next byte offset in its wire bytes.
    index: u32,
    offset: u64,
    /// Its dtype and size on the wire.
    wire: Dtype,
    wire_bytes: u64,
    done: Vec<(String, Tensor)>,
    /// Tensors from an earlier version, reused when name, shape and kind match.
    spare: Vec<(String, Tensor)>,
}

/// Receives a chunked weight stream version by version; passes whole (unchunked) messages
/// through. Contract: chunks of a version arrive in order (see `WeightsSlice`); a chunk that
/// does not continue the current version is an error, after which the next version starting
/// at tensor 0, byte 0 is received normally.
#[derive(Debug, Default)]
pub struct Receiver {
    pool: Pool,
    partial: Option<Partial>,
}

impl Receiver {
    /// Takes the next message of the stream; returns the version it completes, if any.
    pub fn push(&mut self, msg: Weights) -> Result<Option<Received>, BroadcastError> {
        let chunk = [msg.chunk.clone()];
        self.push_parts(&msg, &chunk)
    }

    /// [`Receiver::push`] for a message read by [`super::wire::subscribe`]: the chunk's
    /// pieces are written into place one after the other, never joined.
    pub fn push_wire(&mut self, msg: WireWeights) -> Result<Option<Received>, BroadcastError> {
        self.push_parts(&msg.header, &msg.chunk)
    }

    /// `msg` with its chunk in `chunk` (`msg.chunk` is not read).
    fn push_parts(
        &mut self,
        msg: &Weights,
        chunk: &[Bytes],
    ) -> Result<Option<Received>, BroadcastError> {
        if let Some(params) = &msg.params {
            let mut tensors = Vec::with_capacity(params.tensors.len());
            for (name, t) in &params.tensors {
                tensors.push((name.clone(), to_f32_tensor(t)?));
            }
            tensors.sort_by(|a, b| a.0.cmp(&b.0));
            return Ok(Some(self.finish(msg, tensors)));
        }
        let slice = msg
            .slice
            .as_ref()
            .ok_or(BroadcastError::Empty(msg.version))?;
        let result = self.write(msg, slice, chunk);
        if result.is_err() {
            if let Some(partial) = self.partial.take() {
                self.pool.give(partial.done);
            }
        }
        result
    }

    fn write(
        &mut self,
        msg: &Weights,
        slice: &WeightsSlice,
        chunk: &[Bytes],
    ) -> Result<Option<Received>, BroadcastError> {
        if slice.index == 0 && slice.offset == 0 {
            if slice.count == 0 {
                return Ok(Some(self.finish(msg, Vec::new())));
            }
            self.start(msg.version, slice.count);
        }
        let partial = self.expect(msg.version, slice)?;
        if slice.offset == 0 {
            partial.begin_tensor(msg.version, slice)?;
        } else if partial
            .done
            .last()
            .is_none_or(|(name, _)| *name != slice.name)
        {
            return Err(BroadcastError::BadSlice {
                version: msg.version,
                name: slice.name.clone(),
                message: format!("continues tensor {} under another name", slice.index),
            });
        }
        partial.write_chunk(msg.version, &slice.name, chunk)?;
        if partial.offset < partial.wire_bytes {
            return Ok(None);
        }
        partial.index += 1;
        partial.offset = 0;
        if partial.index < partial.count {
            return Ok(None);
        }
        let done = self.partial.take().map(|p| p.done).unwrap_or_default();
        Ok(Some(self.finish(msg, done)))
    }

    /// Starts `version`, reusing a version's worth of tensors from the pool.
    fn start(&mut self, version: i64, count: u32) {
        let spare = match self.partial.take() {
            Some(abandoned) => abandoned.done,
            None => self.pool.take(),
        };
        self.partial = Some(Partial {
            version,
            count,
            index: 0,
            offset: 0,
            wire: Dtype::Unspecified,
            wire_bytes: 0,
            // The count is the sender's word: reserve for at most a model's worth of tensors
            // and let a larger (honest) count grow the vector as tensors arrive.
            done: Vec::with_capacity((count as usize).min(MAX_RESERVED_TENSORS)),
            spare,
        });
    }

    /// The version being received, if `slice` continues it.
    fn expect(
        &mut self,
        version: i64,
        slice: &WeightsSlice,
    ) -> Result<&mut Partial, BroadcastError> {
        let out_of_order = |p: Option<&Partial>| BroadcastError::OutOfOrder {
            version,
            index: slice.index,
            offset: slice.offset,
            expected_version: p.map_or(-1, |p| p.version),
            expected_index: p.map_or(0, |p| p.index),
            expected_offset: p.map_or(0, |p| p.offset),
        };
        match self.partial.as_mut() {
            Some(p)
                if p.version == version
                    && p.index == slice.index
                    && p.offset == slice.offset
                    && p.count == slice.count =>
            {
                Ok(p)
            }
            other => Err(out_of_order(other.map(|p| &*p))),
        }
    }

    fn finish(&self, msg: &Weights, tensors: Vec<(String, Tensor)>) -> Received {
        Received {
            version: msg.version,
            subscribers: msg.subscribers,
            published_unix_nanos: msg.published_unix_nanos,
            tensors: Mutex::new(tensors),
            pool: self.pool.clone(),
        }
    }
}

impl Partial {
    /// Checks the header of a tensor's first chunk and picks its destination.
    fn begin_tensor(&mut self, version: i64, slice: &WeightsSlice) -> Result<(), BroadcastError> {
        let bad = |message: String| BroadcastError::BadSlice {
            version,
            name: slice.name.clone(),
            message,
        };
        let header = ProtoTensor {
            dtype: slice.dtype,
            shape: slice.shape.clone(),
            data: Default::default(),
        };
        let wire = header.checked_dtype().map_err(|e| bad(e.to_string()))?;
        let numel = header.numel().map_err(|e| bad(e.to_string()))?;
        let kind = if wire == Dtype::F16 {
            Kind::Float
        } else {
            kind_of(wire)
        };
        let reused = self
            .spare
            .iter()
            .position(|(n, t)| *n == slice.name && t.size() == slice.shape && t.kind() == kind);
        let tensor = match reused {
            Some(i) => self.spare.swap_remove(i).1,
            None => Tensor::f_empty(slice.shape.as_slice(), (kind, tch::Device::Cpu))
                .map_err(|e| bad(e.to_string()))?,
        };
        self.done.push((slice.name.clone(), tensor));
        self.wire = wire;
        self.wire_bytes = (numel * wire.size()) as u64;
        Ok(())
    }

    /// Writes `chunk` (its pieces one after the other) at the current offset of the current
    /// tensor, widening f16.
    fn write_chunk(
        &mut self,
        version: i64,
        name: &str,
        chunk: &[Bytes],
    ) -> Result<(), BroadcastError> {
        let size = self.wire.size();
        let length: usize = chunk.iter().map(Bytes::len).sum();
        let end = self.offset + length as u64;
        if end > self.wire_bytes {
            return Err(BroadcastError::Overrun {
                version,
                name: name.to_string(),
                end,
                size: self.wire_bytes,
            });
        }
        if !length.is_multiple_of(size) {
            return Err(BroadcastError::BadSlice {
                version,
                name: name.to_string(),
                message: format!(
                    "{length} bytes is not a whole number of {:?} elements",
                    self.wire
                ),
            });
        }
        let (_, dest) = self
            .done
            .last_mut()
            .expect("begin_tensor pushed the destination");
        let first = self.offset as usize / size;
        if self.wire == Dtype::F16 {
            let out = &mut elements_mut::<f32>(dest)[first..first + length / 2];
            widen_f16_pieces(chunk, out);
        } else {
            let mut at = self.offset as usize;
            let dest = elements_mut::<u8>(dest);
            for piece in chunk {
                dest[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
        }
        self.offset = end;
        Ok(())
    }
}

/// The storage of `t` as a slice of `T` (bytes for any kind, `f32` for a float tensor).
/// `t` must be a contiguous CPU tensor that only this code holds: the pool's and new tensors
/// are, since [`Received`] lends its tensors only for the length of a closure.
fn elements_mut<T>(t: &mut Tensor) -> &mut [T] {
    let bytes = t.numel() * t.kind().elt_size_in_bytes();
    let len = bytes / std::mem::size_of::<T>();
    if len == 0 {
        return &mut [];
    }
    let ptr = t.data_ptr() as *mut T;
    assert!(
        t.is_contiguous() && t.device() == tch::Device::Cpu && ptr.is_aligned(),
        "weights destination must be a contiguous, aligned CPU tensor"
    );
    // SAFETY: the tensor's storage is `bytes` contiguous, aligned bytes on the CPU (checked
    // above), and the `&mut` borrow of the only handle keeps anyone else from using it while
    // the slice lives.
    unsafe { std::slice::from_raw_parts_mut(ptr, len) }
}

/// Widens the little-endian f16 elements in `pieces` (joined, a whole number of elements)
/// into `out`. A piece may end inside an element: frames are cut wherever flow control cuts.
fn widen_f16_pieces(pieces: &[Bytes], out: &mut [f32]) {
    let mut at = 0;
    let mut low: Option<u8> = None;
    for piece in pieces {
        let mut bytes = &piece[..];
        if let (Some(b), Some((&high, rest))) = (low, bytes.split_first()) {
            out[at] = half::f16::from_le_bytes([b, high]).to_f32();
            at += 1;
            low = None;
            bytes = rest;
        }
        let whole = bytes.len() / 2;
        widen_f16(&bytes[..whole * 2], &mut out[at..at + whole]);
        at += whole;
        if bytes.len() % 2 == 1 {
            low = Some(bytes[bytes.len() - 1]);
        }
    }
}

/// Widens little-endian f16 `bytes` into `out` (same element count; the machine is
/// little-endian, see `super`), with the CPU's vector conversion (F16C on x86) and no
/// allocation. A received chunk need not be 2-byte aligned;
/// one that is not goes through a small aligned buffer.
fn widen_f16(bytes: &[u8], out: &mut [f32]) {
    // SAFETY: every bit pattern is a valid u16; `align_to` only reinterprets the aligned middle.
    let (head, bits, tail) = unsafe { bytes.align_to::<u16>() };
    if head.is_empty() && tail.is_empty() {
        bits.reinterpret_cast::<half::f16>()
            .convert_to_f32_slice(out);
        return;
    }
    const BLOCK: usize = 4096;
    let mut buffer = [0u16; BLOCK];
    for (bytes, out) in bytes.chunks(BLOCK * 2).zip(out.chunks_mut(BLOCK)) {
        let bits = &mut buffer[..out.len()];
        for (b, pair) in bits.iter_mut().zip(bytes.chunks_exact(2)) {
            *b = u16::from_le_bytes([pair[0], pair[1]]);
        }
        bits.reinterpret_cast::<half::f16>()
            .convert_to_f32_slice(out);
    }
}

fn kind_of(dtype: Dtype) -> Kind {
    match dtype {
        Dtype::F32 => Kind::Float,
        Dtype::F64 => Kind::Double,
        Dtype::I64 => Kind::Int64,
        Dtype::I32 => Kind::Int,
        Dtype::U8 | Dtype::Unspecified => Kind::Uint8,
        Dtype::Bool => Kind::Bool,
        Dtype::F16 => Kind::Half,
    }
}

/// One tensor of an unchunked message as a tch tensor, f16 widened back to f32.
fn to_f32_tensor(t: &ProtoTensor) -> Result<Tensor, BroadcastError> {
    let tensor = crate::models::weights::from_proto(t)?;
    Ok(if tensor.kind() == Kind::Half {
        tensor.to_kind(Kind::Float)
    } else {
        tensor
    })
}

#[cfg(test)]
mod tests;
