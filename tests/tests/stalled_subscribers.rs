//! Weight subscribers that never read, or read slowly, do not slow the learner: a PPO CartPole
//! run (2 real actors) keeps its update rate while 100 raw `SubscribeWeights` streams that
//! never read and one that reads a message every 250 ms are open, the stalled ones are
//! dropped after `learner.subscriber_timeout_s` (counted, and no longer in
//! `actors_connected`), and the slow one is sent the newest version each time, skipping the
//! rest (counted).
//!
//! Before, the learner sized each batch by the open subscriptions (102 here), so the actor
//! sent one rollout per version where the batch needs two and then waited out
//! `actors.sync_timeout_s` for a version that never came: on the 2-core machine this was
//! written on, 19.9 updates/s without the raw streams and 0.75 with them (now 22.7 and 20.5).
//! The threshold, half the rate without the streams, sits far from both.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::{SubscribeWeightsRequest, Weights};
use fleetrl_tests::compose::{metric, metric_at_least};
use fleetrl_tests::Sandbox;
use tonic::codec::Streaming;
use tonic::transport::{Channel, Endpoint};

const GENEROUS: Duration = Duration::from_secs(120);
/// Raw streams that never read, over [`CONNECTIONS`] connections.
const STALLED: usize = 100;
const CONNECTIONS: usize = 10;
/// Longer than the window the rate is measured in, so the stalled streams are all still open
/// (and counted by the old code) while it is.
const TIMEOUT_S: u64 = 12;
/// How long each update rate is measured.
const WINDOW: Duration = Duration::from_secs(8);

/// A plain tonic connection with small HTTP/2 windows (64 KiB a stream, 1 MiB in all), so a
/// stream that does not read stops the learner's sends after a version or two.
async fn small_window_client(addr: SocketAddr) -> anyhow::Result<LearnerServiceClient<Channel>> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .initial_stream_window_size(64 * 1024)
        .initial_connection_window_size(1024 * 1024)
        .connect()
        .await?;
    Ok(LearnerServiceClient::new(channel).max_decoding_message_size(64 * 1024 * 1024))
}

/// Opens a whole-message subscription (`chunk_bytes` 0, what any gRPC client can read).
async fn subscribe(
    client: &mut LearnerServiceClient<Channel>,
) -> anyhow::Result<Streaming<Weights>> {
    let request = SubscribeWeightsRequest {
        after_version: -1,
        ..Default::default()
    };
    Ok(client.subscribe_weights(request).await?.into_inner())
}

/// Updates per second over [`WINDOW`], from the learner's status.
async fn update_rate(sandbox: &Sandbox) -> anyhow::Result<f64> {
    let (before, started) = (sandbox.status().await?.updates, Instant::now());
    tokio::time::sleep(WINDOW).await;
    let after = sandbox.status().await?.updates;
    Ok((after - before) as f64 / started.elapsed().as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_do_not_read_neither_slow_nor_count() -> anyhow::Result<()> {
    let sandbox = Sandbox::builder("stalled-subscribers")
        .actors(1)
        .set("stop.total_env_steps=100_000_000")
        .set("learner.update_threads=1")
        .set(&format!("learner.subscriber_timeout_s={TIMEOUT_S}"))
        .metrics()
        .start()
        .await?;
    let learner_m = sandbox.metrics().expect("asked for").learner;
    sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 3)
        .await?;
    let alone = update_rate(&sandbox).await?;

    let mut stalled = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut client = small_window_client(sandbox.learner_addr).await?;
        for _ in 0..STALLED / CONNECTIONS {
            stalled.push(subscribe(&mut client).await?);
        }
    }
    let mut slow = subscribe(&mut small_window_client(sandbox.learner_addr).await?).await?;
    let reader = tokio::spawn(async move {
        let mut versions = Vec::new();
        while let Ok(Some(message)) = slow.message().await {
            versions.push(message.version);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        versions
    });
    let crowded = update_rate(&sandbox).await?;
    eprintln!("updates/s: {alone:.2} alone, {crowded:.2} with {STALLED} stalled subscribers");
    assert!(
        crowded >= 0.5 * alone,
        "{crowded:.2} updates/s with {STALLED} stalled subscribers, {alone:.2} without; logs in {}",
        sandbox.dir.display()
    );

    let dropped = "fleetrl_learner_weight_subscribers_dropped_total";
    metric_at_least(learner_m, dropped, STALLED as f64, GENEROUS).await?;
    let connected = metric(learner_m, "fleetrl_learner_actors_connected").await?;
    assert!(
        connected <= 2.0,
        "{connected} subscriptions counted after the stalled ones were dropped (the actor and \
         the slow reader are left)"
    );
    let skipped = metric(learner_m, "fleetrl_learner_weight_versions_skipped_total").await?;
    assert!(skipped >= 1.0, "the slow reader skipped no version");
    let after = sandbox.status().await?.updates;
    sandbox
        .wait_for("updates after the drops", GENEROUS, |s| {
            s.updates >= after + 5
        })
        .await?;
    drop(stalled);
    reader.abort();
    Ok(())
}
