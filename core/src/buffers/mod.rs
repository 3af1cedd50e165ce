//! Replay tables: named stores of items (rollouts, transitions, sequences) that actors fill and
//! learners drain, in the way of Reverb.
//!
//! A [`Table`] validates every item against its [`Signature`] and is composed from a sampler
//! and a remover (both [`Selector`]s: uniform, prioritized, FIFO, LIFO, max-heap, min-heap) and
//! a [`RateLimiter`] (min-size, samples-per-insert, queue), all declared by a [`TableSpec`]. An
//! on-policy queue is a FIFO sampler, a queue limiter and items removed once sampled
//! ([`TableSpec::queue`]). [`persist`] writes tables to checkpoints and reads them back.

mod batch;
pub mod demos;
mod error;
mod info;
pub mod persist;
mod rate_limiter;
pub mod selectors;
mod signature;
mod spec;
mod table;
mod wire;

pub use batch::{split_stacked, SampledBatch, TakenItems, MAX_ITEMS_PER_REQUEST};
pub use error::ReplayError;
pub use info::TableInfo;
pub use rate_limiter::{Counters, RateLimiter};
pub use selectors::Selector;
pub use spec::{FieldSpec, LimiterBounds, RateLimiterSpec, SelectorKind, Signature, TableSpec};
pub use table::{SnapshotItem, Table, TableSnapshot};
pub use wire::difference;
