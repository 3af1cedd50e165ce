//! Following a learner's weight stream: what the actors and the policy server share. One
//! subscription, kept alive across errors and learner restarts, that always holds the newest
//! version whole.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetrl_proto::v1::SubscribeWeightsRequest;
use fleetrl_runtime::net::health::{self, HealthReporter};
use fleetrl_runtime::net::Channel;
use fleetrl_runtime::telemetry::metrics::Counter;
use tokio::sync::watch;

use super::{wire, Received, Receiver, DEFAULT_CHUNK_BYTES};

/// The learner's weight stream is gone for good.
#[derive(Debug, thiserror::Error)]
pub enum LearnerLost {
    /// No subscription succeeded for this long.
    #[error("no weights from the learner for {0:?} (the learner is gone)")]
    Gone(Duration),
    /// The learner restarted from a checkpoint: its versions start again below the ones this
    /// subscriber acted with, so it exits to rejoin with a clean state (its supervisor
    /// restarts it: `fleetrl train`, compose and Kubernetes all do).
    #[error("the learner restarted ({0}); exiting to rejoin the run")]
    Restarted(String),
}

/// Who follows: the run it joined, and the actor it is (`None` for a subscriber the learner
/// never waits for, such as the policy server).
#[derive(Debug, Clone)]
pub struct Follower {
    /// The run id from the learner's run spec.
    pub run_id: String,
    /// The actor id the learner counts on for a share of each on-policy batch.
    pub actor_id: Option<u32>,
    /// How long the stream may stay lost before [`LearnerLost::Gone`].
    pub patience: Duration,
}

/// Keeps `latest` set to the newest published weights, resubscribing after errors or when
/// the learner ends the stream (it drops a subscriber that reads nothing for a while), and
/// counting each version in `received`; health is SERVING while weights flow and NOT_SERVING
/// while the stream is lost. Weights arrive in chunks ([`super`]), read straight off the
/// HTTP/2 stream ([`wire::subscribe`]) and written into f32 tensors here, off the thread that
/// uses them, which only copies the finished tensors into its model. Ends when no one reads
/// `latest` any more, or with [`LearnerLost`] once no subscription has succeeded for the
/// follower's patience (a restarted learner is back well within it; a learner that stays away
/// leaves nothing to act for).
pub async fn follow_weights(
    channel: Channel,
    follower: Follower,
    latest: watch::Sender<Option<Arc<Received>>>,
    received: Counter,
    health: HealthReporter,
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
            run_id: follower.run_id.clone(),
            actor_id: follower.actor_id,
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
                    received.inc();
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
        if lost_since.get_or_insert_with(Instant::now).elapsed() > follower.patience {
            return Err(LearnerLost::Gone(follower.patience));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
