//! Learners across processes (`learner.world_size > 1`) on libtorch's own c10d collectives:
//! a `TCPStore` rendezvous at rank 0's `learner.rendezvous`, then a gloo (CPU) or NCCL (CUDA)
//! process group, reached through the shim in core/csrc/c10d.cpp.
//!
//! A [`Group`] is what the optimisers share ([`crate::optim::Adam::join`]): before every step
//! each rank scales its flat gradient buffer by its share of the update's rows
//! ([`Group::weigh_rows`]) and the group sums the buffers, so every rank takes the same step,
//! the one a single learner would take on the union of the ranks' batches. Rank 0's
//! parameters and optimiser state are broadcast once at the start ([`Group::broadcast`]), and
//! identical steps keep them identical afterwards.
//!
//! A collective that fails (a rank died, or did not answer within the timeout) latches the
//! group: later collectives return at once, and [`Group::failure`] says which rank stopped
//! answering, so the trainer ends the run instead of hanging in the next collective.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tch::{Device, Kind, Tensor};

/// Which c10d process group carries the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `ProcessGroupGloo`: tensors on the CPU (TCP between hosts).
    Gloo,
    /// `ProcessGroupNCCL`: tensors on the rank's CUDA device (NVLink / InfiniBand).
    Nccl,
}

/// How a rank joins its group.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// `host:port` of rank 0's store (rank 0 listens on its port).
    pub rendezvous: String,
    /// This process's index, `0 <= rank < world_size`.
    pub rank: u32,
    /// Processes in the group.
    pub world_size: u32,
    /// The process group kind.
    pub backend: Backend,
    /// Bound on the rendezvous and on every collective.
    pub timeout: Duration,
}

/// Why a group could not be joined or a collective failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CollectiveError {
    /// This build or this machine cannot run the backend.
    #[error("learner.collective_backend: {0}")]
    Unavailable(String),
    /// `learner.rendezvous` is not `host:port`.
    #[error("learner.rendezvous `{0}` is not host:port")]
    Address(String),
    /// The store or the process group could not be set up within the timeout.
    #[error(
        "learner rank {rank} of {world_size}: rendezvous at {rendezvous} failed: {message} (is \
         every rank started with the same learner.rendezvous and learner.world_size?)"
    )]
    Rendezvous {
        /// This rank.
        rank: u32,
        /// The group size.
        world_size: u32,
        /// Rank 0's address.
        rendezvous: String,
        /// What c10d said.
        message: String,
    },
    /// This rank's config differs from rank 0's in `keys`.
    #[error(
        "learner rank {rank}'s config differs from rank 0's in {}: every rank must train with \
         the same config (only learner.rank differs)",
        keys.join(", ")
    )]
    ConfigMismatch {
        /// This rank.
        rank: u32,
        /// The dotted keys whose values differ (or exist on one side only).
        keys: Vec<String>,
    },
    /// A collective failed: a rank died or did not answer within the timeout.
    #[error("learner rank {rank} of {world_size}: {op} failed: {lost}; c10d said: {message}")]
    Collective {
        /// This rank.
        rank: u32,
        /// The group size.
        world_size: u32,
        /// Which collective.
        op: &'static str,
        /// Which rank stopped answering, as far as this rank can tell.
        lost: String,
        /// What c10d said.
        message: String,
    },
    /// Other ranks left the group on purpose ([`Group::leave`]: a shutdown).
    #[error(
        "learner rank {rank} of {world_size}: learner rank{} {} left the group (a shutdown), so \
         this rank stops too",
        if left.len() > 1 { "s" } else { "" },
        left.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    )]
    Left {
        /// This rank.
        rank: u32,
        /// The group size.
        world_size: u32,
        /// The ranks that left.
        left: Vec<u32>,
    },
}

/// How many counts each rank states in an agreement ([`Group::agree`]).
pub const COUNTS: usize = 6;

