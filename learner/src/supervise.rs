//! Where the learner joins everything it runs: the gRPC server, the trainer thread and the
//! sampling task. A signal stops them in order with a final checkpoint, then ends every weight
//! stream with UNAVAILABLE so connected actors cannot hold the learner up; a trainer that panics
//! or a sampler that ends turns health NOT_SERVING, checkpoints when the trainer still can,
//! and makes the learner exit non-zero so compose or Kubernetes restarts it.

use std::any::Any;
use std::time::Duration;

use anyhow::Context;
use fleetrl_proto::v1::learner_service_server::LearnerServiceServer;
use fleetrl_runtime::signals::Signals;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;

use crate::sampler::Ended;
use crate::service::{self, Learner};
use crate::trainer::{log_final_checkpoint, TrainerStop, Work};

/// How long a failing learner keeps answering NOT_SERVING before it exits, so probes and
/// clients see why it goes away.
const DRAIN: Duration = Duration::from_secs(2);

/// How long the server gets, once its streams are closed, to finish what it is answering.
const SERVER_GRACE: Duration = Duration::from_secs(5);

/// What the learner runs besides its server.
pub(crate) struct Roles {
    /// The trainer thread (it ends when every sender of `work` is gone).
    pub(crate) trainer: std::thread::JoinHandle<Result<(), TrainerStop>>,
    /// The sampling task.
    pub(crate) sampler: JoinHandle<Ended>,
    /// Background helpers (priority updates, demo stats) stopped with the rest.
    pub(crate) helpers: Vec<JoinHandle<()>>,
    /// The trainer's work queue, for the final checkpoint.
    pub(crate) work: mpsc::Sender<Work>,
    /// Set at shutdown: every weight subscription ends with UNAVAILABLE.
    pub(crate) closing: watch::Sender<bool>,
}

/// Serves `service` on `listen` until a shutdown signal (Ok) or a failure of any role (Err,
/// naming the cause).
pub(crate) async fn run(
    listen: &str,
    service: Learner,
    roles: Roles,
    signals: &Signals,
) -> anyhow::Result<()> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<LearnerServiceServer<Learner>>().await;
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async {
        let _ = stopped.await;
    };
    let listen = listen.to_string();
    let mut server =
        tokio::spawn(
            async move { service::serve(&listen, service, health_service, shutdown).await },
        );
    let Roles {
        trainer,
        mut sampler,
        helpers,
        work,
        closing,
    } = roles;
    let mut trainer = tokio::task::spawn_blocking(move || trainer.join());
    let mut trainer_done = false;
    let mut server_done = false;
    let fault = tokio::select! {
        () = signals.stop() => None,
        served = &mut server => {
            server_done = true;
            Some(match served {
                Ok(Ok(())) => "the gRPC server stopped".to_string(),
                Ok(Err(error)) => format!("{error:#}"),
                Err(error) => format!("the server task failed: {error}"),
            })
        }
        joined = &mut trainer => {
            trainer_done = true;
            trainer_ended(joined)
        }
        ended = &mut sampler => match ended {
            // The trainer dropped its queue: say why it did.
            Ok(Ended::TrainerGone) => match tokio::time::timeout(DRAIN, &mut trainer).await {
                Ok(joined) => {
                    trainer_done = true;
                    trainer_ended(joined)
                }
                Err(_) => Some("the trainer stopped taking batches".to_string()),
            },
            Ok(Ended::Failed(error)) => Some(format!("sampling failed: {error}")),
            Err(error) => Some(format!("the sampler task failed: {error}")),
        },
    };
    sampler.abort();
    for helper in helpers {
        helper.abort();
    }
    if let Some(cause) = &fault {
        tracing::error!(cause, "learner failure: NOT_SERVING, then exiting");
        health
            .set_not_serving::<LearnerServiceServer<Learner>>()
            .await;
        health
            .set_service_status("", ServingStatus::NotServing)
            .await;
    } else {
        tracing::info!("shutting down: writing a final checkpoint");
    }
    // The trainer, if it still runs, writes a final checkpoint; a dead one drops the request.
    let (reply, saved) = oneshot::channel();
    if work.send(Work::Checkpoint(reply)).await.is_ok() {
        log_final_checkpoint(saved).await;
    }
    drop(work);
    if fault.is_some() {
        tokio::time::sleep(DRAIN).await;
    }
    // Weight streams end with UNAVAILABLE (actors resubscribe to whoever serves next), so the
    // server's graceful stop does not wait for subscribers that would never leave.
    let _ = closing.send(true);
    let _ = stop.send(());
    if !server_done
        && tokio::time::timeout(SERVER_GRACE, &mut server)
            .await
            .is_err()
    {
        tracing::warn!("connections still open after {SERVER_GRACE:?}; leaving them");
    }
    let Some(cause) = fault else {
        // The trainer ends once the server (holding the last work sender) is gone.
        if !trainer_done {
            let _ = tokio::time::timeout(DRAIN, trainer).await;
        }
        return Ok(());
    };
    Err(anyhow::anyhow!(cause)).context("the learner stops")
}

/// Why the trainer thread ended, as a fault; `None` when another learner rank left the
/// group (a shutdown), which this rank follows.
fn trainer_ended(
    joined: Result<std::thread::Result<Result<(), TrainerStop>>, tokio::task::JoinError>,
) -> Option<String> {
    Some(match joined {
        Ok(Ok(Ok(()))) => "the trainer thread ended".to_string(),
        Ok(Ok(Err(TrainerStop::Left(source)))) => {
            tracing::info!(cause = %source, "shutting down with the other learner ranks");
            return None;
        }
        Ok(Ok(Err(stop))) => stop.to_string(),
        Ok(Err(panic)) => format!("the trainer thread panicked: {}", panic_message(&*panic)),
        Err(error) => format!("the trainer thread could not be joined: {error}"),
    })
}

/// The message a panic carried, when it is text.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
