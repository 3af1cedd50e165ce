//! A replay table: a signature-checked store of items composed from a sampler, a remover and a
//! rate limiter, with an async API for gRPC handlers.
//!
//! Concurrency: all state sits behind one `std::sync::Mutex`, held only for bookkeeping (never
//! across an `.await`, never while validating or stacking tensors). Waiters park on two
//! `Notify`s: `room` (an insert may now be allowed) and `ready` (a sample may now be served).
//! Each waiter registers with its `Notify` *before* checking the rate limiter, so no wake-up is
//! lost.
//!
//! Cancellation: `insert` and `sample` only await while parked, before anything changed, so
//! dropping either future (tonic does when a client goes away) leaves the table untouched: a
//! dropped insert stored nothing and acknowledged nothing, a dropped sample took nothing. Once
//! `insert` stores the item it returns `Ok(key)` without another await, so an item is never
//! stored without its key reaching the caller. `insert_many` stores items as the limiter
//! allows; dropped midway, the items it stored stay (unacknowledged, so a client resends them:
//! at-least-once, as the wire protocol says).

use std::pin::pin;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use fleetrl_proto::{Dtype, TensorMap};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::Notify;

use super::keymap::{KeyMap, Vacant};
use super::rows::{self, Rows};
use super::selectors::{self, Selector};
use super::{Counters, RateLimiter, TableInfo};
use fleetrl_proto::table::{ReplayError, SampledBatch, Signature, TableSpec};

/// A named store of items. Share it between tasks with an `Arc`.
#[derive(Debug)]
pub struct Table {
    spec: TableSpec,
    limiter: RateLimiter,
    state: Mutex<State>,
    room: Notify,
    ready: Notify,
}

#[derive(Debug)]
struct State {
    items: KeyMap<Stored>,
    rows: Rows,
    sampler: Box<dyn Selector>,
    remover: Box<dyn Selector>,
    counters: Counters,
    next_key: u64,
    rng: SmallRng,
    closed: bool,
    waiting_inserts: u64,
    waiting_samples: u64,
}

/// An item's bookkeeping; its bytes are row `slot` of [`State::rows`].
#[derive(Debug, Clone, Copy)]
struct Stored {
    priority: f64,
    slot: u32,
    times_sampled: u32,
}

impl Vacant for Stored {
    const VACANT: Stored = Stored {
        priority: 0.0,
        slot: u32::MAX,
        times_sampled: 0,
    };

    fn is_vacant(&self) -> bool {
        self.slot == u32::MAX
    }
}

/// One item as a checkpoint holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotItem {
    /// The item's key.
    pub key: u64,
    /// Its priority.
    pub priority: f64,
    /// How often it was sampled so far.
    pub times_sampled: u32,
    /// Its fields' bytes in signature order (sharing the table's pages, or a checkpoint
    /// file's buffer).
    pub row: Bytes,
}

/// A consistent copy of a table's contents: what a checkpoint writes and a restore reads.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSnapshot {
    /// The table's definition.
    pub spec: TableSpec,
    /// The rate limiter's counters.
    pub counters: Counters,
    /// The key the next insert gets.
    pub next_key: u64,
    /// Every item, in key (= insertion) order.
    pub items: Vec<SnapshotItem>,
}

impl Table {
    /// An empty table as `spec` declares it; the spec is checked first.
    pub fn from_spec(spec: &TableSpec) -> Result<Table, ReplayError> {
        Table::seeded(spec, rand::random())
    }

    /// [`Table::from_spec`] with a fixed seed for the random samplers, for reproducible tests.
    pub fn seeded(spec: &TableSpec, seed: u64) -> Result<Table, ReplayError> {
        spec.check(u64::MAX)?;
        let state = State {
            items: KeyMap::default(),
            rows: Rows::new(&spec.signature),
            sampler: selectors::build(spec.sampler),
            remover: selectors::build(spec.remover),
            counters: Counters::default(),
            next_key: 1,
            rng: SmallRng::seed_from_u64(seed),
            closed: false,
            waiting_inserts: 0,
            waiting_samples: 0,
        };
        Ok(Table {
            spec: spec.clone(),
            limiter: RateLimiter::new(spec.rate_limiter),
            state: Mutex::new(state),
            room: Notify::new(),
            ready: Notify::new(),
        })
    }

