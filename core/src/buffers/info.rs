//! A snapshot of a table's state, for `Info` RPCs, logs and tests.

use super::Signature;

/// What a table holds and has done so far.
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    /// Table name.
    pub name: String,
    /// Sampler name, e.g. `"fifo"`.
    pub sampler: &'static str,
    /// Rate limiter name, e.g. `"queue"`.
    pub rate_limiter: &'static str,
    /// Capacity in items.
    pub max_size: u64,
    /// Items held now.
    pub current_size: u64,
    /// Items ever stored.
    pub num_inserted: u64,
    /// Items ever handed out in batches.
    pub num_sampled: u64,
    /// What every item looks like.
    pub signature: Signature,
}

impl From<&TableInfo> for fleetrl_proto::v1::TableInfo {
    fn from(info: &TableInfo) -> Self {
        fleetrl_proto::v1::TableInfo {
            name: info.name.clone(),
            sampler: info.sampler.to_string(),
            max_size: info.max_size,
            current_size: info.current_size,
            num_inserted: info.num_inserted,
            num_sampled: info.num_sampled,
            signature: info.signature.fields.iter().map(Into::into).collect(),
        }
    }
}
