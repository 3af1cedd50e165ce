//! Conversions between [`Tensor`] (dtype, shape, little-endian bytes) and typed Rust data.

use bytes::{Bytes, BytesMut};

use crate::v1::{Dtype, Tensor, TensorMap};

/// Why a proto tensor could not be built, read or stacked.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TensorError {
    #[error("dtype is unspecified or unknown ({0})")]
    UnknownDType(i32),
    #[error("shape {shape:?} has a negative dimension")]
    NegativeDim { shape: Vec<i64> },
    #[error("shape {shape:?} describes more elements than memory can hold")]
    TooLarge { shape: Vec<i64> },
    #[error("shape {shape:?} of {dtype:?} needs {expected} bytes, data has {actual}")]
    DataLength {
        shape: Vec<i64>,
        dtype: Dtype,
        expected: usize,
        actual: usize,
    },
    #[error("expected dtype {expected:?}, got {actual:?}")]
    WrongDType { expected: Dtype, actual: Dtype },
    #[error("cannot stack tensors of different dtype or shape ({0})")]
    Mismatch(String),
    #[error("cannot stack zero tensors")]
    Empty,
    #[error("missing field `{0}`")]
    MissingField(String),
    /// The tensor library on either side of a conversion refused (fleetrl-core's tch
    /// conversions).
    #[error("tch: {0}")]
    Tch(String),
    /// An f32 value that a byte tensor cannot hold exactly.
    #[error("value {0} is not a whole number in 0..=255, so it cannot travel as a byte")]
    NotAByte(String),
}

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F64 | Dtype::I64 => 8,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 => 2,
            Dtype::U8 | Dtype::Bool | Dtype::Unspecified => 1,
        }
    }
}

/// A Rust element type that has a proto dtype.
pub trait Element: Copy + Sized {
    /// The matching proto dtype.
    const DTYPE: Dtype;
    /// Appends the little-endian bytes of `self`.
    fn put(self, out: &mut BytesMut);
    /// Reads one element from exactly `Self::DTYPE.size()` little-endian bytes.
    fn get(bytes: &[u8]) -> Self;
}

macro_rules! numeric_element {
    ($ty:ty, $dtype:expr) => {
        impl Element for $ty {
            const DTYPE: Dtype = $dtype;
            fn put(self, out: &mut BytesMut) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(bytes: &[u8]) -> Self {
                let mut raw = [0u8; std::mem::size_of::<$ty>()];
                raw.copy_from_slice(bytes);
                <$ty>::from_le_bytes(raw)
            }
        }
    };
}

numeric_element!(f32, Dtype::F32);
numeric_element!(f64, Dtype::F64);
numeric_element!(i64, Dtype::I64);
numeric_element!(i32, Dtype::I32);
numeric_element!(u8, Dtype::U8);

impl Element for bool {
    const DTYPE: Dtype = Dtype::Bool;
    fn put(self, out: &mut BytesMut) {
        out.extend_from_slice(&[self as u8]);
    }
    fn get(bytes: &[u8]) -> Self {
        bytes[0] != 0
    }
}

impl Tensor {
    /// Builds a tensor from row-major `values` of the given shape.
    ///
    /// Panics if `values.len()` is not the product of `shape`: that is a caller bug, not input.
    pub fn from_slice<T: Element>(shape: &[i64], values: &[T]) -> Tensor {
        let numel: i64 = shape.iter().product();
        assert_eq!(
            numel as usize,
            values.len(),
            "values do not fill shape {shape:?}"
        );
        let mut data = BytesMut::with_capacity(values.len() * T::DTYPE.size());
        for &v in values {
            v.put(&mut data);
        }
        Tensor {
            dtype: T::DTYPE as i32,
            shape: shape.to_vec(),
            data: data.freeze(),
        }
    }

