//! An off-policy-style replay table (uniform sampling, samples-per-insert limiter) spread over
//! three real replay server processes through the shared client, one of which is killed
//! midway: inserts and samples carry on through the other two, every acknowledged item stays
//! sampleable, and each shard holds its samples-per-insert ratio within the error buffer. And
//! a sampler whose reader is busy takes only its prefetch from the table (the old open stream
//! took 203,544 items here while its reader read 8).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetrl_core::replay_client::{sample_stream, SampleOptions, Writer, WriterOptions};
use fleetrl_proto::v1::SampleResponse;
use fleetrl_proto::{Tensor, TensorMap};
use fleetrl_tests::ReplayProcess;

const TABLES: &str = r#"
[[table]]
name = "replay"
max_size = 100000
sampler = { kind = "uniform" }
remover = { kind = "fifo" }
rate_limiter = { kind = "samples_per_insert", samples_per_insert = 2.0, min_size_to_sample = 20, error_buffer = 64.0 }
signature = [
  { name = "obs", dtype = "f32", shape = [4] },
  { name = "id", dtype = "i64", shape = [] },
]
"#;

fn transition(id: i64) -> TensorMap {
    TensorMap::from_pairs([
        ("obs", Tensor::from_slice(&[4], &[id as f32; 4])),
        ("id", Tensor::scalar(id)),
    ])
}

/// The `id` field of a sampled batch.
fn ids(response: SampleResponse) -> Vec<i64> {
    let batch = response.batch.expect("a batch");
    batch.field("id").unwrap().to_vec::<i64>().unwrap()
}

