//! Moving a var store's parameters in and out by name: weight messages (proto tensors) and
//! checkpoints (named tch tensors). Shared by every model, so they all load the same way.

use std::collections::HashMap;

use fleetrl_proto::{Tensor as ProtoTensor, TensorMap};
use tch::{nn, Tensor};

use super::ModelError;

/// Every variable of `vs` as a proto tensor, by path.
pub fn export(vs: &nn::VarStore) -> Result<TensorMap, ModelError> {
    let mut map = HashMap::new();
    for (name, var) in vs.variables() {
        map.insert(name, ProtoTensor::try_from(&var)?);
    }
    Ok(TensorMap { tensors: map })
}

/// Copies a proto map into `vs`; every variable must be present with its shape.
pub fn import(vs: &nn::VarStore, weights: &TensorMap) -> Result<(), ModelError> {
    let mut named = Vec::with_capacity(weights.tensors.len());
    for (name, proto) in &weights.tensors {
        named.push((name.clone(), Tensor::try_from(proto)?));
    }
    load_named(vs, &named)
}

/// Every variable of `vs`, sorted by path.
pub fn named(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

/// Copies named tensors into `vs`; every variable must be present with its exact shape.
pub fn load_named(vs: &nn::VarStore, weights: &[(String, Tensor)]) -> Result<(), ModelError> {
    let _guard = tch::no_grad_guard();
    for (name, mut var) in vs.variables() {
        let src = weights
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| ModelError::WeightsMismatch(format!("missing `{name}`")))?;
        if src.size() != var.size() {
            return Err(ModelError::WeightsMismatch(format!(
                "`{name}` has shape {:?}, model expects {:?}",
                src.size(),
                var.size()
            )));
        }
        var.copy_(src);
    }
    Ok(())
}