    /// A scalar (shape `[]`).
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_slice(&[], &[value])
    }

    /// The dtype, or an error if it is unspecified or unknown.
    pub fn checked_dtype(&self) -> Result<Dtype, TensorError> {
        match Dtype::try_from(self.dtype) {
            Ok(Dtype::Unspecified) | Err(_) => Err(TensorError::UnknownDType(self.dtype)),
            Ok(dtype) => Ok(dtype),
        }
    }

    /// Number of elements the shape describes.
    pub fn numel(&self) -> Result<usize, TensorError> {
        let mut n = 1usize;
        for &d in &self.shape {
            if d < 0 {
                return Err(TensorError::NegativeDim {
                    shape: self.shape.clone(),
                });
            }
            n = n
                .checked_mul(d as usize)
                .ok_or_else(|| TensorError::TooLarge {
                    shape: self.shape.clone(),
                })?;
        }
        Ok(n)
    }

    /// Checks that dtype is known and `data` has exactly the bytes the shape needs.
    pub fn validate(&self) -> Result<Dtype, TensorError> {
        let dtype = self.checked_dtype()?;
        let expected =
            self.numel()?
                .checked_mul(dtype.size())
                .ok_or_else(|| TensorError::TooLarge {
                    shape: self.shape.clone(),
                })?;
        if expected != self.data.len() {
            return Err(TensorError::DataLength {
                shape: self.shape.clone(),
                dtype,
                expected,
                actual: self.data.len(),
            });
        }
        Ok(dtype)
    }

    /// Reads the elements back, checking dtype and length.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, TensorError> {
        let dtype = self.validate()?;
        if dtype != T::DTYPE {
            return Err(TensorError::WrongDType {
                expected: T::DTYPE,
                actual: dtype,
            });
        }
        Ok(self.data.chunks_exact(dtype.size()).map(T::get).collect())
    }

    /// The values as f32: an F32 tensor as it is, a U8 tensor widened (exactly).
    pub fn to_f32_widened(&self) -> Result<Vec<f32>, TensorError> {
        match self.validate()? {
            Dtype::U8 => Ok(self.data.iter().map(|&b| f32::from(b)).collect()),
            _ => self.to_vec::<f32>(),
        }
    }

    /// An F32 tensor whose every value is a whole number in 0..=255 as a U8 tensor of the
    /// same shape (a quarter of the bytes, no loss); other values are refused.
    pub fn narrowed_to_bytes(&self) -> Result<Tensor, TensorError> {
        let values = self.to_vec::<f32>()?;
        let bytes = values
            .iter()
            .map(|&v| match v.fract() == 0.0 && (0.0..=255.0).contains(&v) {
                true => Ok(v as u8),
                false => Err(TensorError::NotAByte(v.to_string())),
            })
            .collect::<Result<Vec<u8>, _>>()?;
        Ok(Tensor::from_slice(&self.shape, &bytes))
    }

    /// Stacks same-typed, same-shaped tensors along a new leading dimension.
    pub fn stack(parts: &[&Tensor]) -> Result<Tensor, TensorError> {
        let first = parts.first().ok_or(TensorError::Empty)?;
        let mut shape = Vec::with_capacity(first.shape.len() + 1);
        shape.push(parts.len() as i64);
        shape.extend_from_slice(&first.shape);
        join(parts, |p| p.shape == first.shape, shape)
    }

    /// Concatenates same-typed tensors along their leading dimension; every other
    /// dimension must agree.
    pub fn concat(parts: &[&Tensor]) -> Result<Tensor, TensorError> {
        let first = parts.first().ok_or(TensorError::Empty)?;
        if first.shape.is_empty() {
            return Err(TensorError::Mismatch("cannot concatenate scalars".into()));
        }
        // Checked: leading dimensions come from the wire, and two near i64::MAX overflowed.
        let mut rows = 0i64;
        for part in parts {
            let leading = part.shape.first().copied().unwrap_or(0);
            rows = rows
                .checked_add(leading)
                .ok_or_else(|| TensorError::TooLarge {
                    shape: part.shape.clone(),
                })?;
        }
        let mut shape = first.shape.clone();
        shape[0] = rows;
        join(
            parts,
            |p| !p.shape.is_empty() && p.shape[1..] == first.shape[1..],
            shape,
        )
    }

    /// The rows `rows` (indices along the leading dimension, in that order) as one tensor.
    pub fn select_rows(&self, rows: &[usize]) -> Result<Tensor, TensorError> {
        let dtype = self.validate()?;
        let Some(&n) = self.shape.first() else {
            return Err(TensorError::Mismatch("cannot take rows of a scalar".into()));
        };
        let row_bytes = self.data.len() / (n.max(1) as usize);
        let mut data = BytesMut::with_capacity(rows.len() * row_bytes);
        for &row in rows {
            if row >= n as usize {
                return Err(TensorError::Mismatch(format!("row {row} of {n}")));
            }
            data.extend_from_slice(&self.data[row * row_bytes..(row + 1) * row_bytes]);
        }
        let mut shape = self.shape.clone();
        shape[0] = rows.len() as i64;
        Ok(Tensor {
            dtype: dtype as i32,
            shape,
            data: data.freeze(),
        })
    }

    /// The raw little-endian bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.data
    }
}

