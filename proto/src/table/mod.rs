//! Replay table declarations every role shares: a table's [`TableSpec`] (signature, sampler,
//! remover, rate limiter) and its proto form, checking items against a [`Signature`],
//! splitting a stacked insert into items and stacking items into a batch, and the
//! [`ReplayError`] those operations return. The table engine itself lives in the replay server.

mod batch;
mod error;
mod signature;
mod spec;
mod wire;

pub use batch::{split_stacked, SampledBatch, MAX_ITEMS_PER_REQUEST};
pub use error::ReplayError;
pub use spec::{
    FieldSpec, LimiterBounds, RateLimiterSpec, SelectorKind, Signature, TableSpec, MAX_TABLE_ITEMS,
};
pub use wire::difference;
