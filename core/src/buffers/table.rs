//! A replay table: a signature-checked store of items composed from an injected sampler,
//! remover and rate limiter, with an async API for gRPC handlers.
//!
//! Concurrency: all state sits behind one `std::sync::Mutex`, held only for bookkeeping (never
//! across an `.await`, never while stacking tensors). Waiters park on two `Notify`s: `room`
//! (an insert may now be allowed) and `ready` (a sample may now be served). Each waiter
//! registers with its `Notify` *before* checking the rate limiter, so no wake-up is lost.
//!
//! Cancellation: `insert` and `sample` only await while parked, before anything changed, so
//! dropping either future (tonic does when a client goes away) leaves the table untouched: a
//! dropped insert stored nothing and acknowledged nothing, a dropped sample took nothing. Once
//! `insert` stores the item it returns `Ok(key)` without another await, so an item is never
//! stored without its key reaching the caller, nor lost once acknowledged.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::{Mutex, MutexGuard};

use fleetrl_proto::TensorMap;
use tokio::sync::Notify;

use super::{
    Counters, FifoRemover, FifoSampler, QueueLimiter, RateLimiter, Remover, ReplayError,
    SampledBatch, Sampler, SamplerKind, Signature, TableInfo, TableSpec, TakenItems,
};

/// What a table is, apart from its sampler, remover and rate limiter.
#[derive(Debug, Clone, PartialEq)]
pub struct TableOptions {
    /// Table name, unique per server.
    pub name: String,
    /// Capacity in items: a full table evicts (remover) unless its limiter makes inserts wait.
    pub max_size: u64,
    /// What every item must look like.
    pub signature: Signature,
    /// An item is deleted after being sampled this many times; 0 keeps it until evicted.
    pub max_times_sampled: u32,
}

/// A named store of items. Share it between tasks with an `Arc`.
#[derive(Debug)]
pub struct Table {
    options: TableOptions,
    state: Mutex<State>,
    room: Notify,
    ready: Notify,
}

#[derive(Debug)]
struct State {
    items: HashMap<u64, Stored>,
    sampler: Box<dyn Sampler>,
    remover: Box<dyn Remover>,
    limiter: Box<dyn RateLimiter>,
    counters: Counters,
    next_key: u64,
    closed: bool,
}

#[derive(Debug)]
struct Stored {
    item: TensorMap,
    times_sampled: u32,
}

/// The outcome of one locked insert attempt.
enum InsertAttempt {
    Stored(u64),
    Refused(TensorMap),
}

impl Table {
    /// A table composed from the given parts, all empty.
    pub fn new(
        options: TableOptions,
        sampler: Box<dyn Sampler>,
        remover: Box<dyn Remover>,
        limiter: Box<dyn RateLimiter>,
    ) -> Table {
        let state = State {
            items: HashMap::new(),
            sampler,
            remover,
            limiter,
            counters: Counters::default(),
            next_key: 1,
            closed: false,
        };
        Table {
            options,
            state: Mutex::new(state),
            room: Notify::new(),
            ready: Notify::new(),
        }
    }

    /// Builds the table a spec declares. [`SamplerKind::Fifo`] is an on-policy queue: FIFO
    /// sampler and remover, a queue limiter, and each item deleted once sampled.
    pub fn from_spec(spec: &TableSpec) -> Result<Table, ReplayError> {
        if spec.max_size == 0 {
            return Err(ReplayError::InvalidRequest(format!(
                "table `{}`: max_size must be at least 1",
                spec.name
            )));
        }
        spec.signature.check()?;
        let options = TableOptions {
            name: spec.name.clone(),
            max_size: spec.max_size,
            signature: spec.signature.clone(),
            max_times_sampled: 1,
        };
        Ok(match spec.sampler {
            SamplerKind::Fifo => Table::new(
                options,
                Box::new(FifoSampler::new()),
                Box::new(FifoRemover::new()),
                Box::new(QueueLimiter::new(spec.max_size)),
            ),
        })
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.options.name
    }

    /// What every item must look like.
    pub fn signature(&self) -> &Signature {
        &self.options.signature
    }

    /// Validates `item`, waits while the rate limiter refuses, stores it and returns its key
    /// (keys are 1, 2, 3, ... in store order). A bad item or priority fails at once without
    /// waiting or changing the table. Cancel-safe (see the module docs). Errors:
    /// [`ReplayError::InvalidItem`], [`ReplayError::InvalidRequest`] (priority not finite or
    /// negative), [`ReplayError::Closed`].
    pub async fn insert(&self, item: TensorMap, priority: f64) -> Result<u64, ReplayError> {
        self.options.signature.validate(&item)?;
        if !priority.is_finite() || priority < 0.0 {
            return Err(ReplayError::InvalidRequest(format!(
                "priority must be finite and >= 0, got {priority}"
            )));
        }
        let mut item = item;
        loop {
            let mut room = pin!(self.room.notified());
            room.as_mut().enable();
            match self.try_insert(item, priority)? {
                InsertAttempt::Stored(key) => {
                    self.ready.notify_waiters();
                    return Ok(key);
                }
                InsertAttempt::Refused(back) => item = back,
            }
            room.await;
        }
    }

