//! `fleetrl.v1.LearnerService`: run spec, weight stream, episode reports, status, checkpoints.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetrl_proto::v1::learner_service_server::LearnerService;
use fleetrl_proto::v1::{
    GetRunSpecRequest, GetStatusRequest, LearnerStatus, ReportEpisodesRequest,
    ReportEpisodesResponse, RunSpec, SaveCheckpointRequest, SaveCheckpointResponse,
    SetParameterRequest, SetParameterResponse, SubscribeWeightsRequest, Weights,
};
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tonic::{Request, Response, Status};

use anyhow::Context;
use fleetrl_core::broadcast::{self, EncodedCache, Framing};
use fleetrl_runtime::net::{self, MAX_MESSAGE_BYTES};
use fleetrl_runtime::telemetry;
use tonic_health::pb::health_server::{Health, HealthServer};

use crate::error::LearnerError;
use crate::fleet::Fleet;
use crate::metrics::LearnerMetrics;
use crate::stats::Stats;
use crate::trainer::Work;

/// The service's handles onto the trainer and its published state.
pub(crate) struct Learner {
    pub(crate) spec: RunSpec,
    /// This learner's rank (`learner.rank`): only rank 0 bootstraps actors.
    pub(crate) rank: u32,
    pub(crate) stats: Arc<Mutex<Stats>>,
    pub(crate) weights: watch::Receiver<Arc<Weights>>,
    pub(crate) work: mpsc::Sender<Work>,
    /// The open weight subscriptions and the actors acting.
    pub(crate) fleet: Arc<Fleet>,
    /// What Prometheus scrapes.
    pub(crate) metrics: Arc<LearnerMetrics>,
    /// The newest version serialised for chunked subscribers.
    pub(crate) encoded: Arc<EncodedCache>,
    /// How long a subscriber may read nothing before it is dropped.
    pub(crate) subscriber_timeout: Duration,
    /// Turns true at shutdown: weight streams then end with UNAVAILABLE.
    pub(crate) closing: watch::Receiver<bool>,
}

/// Ends `stream` once `closing` turns true (or its source ends) with UNAVAILABLE, so that a
/// subscriber knows to resubscribe rather than take the end for a finished run.
fn until_closing<T: Send + 'static>(
    stream: impl Stream<Item = Result<T, Status>> + Send + 'static,
    mut closing: watch::Receiver<bool>,
) -> impl Stream<Item = Result<T, Status>> + Send + 'static {
    let closed = async move {
        let _ = closing.wait_for(|&c| c).await;
    };
    stream
        .take_until(closed)
        .chain(futures::stream::once(async {
            Err(Status::unavailable(
                "the learner is shutting down; subscribe again to its successor",
            ))
        }))
}

type WeightStream = Pin<Box<dyn Stream<Item = Result<Weights, Status>> + Send>>;

#[tonic::async_trait]
impl LearnerService for Learner {
    async fn get_run_spec(
        &self,
        _: Request<GetRunSpecRequest>,
    ) -> Result<Response<RunSpec>, Status> {
        if self.rank != 0 {
            return Err(LearnerError::NotLeader(self.rank).into());
        }
        Ok(Response::new(self.spec.clone()))
    }

    type SubscribeWeightsStream = WeightStream;

    #[tracing::instrument(skip_all, fields(after_version = request.get_ref().after_version))]
    async fn subscribe_weights(
        &self,
        request: Request<SubscribeWeightsRequest>,
    ) -> Result<Response<WeightStream>, Status> {
        let peer = request.remote_addr();
        let request = request.into_inner();
        if !request.run_id.is_empty() && request.run_id != self.spec.run_id {
            return Err(Status::failed_precondition(format!(
                "this learner is run {}, not {}: it restarted (its versions start again from \
                 its checkpoint); rejoin the run",
                self.spec.run_id, request.run_id
            )));
        }
        let framing = match request.chunk_bytes {
            0 => Framing::Whole,
            n => Framing::Chunked {
                cache: self.encoded.clone(),
                chunk_bytes: (n as usize).min(MAX_MESSAGE_BYTES / 2),
            },
        };
        // The subscription's own task sends the newest version whenever the subscriber is
        // ready (a slow one skips versions instead of queueing them), and drops a subscriber
        // that reads nothing for `subscriber_timeout`. It holds the subscription's count, so a
        // client going away (a killed actor's connection closing) stops counting at once.
        let stream = broadcast::subscription(
            self.weights.clone(),
            request.after_version,
            framing,
            self.subscriber_timeout,
            self.fleet.subscribe(request.actor_id, peer),
        )
        .map(|m| m.map_err(|e| Status::from(LearnerError::from(e))));
        Ok(Response::new(Box::pin(until_closing(
            stream,
            self.closing.clone(),
        ))))
    }

