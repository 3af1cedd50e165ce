//! `fleetrl.v1.LearnerService`: run spec, weight stream, episode reports, status, checkpoints.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use fleetrl_proto::v1::learner_service_server::LearnerService;
use fleetrl_proto::v1::{
    GetRunSpecRequest, GetStatusRequest, LearnerStatus, ReportEpisodesRequest,
    ReportEpisodesResponse, RunSpec, SaveCheckpointRequest, SaveCheckpointResponse,
    SubscribeWeightsRequest, Weights,
};
use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

use anyhow::Context;
use fleetrl_core::broadcast::{self, EncodedCache};
use fleetrl_proto::v1::learner_service_server::LearnerServiceServer;
use fleetrl_runtime::net::{self, MAX_MESSAGE_BYTES};
use fleetrl_runtime::telemetry;

use crate::metrics::LearnerMetrics;
use crate::stats::Stats;
use crate::trainer::Work;

/// The service's handles onto the trainer and its published state.
pub(crate) struct Learner {
    pub(crate) spec: RunSpec,
    pub(crate) stats: Arc<Mutex<Stats>>,
    pub(crate) weights: watch::Receiver<Arc<Weights>>,
    pub(crate) work: mpsc::Sender<Work>,
    /// Open weight subscriptions: the actors connected right now.
    pub(crate) subscribers: Arc<AtomicU32>,
    /// What Prometheus scrapes.
    pub(crate) metrics: Arc<LearnerMetrics>,
    /// The newest version serialised for chunked subscribers.
    pub(crate) encoded: Arc<EncodedCache>,
}

/// Counts one open weight subscription for as long as it lives.
struct Subscription(Arc<AtomicU32>, Arc<LearnerMetrics>);

impl Subscription {
    fn open(count: &Arc<AtomicU32>, metrics: &Arc<LearnerMetrics>) -> Subscription {
        let now = count.fetch_add(1, Ordering::Relaxed) + 1;
        metrics.actors_connected.set(now as f64);
        Subscription(count.clone(), metrics.clone())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let now = self.0.fetch_sub(1, Ordering::Relaxed).saturating_sub(1);
        self.1.actors_connected.set(now as f64);
    }
}

type WeightStream = Pin<Box<dyn Stream<Item = Result<Weights, Status>> + Send>>;

#[tonic::async_trait]
impl LearnerService for Learner {
    async fn get_run_spec(
        &self,
        _: Request<GetRunSpecRequest>,
    ) -> Result<Response<RunSpec>, Status> {
        Ok(Response::new(self.spec.clone()))
    }

    type SubscribeWeightsStream = WeightStream;

    #[tracing::instrument(skip_all, fields(after_version = request.get_ref().after_version))]
    async fn subscribe_weights(
        &self,
        request: Request<SubscribeWeightsRequest>,
    ) -> Result<Response<WeightStream>, Status> {
        let request = request.into_inner();
        let after = request.after_version;
        // WatchStream yields the current value first, then only the newest on each change,
        // so a slow subscriber skips versions instead of queueing them.
        // The subscription guard lives in the stream, so a client going away (a killed actor's
        // connection closing) stops counting at once.
        let subscription = Subscription::open(&self.subscribers, &self.metrics);
        if request.chunk_bytes > 0 {
            let chunk_bytes = (request.chunk_bytes as usize).min(MAX_MESSAGE_BYTES / 2);
            let stream = broadcast::subscription(
                self.weights.clone(),
                self.encoded.clone(),
                after,
                chunk_bytes,
                move || subscription.0.load(Ordering::Relaxed).max(1),
            )
            .map(|m| m.map_err(|e| Status::internal(e.to_string())));
            return Ok(Response::new(Box::pin(stream)));
        }
        let stream = WatchStream::new(self.weights.clone())
            .filter(move |w| std::future::ready(w.version > after))
            .map(move |w| {
                let subscribers = subscription.0.load(Ordering::Relaxed).max(1);
                Ok(Weights {
                    subscribers,
                    ..Weights::clone(&w)
                })
            });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report_episodes(
        &self,
        request: Request<ReportEpisodesRequest>,
    ) -> Result<Response<ReportEpisodesResponse>, Status> {
        let report = request.into_inner();
        if report.returns.len() != report.lengths.len() {
            return Err(Status::invalid_argument(format!(
                "returns has {} entries but lengths has {}",
                report.returns.len(),
                report.lengths.len()
            )));
        }
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
            .map_err(|_| Status::unavailable("the trainer has stopped"))?;
        let (path, version) = saved
            .await
            .map_err(|_| Status::unavailable("the trainer has stopped"))?
            .map_err(Status::internal)?;
        Ok(Response::new(SaveCheckpointResponse {
            path: path.display().to_string(),
            policy_version: version,
        }))
    }
}

/// Serves the learner service and health on `listen` until a shutdown signal: the same for
/// the on- and the off-policy learner.
pub(crate) async fn serve(listen: &str, service: Learner) -> anyhow::Result<()> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<LearnerServiceServer<Learner>>().await;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    telemetry::announce_listening(listener.local_addr()?);
    net::server()
        .add_service(health_service)
        .add_service(broadcast::wire::LearnerRoutes::new(service))
        .serve_with_incoming_shutdown(net::incoming(listener), net::shutdown_signal())
        .await?;
    Ok(())
}