/// A process group joined through a store, shared by the optimisers of one learner.
///
/// Thread safety: collectives are issued by one thread at a time (the learner's update
/// thread); the handles are only freed on drop.
#[derive(Debug)]
pub struct Group {
    rank: u32,
    world_size: u32,
    /// This rank's share of the current update's rows (f64 bits); 1 / world_size until set.
    weight: AtomicU64,
    /// The first failure; once set, every collective returns it at once.
    failed: Mutex<Option<CollectiveError>>,
    /// Nanoseconds spent in collectives since [`Group::take_busy_seconds`] last read them.
    busy_nanos: AtomicU64,
    group: ffi::Handle,
    store: ffi::Handle,
    timeout: Duration,
}

impl Group {
    /// Joins the group `spec` describes: rank 0 serves the store and the others connect to it,
    /// every rank checks its `config_toml` against rank 0's, then the process group forms.
    /// Blocks until every rank has joined or `spec.timeout` has passed.
    pub fn join(spec: &GroupSpec, config_toml: &str) -> Result<Group, CollectiveError> {
        let (host, port) = spec
            .rendezvous
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
            .ok_or_else(|| CollectiveError::Address(spec.rendezvous.clone()))?;
        let rendezvous = |message: String| CollectiveError::Rendezvous {
            rank: spec.rank,
            world_size: spec.world_size,
            rendezvous: spec.rendezvous.clone(),
            message,
        };
        let timeout_ms = spec.timeout.as_millis().min(i64::MAX as u128) as i64;
        let store = ffi::store(host, port, spec.rank == 0, spec.world_size, timeout_ms)
            .map_err(rendezvous)?;
        const CONFIG_KEY: &str = "fleetrl/config";
        if spec.rank == 0 {
            ffi::store_set(&store, CONFIG_KEY, config_toml.as_bytes()).map_err(rendezvous)?;
        } else {
            let leader = ffi::store_get(&store, CONFIG_KEY).map_err(rendezvous)?;
            let keys = differing_keys(&String::from_utf8_lossy(&leader), config_toml);
            if !keys.is_empty() {
                return Err(CollectiveError::ConfigMismatch {
                    rank: spec.rank,
                    keys,
                });
            }
        }
        let group = ffi::group(&store, spec.backend, spec.rank, spec.world_size, timeout_ms)
            .map_err(rendezvous)?;
        Ok(Group {
            rank: spec.rank,
            world_size: spec.world_size,
            weight: AtomicU64::new((1.0 / f64::from(spec.world_size)).to_bits()),
            failed: Mutex::new(None),
            busy_nanos: AtomicU64::new(0),
            group,
            store,
            timeout: spec.timeout,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Processes in the group.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// Seconds spent in collectives (waiting for the other ranks included) since the last
    /// call: what the learner's progress log reports per update.
    pub fn take_busy_seconds(&self) -> f64 {
        self.busy_nanos.swap(0, Ordering::Relaxed) as f64 * 1e-9
    }

    /// The first failed collective, if any: the group is unusable from then on.
    pub fn failure(&self) -> Option<CollectiveError> {
        self.failed.lock().expect("group lock poisoned").clone()
    }

    /// Sets this rank's weight for the optimiser steps of the next update to its share of the
    /// update's rows, `rows / (sum of every rank's rows)`: one all-reduce of the count, so
    /// ranks may train on batches of different sizes. Returns the rows over all ranks.
    pub fn weigh_rows(&self, rows: usize) -> Result<f64, CollectiveError> {
        let mut counts = [0.0; COUNTS];
        counts[0] = rows as f64;
        let total = self.agree(counts)?[0];
        let weight = if total > 0.0 {
            rows as f64 / total
        } else {
            0.0
        };
        self.weight.store(weight.to_bits(), Ordering::Relaxed);
        Ok(total)
    }

    /// Sums `counts` over the group: the one exchange ranks make between updates (the row
    /// counts of [`Group::weigh_rows`], the learner's on-policy ticks), which also carries
    /// [`Group::leave`], so a rank that leaves is seen by the others whichever of them they
    /// are in. Once a rank has left, returns [`CollectiveError::Left`] naming it, and so does
    /// every later collective.
    pub fn agree(&self, counts: [f64; COUNTS]) -> Result<[f64; COUNTS], CollectiveError> {
        self.exchange(counts, false)
    }

    /// Tells the other ranks that this one stops (a shutdown): their next agreement fails
    /// with [`CollectiveError::Left`] naming it, instead of a lost connection later. Blocks
    /// until they reach that agreement, or the collective timeout.
    pub fn leave(&self) -> Result<(), CollectiveError> {
        self.exchange([0.0; COUNTS], true).map(|_| ())
    }

    /// `counts` then one flag per rank (set by a rank that leaves), summed over the group.
    fn exchange(
        &self,
        counts: [f64; COUNTS],
        leaving: bool,
    ) -> Result<[f64; COUNTS], CollectiveError> {
        let mut values = counts.to_vec();
        values.extend((0..self.world_size).map(|r| f64::from(u8::from(leaving && r == self.rank))));
        let summed = Tensor::from_slice(&values);
        self.all_reduce_sum(&summed, "agreement between the ranks")?;
        let mut sums = [0.0; COUNTS];
        for (i, sum) in sums.iter_mut().enumerate() {
            *sum = summed.double_value(&[i as i64]);
        }
        let left: Vec<u32> = (0..self.world_size)
            .filter(|&r| summed.double_value(&[(COUNTS as u32 + r) as i64]) > 0.5)
            .collect();
        if left.is_empty() {
            return Ok(sums);
        }
        let error = CollectiveError::Left {
            rank: self.rank,
            world_size: self.world_size,
            left,
        };
        *self.failed.lock().expect("group lock poisoned") = Some(error.clone());
        if leaving {
            return Ok(sums);
        }
        Err(error)
    }

    /// Scales `flat_grads` by this rank's row share and sums it over the group, in place: the
    /// gradient of the mean loss over every rank's rows.
    pub fn reduce_gradients(&self, flat_grads: &Tensor) -> Result<(), CollectiveError> {
        let weight = f64::from_bits(self.weight.load(Ordering::Relaxed));
        let _guard = tch::no_grad_guard();
        let _ = flat_grads.shallow_clone().g_mul_scalar_(weight);
        self.all_reduce_sum(flat_grads, "all-reduce of the gradients")
    }

    /// Overwrites every rank's `tensors` (in order; the same shapes on every rank) with rank
    /// 0's.
    pub fn broadcast(&self, tensors: &[Tensor]) -> Result<(), CollectiveError> {
        for t in tensors {
            self.collective("broadcast from rank 0", t, |group, staged| {
                ffi::broadcast(group, staged, 0)
            })?;
        }
        Ok(())
    }

    /// Sums `tensor` over the group, in place.
    pub fn all_reduce_sum(&self, tensor: &Tensor, op: &'static str) -> Result<(), CollectiveError> {
        self.collective(op, tensor, ffi::all_reduce_sum)
    }

    /// Runs `run` on `tensor`, staged through a contiguous copy on the backend's device when
    /// it is not one already; latches the first failure.
    fn collective(
        &self,
        op: &'static str,
        tensor: &Tensor,
        run: impl FnOnce(&ffi::Handle, &Tensor) -> Result<(), String>,
    ) -> Result<(), CollectiveError> {
        let mut failed = self.failed.lock().expect("group lock poisoned");
        if let Some(error) = failed.as_ref() {
            return Err(error.clone());
        }
        let _guard = tch::no_grad_guard();
        let direct = tensor.is_contiguous() && self.suits(tensor);
        let staged = if direct {
            tensor.shallow_clone()
        } else {
            tensor.to_device(self.staging_device(tensor)).contiguous()
        };
        let started = std::time::Instant::now();
        let result = run(&self.group, &staged);
        let nanos = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        self.busy_nanos.fetch_add(nanos, Ordering::Relaxed);
        if result.is_ok() && !direct {
            tensor.shallow_clone().copy_(&staged);
        }
        result.map_err(|message| {
            let error = CollectiveError::Collective {
                rank: self.rank,
                world_size: self.world_size,
                op,
                lost: self.lost_rank(),
                message,
            };
            *failed = Some(error.clone());
            error
        })
    }

    /// gloo runs on CPU tensors (f64 counts included); NCCL on the rank's CUDA tensors.
    fn suits(&self, tensor: &Tensor) -> bool {
        match ffi::backend(&self.group) {
            Backend::Gloo => tensor.device() == Device::Cpu,
            Backend::Nccl => tensor.device().is_cuda() && tensor.kind() != Kind::Double,
        }
    }

    fn staging_device(&self, tensor: &Tensor) -> Device {
        match ffi::backend(&self.group) {
            Backend::Gloo => Device::Cpu,
            Backend::Nccl => tensor.device(),
        }
    }

    /// After a failed collective: which rank stopped answering. Rank 0 asks every other rank
    /// through gloo's monitored barrier, whose error names those that did not answer, and
    /// leaves that answer in the store for the others; another rank that cannot reach rank 0
    /// names rank 0, else reads rank 0's answer.
    fn lost_rank(&self) -> String {
        const LOST_KEY: &str = "fleetrl/lost";
        let wait = (self.timeout / 4).clamp(Duration::from_secs(1), Duration::from_secs(10));
        let wait_ms = wait.as_millis() as i64;
        if self.world_size == 2 {
            return format!("rank {} stopped answering", 1 - self.rank);
        }
        if ffi::backend(&self.group) == Backend::Nccl {
            return "a rank stopped answering (NCCL does not say which; see each rank's log)"
                .into();
        }
        let barrier = ffi::monitored_barrier(&self.group, wait_ms);
        if self.rank == 0 {
            let answer = match barrier {
                Ok(()) => "every rank answered the monitored barrier afterwards".to_string(),
                Err(message) => message,
            };
            let _ = ffi::store_set(&self.store, LOST_KEY, answer.as_bytes());
            return answer;
        }
        match barrier {
            Err(_) => "rank 0 stopped answering".into(),
            Ok(()) => ffi::store_get(&self.store, LOST_KEY)
                .map(|a| String::from_utf8_lossy(&a).into_owned())
                .unwrap_or_else(|_| {
                    "rank 0 answers; another rank stopped (see rank 0's log)".into()
                }),
        }
    }
}

/// The dotted keys whose values differ between two TOML configs (or that one of them lacks),
/// `learner.rank` aside; sorted. A text that does not parse differs everywhere ("<config>").
pub fn differing_keys(leader: &str, mine: &str) -> Vec<String> {
    let (Ok(leader), Ok(mine)) = (leader.parse::<toml::Table>(), mine.parse::<toml::Table>())
    else {
        return vec!["<config>".into()];
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    flatten("", &leader, &mut a);
    flatten("", &mine, &mut b);
    let a: std::collections::BTreeMap<_, _> = a.into_iter().collect();
    let b: std::collections::BTreeMap<_, _> = b.into_iter().collect();
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| *k != "learner.rank" && a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Leaf values of `table` as (dotted key, value) pairs.
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (key, value) in table {
        let dotted = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten(&dotted, inner, out),
            other => out.push((dotted, other.clone())),
        }
    }
}

#[cfg(fleetrl_c10d)]
mod ffi {
    //! The C++ shim over c10d (core/csrc/c10d.cpp).
    use std::ffi::{c_char, c_int, c_void, CStr, CString};

    use tch::Tensor;

    use super::Backend;

    extern "C" {
        fn fleetrl_c10d_free(p: *mut c_void);
        fn fleetrl_c10d_store_new(
            host: *const c_char,
            port: u16,
            is_server: c_int,
            world_size: c_int,
            timeout_ms: i64,
            err: *mut *mut c_char,
        ) -> *mut c_void;
        fn fleetrl_c10d_store_free(store: *mut c_void);
        fn fleetrl_c10d_store_set(
            store: *mut c_void,
            key: *const c_char,
            data: *const u8,
            len: usize,
            err: *mut *mut c_char,
        ) -> c_int;
        fn fleetrl_c10d_store_get(
            store: *mut c_void,
            key: *const c_char,
            data: *mut *mut u8,
            len: *mut usize,
            err: *mut *mut c_char,
        ) -> c_int;
        fn fleetrl_c10d_gloo_new(
            store: *mut c_void,
            rank: c_int,
            size: c_int,
            timeout_ms: i64,
            err: *mut *mut c_char,
        ) -> *mut c_void;
        #[cfg(fleetrl_c10d_nccl)]
        fn fleetrl_c10d_nccl_new(
            store: *mut c_void,
            rank: c_int,
            size: c_int,
            timeout_ms: i64,
            err: *mut *mut c_char,
        ) -> *mut c_void;
        fn fleetrl_c10d_group_free(group: *mut c_void);
        fn fleetrl_c10d_all_reduce_sum(
            group: *mut c_void,
            tensor: *const c_void,
            err: *mut *mut c_char,
        ) -> c_int;
        fn fleetrl_c10d_broadcast(
            group: *mut c_void,
            tensor: *const c_void,
            root: c_int,
            err: *mut *mut c_char,
        ) -> c_int;
        fn fleetrl_c10d_monitored_barrier(
            group: *mut c_void,
            timeout_ms: i64,
            err: *mut *mut c_char,
        ) -> c_int;
    }

    /// A store or a process group owned by the shim, freed on drop.
    #[derive(Debug)]
    pub(super) struct Handle {
        ptr: *mut c_void,
        /// `None`: a store.
        backend: Option<Backend>,
    }

    // SAFETY: c10d's stores and process groups may be used from any thread; `Group`
    // serialises the collectives it issues behind its lock.
    unsafe impl Send for Handle {}
    unsafe impl Sync for Handle {}

    impl Drop for Handle {
        fn drop(&mut self) {
            // SAFETY: `ptr` came from the matching constructor and is freed once.
            unsafe {
                match self.backend {
                    None => fleetrl_c10d_store_free(self.ptr),
                    Some(_) => fleetrl_c10d_group_free(self.ptr),
                }
            }
        }
    }

    /// Runs a shim call that reports failure through `err`.
    fn checked(call: impl FnOnce(*mut *mut c_char) -> bool) -> Result<(), String> {
        let mut err: *mut c_char = std::ptr::null_mut();
        if call(&mut err) {
            return Ok(());
        }
        if err.is_null() {
            return Err("c10d reported an error without a message".into());
        }
        // SAFETY: the shim returns a NUL-terminated malloc'd message, freed here once.
        let message = unsafe { CStr::from_ptr(err) }
            .to_string_lossy()
            .into_owned();
        unsafe { fleetrl_c10d_free(err.cast()) };
        Err(message)
    }

    fn c_string(s: &str) -> Result<CString, String> {
        CString::new(s).map_err(|_| format!("`{s}` holds a NUL byte"))
    }

    pub(super) fn store(
        host: &str,
        port: u16,
        is_server: bool,
        world_size: u32,
        timeout_ms: i64,
    ) -> Result<Handle, String> {
        let host = c_string(host)?;
        let mut ptr = std::ptr::null_mut();
        checked(|err| {
            // SAFETY: `host` outlives the call; `err` is the shim's out parameter.
            ptr = unsafe {
                fleetrl_c10d_store_new(
                    host.as_ptr(),
                    port,
                    c_int::from(is_server),
                    world_size as c_int,
                    timeout_ms,
                    err,
                )
            };
            !ptr.is_null()
        })?;
        Ok(Handle { ptr, backend: None })
    }

    pub(super) fn store_set(store: &Handle, key: &str, value: &[u8]) -> Result<(), String> {
        let key = c_string(key)?;
        checked(|err| {
            // SAFETY: `key` and `value` outlive the call, which copies them.
            unsafe {
                fleetrl_c10d_store_set(store.ptr, key.as_ptr(), value.as_ptr(), value.len(), err)
                    == 0
            }
        })
    }

    pub(super) fn store_get(store: &Handle, key: &str) -> Result<Vec<u8>, String> {
        let key = c_string(key)?;
        let (mut data, mut len) = (std::ptr::null_mut::<u8>(), 0usize);
        checked(|err| {
            // SAFETY: the shim fills `data` with a malloc'd buffer of `len` bytes on success.
            unsafe {
                fleetrl_c10d_store_get(store.ptr, key.as_ptr(), &mut data, &mut len, err) == 0
            }
        })?;
        // SAFETY: as above; the buffer is copied, then freed once.
        let value = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
        unsafe { fleetrl_c10d_free(data.cast()) };
        Ok(value)
    }

    pub(super) fn group(
        store: &Handle,
        backend: Backend,
        rank: u32,
        size: u32,
        timeout_ms: i64,
    ) -> Result<Handle, String> {
        let mut ptr = std::ptr::null_mut();
        checked(|err| {
            // SAFETY: the store outlives the group (both live in `Group`, the store dropped
            // last) and c10d holds its own reference to it anyway.
            ptr = unsafe {
                match backend {
                    Backend::Gloo => fleetrl_c10d_gloo_new(
                        store.ptr,
                        rank as c_int,
                        size as c_int,
                        timeout_ms,
                        err,
                    ),
                    #[cfg(fleetrl_c10d_nccl)]
                    Backend::Nccl => fleetrl_c10d_nccl_new(
                        store.ptr,
                        rank as c_int,
                        size as c_int,
                        timeout_ms,
                        err,
                    ),
                    #[cfg(not(fleetrl_c10d_nccl))]
                    Backend::Nccl => {
                        let _ = err;
                        std::ptr::null_mut()
                    }
                }
            };
            !ptr.is_null()
        })
        .map_err(|e| {
            if cfg!(fleetrl_c10d_nccl) || backend == Backend::Gloo {
                e
            } else {
                "this build has no NCCL process group (libtorch without CUDA, or its CUDA \
                 toolkit headers were missing when it was built); use gloo"
                    .into()
            }
        })?;
        Ok(Handle {
            ptr,
            backend: Some(backend),
        })
    }

    pub(super) fn backend(group: &Handle) -> Backend {
        group.backend.expect("a process group handle")
    }

    pub(super) fn all_reduce_sum(group: &Handle, tensor: &Tensor) -> Result<(), String> {
        checked(|err| {
            // SAFETY: tch's tensor handle is an `at::Tensor*`, alive for the call.
            unsafe { fleetrl_c10d_all_reduce_sum(group.ptr, tensor.as_ptr().cast(), err) == 0 }
        })
    }

    pub(super) fn broadcast(group: &Handle, tensor: &Tensor, root: i32) -> Result<(), String> {
        checked(|err| {
            // SAFETY: as in `all_reduce_sum`.
            unsafe { fleetrl_c10d_broadcast(group.ptr, tensor.as_ptr().cast(), root, err) == 0 }
        })
    }

    pub(super) fn monitored_barrier(group: &Handle, timeout_ms: i64) -> Result<(), String> {
        checked(|err| {
            // SAFETY: the group is alive for the call.
            unsafe { fleetrl_c10d_monitored_barrier(group.ptr, timeout_ms, err) == 0 }
        })
    }
}

#[cfg(not(fleetrl_c10d))]
mod ffi {
    //! This build has no c10d shim: joining a group says so.
    use tch::Tensor;

    use super::Backend;

    const MISSING: &str = "this build has no c10d collectives (libtorch's c10d headers were \
                           missing when it was built): learner.world_size must be 1";

    #[derive(Debug)]
    pub(super) struct Handle;

    pub(super) fn store(_: &str, _: u16, _: bool, _: u32, _: i64) -> Result<Handle, String> {
        Err(MISSING.into())
    }
    pub(super) fn store_set(_: &Handle, _: &str, _: &[u8]) -> Result<(), String> {
        Err(MISSING.into())
    }
    pub(super) fn store_get(_: &Handle, _: &str) -> Result<Vec<u8>, String> {
        Err(MISSING.into())
    }
    pub(super) fn group(_: &Handle, _: Backend, _: u32, _: u32, _: i64) -> Result<Handle, String> {
        Err(MISSING.into())
    }
    pub(super) fn backend(_: &Handle) -> Backend {
        Backend::Gloo
    }
    pub(super) fn all_reduce_sum(_: &Handle, _: &Tensor) -> Result<(), String> {
        Err(MISSING.into())
    }
    pub(super) fn broadcast(_: &Handle, _: &Tensor, _: i32) -> Result<(), String> {
        Err(MISSING.into())
    }
    pub(super) fn monitored_barrier(_: &Handle, _: i64) -> Result<(), String> {
        Err(MISSING.into())
    }
}

#[cfg(test)]
mod tests;
