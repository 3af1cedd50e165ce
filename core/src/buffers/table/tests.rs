//! Table behaviour: FIFO queue semantics, waiting and waking, validation, cancellation.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fleetrl_proto::{Dtype, Tensor, TensorMap};
use proptest::prelude::*;

use super::*;
use crate::buffers::FieldSpec;

const WAIT: Duration = Duration::from_secs(10);

fn signature() -> Signature {
    Signature {
        fields: vec![
            FieldSpec::new("obs", Dtype::F32, &[2, 3]),
            FieldSpec::new("step", Dtype::I64, &[]),
        ],
    }
}

fn queue(max_size: u64) -> Table {
    Table::from_spec(&TableSpec::queue("rollouts", max_size, signature())).unwrap()
}

fn item(value: i64) -> TensorMap {
    TensorMap::from_pairs([
        ("obs", Tensor::from_slice(&[2, 3], &[value as f32; 6])),
        ("step", Tensor::scalar(value)),
    ])
}

fn steps(batch: &SampledBatch) -> Vec<i64> {
    batch.batch.field("step").unwrap().to_vec::<i64>().unwrap()
}

/// Polls a future once with a no-op waker, then drops it.
fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    let mut future = pin!(future);
    future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

fn ready<T>(poll: Poll<T>) -> T {
    match poll {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("expected the operation to complete without waiting"),
    }
}

#[tokio::test]
async fn samples_in_fifo_order_each_item_once() {
    let table = queue(8);
    for value in 0..5 {
        assert_eq!(
            table.insert(item(value), 1.0).await.unwrap(),
            value as u64 + 1
        );
    }
    let first = table.sample(2).await.unwrap();
    assert_eq!(first.keys, vec![1, 2]);
    assert_eq!(steps(&first), vec![0, 1]);
    assert_eq!(first.batch.field("obs").unwrap().shape, vec![2, 2, 3]);
    let second = table.sample(3).await.unwrap();
    assert_eq!(second.keys, vec![3, 4, 5]);
    assert_eq!(steps(&second), vec![2, 3, 4]);
    let info = table.info();
    assert_eq!(
        (info.current_size, info.num_inserted, info.num_sampled),
        (0, 5, 5)
    );
    assert_eq!((info.sampler, info.rate_limiter), ("fifo", "queue"));
    assert!(
        poll_once(table.sample(1)).is_pending(),
        "every item was sampled exactly once"
    );
}