/// The bytes of `parts` one after another, as a tensor of `shape`; every part must have the
/// first part's dtype and pass `fits`.
fn join(
    parts: &[&Tensor],
    fits: impl Fn(&Tensor) -> bool,
    shape: Vec<i64>,
) -> Result<Tensor, TensorError> {
    let first = parts.first().ok_or(TensorError::Empty)?;
    let dtype = first.validate()?;
    // One part keeps its bytes (shared, not copied): a writer's request of one 28 KB frame.
    if let [only] = parts {
        if !fits(only) {
            return Err(TensorError::Mismatch(format!("{dtype:?}{:?}", only.shape)));
        }
        return Ok(Tensor {
            dtype: only.dtype,
            shape,
            data: only.data.clone(),
        });
    }
    let mut data = BytesMut::with_capacity(parts.iter().map(|p| p.data.len()).sum());
    for part in parts {
        if part.dtype != first.dtype || !fits(part) {
            return Err(TensorError::Mismatch(format!(
                "{:?}{:?} vs {:?}{:?}",
                dtype,
                first.shape,
                part.checked_dtype(),
                part.shape
            )));
        }
        part.validate()?;
        data.extend_from_slice(&part.data);
    }
    Ok(Tensor {
        dtype: first.dtype,
        shape,
        data: data.freeze(),
    })
}

impl TensorMap {
    /// Builds a map from `(name, tensor)` pairs.
    pub fn from_pairs<I, S>(pairs: I) -> TensorMap
    where
        I: IntoIterator<Item = (S, Tensor)>,
        S: Into<String>,
    {
        TensorMap {
            tensors: pairs.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        }
    }

    /// Rows `rows` of every tensor ([`Tensor::select_rows`]).
    pub fn select_rows(&self, rows: &[usize]) -> Result<TensorMap, TensorError> {
        let mut tensors = std::collections::HashMap::with_capacity(self.tensors.len());
        for (name, tensor) in &self.tensors {
            tensors.insert(name.clone(), tensor.select_rows(rows)?);
        }
        Ok(TensorMap { tensors })
    }

