//! Replay tables: named stores of items (rollouts, transitions) that actors fill and learners
//! drain, in the way of Reverb.
//!
//! A [`Table`] validates every item against its [`Signature`] and is composed from three
//! injected parts: a [`Sampler`] (which items to hand out), a [`Remover`] (which item a full
//! table evicts) and a [`RateLimiter`] (when inserts and samples may proceed).
//! [`Table::from_spec`] builds the combination a [`TableSpec`] asks for; an on-policy queue is
//! a FIFO sampler, a queue limiter and items removed once sampled.

mod batch;
mod error;
mod info;
mod order;
mod rate_limiters;
mod removers;
mod samplers;
mod signature;
mod spec;
mod table;

pub use batch::{SampledBatch, TakenItems};
pub use error::ReplayError;
pub use info::TableInfo;
pub use rate_limiters::{Counters, QueueLimiter, RateLimiter};
pub use removers::{FifoRemover, Remover};
pub use samplers::{FifoSampler, Sampler};
pub use spec::{FieldSpec, SamplerKind, Signature, TableSpec};
pub use table::{Table, TableOptions};
