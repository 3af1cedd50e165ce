//! Table behaviour: FIFO queue semantics, waiting and waking, validation, cancellation.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use fleetrl_proto::{Dtype, Tensor, TensorMap};
use proptest::prelude::*;

use super::*;
use fleetrl_proto::table::{FieldSpec, RateLimiterSpec, SelectorKind};

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
        (
            info.current_size,
            info.counters.inserted,
            info.counters.sampled
        ),
        (0, 5, 5)
    );
    assert_eq!(
        (info.spec.sampler.name(), info.spec.rate_limiter.name()),
        ("fifo", "queue")
    );
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
    assert_eq!((info.current_size, info.counters.inserted), (1, 1));
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

fn replay(max_size: u64, sampler: SelectorKind, remover: SelectorKind) -> Table {
    let mut spec = TableSpec::replay("replay", max_size, 1.0, 1, signature());
    spec.rate_limiter = RateLimiterSpec::MinSize { min_size: 1 };
    spec.sampler = sampler;
    spec.remover = remover;
    Table::seeded(&spec, 5).unwrap()
}

#[test]
fn composed_replay_table_evicts_oldest_and_keeps_sampled_items() {
    let table = replay(2, SelectorKind::Fifo, SelectorKind::Fifo);
    for value in 0..3 {
        ready(poll_once(table.insert(item(value), 1.0))).unwrap();
    }
    assert_eq!(table.info().current_size, 2);
    assert_eq!(
        steps(&ready(poll_once(table.sample(2))).unwrap()),
        vec![1, 2]
    );
    let again = ready(poll_once(table.sample(2))).unwrap();
    assert_eq!(steps(&again), vec![1, 2]);
    assert_eq!(again.times_sampled, vec![2, 2]);
    assert_eq!(again.table_size, 2);
}

#[test]
fn each_remover_evicts_its_victim() {
    let cases = [
        (SelectorKind::Fifo, vec![2, 3, 4]),
        (SelectorKind::Lifo, vec![1, 2, 4]),
        (SelectorKind::MinHeap, vec![2, 3, 4]),
        (SelectorKind::MaxHeap, vec![1, 3, 4]),
    ];
    for (remover, kept) in cases {
        let table = replay(3, SelectorKind::Fifo, remover);
        // Priorities 5, 9, 7: the min-heap evicts key 1 (5), the max-heap key 2 (9).
        for (value, priority) in [(1, 5.0), (2, 9.0), (3, 7.0), (4, 1.0)] {
            ready(poll_once(table.insert(item(value), priority))).unwrap();
        }
        let mut keys: Vec<u64> = table.snapshot().items.iter().map(|i| i.key).collect();
        keys.sort();
        assert_eq!(keys, kept, "{remover:?}");
    }
    let table = replay(3, SelectorKind::Fifo, SelectorKind::Uniform);
    for value in 0..10 {
        ready(poll_once(table.insert(item(value), 1.0))).unwrap();
    }
    assert_eq!(table.info().current_size, 3);
    assert_eq!(table.info().counters.deleted, 7);
}

#[test]
fn priorities_update_delete_and_reset() {
    let table = replay(8, SelectorKind::MaxHeap, SelectorKind::Fifo);
    for value in 0..4 {
        ready(poll_once(table.insert(item(value), 1.0))).unwrap();
    }
    assert_eq!(table.update_priorities(&[(3, 10.0), (99, 1.0)]).unwrap(), 1);
    assert_eq!(ready(poll_once(table.sample(1))).unwrap().keys, vec![3]);
    assert!(matches!(
        table.update_priorities(&[(1, -1.0)]),
        Err(ReplayError::InvalidRequest(m)) if m.contains("priority must be finite and >= 0")
    ));
    assert_eq!(table.delete(&[3, 3, 42]), 1);
    assert_eq!(ready(poll_once(table.sample(1))).unwrap().keys, vec![1]);
    table.reset();
    let info = table.info();
    assert_eq!(
        (info.current_size, info.counters.inserted, info.bytes),
        (0, 0, 0)
    );
    assert_eq!(
        ready(poll_once(table.insert(item(9), 1.0))).unwrap(),
        5,
        "keys keep increasing"
    );
}

#[test]
fn non_finite_values_follow_the_table_policy() {
    let mut bad = item(1);
    bad.tensors.insert(
        "obs".into(),
        Tensor::from_slice(&[2, 3], &[0.0, f32::NAN, 0.0, 0.0, 0.0, 0.0]),
    );
    let err = ready(poll_once(queue(2).insert(bad.clone(), 1.0))).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("field `obs`: holds NaN or infinity"),
        "{err}"
    );
    let mut spec = TableSpec::queue("q", 2, signature());
    spec.allow_non_finite = true;
    let table = Table::from_spec(&spec).unwrap();
    ready(poll_once(table.insert(bad, 1.0))).unwrap();
}

#[test]
fn insert_many_validates_every_item_before_storing_any() {
    let table = queue(4);
    let mut bad = item(2);
    bad.tensors.remove("step");
    let err = ready(poll_once(
        table.insert_many(vec![(item(1), 1.0), (bad, 1.0)]),
    ))
    .unwrap_err();
    assert_eq!(err.to_string(), "field `step`: missing from the item");
    assert_eq!(table.info().current_size, 0);
    let keys = ready(poll_once(
        table.insert_many(vec![(item(1), 1.0), (item(2), 1.0)]),
    ))
    .unwrap();
    assert_eq!(keys, vec![1, 2]);
}

