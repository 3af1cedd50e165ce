//! A sampled batch: items stacked field by field along a new leading dimension.

use fleetrl_proto::{Tensor, TensorMap};

use super::{ReplayError, Signature};

/// Items taken from a table, ready to train on.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledBatch {
    /// Keys of the items, in stacking order.
    pub keys: Vec<u64>,
    /// Every signature field, of shape `[keys.len(), field shape...]`.
    pub batch: TensorMap,
}

/// Items taken from a table but not yet stacked. Stacking copies every tensor once, so a
/// caller on an async runtime may run [`TakenItems::stack`] on a blocking thread.
#[derive(Debug, Clone, PartialEq)]
pub struct TakenItems {
    /// Keys of the items, in batch order.
    pub keys: Vec<u64>,
    /// The items, each valid against the table's signature.
    pub items: Vec<TensorMap>,
}

impl TakenItems {
    /// Stacks every field of `signature` along a new leading dimension. Cannot fail for items
    /// a table validated against the same signature; the error names the field otherwise.
    pub fn stack(self, signature: &Signature) -> Result<SampledBatch, ReplayError> {
        debug_assert_eq!(self.keys.len(), self.items.len());
        let mut batch = TensorMap::default();
        for spec in &signature.fields {
            let invalid = |e: fleetrl_proto::TensorError| {
                ReplayError::invalid_item(&spec.name, e.to_string())
            };
            let mut parts = Vec::with_capacity(self.items.len());
            for item in &self.items {
                parts.push(item.field(&spec.name).map_err(invalid)?);
            }
            let stacked = Tensor::stack(&parts).map_err(invalid)?;
            batch.tensors.insert(spec.name.clone(), stacked);
        }
        Ok(SampledBatch {
            keys: self.keys,
            batch,
        })
    }
}

impl From<SampledBatch> for fleetrl_proto::v1::SampleResponse {
    fn from(sampled: SampledBatch) -> Self {
        fleetrl_proto::v1::SampleResponse {
            batch: Some(sampled.batch),
            keys: sampled.keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::FieldSpec;
    use fleetrl_proto::Dtype;

    #[test]
    fn stacks_every_field_with_a_leading_dim() {
        let signature = Signature {
            fields: vec![
                FieldSpec::new("x", Dtype::F32, &[2]),
                FieldSpec::new("v", Dtype::I64, &[]),
            ],
        };
        let item = |i: i64| {
            TensorMap::from_pairs([
                ("x", Tensor::from_slice(&[2], &[i as f32, -(i as f32)])),
                ("v", Tensor::scalar(i)),
            ])
        };
        let taken = TakenItems {
            keys: vec![1, 2, 3],
            items: vec![item(1), item(2), item(3)],
        };
        let sampled = taken.stack(&signature).unwrap();
        let x = sampled.batch.field("x").unwrap();
        assert_eq!(x.shape, vec![3, 2]);
        assert_eq!(
            x.to_vec::<f32>().unwrap(),
            vec![1.0, -1.0, 2.0, -2.0, 3.0, -3.0]
        );
        let v = sampled.batch.field("v").unwrap();
        assert_eq!(v.shape, vec![3]);
        assert_eq!(v.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
    }
}