    /// A table holding exactly what `snapshot` holds: items, keys, priorities, times sampled
    /// and rate-limiter counters. Fails if the snapshot contradicts its own spec.
    pub fn restore(snapshot: TableSnapshot) -> Result<Table, ReplayError> {
        let table = Table::from_spec(&snapshot.spec)?;
        {
            let mut state = table.lock();
            let mut last_key = 0;
            for stored in snapshot.items {
                let corrupt = |why: &str| {
                    ReplayError::InvalidRequest(format!(
                        "table `{}`: snapshot item {}: {why}",
                        snapshot.spec.name, stored.key
                    ))
                };
                if stored.key <= last_key || stored.key >= snapshot.next_key {
                    return Err(corrupt("keys are not increasing below next_key"));
                }
                last_key = stored.key;
                if stored.row.len() != state.rows.row_bytes() {
                    return Err(corrupt("its bytes do not match the signature"));
                }
                table.validate(&rows::item_of_row(&table.spec.signature, &stored.row))?;
                if !stored.priority.is_finite() || stored.priority < 0.0 {
                    return Err(corrupt("priority is not finite and >= 0"));
                }
                if state.items.len() as u64 >= snapshot.spec.max_size {
                    return Err(corrupt("the snapshot holds more items than max_size"));
                }
                state.sampler.insert(stored.key, stored.priority);
                state.remover.insert(stored.key, stored.priority);
                let slot = state.rows.put_row(&stored.row)?;
                state.items.insert(
                    stored.key,
                    Stored {
                        priority: stored.priority,
                        slot,
                        times_sampled: stored.times_sampled,
                    },
                );
            }
            state.counters = snapshot.counters;
            state.next_key = snapshot.next_key;
        }
        Ok(table)
    }

