//! The actor's side of the learner service: the run spec and the episode reports (the weight
//! subscription is [`fleetrl_core::broadcast::follow_weights`], shared with the policy server).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::ReportEpisodesRequest;
use fleetrl_runtime::net::Channel;
use fleetrl_runtime::net::MAX_MESSAGE_BYTES;

use crate::collect::Progress;

/// A client with fleetrl's message size limits.
pub(crate) fn client(channel: Channel) -> LearnerServiceClient<Channel> {
    LearnerServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES)
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