async fn wait_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_survive_losing_one() {
    let dir = fleetrl_tests::scratch("fleetrl-replay-shards");
    let mut shards = Vec::new();
    for i in 0..3 {
        shards.push(
            ReplayProcess::start(&dir, &format!("shard-{i}"), TABLES, None)
                .await
                .unwrap(),
        );
    }
    let addrs: Vec<String> = shards.iter().map(|s| s.addr.to_string()).collect();

    // Writer: ids 0, 1, 2, ... as fast as the limiters allow.
    let mut options = WriterOptions::new("replay");
    options.max_items_per_request = 4;
    options.max_in_flight = 8;
    let (writer, writer_task) = Writer::spawn(addrs.clone(), options);
    let stop = Arc::new(AtomicBool::new(false));
    let next_id = Arc::new(AtomicU64::new(0));
    let writing = tokio::spawn({
        let (writer, stop, next_id) = (writer.clone(), stop.clone(), next_id.clone());
        async move {
            while !stop.load(Ordering::SeqCst) {
                let id = next_id.fetch_add(1, Ordering::SeqCst) as i64;
                writer.insert(transition(id), 1.0).await.unwrap();
            }
        }
    });

    // Sampler: batches of 8 from whichever shard has one.
    let (mut batches, sampler_tasks) =
        sample_stream(addrs.clone(), SampleOptions::new("replay", 8));
    let sampled = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let per_shard = Arc::new(Mutex::new([0u64; 3]));
    let sampling = tokio::spawn({
        let (sampled, seen, per_shard, next_id) = (
            sampled.clone(),
            seen.clone(),
            per_shard.clone(),
            next_id.clone(),
        );
        async move {
            while let Some(batch) = batches.recv().await {
                let batch = batch.expect("no client-side error");
                let ids = ids(batch.response);
                for id in &ids {
                    assert!(
                        (*id as u64) < next_id.load(Ordering::SeqCst),
                        "sampled an id never written: {id}"
                    );
                }
                seen.lock().unwrap().extend(ids.iter().copied());
                per_shard.lock().unwrap()[batch.shard] += 1;
                sampled.fetch_add(ids.len() as u64, Ordering::SeqCst);
            }
        }
    });

    let limit = Duration::from_secs(120);
    wait_until("samples from all three shards", limit, || {
        per_shard.lock().unwrap().iter().all(|&n| n >= 5)
    })
    .await;
    for shard in &shards {
        let info = shard.info("replay").await.unwrap();
        assert!(info.num_inserted > 0, "inserts spread over every shard");
        assert!(
            info.limiter_diff >= info.limiter_min_diff - 1e-9
                && info.limiter_diff <= info.limiter_max_diff + 1e-9,
            "shard {} ratio left its bounds: {info:?}",
            shard.addr
        );
    }

    // Lose shard 1 for good.
    shards[1].role.kill().await;
    let acked_at_kill = writer.progress().acked();
    let sampled_at_kill = sampled.load(Ordering::SeqCst);
    wait_until("progress after losing a shard", limit, || {
        writer.progress().acked() > acked_at_kill + 500
            && sampled.load(Ordering::SeqCst) > sampled_at_kill + 1000
    })
    .await;

    stop.store(true, Ordering::SeqCst);
    tokio::time::timeout(limit, writing).await.unwrap().unwrap();
    drop(writer);
    // Every item is acknowledged by a live shard, including those the dead one never acked.
    tokio::time::timeout(limit, writer_task.finish())
        .await
        .unwrap()
        .unwrap();
    let written = next_id.load(Ordering::SeqCst);
    let live: Vec<_> = [0, 2].iter().map(|&i| &shards[i]).collect();
    let mut held = 0;
    for shard in &live {
        let info = shard.info("replay").await.unwrap();
        assert!(
            info.limiter_diff >= info.limiter_min_diff - 1e-9
                && info.limiter_diff <= info.limiter_max_diff + 1e-9,
            "ratio left its bounds: {info:?}"
        );
        // Samples per insert holds on each shard, within the error buffer.
        let target = info.num_inserted as f64 * 2.0;
        assert!(
            (target - info.num_sampled as f64).abs() <= 64.0 + 2.0 * 20.0 + 8.0,
            "{info:?}"
        );
        held += info.current_size;
    }
    assert!(held > 0 && held <= written);
    assert!(
        seen.lock().unwrap().len() > 100,
        "many distinct items sampled"
    );
    sampling.abort();
    for task in sampler_tasks {
        task.abort();
    }
    for shard in &mut shards {
        shard.role.stop(Duration::from_secs(10)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A learner busy elsewhere holds back sampling: with `prefetch` 2 and nobody reading the
/// channel, the server hands out a handful of batches, not as many as HTTP/2's flow-control
/// window would carry (thousands of these small batches). Batches taken ahead count as sampled
/// for the rate limiter without being trained, so a sampler that ran ahead would leave the
/// learner behind its samples-per-insert ratio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_runs_only_prefetch_batches_ahead_of_its_reader() {
    let dir = fleetrl_tests::scratch("fleetrl-replay-ahead");
    // No samples-per-insert limit here: only the sampler's own restraint holds it back.
    let tables = TABLES.replace(
        r#"{ kind = "samples_per_insert", samples_per_insert = 2.0, min_size_to_sample = 20, error_buffer = 64.0 }"#,
        r#"{ kind = "min_size", min_size = 20 }"#,
    );
    assert_ne!(tables, TABLES);
    let mut shard = ReplayProcess::start(&dir, "ahead", &tables, None)
        .await
        .unwrap();
    let addrs = vec![shard.addr.to_string()];
    let (writer, writer_task) = Writer::spawn(addrs.clone(), WriterOptions::new("replay"));
    for id in 0..2_000 {
        writer.insert(transition(id), 1.0).await.unwrap();
    }
    drop(writer);
    writer_task.finish().await.unwrap();

    let mut options = SampleOptions::new("replay", 8);
    options.prefetch = 2;
    let (mut batches, tasks) = sample_stream(addrs, options);
    // Nobody reads for a while: whatever the server gives out now is sampling running ahead.
    let first = tokio::time::timeout(Duration::from_secs(60), batches.recv())
        .await
        .expect("a first batch")
        .expect("the stream is open")
        .expect("no client-side error");
    assert_eq!(ids(first.response).len(), 8);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let info = shard.info("replay").await.unwrap();
    // The batch read, the channel's 2, the request's 2 in flight: 5 batches; 8 allows for a
    // request just being renewed.
    assert!(
        info.num_sampled <= 8 * 8,
        "the server handed out {} items to a sampler that read 8: {info:?}",
        info.num_sampled
    );
    // Reading goes on as before: 100 more batches come.
    for _ in 0..100 {
        tokio::time::timeout(Duration::from_secs(60), batches.recv())
            .await
            .expect("a batch")
            .expect("the stream is open")
            .expect("no client-side error");
    }
    for task in tasks {
        task.abort();
    }
    shard.role.stop(Duration::from_secs(10)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shard that rejects an item (here a NaN, which the table refuses) ends the writer, and
/// every insert after it fails at once with that error instead of waiting for permits that
/// the rejected items hold: before, an actor that kept producing blocked in `insert` forever,
/// and its run stalled without a word in any log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_item_fails_the_writer_instead_of_stalling_it() {
    let dir = fleetrl_tests::scratch("fleetrl-replay-reject");
    let mut shard = ReplayProcess::start(&dir, "reject", TABLES, None)
        .await
        .unwrap();
    let mut options = WriterOptions::new("replay");
    options.max_in_flight = 2;
    let (writer, writer_task) = Writer::spawn(vec![shard.addr.to_string()], options);
    let poisoned = TensorMap::from_pairs([
        ("obs", Tensor::from_slice(&[4], &[f32::NAN; 4])),
        ("id", Tensor::scalar(0i64)),
    ]);
    writer.insert(poisoned, 1.0).await.unwrap();
    // Far more than the writer's window (2): without the fix the third insert or so waits
    // for good.
    let inserting = tokio::time::timeout(Duration::from_secs(60), async {
        for id in 1..1_000 {
            if writer.insert(transition(id), 1.0).await.is_err() {
                return id;
            }
        }
        panic!("every insert after a rejected item was taken");
    });
    inserting
        .await
        .expect("an insert failed rather than waiting");
    drop(writer);
    let error = tokio::time::timeout(Duration::from_secs(60), writer_task.finish())
        .await
        .expect("the writer ended")
        .unwrap_err();
    assert!(
        format!("{error:#}").contains("holds NaN or infinity"),
        "the writer's error names the rejection: {error:#}"
    );
    shard.role.stop(Duration::from_secs(10)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