#[tokio::test]
async fn insert_waits_when_full_and_proceeds_after_a_sample() {
    let table = Arc::new(queue(2));
    table.insert(item(0), 1.0).await.unwrap();
    table.insert(item(1), 1.0).await.unwrap();
    let waiting = tokio::spawn({
        let table = table.clone();
        async move { table.insert(item(2), 1.0).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "insert into a full queue waits");
    assert_eq!(table.sample(1).await.unwrap().keys, vec![1]);
    let key = tokio::time::timeout(WAIT, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(key, 3);
    assert_eq!(steps(&table.sample(2).await.unwrap()), vec![1, 2]);
}

#[tokio::test]
async fn sample_waits_until_enough_items() {
    let table = Arc::new(queue(4));
    let waiting = tokio::spawn({
        let table = table.clone();
        async move { table.sample(2).await }
    });
    table.insert(item(7), 1.0).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "one item is not a batch of two");
    table.insert(item(8), 1.0).await.unwrap();
    let batch = tokio::time::timeout(WAIT, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(steps(&batch), vec![7, 8]);
}

#[test]
fn bad_item_is_rejected_at_once_naming_the_field() {
    let table = queue(1);
    ready(poll_once(table.insert(item(0), 1.0))).unwrap();
    let mut bad = item(1);
    bad.tensors
        .insert("obs".into(), Tensor::from_slice(&[2, 2], &[0.0f32; 4]));
    let err = ready(poll_once(table.insert(bad, 1.0))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "field `obs`: shape [2, 2] does not match signature [2, 3]"
    );
    let info = table.info();
    assert_eq!((info.current_size, info.num_inserted), (1, 1));
    assert_eq!(ready(poll_once(table.sample(1))).unwrap().keys, vec![1]);
}

#[test]
fn dropped_waiting_insert_stores_nothing() {
    let table = queue(1);
    ready(poll_once(table.insert(item(0), 1.0))).unwrap();
    assert!(poll_once(table.insert(item(1), 1.0)).is_pending());
    ready(poll_once(table.sample(1))).unwrap();
    assert_eq!(
        table.info().current_size,
        0,
        "the dropped insert did not store its item"
    );
    assert_eq!(ready(poll_once(table.insert(item(2), 1.0))).unwrap(), 2);
}

#[tokio::test]
async fn close_wakes_waiters_with_closed() {
    let table = Arc::new(queue(1));
    let sampler = tokio::spawn({
        let table = table.clone();
        async move { table.sample(1).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    table.close();
    let result = tokio::time::timeout(WAIT, sampler).await.unwrap().unwrap();
    assert_eq!(result.unwrap_err(), ReplayError::Closed);
    assert_eq!(
        table.insert(item(0), 1.0).await.unwrap_err(),
        ReplayError::Closed
    );
}

#[test]
fn rejects_requests_that_can_never_be_served() {
    let table = queue(3);
    assert!(matches!(
        table.check_batch_size(0),
        Err(ReplayError::InvalidRequest(_))
    ));
    assert!(matches!(
        table.check_batch_size(4),
        Err(ReplayError::InvalidRequest(_))
    ));
    assert!(matches!(
        ready(poll_once(table.insert(item(0), f64::NAN))),
        Err(ReplayError::InvalidRequest(_))
    ));
    let spec = TableSpec::queue("empty", 0, signature());
    assert!(matches!(
        Table::from_spec(&spec),
        Err(ReplayError::InvalidRequest(_))
    ));
}

/// A limiter that never waits, to build a replay table from the same parts.
#[derive(Debug)]
struct Unlimited;

impl RateLimiter for Unlimited {
    fn name(&self) -> &'static str {
        "unlimited"
    }
    fn can_insert(&self, _size: u64, _counters: &Counters) -> bool {
        true
    }
    fn can_sample(&self, n: usize, size: u64, _counters: &Counters) -> bool {
        size >= n as u64
    }
}

#[test]
fn composed_replay_table_evicts_oldest_and_keeps_sampled_items() {
    let options = TableOptions {
        name: "replay".into(),
        max_size: 2,
        signature: signature(),
        max_times_sampled: 0,
    };
    let table = Table::new(
        options,
        Box::new(FifoSampler::new()),
        Box::new(FifoRemover::new()),
        Box::new(Unlimited),
    );
    for value in 0..3 {
        ready(poll_once(table.insert(item(value), 1.0))).unwrap();
    }
    assert_eq!(table.info().current_size, 2);
    assert_eq!(
        steps(&ready(poll_once(table.sample(2))).unwrap()),
        vec![1, 2]
    );
    assert_eq!(
        steps(&ready(poll_once(table.sample(2))).unwrap()),
        vec![1, 2]
    );
}

#[derive(Debug, Clone)]
enum Op {
    Insert,
    Sample(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![Just(Op::Insert), (1usize..=4).prop_map(Op::Sample)]
}

proptest! {
    /// Against a `VecDeque` model: an operation completes at once exactly when the queue
    /// allows it, batches come out oldest first, and sizes and counters always agree.
    #[test]
    fn any_interleaving_keeps_fifo_order(max_size in 1u64..=4, ops in prop::collection::vec(op(), 0..64)) {
        let table = queue(max_size);
        let mut model = VecDeque::new();
        let (mut next, mut inserted, mut sampled) = (0i64, 0u64, 0u64);
        for op in ops {
            match op {
                Op::Insert => {
                    let poll = poll_once(table.insert(item(next), 1.0));
                    if (model.len() as u64) < max_size {
                        inserted += 1;
                        prop_assert_eq!(ready(poll).unwrap(), inserted);
                        model.push_back(next);
                    } else {
                        prop_assert!(poll.is_pending());
                    }
                    next += 1;
                }
                Op::Sample(n) if n as u64 > max_size => {
                    prop_assert!(matches!(table.check_batch_size(n), Err(ReplayError::InvalidRequest(_))));
                }
                Op::Sample(n) => {
                    let poll = poll_once(table.sample(n));
                    if model.len() >= n {
                        let expected: Vec<i64> = model.drain(..n).collect();
                        prop_assert_eq!(steps(&ready(poll).unwrap()), expected);
                        sampled += n as u64;
                    } else {
                        prop_assert!(poll.is_pending());
                    }
                }
            }
            let info = table.info();
            prop_assert_eq!(info.current_size, model.len() as u64);
            prop_assert_eq!(info.num_sampled, sampled);
            prop_assert_eq!(info.num_inserted, inserted);
            prop_assert_eq!(inserted, sampled + model.len() as u64);
        }
    }
}
