//! What a table is declared with: its name, capacity, sampler and item signature.

use fleetrl_proto::Dtype;

/// One named tensor of every item in a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSpec {
    /// Field name, the key in the item's tensor map.
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Exact shape of the field in one item.
    pub shape: Vec<i64>,
}

impl FieldSpec {
    /// A field spec.
    pub fn new(name: &str, dtype: Dtype, shape: &[i64]) -> FieldSpec {
        FieldSpec {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
        }
    }
}

/// The fields every item of a table has, exactly (no more, no fewer).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    /// The fields, in a stable order.
    pub fields: Vec<FieldSpec>,
}

/// How a table picks the items it samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerKind {
    /// Oldest first, each item sampled once and then removed (an on-policy queue).
    Fifo,
}

/// Everything needed to build a table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSpec {
    /// Table name, unique per server.
    pub name: String,
    /// Items the table holds; inserts wait (queue) or evict (replay) beyond it.
    pub max_size: u64,
    /// How items are picked.
    pub sampler: SamplerKind,
    /// What every item must look like.
    pub signature: Signature,
}

impl TableSpec {
    /// An on-policy queue: FIFO, each item sampled exactly once, inserts wait when full.
    pub fn queue(name: &str, max_size: u64, signature: Signature) -> TableSpec {
        TableSpec {
            name: name.to_string(),
            max_size,
            sampler: SamplerKind::Fifo,
            signature,
        }
    }
}

impl From<&FieldSpec> for fleetrl_proto::v1::FieldSpec {
    fn from(spec: &FieldSpec) -> Self {
        fleetrl_proto::v1::FieldSpec {
            name: spec.name.clone(),
            dtype: spec.dtype as i32,
            shape: spec.shape.clone(),
        }
    }
}