    async fn report_episodes(
        &self,
        request: Request<ReportEpisodesRequest>,
    ) -> Result<Response<ReportEpisodesResponse>, Status> {
        let report = request.into_inner();
        check_report(&report).inspect_err(|error| {
            tracing::warn!(actor = report.actor_id, %error, "episode report refused");
        })?;
        let recent = {
            let mut stats = self.stats.lock().expect("stats lock poisoned");
            stats.record_report(&report);
            stats.recent_return()
        };
        self.metrics.episodes.add(report.returns.len() as f64);
        self.metrics.env_steps_reported.add(report.env_steps as f64);
        if recent.is_finite() {
            self.metrics.episode_return_recent.set(recent);
        }
        Ok(Response::new(ReportEpisodesResponse {}))
    }

    async fn get_status(
        &self,
        _: Request<GetStatusRequest>,
    ) -> Result<Response<LearnerStatus>, Status> {
        Ok(Response::new(
            self.stats.lock().expect("stats lock poisoned").to_proto(),
        ))
    }

    #[tracing::instrument(skip_all)]
    async fn save_checkpoint(
        &self,
        _: Request<SaveCheckpointRequest>,
    ) -> Result<Response<SaveCheckpointResponse>, Status> {
        let (reply, saved) = oneshot::channel();
        self.work
            .send(Work::Checkpoint(reply))
            .await
            .map_err(|_| LearnerError::TrainerStopped)?;
        let (path, version) = saved.await.map_err(|_| LearnerError::TrainerStopped)??;
        Ok(Response::new(SaveCheckpointResponse {
            path: path.display().to_string(),
            policy_version: version,
        }))
    }

    #[tracing::instrument(skip_all, fields(key = %request.get_ref().key))]
    async fn set_parameter(
        &self,
        request: Request<SetParameterRequest>,
    ) -> Result<Response<SetParameterResponse>, Status> {
        let SetParameterRequest { key, value } = request.into_inner();
        // Bounded before the trainer sees it: no config key or TOML value is this long.
        if key.len() > 128 || value.len() > 1024 {
            return Err(LearnerError::BadParameter(format!(
                "a key of {} bytes and a value of {} bytes: too long (128 and 1024 at most)",
                key.len(),
                value.len()
            ))
            .into());
        }
        let (reply, done) = oneshot::channel();
        self.work
            .send(Work::Set { key, value, reply })
            .await
            .map_err(|_| LearnerError::TrainerStopped)?;
        let changed = done.await.map_err(|_| LearnerError::TrainerStopped)??;
        Ok(Response::new(changed))
    }
}

/// Serves the learner service and `health` on `listen` until `shutdown` completes.
pub(crate) async fn serve(
    listen: &str,
    service: Learner,
    health: HealthServer<impl Health>,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    telemetry::announce_listening(listener.local_addr()?);
    net::server()?
        .add_service(health)
        .add_service(broadcast::wire::LearnerRoutes::new(service))
        .serve_with_incoming_shutdown(net::incoming(listener), shutdown)
        .await?;
    Ok(())
}

/// Refuses a report no real actor sends: mismatched columns, returns that are not finite, or
/// episodes of zero steps. Its `env_steps` only feeds the per-actor view and a metric: the
/// run's progress is counted from the data the learner trains on or the replay server
/// accepted, never from reports.
fn check_report(report: &ReportEpisodesRequest) -> Result<(), LearnerError> {
    if report.returns.len() != report.lengths.len() {
        return Err(LearnerError::BadReport {
            returns: report.returns.len(),
            lengths: report.lengths.len(),
        });
    }
    if let Some(r) = report.returns.iter().find(|r| !r.is_finite()) {
        return Err(LearnerError::ImplausibleReport(format!(
            "an episode return of {r} (returns must be finite)"
        )));
    }
    if report.lengths.contains(&0) {
        return Err(LearnerError::ImplausibleReport(
            "an episode of length 0".to_string(),
        ));
    }
    Ok(())
}
