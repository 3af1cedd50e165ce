//! Checking items (and signatures themselves) against a table's [`Signature`].

use std::collections::HashSet;

use crate::{Dtype, Tensor, TensorMap};

use super::{FieldSpec, ReplayError, Signature};

impl Signature {
    /// Checks that `item` has exactly the signature's fields, each with the declared dtype and
    /// shape and the right number of data bytes. The error names the first bad field.
    pub fn validate(&self, item: &TensorMap) -> Result<(), ReplayError> {
        for spec in &self.fields {
            let tensor = item
                .tensors
                .get(&spec.name)
                .ok_or_else(|| ReplayError::invalid_item(&spec.name, "missing from the item"))?;
            check_field(spec, tensor)?;
        }
        if item.tensors.len() != self.fields.len() {
            return Err(self.first_extra_field(item));
        }
        Ok(())
    }

    /// Checks that the signature itself is usable: at least one field, unique names, known
    /// dtypes, and dimensions of at least 1 (a zero-length dimension would make every item of
    /// that field hold no data).
    pub fn check(&self) -> Result<(), ReplayError> {
        if self.fields.is_empty() {
            return Err(ReplayError::InvalidRequest(
                "the signature is empty: a table needs at least one field".into(),
            ));
        }
        let mut seen = HashSet::new();
        for spec in &self.fields {
            let bad =
                |why: &str| ReplayError::InvalidRequest(format!("field `{}`: {why}", spec.name));
            if !seen.insert(spec.name.as_str()) {
                return Err(bad("appears twice in the signature"));
            }
            if spec.dtype == Dtype::Unspecified {
                return Err(bad("dtype is unspecified"));
            }
            if spec.shape.iter().any(|&d| d < 0) {
                return Err(bad("shape has a negative dimension"));
            }
            if spec.shape.contains(&0) {
                return Err(bad(&format!(
                    "shape {:?} has a zero-length dimension, so the field would hold no data",
                    spec.shape
                )));
            }
        }
        Ok(())
    }

    /// The spec of the field called `name`.
    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }

    fn first_extra_field(&self, item: &TensorMap) -> ReplayError {
        let mut extra: Vec<&String> = item
            .tensors
            .keys()
            .filter(|name| self.field(name).is_none())
            .collect();
        // Map order is arbitrary; report the smallest name so the message is deterministic.
        extra.sort();
        match extra.first() {
            Some(name) => ReplayError::invalid_item(name, "is not in the signature"),
            // Unreachable while field names are unique (`check`), but never panic on input.
            None => ReplayError::InvalidRequest("item and signature field counts differ".into()),
        }
    }
}

