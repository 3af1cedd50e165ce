//! fleet-serve: the policy server. Loads a trained policy from a checkpoint, or follows a live
//! learner's weight stream so it always serves the newest version, and answers
//! `fleetrl.v1.PolicyService/Act` (observations in, actions out) with the run's token and TLS,
//! batching concurrent requests into one forward pass on its inference thread. Serves
//! `grpc.health.v1.Health` on the same port (SERVING once it has a policy to serve) and
//! Prometheus metrics on `--metrics-listen`. Exits 0 after SIGTERM, non-zero when the
//! learner it follows is gone or a part of it fails.

mod batcher;
mod error;
mod limits;
mod metrics;
mod service;
mod source;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fleetrl_runtime::net::{self, health};
use fleetrl_runtime::signals::Signals;
use fleetrl_runtime::telemetry;
use tokio::sync::oneshot;

/// The fleetrl policy server.
#[derive(Debug, Parser)]
#[command(name = "fleet-serve", version, about)]
struct Args {
    /// Address to serve the policy service and health on (port 0 picks a free one).
    #[arg(long, env = "FLEETRL_SERVE_LISTEN", default_value = "127.0.0.1:50055")]
    listen: String,
    /// Serve this checkpoint's policy (a checkpoint directory, or a run directory for its
    /// newest checkpoint).
    #[arg(
        long,
        env = "FLEETRL_SERVE_CHECKPOINT",
        required_unless_present = "follow",
        conflicts_with = "follow"
    )]
    checkpoint: Option<PathBuf>,
    /// Serve the policy of the learner at this `host:port`, always at its newest version.
    #[arg(long, env = "FLEETRL_LEARNER_ADDR")]
    follow: Option<String>,
    /// Seconds to keep trying to reach the learner at start, and to get its weight stream back
    /// after losing it (then the server exits non-zero).
    #[arg(long, default_value_t = 120)]
    connect_patience_s: u64,
    /// Serve Prometheus metrics on this address (`GET /metrics`); off when unset.
    #[arg(long, env = "FLEETRL_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    limits: limits::Limits,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fleetrl_runtime::private::private_files();
    telemetry::exit_code(run().await)
}

async fn run() -> anyhow::Result<()> {
    let signals = Signals::listen().context("listening for SIGTERM and Ctrl-C")?;
    telemetry::init("info");
    let args = Args::parse();
    net::load_security()?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding --listen {}", args.listen))?;
    net::auth::check_exposure(listener.local_addr()?)?;
    let limits = args.limits.clone().validated()?;
    // One forward pass at a time, on one core: concurrency comes from batching.
    tch::set_num_threads(1);
    tch::set_num_interop_threads(1);
    let (registry, metrics) = metrics::build();
    telemetry::metrics::serve_if(args.metrics_listen.as_deref(), &registry).await?;
    let (reporter, health_service) = tonic_health::server::health_reporter();
    health::set(&reporter, false).await;
    let patience = Duration::from_secs(args.connect_patience_s);
    let (opened, follow) = match (&args.checkpoint, &args.follow) {
        (Some(path), _) => (source::checkpoint(path)?, None),
        (None, Some(addr)) => {
            // The wait for the learner (up to the patience) runs beside the stop.
            let following = source::follow(addr, patience, &metrics, reporter.clone());
            let Some(followed) = signals.before_stop(following).await else {
                tracing::info!("stopped while waiting for the learner: nothing was served");
                return Ok(());
            };
            let (opened, follow) = followed?;
            (opened, Some(follow))
        }
        (None, None) => anyhow::bail!("give --checkpoint or --follow"),
    };
    let inference = batcher::Inference {
        config: opened.config.clone(),
        obs_space: opened.obs_space.clone(),
        action_space: opened.action_space.clone(),
        weights: opened.weights,
        limits: limits.clone(),
        metrics: metrics.clone(),
    };
    let (queue, state_size, inference) = batcher::spawn(inference).await?;
    let service = service::Policy {
        obs_space: opened.obs_space.clone(),
        action_space: opened.action_space.clone(),
        env: opened.config.env.id.clone(),
        algo: opened.config.algo.name().to_string(),
        max_request_rows: limits.max_request_rows,
        deterministic: limits.deterministic,
        state_size,
        metrics: metrics.clone(),
        queue,
    };
    if follow.is_none() {
        health::set(&reporter, true).await;
    }
    telemetry::announce_listening(listener.local_addr()?);
    let (stop, stopped) = oneshot::channel::<()>();
    let server = net::server()?
        .add_service(health_service)
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(net::incoming(listener), async {
            let _ = stopped.await;
        });
    let follow = async {
        match follow {
            Some(follow) => follow.await,
            None => std::future::pending().await,
        }
    };
    let fault = tokio::select! {
        () = signals.stop() => None,
        served = server => Some(match served {
            Ok(()) => anyhow::anyhow!("the gRPC server stopped"),
            Err(error) => anyhow::Error::from(error).context("the gRPC server failed"),
        }),
        followed = follow => Some(match followed {
            Ok(()) => anyhow::anyhow!("the weight subscription ended"),
            Err(lost) => anyhow::Error::from(lost),
        }),
        ended = inference => Some(match ended {
            Ok(Ok(())) => anyhow::anyhow!("the inference thread ended"),
            Ok(Err(error)) => anyhow::Error::from(error).context("the inference thread failed"),
            Err(_) => anyhow::anyhow!("the inference thread panicked"),
        }),
    };
    let _ = stop.send(());
    match fault {
        None => {
            tracing::info!("shutting down");
            Ok(())
        }
        Some(fault) => {
            health::set(&reporter, false).await;
            Err(fault)
        }
    }
}