    /// A consistent copy of the table, taken under its lock. Items share the table's pages
    /// (a later write copies a page first), so this copies no item bytes.
    pub fn snapshot(&self) -> TableSnapshot {
        let state = self.lock();
        let stored: Vec<(u64, Stored)> = state.items.iter().map(|(k, &s)| (k, s)).collect();
        let rows = state.rows.shared(stored.iter().map(|(_, s)| s.slot));
        let items: Vec<SnapshotItem> = stored
            .into_iter()
            .zip(rows)
            .map(|((key, stored), row)| SnapshotItem {
                key,
                priority: stored.priority,
                times_sampled: stored.times_sampled,
                row,
            })
            .collect();
        // Items, counters and the next key come from one lock, so they agree with each other.
        let (counters, next_key) = (state.counters, state.next_key);
        drop(state);
        TableSnapshot {
            spec: self.spec.clone(),
            counters,
            next_key,
            items,
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The table's definition.
    pub fn spec(&self) -> &TableSpec {
        &self.spec
    }

    /// What every item must look like.
    pub fn signature(&self) -> &Signature {
        &self.spec.signature
    }

    /// Checks an item against the signature and the table's NaN/Inf policy, without storing it.
    pub fn validate(&self, item: &TensorMap) -> Result<(), ReplayError> {
        self.spec.signature.validate(item)?;
        if !self.spec.allow_non_finite {
            for spec in &self.spec.signature.fields {
                let tensor = &item.tensors[&spec.name];
                let finite = match spec.dtype {
                    Dtype::F32 => tensor
                        .data
                        .chunks_exact(4)
                        .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite()),
                    Dtype::F64 => tensor.data.chunks_exact(8).all(|b| {
                        f64::from_le_bytes(b.try_into().expect("chunks of 8")).is_finite()
                    }),
                    _ => true,
                };
                if !finite {
                    return Err(ReplayError::invalid_item(
                        &spec.name,
                        "holds NaN or infinity, which this table rejects (allow_non_finite = false)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Validates `item`, waits while the rate limiter refuses, stores it and returns its key
    /// (keys are 1, 2, 3, ... in store order). A bad item or priority fails at once without
    /// waiting or changing the table. Cancel-safe (see the module docs).
    pub async fn insert(&self, item: TensorMap, priority: f64) -> Result<u64, ReplayError> {
        let keys = self.insert_many(vec![(item, priority)]).await?;
        Ok(keys[0])
    }

    /// Validates every item first (one bad item stores none), then stores them in order,
    /// waiting for the rate limiter between them as needed. Returns their keys in order.
    pub async fn insert_many(&self, items: Vec<(TensorMap, f64)>) -> Result<Vec<u64>, ReplayError> {
        for (item, priority) in &items {
            self.validate(item)?;
            check_priority(*priority)?;
        }
        let mut keys = Vec::with_capacity(items.len());
        let mut pending = items.into_iter().peekable();
        loop {
            let mut room = pin!(self.room.notified());
            room.as_mut().enable();
            let stored_any = {
                let mut state = self.lock();
                if state.closed {
                    return Err(ReplayError::Closed);
                }
                let before = keys.len();
                while pending.peek().is_some() {
                    let size = state.items.len() as u64;
                    if !self.limiter.can_insert(size, &state.counters) {
                        break;
                    }
                    let (item, priority) = pending.next().expect("peeked");
                    if size >= self.spec.max_size {
                        state.evict_one();
                    }
                    keys.push(state.store(&item, priority));
                }
                keys.len() > before
            };
            if stored_any {
                self.ready.notify_waiters();
            }
            if pending.peek().is_none() {
                return Ok(keys);
            }
            let _waiting = Waiting::new(self, Side::Insert);
            room.await;
        }
    }

    /// Waits until the rate limiter allows a batch of `batch_size`, then takes the sampler's
    /// keys (deleting items sampled `max_times_sampled` times) and stacks them. Cancel-safe.
    pub async fn sample(&self, batch_size: usize) -> Result<SampledBatch, ReplayError> {
        self.take(batch_size, None).await
    }

    /// [`Table::sample`] with a limit on the wait: a limiter that does not allow the batch in
    /// `timeout` gives [`ReplayError::RateLimited`].
    pub async fn take(
        &self,
        batch_size: usize,
        timeout: Option<Duration>,
    ) -> Result<SampledBatch, ReplayError> {
        self.check_batch_size(batch_size)?;
        let wait = async {
            loop {
                let mut ready = pin!(self.ready.notified());
                ready.as_mut().enable();
                if let Some(taken) = self.try_take(batch_size)? {
                    self.room.notify_waiters();
                    return Ok(taken);
                }
                let _waiting = Waiting::new(self, Side::Sample);
                ready.await;
            }
        };
        match timeout {
            None => wait.await,
            Some(limit) => tokio::time::timeout(limit, wait)
                .await
                .unwrap_or(Err(ReplayError::RateLimited)),
        }
    }

    /// Rejects batch sizes that could never be served: 0, or more than the table and its rate
    /// limiter can ever hand out at once ([`TableSpec::max_batch_size`]).
    pub fn check_batch_size(&self, batch_size: usize) -> Result<(), ReplayError> {
        let most = self.spec.max_batch_size();
        if batch_size == 0 || batch_size as u64 > most {
            return Err(ReplayError::InvalidRequest(format!(
                "batch_size must be in 1..={most} for table `{}`, got {batch_size}",
                self.spec.name
            )));
        }
        Ok(())
    }

    /// Sets the priorities of the given keys; keys no longer in the table are skipped. All
    /// priorities are checked first (finite, >= 0). Returns how many keys were updated.
    pub fn update_priorities(&self, updates: &[(u64, f64)]) -> Result<usize, ReplayError> {
        for &(_, priority) in updates {
            check_priority(priority)?;
        }
        let mut state = self.lock();
        let mut updated = 0;
        for &(key, priority) in updates {
            let Some(stored) = state.items.get_mut(key) else {
                continue;
            };
            stored.priority = priority;
            state.sampler.update(key, priority);
            state.remover.update(key, priority);
            updated += 1;
        }
        Ok(updated)
    }

    /// Deletes the given keys (unknown ones are skipped); returns how many were deleted.
    pub fn delete(&self, keys: &[u64]) -> usize {
        let deleted = {
            let mut state = self.lock();
            keys.iter().filter(|&&key| state.delete(key)).count()
        };
        self.room.notify_waiters();
        deleted
    }

    /// Deletes every item and zeroes the rate limiter's counters (keys keep increasing).
    pub fn reset(&self) {
        {
            let mut state = self.lock();
            state.items.clear();
            state.rows.clear();
            state.sampler.clear();
            state.remover.clear();
            state.counters = Counters::default();
        }
        self.room.notify_waiters();
    }

    /// A snapshot of sizes, counters and the rate limiter's state.
    pub fn info(&self) -> TableInfo {
        let state = self.lock();
        let size = state.items.len() as u64;
        TableInfo {
            spec: self.spec.clone(),
            current_size: size,
            counters: state.counters,
            bytes: size * self.spec.signature.item_bytes(),
            diff: self.limiter.diff(&state.counters),
            bounds: self.limiter.bounds(),
            waiting_inserts: state.waiting_inserts,
            waiting_samples: state.waiting_samples,
        }
    }

    /// Shuts the table: every waiting and later insert or sample fails with
    /// [`ReplayError::Closed`]. Items already stored stay (for persistence).
    pub fn close(&self) {
        self.lock().closed = true;
        self.room.notify_waiters();
        self.ready.notify_waiters();
    }

    /// Picks a batch and stacks it under the lock: the rows are copied once, straight into
    /// the batch's tensors, and an item deleted by this pick cannot be overwritten meanwhile.
    fn try_take(&self, n: usize) -> Result<Option<SampledBatch>, ReplayError> {
        let mut state = self.lock();
        if state.closed {
            return Err(ReplayError::Closed);
        }
        let size = state.items.len() as u64;
        let deletes = self.spec.max_times_sampled > 0;
        let enough = !(self.spec.sampler.without_replacement() || deletes) || size >= n as u64;
        if !enough || !self.limiter.can_sample(n, size, &state.counters) {
            return Ok(None);
        }
        let mut keys = Vec::with_capacity(n);
        let mut slots = Vec::with_capacity(n);
        let mut probabilities = Vec::with_capacity(n);
        let mut times_sampled = Vec::with_capacity(n);
        let mut released = Vec::new();
        // Items that leave once sampled are picked one at a time, so a later pick never sees
        // an item an earlier pick of the same batch deleted.
        let per_pick = if deletes { 1 } else { n };
        while keys.len() < n {
            let State { sampler, rng, .. } = &mut *state;
            let picked = sampler.select(per_pick, rng);
            if picked.is_empty() {
                break;
            }
            for (key, probability) in picked {
                let (slot, times, deleted) = state.take(key, self.spec.max_times_sampled);
                keys.push(key);
                slots.push(slot);
                probabilities.push(probability);
                times_sampled.push(times);
                if deleted {
                    released.push(slot);
                }
            }
        }
        let batch = state.rows.stack(&slots);
        for slot in released {
            state.rows.release(slot);
        }
        state.counters.sampled += keys.len() as u64;
        Ok(Some(SampledBatch {
            keys,
            batch,
            probabilities,
            times_sampled,
            table_size: size,
        }))
    }

    /// Locks the state. Poisoning means a panic inside a table operation, which is a bug the
    /// table cannot recover from, so it propagates the panic.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("replay table lock poisoned by an earlier panic")
    }
}

fn check_priority(priority: f64) -> Result<(), ReplayError> {
    if !priority.is_finite() || priority < 0.0 {
        return Err(ReplayError::InvalidRequest(format!(
            "priority must be finite and >= 0, got {priority}"
        )));
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Side {
    Insert,
    Sample,
}

/// Counts a parked waiter for `Info` while it is parked (including when its future is dropped).
struct Waiting<'a> {
    table: &'a Table,
    side: Side,
}

impl<'a> Waiting<'a> {
    fn new(table: &'a Table, side: Side) -> Waiting<'a> {
        let mut state = table.lock();
        match side {
            Side::Insert => state.waiting_inserts += 1,
            Side::Sample => state.waiting_samples += 1,
        }
        Waiting { table, side }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.table.lock();
        match self.side {
            Side::Insert => state.waiting_inserts -= 1,
            Side::Sample => state.waiting_samples -= 1,
        }
    }
}

impl State {
    fn store(&mut self, item: &TensorMap, priority: f64) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        let slot = self.rows.put(item);
        self.items.insert(
            key,
            Stored {
                priority,
                slot,
                times_sampled: 0,
            },
        );
        self.sampler.insert(key, priority);
        self.remover.insert(key, priority);
        self.counters.inserted += 1;
        key
    }

    fn evict_one(&mut self) {
        let State { remover, rng, .. } = self;
        if let Some(&(key, _)) = remover.select(1, rng).first() {
            self.delete(key);
        }
    }

    /// Counts a sample of the item under `key`: returns its slot, its new times-sampled count
    /// and whether that count deleted it (its slot is then the caller's to release).
    fn take(&mut self, key: u64, max_times_sampled: u32) -> (u32, u32, bool) {
        let stored = self
            .items
            .get_mut(key)
            .expect("invariant: a sampler only returns keys the table holds");
        stored.times_sampled += 1;
        let (slot, times) = (stored.slot, stored.times_sampled);
        if max_times_sampled != 0 && times >= max_times_sampled {
            self.items.remove(key);
            self.sampler.remove(key);
            self.remover.remove(key);
            self.counters.deleted += 1;
            return (slot, times, true);
        }
        (slot, times, false)
    }

    fn delete(&mut self, key: u64) -> bool {
        let Some(stored) = self.items.remove(key) else {
            return false;
        };
        self.rows.release(stored.slot);
        self.sampler.remove(key);
        self.remover.remove(key);
        self.counters.deleted += 1;
        true
    }
}

#[cfg(test)]
mod tests;