#[tokio::test]
async fn sample_timeout_is_backpressure_not_failure() {
    let table = queue(2);
    let err = table
        .take(1, Some(Duration::from_millis(20)))
        .await
        .unwrap_err();
    assert_eq!(err, ReplayError::RateLimited);
    assert_eq!(
        table.info().waiting_samples,
        0,
        "the timed-out waiter is no longer counted"
    );
}

/// Chi-squared statistic of observed counts against expected probabilities.
fn chi_squared(counts: &[u64], probabilities: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(probabilities)
        .map(|(&c, &p)| {
            let e = p * n as f64;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

/// 99.9th percentile of chi-squared with 9 degrees of freedom.
const CHI2_9DF_999: f64 = 27.877;

#[test]
fn random_samplers_match_their_distributions() {
    let priorities: Vec<f64> = (1..=10).map(|i| i as f64).collect();
    for (sampler, expected) in [
        (SelectorKind::Uniform, vec![0.1; 10]),
        (
            SelectorKind::Prioritized { exponent: 1.0 },
            priorities.iter().map(|p| p / 55.0).collect(),
        ),
        (SelectorKind::Prioritized { exponent: 0.5 }, {
            let w: Vec<f64> = priorities.iter().map(|p| p.sqrt()).collect();
            let total: f64 = w.iter().sum();
            w.iter().map(|x| x / total).collect()
        }),
    ] {
        let table = replay(10, sampler, SelectorKind::Fifo);
        for (i, &p) in priorities.iter().enumerate() {
            ready(poll_once(table.insert(item(i as i64), p))).unwrap();
        }
        let mut counts = vec![0u64; 10];
        // Batches are at most the table's size (10), even drawn with replacement.
        for _ in 0..2000 {
            let batch = ready(poll_once(table.sample(10))).unwrap();
            for (key, probability) in batch.keys.iter().zip(&batch.probabilities) {
                counts[*key as usize - 1] += 1;
                assert!((probability - expected[*key as usize - 1]).abs() < 1e-12);
            }
        }
        let statistic = chi_squared(&counts, &expected);
        assert!(
            statistic < CHI2_9DF_999,
            "{sampler:?}: chi2 {statistic} counts {counts:?}"
        );
    }
}

#[test]
fn deterministic_samplers_follow_their_order() {
    for (sampler, first) in [
        (SelectorKind::Fifo, vec![0, 1, 2]),
        (SelectorKind::Lifo, vec![4, 3, 2]),
        (SelectorKind::MaxHeap, vec![3, 1, 4]),
        (SelectorKind::MinHeap, vec![0, 2, 4]),
    ] {
        let table = replay(8, sampler, SelectorKind::Fifo);
        for (value, priority) in [(0, 1.0), (1, 5.0), (2, 1.0), (3, 9.0), (4, 2.0)] {
            ready(poll_once(table.insert(item(value), priority))).unwrap();
        }
        let batch = ready(poll_once(table.sample(3))).unwrap();
        assert_eq!(steps(&batch), first, "{sampler:?}");
        assert_eq!(batch.probabilities, vec![1.0; 3]);
    }
}

/// Many writers and readers on one queue: every item comes out exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queue_delivers_each_item_exactly_once_under_concurrency() {
    let table = Arc::new(queue(16));
    let writers = 8;
    let per_writer = 250;
    let readers = 4;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let table = table.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per_writer {
                table.insert(item(w * per_writer + i), 1.0).await.unwrap();
            }
        }));
    }
    let total = (writers * per_writer) as usize;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut reading = Vec::new();
    for r in 0..readers {
        let (table, seen) = (table.clone(), seen.clone());
        reading.push(tokio::spawn(async move {
            // Readers take batches of 1 to 3 until every item was seen.
            let n = 1 + r % 3;
            loop {
                if seen.lock().unwrap().len() >= total {
                    return;
                }
                match tokio::time::timeout(Duration::from_millis(200), table.sample(n)).await {
                    Ok(batch) => seen.lock().unwrap().extend(steps(&batch.unwrap())),
                    Err(_) => continue,
                }
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(WAIT * 3, task).await.unwrap().unwrap();
    }
    // Whatever is left (fewer than a reader's batch) is drained one at a time.
    let deadline = tokio::time::Instant::now() + WAIT * 3;
    while seen.lock().unwrap().len() < total && tokio::time::Instant::now() < deadline {
        if let Ok(batch) = tokio::time::timeout(Duration::from_millis(50), table.sample(1)).await {
            seen.lock().unwrap().extend(steps(&batch.unwrap()));
        }
    }
    for task in reading {
        tokio::time::timeout(WAIT * 3, task).await.unwrap().unwrap();
    }
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, (0..total as i64).collect::<Vec<_>>());
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
            prop_assert_eq!(info.counters.sampled, sampled);
            prop_assert_eq!(info.counters.inserted, inserted);
            prop_assert_eq!(inserted, sampled + model.len() as u64);
        }
    }
}
