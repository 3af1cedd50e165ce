//! A snapshot of a table's state, for `Info` RPCs, logs and tests.

use super::spec::LimiterBounds;
use super::{Counters, TableSpec};

/// What a table is, holds and has done so far.
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    /// The table's definition.
    pub spec: TableSpec,
    /// Items held now.
    pub current_size: u64,
    /// Lifetime counters: inserted, sampled, deleted.
    pub counters: Counters,
    /// Bytes of item data held.
    pub bytes: u64,
    /// The rate limiter's `inserted * samples_per_insert - sampled`.
    pub diff: f64,
    /// The rate limiter's bounds.
    pub bounds: LimiterBounds,
    /// Inserts parked on the rate limiter now.
    pub waiting_inserts: u64,
    /// Samples parked on the rate limiter now.
    pub waiting_samples: u64,
}
