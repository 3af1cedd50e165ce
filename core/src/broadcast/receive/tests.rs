use std::sync::Arc;

use fleetrl_proto::TensorMap;
use futures::{Stream, StreamExt};
use proptest::strategy::Strategy;
use prost::Message;
use tokio::sync::watch;

use super::*;
use crate::broadcast::{
    chunked, encode, subscription, test_weights as weights, Counts, EncodedCache, Framing,
};
use crate::config::BroadcastDtype;

fn messages(version: i64, values: &[f32], dtype: BroadcastDtype, chunk: usize) -> Vec<Weights> {
    chunked(&encode(&weights(version, values), dtype).unwrap(), chunk, 3)
}

/// Feeds every message; the version must complete on the last one and not before.
fn receive(receiver: &mut Receiver, messages: Vec<Weights>) -> Received {
    let n = messages.len();
    let mut done = None;
    for (i, m) in messages.into_iter().enumerate() {
        let out = receiver.push(m).unwrap();
        assert_eq!(out.is_some(), i + 1 == n, "completes on the last chunk");
        done = out.or(done);
    }
    done.unwrap()
}

fn values_of(received: &Received, name: &str) -> (Kind, Vec<i64>, Vec<f64>) {
    received.with_tensors(|tensors| {
        let (_, t) = tensors.iter().find(|(n, _)| n == name).unwrap();
        let flat = t.to_kind(Kind::Double).flatten(0, -1);
        (t.kind(), t.size(), Vec::<f64>::try_from(&flat).unwrap())
    })
}

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32 * 0.37).sin() * 2.0).collect()
}

#[test]
fn chunks_land_in_f32_tensors_with_their_shapes() {
    let v = values(1000);
    let mut receiver = Receiver::default();
    let got = receive(&mut receiver, messages(4, &v, BroadcastDtype::F32, 100));
    assert_eq!(
        (got.version, got.subscribers, got.published_unix_nanos),
        (4, 3, 5)
    );
    let (kind, shape, back) = values_of(&got, "pi.w");
    assert_eq!((kind, shape), (Kind::Float, vec![2, 500]));
    assert!(back.iter().zip(&v).all(|(b, v)| *b == *v as f64));
    assert_eq!(values_of(&got, "steps"), (Kind::Int64, vec![1], vec![7.0]));
}

#[test]
fn f16_is_widened_to_f32_as_it_arrives() {
    let v = values(4096);
    let mut receiver = Receiver::default();
    // 1001-byte chunks: odd sizes are cut to whole f16 elements.
    let got = receive(&mut receiver, messages(1, &v, BroadcastDtype::F16, 1001));
    let (kind, _, back) = values_of(&got, "pi.w");
    assert_eq!(kind, Kind::Float);
    for (g, v) in back.iter().zip(&v) {
        assert!(
            (*g as f32 - v).abs() <= 2e-3 * v.abs().max(1.0),
            "{g} vs {v}"
        );
    }
    assert_eq!(
        values_of(&got, "steps").0,
        Kind::Int64,
        "integers stay integers"
    );
}

#[test]
fn the_next_version_reuses_the_storage_of_a_dropped_one() {
    let mut receiver = Receiver::default();
    let first = receive(
        &mut receiver,
        messages(1, &values(64), BroadcastDtype::F32, 32),
    );
    let ptr = first.with_tensors(|t| t[0].1.data_ptr() as usize);
    drop(first);
    let second = receive(
        &mut receiver,
        messages(2, &[1.5; 64], BroadcastDtype::F32, 32),
    );
    assert_eq!(second.with_tensors(|t| t[0].1.data_ptr() as usize), ptr);
    assert!(values_of(&second, "pi.w").2.iter().all(|v| *v == 1.5));
    // While a version is held, the next one gets its own tensors.
    let third = receive(
        &mut receiver,
        messages(3, &[2.5; 64], BroadcastDtype::F32, 32),
    );
    assert_ne!(third.with_tensors(|t| t[0].1.data_ptr() as usize), ptr);
    assert!(values_of(&second, "pi.w").2.iter().all(|v| *v == 1.5));
}

