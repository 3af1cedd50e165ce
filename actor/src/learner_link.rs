//! The actor's side of the learner service: the run spec, the weight subscription and the
//! episode reports.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetrl_core::broadcast::{wire, Received, Receiver, DEFAULT_CHUNK_BYTES};
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::{ReportEpisodesRequest, SubscribeWeightsRequest};
use fleetrl_runtime::net::Channel;
use fleetrl_runtime::net::MAX_MESSAGE_BYTES;
use tokio::sync::watch;
use tonic_health::server::HealthReporter;

use crate::collect::Progress;
use crate::health;
use crate::metrics::ActorMetrics;

/// A client with fleetrl's message size limits.
pub(crate) fn client(channel: Channel) -> LearnerServiceClient<Channel> {
    LearnerServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

/// The learner's weight stream is gone for good.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LearnerLost {
    /// No subscription succeeded for this long.
    #[error("no weights from the learner for {0:?} (the learner is gone)")]
    Gone(Duration),
    /// The learner restarted from a checkpoint: its versions start again below the ones this
    /// actor acted with, so the actor exits to rejoin with a clean state (its supervisor
    /// restarts it: `fleetrl train`, compose and Kubernetes all do).
    #[error("the learner restarted ({0}); exiting to rejoin the run")]
    Restarted(String),
}

/// Keeps `latest` set to the newest published weights, subscribing as `actor_id` (so the
/// learner waits for this actor's share of each batch) and resubscribing after errors or when
/// the learner ends the stream (it drops a subscriber that reads nothing for a while); health is
/// SERVING while weights flow and NOT_SERVING while the stream is lost. Weights arrive in
/// chunks ([`fleetrl_core::broadcast`]), read straight off the HTTP/2 stream
/// ([`wire::subscribe`]) and written into f32 tensors here, off the env loop, which only
/// copies the finished tensors into its model between rollouts. Ends when no one reads
/// `latest` any more, or with [`LearnerLost`] once no subscription has succeeded for
/// `patience` (a restarted learner is back well within it; a learner that stays away leaves
/// nothing to act for).
pub(crate) async fn follow_weights(
    channel: Channel,
    actor_id: u32,
    run_id: String,
    latest: watch::Sender<Option<Arc<Received>>>,
    metrics: Arc<ActorMetrics>,
    health: HealthReporter,
    patience: Duration,
) -> Result<(), LearnerLost> {
    let mut after_version = -1;
    // Outlives resubscriptions, so its tensors are reused across them.
    let mut receiver = Receiver::default();
    // When the stream was lost, while it is.
    let mut lost_since: Option<Instant> = None;
    let mut serving = false;
    loop {
        let request = SubscribeWeightsRequest {
            after_version,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            run_id: run_id.clone(),
            actor_id: Some(actor_id),
        };
        match wire::subscribe(channel.clone(), request).await {
            Ok(mut stream) => {
                lost_since = None;
                while let Ok(Some(message)) = stream.message().await {
                    let weights = match receiver.push_wire(message) {
                        Ok(Some(weights)) => weights,
                        Ok(None) => continue,
                        Err(error) => {
                            tracing::warn!(%error, "bad weights chunk; resubscribing");
                            break;
                        }
                    };
                    after_version = weights.version;
                    metrics.weights_received.inc();
                    if latest.send(Some(Arc::new(weights))).is_err() {
                        return Ok(());
                    }
                    if !serving {
                        serving = true;
                        health::set(&health, true).await;
                    }
                }
                tracing::warn!(after_version, "weight stream ended; resubscribing");
            }
            Err(status) if status.code() == tonic::Code::FailedPrecondition => {
                return Err(LearnerLost::Restarted(status.message().to_string()));
            }
            Err(status) => tracing::warn!(%status, "cannot subscribe to weights; retrying"),
        }
        if serving {
            serving = false;
            health::set(&health, false).await;
        }
        if lost_since.get_or_insert_with(Instant::now).elapsed() > patience {
            return Err(LearnerLost::Gone(patience));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Longest quiet spell between reports: an actor with nothing finished (a 1,000-step rollout
/// of a slow off-policy run takes 10-20 s) still reports, empty, so that the learner's status
/// (`fleetrl train`'s "actors N") counts it as alive.
const HEARTBEAT: Duration = Duration::from_secs(2);

/// Sends the episodes finished since the last report every `interval`, and an empty report
/// after [`HEARTBEAT`] without one; never ends (a report that failed is kept for the next one,
/// one the learner refused as invalid is dropped).
pub(crate) async fn report_episodes(
    channel: Channel,
    actor_id: u32,
    progress: Arc<Mutex<Progress>>,
    interval: Duration,
) -> Result<(), std::convert::Infallible> {
    let mut client = client(channel);
    let mut ticker = tokio::time::interval(interval);
    let mut last_sent = Instant::now();
    loop {
        ticker.tick().await;
        let (episodes, env_steps) = {
            let mut progress = progress.lock().expect("progress lock poisoned");
            (
                std::mem::take(&mut progress.episodes),
                std::mem::take(&mut progress.env_steps),
            )
        };
        if episodes.is_empty() && env_steps == 0 && last_sent.elapsed() < HEARTBEAT {
            continue;
        }
        last_sent = Instant::now();
        let request = ReportEpisodesRequest {
            actor_id,
            returns: episodes.iter().map(|e| e.return_).collect(),
            lengths: episodes.iter().map(|e| e.length).collect(),
            env_steps,
        };
        match client.report_episodes(request).await {
            Ok(_) => {}
            // The learner refused what it was sent (a NaN return from the env): sending it
            // again gets the same answer and would hold back every later episode with it.
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                tracing::error!(%status, dropped = episodes.len(), "episode report refused; dropping it");
            }
            Err(status) => {
                tracing::warn!(%status, "episode report failed; keeping it for the next one");
                let mut progress = progress.lock().expect("progress lock poisoned");
                progress.episodes.extend(episodes);
                progress.env_steps += env_steps;
            }
        }
    }
}
