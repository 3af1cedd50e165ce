//! A snapshot of a table's state, for `Info` RPCs, logs and tests.

use fleetrl_proto::table::{LimiterBounds, TableSpec};
use fleetrl_proto::v1 as pb;

use super::Counters;

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

impl From<&TableInfo> for pb::TableInfo {
    fn from(info: &TableInfo) -> Self {
        pb::TableInfo {
            name: info.spec.name.clone(),
            sampler: info.spec.sampler.name().to_string(),
            max_size: info.spec.max_size,
            current_size: info.current_size,
            num_inserted: info.counters.inserted,
            num_sampled: info.counters.sampled,
            signature: info.spec.signature.fields.iter().map(Into::into).collect(),
            config: Some((&info.spec).into()),
            num_deleted: info.counters.deleted,
            bytes: info.bytes,
            limiter_diff: info.diff,
            limiter_min_diff: info.bounds.min_diff,
            limiter_max_diff: info.bounds.max_diff,
            waiting_inserts: info.waiting_inserts,
            waiting_samples: info.waiting_samples,
        }
    }
}