#[test]
fn a_chunk_out_of_order_is_an_error_and_the_next_version_still_arrives() {
    let msgs = messages(2, &[1.0; 100], BroadcastDtype::F32, 80);
    let mut receiver = Receiver::default();
    receiver.push(msgs[0].clone()).unwrap();
    let error = receiver.push(msgs[2].clone()).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("expected tensor 0 at byte 80 of version 2"),
        "{error}"
    );
    // A stream joined mid-version is refused until a version starts.
    let mut late = Receiver::default();
    let error = late.push(msgs[1].clone()).unwrap_err();
    assert!(error.to_string().contains("of version -1"), "{error}");
    assert_eq!(receive(&mut late, msgs.clone()).version, 2);
    assert_eq!(receive(&mut receiver, msgs).version, 2);
}

/// A forged tensor count reserves nothing: the chunk is taken (it fits its tensor) and the
/// version simply never completes, where `u32::MAX` once aborted the process.
#[test]
fn a_forged_tensor_count_does_not_allocate_it() {
    let mut forged = messages(3, &[1.0; 8], BroadcastDtype::F32, 1024)[0].clone();
    forged.slice.as_mut().unwrap().count = u32::MAX;
    let mut receiver = Receiver::default();
    assert!(receiver.push(forged).unwrap().is_none());
    let honest = messages(4, &values(16), BroadcastDtype::F32, 1024);
    receive(&mut receiver, honest);
}

#[test]
fn bad_chunks_name_the_tensor_and_the_problem() {
    let msgs = messages(2, &[1.0; 8], BroadcastDtype::F32, 1024);
    let mut long = msgs[0].clone();
    long.chunk = vec![0u8; 40].into();
    let error = Receiver::default().push(long).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("`pi.w` ends at byte 40, past the tensor's 32 bytes"),
        "{error}"
    );
    let mut odd = msgs[0].clone();
    odd.chunk = vec![0u8; 6].into();
    let error = Receiver::default().push(odd).unwrap_err();
    assert!(error.to_string().contains("not a whole number"), "{error}");
    let mut unknown = msgs[0].clone();
    unknown.slice.as_mut().unwrap().dtype = 99;
    let error = Receiver::default().push(unknown).unwrap_err();
    assert!(error.to_string().contains("bad chunk of `pi.w`"), "{error}");
    let bare = Weights {
        version: 9,
        ..Weights::default()
    };
    let error = Receiver::default().push(bare).unwrap_err();
    assert!(
        error.to_string().contains("neither params nor a chunk"),
        "{error}"
    );
}

#[test]
fn whole_messages_and_empty_versions_pass_through() {
    let mut receiver = Receiver::default();
    let whole = receiver.push(weights(7, &[3.0; 4])).unwrap().unwrap();
    assert_eq!(whole.version, 7);
    assert_eq!(values_of(&whole, "pi.w").2, vec![3.0; 4]);
    let empty = Weights {
        version: 8,
        params: Some(TensorMap::default()),
        ..Weights::default()
    };
    let msgs = chunked(&encode(&empty, BroadcastDtype::F32).unwrap(), 64, 1);
    let got = receive(&mut receiver, msgs);
    assert_eq!((got.version, got.with_tensors(|t| t.len())), (8, 0));
}

#[test]
fn every_message_stays_within_the_chunk_size_whatever_the_model_size() {
    // The bound that keeps 100M+ parameter models clear of any message-size limit.
    let msgs = messages(1, &values(50_000), BroadcastDtype::F32, 4096);
    assert!(msgs.len() > 48);
    assert!(msgs.iter().all(|m| m.encoded_len() <= 4096 + 128));
}

async fn next_version(
    stream: &mut (impl Stream<Item = Result<Weights, BroadcastError>> + Unpin),
    receiver: &mut Receiver,
) -> i64 {
    loop {
        let msg = stream.next().await.unwrap().unwrap();
        if let Some(w) = receiver.push(msg).unwrap() {
            return w.version;
        }
    }
}