    /// The tensor named `name`, or a `MissingField` error.
    pub fn field(&self, name: &str) -> Result<&Tensor, TensorError> {
        self.tensors
            .get(name)
            .ok_or_else(|| TensorError::MissingField(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn selects_rows_in_order() {
        let t = Tensor::from_slice(&[3, 2], &[1i64, 2, 3, 4, 5, 6]);
        let picked = t.select_rows(&[2, 0]).unwrap();
        assert_eq!(picked.shape, vec![2, 2]);
        assert_eq!(picked.to_vec::<i64>().unwrap(), vec![5, 6, 1, 2]);
        assert!(t.select_rows(&[3]).is_err());
        assert!(Tensor::scalar(1.0f32).select_rows(&[0]).is_err());
    }

    #[test]
    fn rejects_short_data_naming_lengths() {
        let mut t = Tensor::from_slice(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]);
        t.data = t.data.slice(0..12);
        let err = t.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "shape [2, 2] of F32 needs 16 bytes, data has 12"
        );
    }

    #[test]
    fn rejects_wrong_dtype_on_read() {
        let t = Tensor::from_slice(&[1], &[3i64]);
        assert!(matches!(
            t.to_vec::<f32>(),
            Err(TensorError::WrongDType { .. })
        ));
    }

    #[test]
    fn stack_adds_leading_dim() {
        let a = Tensor::from_slice(&[2], &[1u8, 2]);
        let b = Tensor::from_slice(&[2], &[3u8, 4]);
        let s = Tensor::stack(&[&a, &b]).unwrap();
        assert_eq!(s.shape, vec![2, 2]);
        assert_eq!(s.to_vec::<u8>().unwrap(), vec![1, 2, 3, 4]);
        let c = Tensor::from_slice(&[1], &[5u8]);
        assert!(matches!(
            Tensor::stack(&[&a, &c]),
            Err(TensorError::Mismatch(_))
        ));
        // One part shares its bytes instead of copying them, and is still validated.
        let one = Tensor::stack(&[&a]).unwrap();
        assert_eq!(one.shape, vec![1, 2]);
        assert_eq!(one.data.as_ptr(), a.data.as_ptr());
        let short = Tensor {
            data: a.data.slice(..1),
            ..a.clone()
        };
        assert!(Tensor::stack(&[&short]).is_err());
    }

    #[test]
    fn concat_joins_leading_dims() {
        let a = Tensor::from_slice(&[1, 2], &[1i64, 2]);
        let b = Tensor::from_slice(&[2, 2], &[3i64, 4, 5, 6]);
        let c = Tensor::concat(&[&a, &b]).unwrap();
        assert_eq!(c.shape, vec![3, 2]);
        assert_eq!(c.to_vec::<i64>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
        let wrong = Tensor::from_slice(&[1, 3], &[0i64, 0, 0]);
        assert!(matches!(
            Tensor::concat(&[&a, &wrong]),
            Err(TensorError::Mismatch(_))
        ));
        assert!(matches!(
            Tensor::concat(&[&Tensor::scalar(1i64)]),
            Err(TensorError::Mismatch(_))
        ));
    }

    /// Any dtype number (mostly known ones), any shape (small, negative or near `i64::MAX`
    /// dimensions), any bytes: what a client can put in a `Tensor`.
    fn any_tensor() -> impl Strategy<Value = Tensor> {
        let dim = prop_oneof![4 => -2i64..6, 1 => any::<i64>()];
        (
            prop_oneof![4 => 0i32..8, 1 => any::<i32>()],
            proptest::collection::vec(dim, 0..4),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(dtype, shape, data)| Tensor {
                dtype,
                shape,
                data: data.into(),
            })
    }

    /// A well-formed tensor of every dtype, its values from `bytes` (any bit pattern).
    fn valid_tensor() -> impl Strategy<Value = Tensor> {
        let dtypes = [
            Dtype::F32,
            Dtype::F64,
            Dtype::I64,
            Dtype::I32,
            Dtype::U8,
            Dtype::Bool,
        ];
        (
            proptest::sample::select(dtypes.to_vec()),
            proptest::collection::vec(0i64..4, 0..3),
            proptest::collection::vec(any::<u8>(), 0..512),
        )
            .prop_map(|(dtype, shape, bytes)| {
                let numel = shape.iter().product::<i64>() as usize;
                let mut data: Vec<u8> = bytes
                    .into_iter()
                    .cycle()
                    .take(numel * dtype.size())
                    .collect();
                data.resize(numel * dtype.size(), 0);
                if dtype == Dtype::Bool {
                    data.iter_mut().for_each(|b| *b &= 1);
                }
                Tensor {
                    dtype: dtype as i32,
                    shape,
                    data: data.into(),
                }
            })
    }

    /// Every reading of `t`; none may panic, whatever `t` holds.
    fn read_every_way(t: &Tensor) {
        let _ = (t.checked_dtype(), t.numel(), t.validate());
        let _ = (
            t.to_vec::<f32>(),
            t.to_vec::<f64>(),
            t.to_vec::<i64>(),
            t.to_vec::<i32>(),
        );
        let _ = (
            t.to_vec::<u8>(),
            t.to_vec::<bool>(),
            t.to_f32_widened(),
            t.narrowed_to_bytes(),
        );
    }

    #[test]
    fn concatenating_leading_dims_that_overflow_is_an_error() {
        let huge = Tensor {
            dtype: Dtype::U8 as i32,
            shape: vec![i64::MAX],
            data: Bytes::new(),
        };
        assert!(Tensor::concat(&[&huge, &huge]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn any_tensor_reads_stacks_and_concatenates_without_panicking(
            a in any_tensor(),
            b in any_tensor(),
        ) {
            read_every_way(&a);
            let _ = (Tensor::stack(&[&a, &b]), Tensor::concat(&[&a, &b]), Tensor::concat(&[&a]));
            if a.validate().is_ok() {
                prop_assert_eq!(a.data.len(), a.numel().unwrap() * a.checked_dtype().unwrap().size());
            }
        }

        #[test]
        fn any_bytes_decode_to_a_tensor_map_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            use prost::Message;
            if let Ok(map) = TensorMap::decode(bytes.as_slice()) {
                map.tensors.values().for_each(read_every_way);
            }
            if let Ok(t) = Tensor::decode(bytes.as_slice()) {
                read_every_way(&t);
            }
        }

        #[test]
        fn valid_tensors_round_trip_through_the_wire_exactly(
            tensors in proptest::collection::btree_map("[a-z.]{1,8}", valid_tensor(), 0..4),
        ) {
            use prost::Message;
            let map = TensorMap::from_pairs(tensors);
            let back = TensorMap::decode(map.encode_to_vec().as_slice()).unwrap();
            prop_assert_eq!(&back, &map);
            for t in back.tensors.values() {
                prop_assert!(t.validate().is_ok());
                let bytes: Vec<u8> = match t.checked_dtype().unwrap() {
                    Dtype::F32 => t.to_vec::<f32>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
                    Dtype::F64 => t.to_vec::<f64>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
                    Dtype::I64 => t.to_vec::<i64>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
                    Dtype::I32 => t.to_vec::<i32>().unwrap().iter().flat_map(|v| v.to_le_bytes()).collect(),
                    Dtype::U8 => t.to_vec::<u8>().unwrap(),
                    _ => t.to_vec::<bool>().unwrap().iter().map(|&v| v as u8).collect(),
                };
                prop_assert_eq!(bytes.as_slice(), &t.data[..]);
            }
        }

        #[test]
        fn f32_round_trip(values in proptest::collection::vec(any::<f32>(), 0..64)) {
            let t = Tensor::from_slice(&[values.len() as i64], &values);
            let back = t.to_vec::<f32>().unwrap();
            prop_assert_eq!(values.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            back.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }

        #[test]
        fn i64_round_trip_2d(rows in 0usize..8, cols in 0usize..8, seed in any::<i64>()) {
            let values: Vec<i64> = (0..rows * cols).map(|i| seed.wrapping_mul(i as i64 + 1)).collect();
            let t = Tensor::from_slice(&[rows as i64, cols as i64], &values);
            prop_assert_eq!(t.to_vec::<i64>().unwrap(), values);
        }
    }
}
