//! Replay persistence across real process deaths: a SIGKILLed server restarts with everything
//! acknowledged before its last checkpoint, and a SIGTERMed one loses nothing it acknowledged.

use std::path::Path;
use std::time::Duration;

use fleetrl_core::replay_client::{Writer, WriterOptions};
use fleetrl_proto::v1::{CheckpointRequest, SampleRequest};
use fleetrl_proto::{Tensor, TensorMap};
use fleetrl_tests::ReplayProcess;

const TABLES: &str = r#"
[[table]]
name = "transitions"
max_size = 100000
sampler = { kind = "fifo" }
remover = { kind = "fifo" }
rate_limiter = { kind = "min_size", min_size = 1 }
signature = [
  { name = "obs", dtype = "f32", shape = [4] },
  { name = "step", dtype = "i64", shape = [] },
]
"#;

fn transition(step: i64) -> TensorMap {
    TensorMap::from_pairs([
        ("obs", Tensor::from_slice(&[4], &[step as f32; 4])),
        ("step", Tensor::scalar(step)),
    ])
}

/// Inserts steps `from..to` through the shared client and waits for every ack.
async fn insert(addr: &str, from: i64, to: i64) {
    let mut options = WriterOptions::new("transitions");
    options.max_items_per_request = 64;
    options.max_in_flight = 256;
    let (writer, task) = Writer::spawn(vec![addr.to_string()], options);
    for step in from..to {
        writer.insert(transition(step), 1.0).await.unwrap();
    }
    drop(writer);
    tokio::time::timeout(Duration::from_secs(60), task.finish())
        .await
        .expect("acks in time")
        .unwrap();
}

/// Every step the server holds, oldest first (a FIFO sampler hands out the oldest items).
async fn held_steps(server: &ReplayProcess) -> Vec<i64> {
    let size = server.info("transitions").await.unwrap().current_size as u32;
    let request = SampleRequest {
        table: "transitions".into(),
        batch_size: size,
        max_batches: 1,
        rate_limiter_timeout_ms: 10_000,
    };
    let mut client = server.client().await.unwrap();
    let mut stream = client.sample(request).await.unwrap().into_inner();
    let batch = stream.message().await.unwrap().unwrap().batch.unwrap();
    batch.field("step").unwrap().to_vec::<i64>().unwrap()
}

/// Waits (the log is written as the server goes) until the server's log mentions `needle`.
async fn wait_for_log(server: &ReplayProcess, needle: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&server.log).unwrap();
        if log.contains(needle) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "`{needle}` not in the log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn start(dir: &Path, name: &str) -> ReplayProcess {
    ReplayProcess::start(dir, name, TABLES, Some(&dir.join("checkpoints")))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_and_terminated_servers_keep_what_they_acknowledged() {
    let dir = fleetrl_tests::scratch("fleetrl-replay-persistence");

    let mut server = start(&dir, "first").await;
    let addr = server.addr.to_string();
    insert(&addr, 0, 500).await;
    let path = server
        .client()
        .await
        .unwrap()
        .checkpoint(CheckpointRequest {})
        .await
        .unwrap()
        .into_inner()
        .path;
    assert!(path.contains("replay-00000001"), "{path}");
    // Acknowledged after the checkpoint: a SIGKILL may lose these, and here it does.
    insert(&addr, 500, 700).await;
    server.role.kill().await;

    let mut server = start(&dir, "after-kill").await;
    wait_for_log(&server, "restored replay checkpoint").await;
    assert_eq!(held_steps(&server).await, (0..500).collect::<Vec<_>>());
    let info = server.info("transitions").await.unwrap();
    assert_eq!(
        (info.num_inserted, info.num_sampled),
        (500, 500),
        "counters restored with the items"
    );

    // SIGTERM: everything acknowledged survives, no checkpoint request needed.
    let addr = server.addr.to_string();
    insert(&addr, 1000, 1300).await;
    server.role.stop(Duration::from_secs(30)).await;
    assert!(
        server.role.exited().unwrap().success(),
        "clean exit on SIGTERM"
    );

    let mut server = start(&dir, "after-term").await;
    let expected: Vec<i64> = (0..500).chain(1000..1300).collect();
    assert_eq!(held_steps(&server).await, expected);
    server.role.stop(Duration::from_secs(30)).await;
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(server.role.exited().unwrap().success(), "{log}");
    assert!(log.contains("replay checkpoint written"), "{log}");

    // A damaged newest checkpoint is refused, naming the problem, and the previous one is used.
    let checkpoints = dir.join("checkpoints");
    // The checkpoints, not the server's `replay.lock` beside them.
    let mut found: Vec<_> = std::fs::read_dir(&checkpoints)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    let newest = found.last().unwrap().join("table-000.bin");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    let mut server = start(&dir, "after-damage").await;
    wait_for_log(&server, "refusing a corrupt or partial replay checkpoint").await;
    wait_for_log(&server, "truncated").await;
    assert_eq!(
        held_steps(&server).await,
        expected,
        "the previous checkpoint (the SIGTERM one) is used"
    );
    server.role.stop(Duration::from_secs(30)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
