//! f32 parameters narrowed to f16 for the broadcast: one pass over each tensor (range check
//! and conversion together, a cache-sized block at a time, with the CPU's vector conversion),
//! tensors spread over the machine's cores, into buffers recycled from earlier versions.
//!
//! Recycling is most of the speed: writing 100 MB into fresh memory costs a page fault every
//! 4 KiB, which took longer than the conversion itself (50M parameters: ~60 ms of faults
//! against ~10 ms of conversion on the 2-core VM).

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use fleetrl_proto::{Dtype, Tensor as ProtoTensor, TensorError, TensorMap};
use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::config::BroadcastDtype;

/// Largest finite f16 value; f32 tensors with larger magnitudes (a running count in the
/// observation statistics) stay f32 rather than overflow.
const F16_MAX: f32 = 65504.0;

/// Models smaller than this many bytes are converted on one thread (starting threads would
/// cost more than they save).
const PARALLEL_BYTES: usize = 4 << 20;

/// Most buffers a pool keeps between two conversions (a few versions of a model of many
/// tensors).
const POOL_BUFFERS: usize = 1024;

/// f16 buffers that earlier versions are done with (every subscriber has sent their chunks),
/// for the next versions to write into. Cloning shares the pool.
#[derive(Debug, Default, Clone)]
pub struct HalfPool(Arc<Mutex<Vec<Vec<f16>>>>);

impl HalfPool {
    /// An empty buffer with room for `n` elements: the smallest spare that fits, or new.
    fn take(&self, n: usize) -> Vec<f16> {
        let mut spares = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let best = spares
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= n)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        let mut buffer = match best {
            Some(i) => spares.swap_remove(i),
            None => Vec::with_capacity(n),
        };
        buffer.clear();
        buffer
    }

    /// Drops every spare: what a conversion did not take is surplus (buffers of versions a
    /// slow subscriber held longer), so between conversions the pool holds at most the
    /// buffers of the versions finished since the last one.
    fn drop_spares(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Bytes that share `halves` and give them back to the pool when the last one is dropped.
    fn bytes(&self, halves: Vec<f16>) -> Bytes {
        Bytes::from_owner(Pooled {
            halves,
            pool: Arc::downgrade(&self.0),
        })
    }
}

/// An f16 buffer lent out as [`Bytes`].
struct Pooled {
    halves: Vec<f16>,
    pool: Weak<Mutex<Vec<Vec<f16>>>>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        let halves = &self.halves;
        // SAFETY: f16 is two plain bytes with no padding; reading them as u8 is always valid,
        // and the slice borrows `self`. They are the little-endian encoding (see `super`).
        unsafe { std::slice::from_raw_parts(halves.as_ptr().cast::<u8>(), halves.len() * 2) }
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            let mut spares = pool.lock().unwrap_or_else(|e| e.into_inner());
            if spares.len() < POOL_BUFFERS {
                spares.push(std::mem::take(&mut self.halves));
            }
        }
    }
}

/// `params` with every f32 tensor in `dtype` (others, and f32 tensors f16 cannot hold,
/// unchanged).
pub fn convert(params: &TensorMap, dtype: BroadcastDtype) -> Result<TensorMap, TensorError> {
    convert_with(params, dtype, &HalfPool::default())
}

/// [`convert`] into buffers from `pool`.
pub fn convert_with(
    params: &TensorMap,
    dtype: BroadcastDtype,
    pool: &HalfPool,
) -> Result<TensorMap, TensorError> {
    if dtype == BroadcastDtype::F32 {
        return Ok(params.clone());
    }
    let mut todo = Vec::new();
    for (name, t) in &params.tensors {
        if t.validate()? == Dtype::F32 {
            todo.push((name, t));
        }
    }
    // Largest first, each to the least loaded lane: balanced to within one tensor.
    todo.sort_by_key(|(_, t)| std::cmp::Reverse(t.data.len()));
    let total: usize = todo.iter().map(|(_, t)| t.data.len()).sum();
    let cores = crate::cpu::cores();
    let lanes = if total < PARALLEL_BYTES {
        1
    } else {
        cores.min(todo.len())
    };
    let mut work: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); lanes.max(1)];
    for (i, (_, t)) in todo.iter().enumerate() {
        let lane = work
            .iter_mut()
            .min_by_key(|(load, _)| *load)
            .expect("at least one lane");
        lane.0 += t.data.len();
        lane.1.push(i);
    }
    let narrow = |mine: &[usize]| -> Vec<(usize, Option<Vec<f16>>)> {
        mine.iter()
            .map(|&i| {
                let data = &todo[i].1.data;
                let mut halves = pool.take(data.len() / 4);
                (i, narrow_f16(data, &mut halves).then_some(halves))
            })
            .collect()
    };
    let narrowed: Vec<(usize, Option<Vec<f16>>)> = if work.len() == 1 {
        narrow(&work[0].1)
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .iter()
                .map(|(_, mine)| scope.spawn(|| narrow(mine)))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("f16 conversion does not panic"))
                .collect()
        })
    };
    pool.drop_spares();
    let mut out = params.clone();
    for (i, halves) in narrowed {
        let (name, t) = todo[i];
        if let Some(halves) = halves {
            let narrowed = ProtoTensor {
                dtype: Dtype::F16 as i32,
                shape: t.shape.clone(),
                data: pool.bytes(halves),
            };
            out.tensors.insert(name.clone(), narrowed);
        }
    }
    Ok(out)
}

