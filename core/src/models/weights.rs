//! Moving a var store's parameters in and out by name: weight messages (proto tensors) and
//! checkpoints (named tch tensors). Shared by every model, so they all load the same way.

use std::collections::HashMap;

use bytes::Bytes;
use fleetrl_proto::{Dtype, Tensor as ProtoTensor, TensorError, TensorMap};
use tch::{nn, Tensor};

use super::ModelError;

fn kind_of(dtype: Dtype) -> Result<tch::Kind, TensorError> {
    Ok(match dtype {
        Dtype::F32 => tch::Kind::Float,
        Dtype::F64 => tch::Kind::Double,
        Dtype::I64 => tch::Kind::Int64,
        Dtype::I32 => tch::Kind::Int,
        Dtype::U8 => tch::Kind::Uint8,
        Dtype::Bool => tch::Kind::Bool,
        Dtype::F16 => tch::Kind::Half,
        Dtype::Unspecified => return Err(TensorError::UnknownDType(0)),
    })
}

fn dtype_of(kind: tch::Kind) -> Result<Dtype, TensorError> {
    Ok(match kind {
        tch::Kind::Float => Dtype::F32,
        tch::Kind::Double => Dtype::F64,
        tch::Kind::Int64 => Dtype::I64,
        tch::Kind::Int => Dtype::I32,
        tch::Kind::Uint8 => Dtype::U8,
        tch::Kind::Bool => Dtype::Bool,
        tch::Kind::Half => Dtype::F16,
        other => return Err(TensorError::Tch(format!("no proto dtype for {other:?}"))),
    })
}

/// Copies a tch tensor (any device) into a proto tensor. (Here, not in fleetrl-proto, so that
/// the protocol crate never depends on tch: the replay server links neither.)
pub fn to_proto(t: &Tensor) -> Result<ProtoTensor, TensorError> {
    let dtype = dtype_of(t.kind())?;
    let t = t.to_device(tch::Device::Cpu).contiguous();
    let numel = t.numel();
    let mut data = vec![0u8; numel * dtype.size()];
    // x86-64 and aarch64 are little-endian, so the in-memory bytes are the wire bytes.
    #[cfg(target_endian = "little")]
    t.f_copy_data_u8(&mut data, numel)
        .map_err(|e| TensorError::Tch(e.to_string()))?;
    Ok(ProtoTensor {
        dtype: dtype as i32,
        shape: t.size(),
        data: Bytes::from(data),
    })
}

/// Copies a proto tensor into a new CPU tch tensor.
pub fn from_proto(t: &ProtoTensor) -> Result<Tensor, TensorError> {
    let dtype = t.validate()?;
    Tensor::f_from_data_size(&t.data, &t.shape, kind_of(dtype)?)
        .map_err(|e| TensorError::Tch(e.to_string()))
}

/// Every variable of `vs` as a proto tensor, by path; refused if one holds NaN or infinity
/// (an update that diverged must not reach the actors).
pub fn export(vs: &nn::VarStore) -> Result<TensorMap, ModelError> {
    let mut map = HashMap::new();
    for (name, var) in vs.variables() {
        check_finite(&name, &var)?;
        map.insert(name, to_proto(&var)?);
    }
    Ok(TensorMap { tensors: map })
}

/// Refuses a floating-point tensor `name` that holds NaN or infinity.
pub fn check_finite(name: &str, t: &Tensor) -> Result<(), ModelError> {
    if t.is_floating_point() && t.isfinite().all().int64_value(&[]) == 0 {
        return Err(ModelError::NonFinite(name.to_string()));
    }
    Ok(())
}

/// Copies a proto map into `vs`; every variable must be present with its shape.
pub fn import(vs: &nn::VarStore, weights: &TensorMap) -> Result<(), ModelError> {
    let mut named = Vec::with_capacity(weights.tensors.len());
    for (name, proto) in &weights.tensors {
        named.push((name.clone(), from_proto(proto)?));
    }
    load_named(vs, &named)
}

/// Every variable of `vs`, sorted by path.
pub fn named(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

/// Copies named tensors into `vs`; every variable must be present with its exact shape and
/// finite (weights from the network or a checkpoint are checked before any is copied).
pub fn load_named(vs: &nn::VarStore, weights: &[(String, Tensor)]) -> Result<(), ModelError> {
    for (name, t) in weights {
        check_finite(name, t)?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_with_nan_or_infinity_are_neither_exported_nor_loaded() {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let mut w = vs.root().zeros("w", &[3]);
        let good = export(&vs).unwrap();
        tch::no_grad(|| {
            let _ = w.fill_(f64::NAN);
        });
        let err = export(&vs).unwrap_err();
        assert_eq!(err.to_string(), "`w` holds NaN or infinity");
        let inf = vec![(
            "w".to_string(),
            Tensor::from_slice(&[0.0f32, f32::INFINITY, 1.0]),
        )];
        assert_eq!(
            load_named(&vs, &inf).unwrap_err().to_string(),
            "`w` holds NaN or infinity"
        );
        import(&vs, &good).unwrap();
        assert_eq!(Vec::<f32>::try_from(&w).unwrap(), [0.0; 3]);
    }
}
