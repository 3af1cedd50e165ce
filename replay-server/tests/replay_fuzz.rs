//! Fuzzing the replay server's decode-and-validate path: whatever bytes or tensors arrive, the
//! path returns an item list or an error naming the problem, and never panics, hangs or
//! allocates without bound. (Property-based with proptest, so it runs in the normal suite.)

use fleet_replay_server::buffers::Table;
use fleetrl_proto::table::{split_stacked, FieldSpec, Signature, TableSpec};
use fleetrl_proto::v1::{InsertRequest, TableConfig};
use fleetrl_proto::{Dtype, Tensor, TensorMap};
use proptest::prelude::*;
use prost::Message;

fn signature() -> Signature {
    Signature {
        fields: vec![
            FieldSpec::new("obs", Dtype::F32, &[4]),
            FieldSpec::new("frame", Dtype::U8, &[2, 3]),
            FieldSpec::new("action", Dtype::I64, &[]),
        ],
    }
}

fn table() -> Table {
    let mut spec = TableSpec::replay("fuzz", 64, 1.0, 1, signature());
    spec.rate_limiter = fleetrl_proto::table::RateLimiterSpec::MinSize { min_size: 1 };
    Table::seeded(&spec, 1).unwrap()
}

/// Runs a decoded request through what the server does with it, short of storing.
fn check(table: &Table, request: &InsertRequest) {
    let Some(items) = &request.items else { return };
    if let Ok(split) = split_stacked(items, table.signature()) {
        for item in &split {
            // Split items may still hold NaN (rejected here) but never a shape error.
            if let Err(e) = table.validate(item) {
                assert!(e.to_string().contains("NaN or infinity"), "{e}");
            }
        }
    }
}

fn tensor() -> impl Strategy<Value = Tensor> {
    (
        -1i32..8,
        prop::collection::vec(prop_oneof![-2i64..6, Just(i64::MAX), Just(1 << 40)], 0..4),
        prop::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(dtype, shape, data)| Tensor {
            dtype,
            shape,
            data: data.into(),
        })
}

fn tensor_map() -> impl Strategy<Value = TensorMap> {
    prop::collection::btree_map(
        prop_oneof![
            Just("obs".to_string()),
            Just("frame".to_string()),
            Just("action".to_string()),
            "[a-z]{1,4}"
        ],
        tensor(),
        0..5,
    )
    .prop_map(|fields| TensorMap {
        tensors: fields.into_iter().collect(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let table = table();
        if let Ok(request) = InsertRequest::decode(bytes.as_slice()) {
            check(&table, &request);
        }
        if let Ok(config) = TableConfig::decode(bytes.as_slice()) {
            if let Ok(spec) = TableSpec::try_from(&config) {
                let _ = spec.check(1 << 30);
            }
        }
    }

    #[test]
    fn arbitrary_tensors_never_panic(items in tensor_map(), priorities in prop::collection::vec(any::<f64>(), 0..3)) {
        let table = table();
        check(&table, &InsertRequest { table: "fuzz".into(), items: Some(items), priorities });
    }

    /// Mutations of a valid request: each is either still valid or refused with a reason.
    #[test]
    fn mutated_valid_requests_are_split_or_refused(
        n in 1i64..5,
        field in 0usize..3,
        new_dim in -1i64..6,
        cut in 0usize..8,
    ) {
        let mut items = TensorMap::from_pairs([
            ("obs", Tensor::from_slice(&[n, 4], &vec![0.5f32; 4 * n as usize])),
            ("frame", Tensor::from_slice(&[n, 2, 3], &vec![7u8; 6 * n as usize])),
            ("action", Tensor::from_slice(&[n], &vec![1i64; n as usize])),
        ]);
        let name = ["obs", "frame", "action"][field];
        let tensor = items.tensors.get_mut(name).unwrap();
        if let Some(last) = tensor.shape.last_mut() { *last = new_dim; }
        let len = tensor.data.len();
        tensor.data = tensor.data.slice(0..len.saturating_sub(cut));
        match split_stacked(&items, &signature()) {
            Ok(split) => {
                prop_assert_eq!(split.len() as i64, n);
                for item in &split { signature().validate(item).unwrap(); }
            }
            Err(e) => prop_assert!(e.to_string().contains("field `"), "{}", e),
        }
    }
}
