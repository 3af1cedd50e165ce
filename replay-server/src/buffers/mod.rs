//! The table engine. Replay tables: named stores of items (rollouts, transitions, sequences) that actors fill and
//! learners drain, in the way of Reverb.
//!
//! A [`Table`] validates every item against its
//! [`Signature`](fleetrl_proto::table::Signature) and is composed from a sampler
//! and a remover (both [`Selector`]s: uniform, prioritized, FIFO, LIFO, max-heap, min-heap) and
//! a [`RateLimiter`] (min-size, samples-per-insert, queue), all declared by a
//! [`TableSpec`](fleetrl_proto::table::TableSpec). An
//! on-policy queue is a FIFO sampler, a queue limiter and items removed once sampled
//! ([`TableSpec::queue`](fleetrl_proto::table::TableSpec::queue)). [`persist`] writes tables to checkpoints and reads them back. The
//! declarations (spec, signature, batch splitting and stacking, `ReplayError`) live in
//! [`fleetrl_proto::table`], which the learner and actors use without this engine.

pub mod demos;
mod info;
mod keymap;
pub mod persist;
mod rate_limiter;
pub mod rows;
pub mod selectors;
mod table;

pub use info::TableInfo;
pub use rate_limiter::{Counters, RateLimiter};
pub use selectors::Selector;
pub use table::{SnapshotItem, Table, TableSnapshot};