fn check_field(spec: &FieldSpec, tensor: &Tensor) -> Result<(), ReplayError> {
    let invalid = |reason: String| ReplayError::invalid_item(&spec.name, reason);
    let dtype = tensor.checked_dtype().map_err(|e| invalid(e.to_string()))?;
    if dtype != spec.dtype {
        return Err(invalid(format!(
            "dtype {dtype:?} does not match signature {:?}",
            spec.dtype
        )));
    }
    if tensor.shape != spec.shape {
        return Err(invalid(format!(
            "shape {:?} does not match signature {:?}",
            tensor.shape, spec.shape
        )));
    }
    tensor.validate().map_err(|e| invalid(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn signature() -> Signature {
        Signature {
            fields: vec![
                FieldSpec::new("obs", Dtype::F32, &[32, 4, 4]),
                FieldSpec::new("done", Dtype::Bool, &[32]),
            ],
        }
    }

    fn item(obs_shape: &[i64]) -> TensorMap {
        let numel: i64 = obs_shape.iter().product();
        TensorMap::from_pairs([
            (
                "obs",
                Tensor::from_slice(obs_shape, &vec![0.0f32; numel as usize]),
            ),
            ("done", Tensor::from_slice(&[32], &[false; 32])),
        ])
    }

    fn message(result: Result<(), ReplayError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn accepts_a_matching_item() {
        signature().validate(&item(&[32, 4, 4])).unwrap();
    }

    #[test]
    fn names_the_field_with_a_wrong_shape() {
        assert_eq!(
            message(signature().validate(&item(&[32, 4, 3]))),
            "field `obs`: shape [32, 4, 3] does not match signature [32, 4, 4]"
        );
    }

    #[test]
    fn rejects_missing_and_extra_fields() {
        let mut missing = item(&[32, 4, 4]);
        missing.tensors.remove("done");
        assert_eq!(
            message(signature().validate(&missing)),
            "field `done`: missing from the item"
        );
        let mut extra = item(&[32, 4, 4]);
        extra.tensors.insert("zeta".into(), Tensor::scalar(1i64));
        assert_eq!(
            message(signature().validate(&extra)),
            "field `zeta`: is not in the signature"
        );
    }

    #[test]
    fn rejects_wrong_dtype_and_short_data() {
        let mut wrong = item(&[32, 4, 4]);
        wrong
            .tensors
            .insert("done".into(), Tensor::from_slice(&[32], &[0u8; 32]));
        assert_eq!(
            message(signature().validate(&wrong)),
            "field `done`: dtype U8 does not match signature Bool"
        );
        let mut short = item(&[32, 4, 4]);
        let obs = short.tensors.get_mut("obs").unwrap();
        obs.data = obs.data.slice(0..8);
        assert!(message(signature().validate(&short)).starts_with("field `obs`: shape [32, 4, 4]"));
    }

    /// Fields of any dtype number, names from a small set (so duplicates happen) and small,
    /// negative or huge dimensions: a signature or an item as a client may send it.
    fn any_fields() -> impl Strategy<Value = Vec<(String, i32, Vec<i64>)>> {
        let dim = prop_oneof![4 => -1i64..4, 1 => any::<i64>()];
        proptest::collection::vec(
            (
                "[ab]",
                prop_oneof![4 => 0i32..8, 1 => any::<i32>()],
                proptest::collection::vec(dim, 0..3),
            ),
            0..4,
        )
    }

    fn signature_of(fields: &[(String, i32, Vec<i64>)]) -> Signature {
        Signature {
            fields: fields
                .iter()
                .map(|(name, dtype, shape)| {
                    FieldSpec::new(name, Dtype::try_from(*dtype).unwrap_or_default(), shape)
                })
                .collect(),
        }
    }

    /// An item whose tensors follow `fields`, each with `bytes` bytes of data.
    fn item_of(fields: &[(String, i32, Vec<i64>)], bytes: usize) -> TensorMap {
        TensorMap::from_pairs(fields.iter().map(|(name, dtype, shape)| {
            let tensor = Tensor {
                dtype: *dtype,
                shape: shape.clone(),
                data: vec![0u8; bytes].into(),
            };
            (name.clone(), tensor)
        }))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn any_signature_and_item_are_checked_without_panicking(
            declared in any_fields(),
            sent in any_fields(),
            bytes in 0usize..64,
        ) {
            let signature = signature_of(&declared);
            let item = item_of(&sent, bytes);
            let checked = signature.check();
            let validated = signature.validate(&item);
            let _ = crate::table::split_stacked(&item, &signature);
            let _ = signature.item_bytes();
            if checked.is_ok() && validated.is_ok() {
                // Accepted means every field is there with exactly its bytes.
                for spec in &signature.fields {
                    prop_assert_eq!(item.tensors[&spec.name].data.len() as u64, spec.bytes());
                }
            }
        }

        #[test]
        fn an_item_built_to_a_checked_signature_validates_and_splits_back(
            declared in any_fields(),
            n in 1i64..4,
        ) {
            let mut signature = signature_of(&declared);
            signature.fields.retain(|f| f.shape.iter().all(|d| (1..4).contains(d)));
            signature.fields.dedup_by(|a, b| a.name == b.name);
            if signature.fields.is_empty() {
                // `check` refuses an empty signature; give it one field the names never clash with.
                signature.fields.push(FieldSpec::new("c", Dtype::F32, &[2]));
            }
            prop_assume!(signature.check().is_ok());
            let items: Vec<TensorMap> = (0..n)
                .map(|i| TensorMap::from_pairs(signature.fields.iter().map(|f| {
                    let data: Vec<u8> = (0..f.bytes()).map(|b| (b as i64 + i) as u8 & 1).collect();
                    (f.name.clone(), Tensor { dtype: f.dtype as i32, shape: f.shape.clone(), data: data.into() })
                })))
                .collect();
            for item in &items {
                prop_assert!(signature.validate(item).is_ok());
            }
            let stacked = TensorMap::from_pairs(signature.fields.iter().map(|f| {
                let parts: Vec<&Tensor> = items.iter().map(|i| &i.tensors[&f.name]).collect();
                (f.name.clone(), Tensor::stack(&parts).unwrap())
            }));
            // `check` refuses a signature with no fields, which has no item dimension to count.
            let back = crate::table::split_stacked(&stacked, &signature);
            prop_assert_eq!(back, Ok(items));
        }
    }

    #[test]
    fn check_rejects_duplicate_names() {
        let mut sig = signature();
        sig.fields.push(FieldSpec::new("obs", Dtype::F32, &[1]));
        assert!(matches!(sig.check(), Err(ReplayError::InvalidRequest(m)) if m.contains("twice")));
        signature().check().unwrap();
    }

    #[test]
    fn check_rejects_an_empty_signature() {
        let empty = Signature { fields: vec![] };
        assert_eq!(
            message(empty.check()),
            "invalid request: the signature is empty: a table needs at least one field"
        );
    }

    #[test]
    fn check_rejects_a_zero_length_dimension() {
        for shape in [&[0][..], &[32, 0, 4], &[4, 0]] {
            let mut sig = signature();
            sig.fields.push(FieldSpec::new("mask", Dtype::Bool, shape));
            let msg = message(sig.check());
            assert!(
                msg.contains("field `mask`") && msg.contains("zero-length dimension"),
                "{shape:?}: {msg}"
            );
        }
        // A scalar field (no dimensions at all) holds one value and stays allowed.
        let mut scalar = signature();
        scalar.fields.push(FieldSpec::new("step", Dtype::I64, &[]));
        scalar.check().unwrap();
    }
}