#[tokio::test]
async fn a_slow_subscriber_gets_only_the_newest_version() {
    let (tx, rx) = watch::channel(Arc::new(weights(0, &[0.0; 10])));
    let cache = Arc::new(EncodedCache::new(BroadcastDtype::F32));
    let framing = Framing::Chunked {
        cache,
        chunk_bytes: 16,
    };
    let counts = Counts::default();
    let mut stream = Box::pin(subscription(
        rx,
        -1,
        framing,
        std::time::Duration::from_secs(60),
        counts.open(),
    ));
    let mut receiver = Receiver::default();
    assert_eq!(next_version(&mut stream, &mut receiver).await, 0);
    for v in 1..=5 {
        tx.send_replace(Arc::new(weights(v, &[v as f32; 10])));
    }
    let newest = next_version(&mut stream, &mut receiver).await;
    assert_eq!(newest, 5, "versions 1-4 are skipped");
    assert_eq!(counts.skipped.load(std::sync::atomic::Ordering::Relaxed), 4);
}

/// A weights message as a learner, a man in the middle or a bug may send it: a chunk of any
/// version, index, offset, count, dtype number and shape (small, so what it announces can be
/// allocated), whole params of any dtype and bytes, or neither.
fn any_message() -> impl proptest::strategy::Strategy<Value = Weights> {
    use fleetrl_proto::v1::WeightsSlice;
    use proptest::prelude::*;
    let shape = proptest::collection::vec(-1i64..5, 0..3);
    let dtype = prop_oneof![4 => 0i32..8, 1 => any::<i32>()];
    let bytes = proptest::collection::vec(any::<u8>(), 0..48);
    let slice = (
        "[ab]",
        dtype.clone(),
        shape.clone(),
        0u64..40,
        0u32..3,
        0u32..4,
    )
        .prop_map(|(name, dtype, shape, offset, index, count)| WeightsSlice {
            name,
            dtype,
            shape,
            offset,
            index,
            count,
        });
    let params = proptest::collection::btree_map("[ab]", (dtype, shape, bytes.clone()), 0..3)
        .prop_map(|tensors| {
            TensorMap::from_pairs(tensors.into_iter().map(|(name, (dtype, shape, data))| {
                let tensor = fleetrl_proto::Tensor {
                    dtype,
                    shape,
                    data: data.into(),
                };
                (name, tensor)
            }))
        });
    (
        0i64..3,
        proptest::option::of(slice),
        proptest::option::weighted(0.2, params),
        bytes,
    )
        .prop_map(|(version, slice, params, chunk)| Weights {
            version,
            slice,
            params,
            chunk: chunk.into(),
            ..Default::default()
        })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// Any run of messages gives versions or typed errors, and an honest version sent after
    /// them still arrives whole.
    #[test]
    fn any_messages_give_versions_or_errors_and_an_honest_version_still_arrives(
        sent in proptest::collection::vec(any_message(), 0..12),
    ) {
        let mut receiver = Receiver::default();
        for message in sent {
            if let Ok(Some(received)) = receiver.push(message) {
                received.with_tensors(|tensors| tensors.len());
            }
        }
        let v = values(64);
        let got = receive(&mut receiver, messages(9, &v, BroadcastDtype::F32, 24));
        let (_, shape, back) = values_of(&got, "pi.w");
        proptest::prop_assert_eq!(shape, vec![2, 32]);
        proptest::prop_assert!(back.iter().zip(&v).all(|(b, v)| *b == *v as f64));
    }

    /// encode -> chunked -> Receiver gives back every tensor: f32 bit for bit, f16 as the
    /// nearest f16, whatever the chunk size.
    #[test]
    fn encoded_chunked_and_received_reproduces_the_tensors(
        v in proptest::collection::vec(-1e4f32..1e4, 1..64).prop_map(|mut v| { v.push(0.5); v.truncate(v.len() / 2 * 2); v }),
        chunk in 1usize..200,
        half in proptest::prelude::any::<bool>(),
    ) {
        let dtype = if half { BroadcastDtype::F16 } else { BroadcastDtype::F32 };
        let mut receiver = Receiver::default();
        let got = receive(&mut receiver, messages(1, &v, dtype, chunk));
        let (kind, shape, back) = values_of(&got, "pi.w");
        proptest::prop_assert_eq!((kind, shape), (Kind::Float, vec![2, v.len() as i64 / 2]));
        for (b, v) in back.iter().zip(&v) {
            let sent = if half { half::f16::from_f32(*v).to_f32() } else { *v };
            proptest::prop_assert_eq!(*b, sent as f64);
        }
        proptest::prop_assert_eq!(values_of(&got, "steps"), (Kind::Int64, vec![1], vec![7.0]));
    }
}