    /// Waits until the rate limiter allows a batch of `batch_size`, takes the sampler's keys
    /// (deleting items sampled `max_times_sampled` times) and stacks them. Cancel-safe (see the
    /// module docs). Errors: [`ReplayError::InvalidRequest`] (see [`Table::check_batch_size`]),
    /// [`ReplayError::Closed`].
    pub async fn sample(&self, batch_size: usize) -> Result<SampledBatch, ReplayError> {
        self.take(batch_size).await?.stack(&self.options.signature)
    }

    /// [`Table::sample`] without the stacking, for callers that stack off the async runtime.
    /// Cancel-safe until it returns; the items it returns are no longer in a queue table.
    pub async fn take(&self, batch_size: usize) -> Result<TakenItems, ReplayError> {
        self.check_batch_size(batch_size)?;
        loop {
            let mut ready = pin!(self.ready.notified());
            ready.as_mut().enable();
            if let Some(taken) = self.try_take(batch_size)? {
                self.room.notify_waiters();
                return Ok(taken);
            }
            ready.await;
        }
    }

    /// Rejects batch sizes that could never be served: 0, or more than `max_size`.
    pub fn check_batch_size(&self, batch_size: usize) -> Result<(), ReplayError> {
        if batch_size == 0 || batch_size as u64 > self.options.max_size {
            return Err(ReplayError::InvalidRequest(format!(
                "batch_size must be in 1..={} for table `{}`, got {batch_size}",
                self.options.max_size, self.options.name
            )));
        }
        Ok(())
    }

    /// A snapshot of sizes and counters.
    pub fn info(&self) -> TableInfo {
        let state = self.lock();
        TableInfo {
            name: self.options.name.clone(),
            sampler: state.sampler.name(),
            rate_limiter: state.limiter.name(),
            max_size: self.options.max_size,
            current_size: state.items.len() as u64,
            num_inserted: state.counters.inserted,
            num_sampled: state.counters.sampled,
            signature: self.options.signature.clone(),
        }
    }

    /// Shuts the table: every waiting and later insert or sample fails with
    /// [`ReplayError::Closed`]. Items already stored stay (for persistence).
    pub fn close(&self) {
        self.lock().closed = true;
        self.room.notify_waiters();
        self.ready.notify_waiters();
    }

    fn try_insert(&self, item: TensorMap, priority: f64) -> Result<InsertAttempt, ReplayError> {
        let mut state = self.lock();
        if state.closed {
            return Err(ReplayError::Closed);
        }
        let size = state.items.len() as u64;
        if !state.limiter.can_insert(size, &state.counters) {
            return Ok(InsertAttempt::Refused(item));
        }
        if size >= self.options.max_size {
            state.evict_one();
        }
        Ok(InsertAttempt::Stored(state.store(item, priority)))
    }

    fn try_take(&self, n: usize) -> Result<Option<TakenItems>, ReplayError> {
        let mut state = self.lock();
        if state.closed {
            return Err(ReplayError::Closed);
        }
        let size = state.items.len() as u64;
        if !state.limiter.can_sample(n, size, &state.counters) {
            return Ok(None);
        }
        let keys = state.sampler.sample(n);
        let mut items = Vec::with_capacity(keys.len());
        for &key in &keys {
            items.push(state.take(key, self.options.max_times_sampled));
        }
        state.counters.sampled += keys.len() as u64;
        Ok(Some(TakenItems { keys, items }))
    }

    /// Locks the state. Poisoning means a panic inside a table operation, which is a bug the
    /// table cannot recover from, so it propagates the panic.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("replay table lock poisoned by an earlier panic")
    }
}

impl State {
    fn store(&mut self, item: TensorMap, priority: f64) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        self.items.insert(
            key,
            Stored {
                item,
                times_sampled: 0,
            },
        );
        self.sampler.insert(key, priority);
        self.remover.insert(key);
        self.counters.inserted += 1;
        key
    }

    fn evict_one(&mut self) {
        if let Some(key) = self.remover.victim() {
            self.delete(key);
        }
    }

    /// Hands out the item under `key`, deleting it once sampled `max_times_sampled` times. A
    /// kept item is cloned, which shares its tensor bytes rather than copying them.
    fn take(&mut self, key: u64, max_times_sampled: u32) -> TensorMap {
        let mut stored = self
            .items
            .remove(&key)
            .expect("invariant: a sampler only returns keys the table holds");
        stored.times_sampled += 1;
        if max_times_sampled != 0 && stored.times_sampled >= max_times_sampled {
            self.sampler.remove(key);
            self.remover.remove(key);
            return stored.item;
        }
        let item = stored.item.clone();
        self.items.insert(key, stored);
        item
    }

    fn delete(&mut self, key: u64) {
        self.sampler.remove(key);
        self.remover.remove(key);
        self.items.remove(&key);
    }
}

#[cfg(test)]
mod tests;