/// Writes little-endian f32 `data` into `out` as f16; false (and `out` unfinished) when a
/// value, NaN included, is out of f16's range.
fn narrow_f16(data: &[u8], out: &mut Vec<f16>) -> bool {
    const BLOCK: usize = 4096;
    let mut floats = [0f32; BLOCK];
    let mut halves = [f16::ZERO; BLOCK];
    // SAFETY: every bit pattern is a valid f32; `align_to` only reinterprets the aligned middle.
    let (head, aligned, tail) = unsafe { data.align_to::<f32>() };
    let aligned = (head.is_empty() && tail.is_empty()).then_some(aligned);
    for (b, bytes) in data.chunks(BLOCK * 4).enumerate() {
        let n = bytes.len() / 4;
        let block: &[f32] = match aligned {
            Some(all) => &all[b * BLOCK..b * BLOCK + n],
            None => {
                for (f, e) in floats.iter_mut().zip(bytes.chunks_exact(4)) {
                    *f = f32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                }
                &floats[..n]
            }
        };
        // No early exit: the branch-free form vectorizes.
        let fits = block
            .iter()
            .fold(true, |fits, f| fits & (f.abs() <= F16_MAX));
        if !fits {
            return false;
        }
        halves[..n].convert_from_f32_slice(block);
        out.extend_from_slice(&halves[..n]);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map of f32 tensors of `sizes` elements (normal, scale 300) plus edge cases.
    fn params(sizes: &[i64]) -> TensorMap {
        let mut params = TensorMap::default();
        for (i, &n) in sizes.iter().enumerate() {
            let t = tch::Tensor::randn([n], (tch::Kind::Float, tch::Device::Cpu)) * 300.0;
            params.tensors.insert(
                format!("t{i}"),
                crate::models::weights::to_proto(&t).unwrap(),
            );
        }
        let edge = tch::Tensor::from_slice(&[65504.0f32, -65504.0, 1e-8, 0.0]);
        params.tensors.insert(
            "edge".into(),
            crate::models::weights::to_proto(&edge).unwrap(),
        );
        let nan = tch::Tensor::from_slice(&[1.0f32, f32::NAN]);
        params.tensors.insert(
            "nan".into(),
            crate::models::weights::to_proto(&nan).unwrap(),
        );
        params
            .tensors
            .insert("steps".into(), ProtoTensor::from_slice(&[1], &[7i64]));
        params
    }

    #[test]
    fn f16_rounds_like_torch_on_every_core_and_nan_or_integers_are_left_alone() {
        // Over PARALLEL_BYTES: converted on every core.
        let mut params = params(&[700_000, 500_000, 300_000, 3]);
        // Bytes at an odd address, as a slice of a received message can be.
        let mut odd = params.tensors["t2"].clone();
        let mut bytes = vec![0u8];
        bytes.extend_from_slice(&odd.data);
        odd.data = Bytes::from(bytes).slice(1..);
        params.tensors.insert("odd".into(), odd);
        let half = convert(&params, BroadcastDtype::F16).unwrap();
        assert_eq!(half.tensors["odd"], half.tensors["t2"]);
        for (name, t) in &params.tensors {
            let got = &half.tensors[name];
            if name == "nan" || name == "steps" {
                assert_eq!(got, t, "{name} stays as it is");
                continue;
            }
            let torch = crate::models::weights::from_proto(t)
                .unwrap()
                .to_kind(tch::Kind::Half);
            assert_eq!(
                got,
                &crate::models::weights::to_proto(&torch).unwrap(),
                "{name}"
            );
        }
    }

    #[test]
    fn buffers_come_back_when_a_version_is_dropped_and_are_reused() {
        let pool = HalfPool::default();
        let params = params(&[1000, 10]);
        let first = convert_with(&params, BroadcastDtype::F16, &pool).unwrap();
        let address = first.tensors["t0"].data.as_ptr();
        let chunk = first.tensors["t0"].data.slice(10..20);
        drop(first);
        assert!(pool.0.lock().unwrap().len() == 2, "t1 and edge are back");
        drop(chunk);
        assert_eq!(
            pool.0.lock().unwrap().len(),
            3,
            "t0 once its last chunk is gone"
        );
        let second = convert_with(&params, BroadcastDtype::F16, &pool).unwrap();
        assert_eq!(second.tensors["t0"].data.as_ptr(), address, "reused");
        assert_eq!(second, convert(&params, BroadcastDtype::F16).unwrap());
    }

    #[test]
    fn a_conversion_drops_the_spares_it_did_not_need() {
        let pool = HalfPool::default();
        let params = params(&[1000]);
        let held: Vec<_> = (0..3)
            .map(|_| convert_with(&params, BroadcastDtype::F16, &pool).unwrap())
            .collect();
        drop(held);
        assert_eq!(
            pool.0.lock().unwrap().len(),
            6,
            "three versions' worth back"
        );
        let _next = convert_with(&params, BroadcastDtype::F16, &pool).unwrap();
        assert_eq!(
            pool.0.lock().unwrap().len(),
            0,
            "one version's worth reused, the rest dropped"
        );
    }
}
