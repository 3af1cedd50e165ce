//! A sampled batch: items stacked field by field along a new leading dimension.

use crate::{Tensor, TensorMap};

use super::{ReplayError, Signature};

/// Items taken from a table, ready to train on.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledBatch {
    /// Keys of the items, in stacking order.
    pub keys: Vec<u64>,
    /// Every signature field, of shape `[keys.len(), field shape...]`.
    pub batch: TensorMap,
    /// The probability each item had of being picked (1 for deterministic samplers).
    pub probabilities: Vec<f64>,
    /// How often each item has been sampled, this time included.
    pub times_sampled: Vec<u32>,
    /// Items the table held when the batch was taken.
    pub table_size: u64,
}

/// Most items one insert request may carry.
pub const MAX_ITEMS_PER_REQUEST: i64 = 1 << 20;

/// Splits a stacked insert (every field `[N, S...]`) into `N` items, which share the request's
/// bytes. Checks that every field of `signature` is present with the right dtype, trailing
/// shape and byte count, that all fields agree on `N >= 1`, and that no other field is there.
pub fn split_stacked(
    stacked: &TensorMap,
    signature: &Signature,
) -> Result<Vec<TensorMap>, ReplayError> {
    let mut count: Option<i64> = None;
    for spec in &signature.fields {
        let tensor = stacked
            .tensors
            .get(&spec.name)
            .ok_or_else(|| ReplayError::invalid_item(&spec.name, "missing from the request"))?;
        let invalid = |why: String| ReplayError::invalid_item(&spec.name, why);
        let Some((&n, rest)) = tensor.shape.split_first() else {
            return Err(invalid(format!(
                "a stacked field needs a leading item dimension, got shape {:?}",
                tensor.shape
            )));
        };
        if rest != spec.shape.as_slice() {
            return Err(invalid(format!(
                "shape {:?} does not match [N] + signature {:?}",
                tensor.shape, spec.shape
            )));
        }
        match count {
            None => count = Some(n),
            Some(c) if c != n => {
                return Err(invalid(format!("holds {n} items, other fields hold {c}")));
            }
            Some(_) => {}
        }
        tensor.validate().map_err(|e| invalid(e.to_string()))?;
        let dtype = tensor.checked_dtype().map_err(|e| invalid(e.to_string()))?;
        if dtype != spec.dtype {
            return Err(invalid(format!(
                "dtype {dtype:?} does not match signature {:?}",
                spec.dtype
            )));
        }
    }
    if stacked.tensors.len() != signature.fields.len() {
        let mut extra: Vec<&String> = stacked
            .tensors
            .keys()
            .filter(|name| signature.field(name).is_none())
            .collect();
        extra.sort();
        let name = extra.first().map_or("?", |n| n.as_str());
        return Err(ReplayError::invalid_item(name, "is not in the signature"));
    }
    let n = count.unwrap_or(0);
    if n < 1 {
        return Err(ReplayError::InvalidRequest(
            "an insert request must hold at least one item".into(),
        ));
    }
    if n > MAX_ITEMS_PER_REQUEST {
        return Err(ReplayError::InvalidRequest(format!(
            "an insert request may hold at most {MAX_ITEMS_PER_REQUEST} items, got {n}"
        )));
    }
    let mut items = vec![TensorMap::default(); n as usize];
    for spec in &signature.fields {
        let tensor = &stacked.tensors[&spec.name];
        let size = spec.bytes() as usize;
        for (i, item) in items.iter_mut().enumerate() {
            item.tensors.insert(
                spec.name.clone(),
                Tensor {
                    dtype: tensor.dtype,
                    shape: spec.shape.clone(),
                    data: tensor.data.slice(i * size..(i + 1) * size),
                },
            );
        }
    }
    Ok(items)
}

impl From<SampledBatch> for crate::v1::SampleResponse {
    fn from(sampled: SampledBatch) -> Self {
        crate::v1::SampleResponse {
            batch: Some(sampled.batch),
            keys: sampled.keys,
            probabilities: sampled.probabilities,
            times_sampled: sampled.times_sampled,
            table_size: sampled.table_size,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::FieldSpec;
    use crate::Dtype;

    #[test]
    fn split_inverts_stack_and_names_bad_fields() {
        let signature = Signature {
            fields: vec![
                FieldSpec::new("x", Dtype::F32, &[2]),
                FieldSpec::new("v", Dtype::I64, &[]),
            ],
        };
        let stacked = TensorMap::from_pairs([
            (
                "x",
                Tensor::from_slice(&[3, 2], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]),
            ),
            ("v", Tensor::from_slice(&[3], &[7i64, 8, 9])),
        ]);
        let items = split_stacked(&stacked, &signature).unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(
            items[1].field("x").unwrap().to_vec::<f32>().unwrap(),
            vec![3.0, 4.0]
        );
        assert_eq!(
            items[2].field("v").unwrap().to_vec::<i64>().unwrap(),
            vec![9]
        );
        let mut uneven = stacked.clone();
        uneven
            .tensors
            .insert("v".into(), Tensor::from_slice(&[2], &[7i64, 8]));
        let err = split_stacked(&uneven, &signature).unwrap_err().to_string();
        assert_eq!(err, "field `v`: holds 2 items, other fields hold 3");
        let empty = TensorMap::from_pairs([
            ("x", Tensor::from_slice::<f32>(&[0, 2], &[])),
            ("v", Tensor::from_slice::<i64>(&[0], &[])),
        ]);
        let err = split_stacked(&empty, &signature).unwrap_err().to_string();
        assert!(err.contains("at least one item"), "{err}");
        let unstacked = TensorMap::from_pairs([
            ("x", Tensor::from_slice(&[2], &[1.0f32, 2.0])),
            ("v", Tensor::scalar(1i64)),
        ]);
        let err = split_stacked(&unstacked, &signature)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("field `x`: shape [2] does not match [N] + signature [2]")
                || err.starts_with("field `v`"),
            "{err}"
        );
    }
}
