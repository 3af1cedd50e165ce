//! fleet-replay-server: parses flags, loads the run config, builds the run's tables and serves
//! them until SIGTERM or Ctrl-C.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use fleetrl_core::config::RunConfig;
use fleetrl_core::telemetry;
use tokio::net::TcpListener;

/// Serves the replay tables of a fleetrl run over gRPC.
#[derive(Debug, Parser)]
#[command(name = "fleet-replay-server", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port; the chosen one is printed).
    #[arg(long, env = "FLEETRL_REPLAY_LISTEN", default_value = "0.0.0.0:50051")]
    listen: SocketAddr,

    /// Run config: a TOML file or a preset name such as `cartpole-ppo`.
    #[arg(long, env = "FLEETRL_CONFIG")]
    config: String,

    /// Config override `key=value` (e.g. `replay.max_size=16`); repeatable, applied in order.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,

    /// Serve Prometheus metrics on this address (`GET /metrics`); off when unset.
    #[arg(long, env = "FLEETRL_METRICS_LISTEN")]
    metrics_listen: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init("info");
    let config = RunConfig::load(&args.config, &args.set)
        .with_context(|| format!("loading run config `{}`", args.config))?;
    let table = fleetrl_core::rollout::table_spec(&config).context("building the rollout table")?;
    tracing::info!(
        table = %table.name,
        max_size = table.max_size,
        fields = table.signature.fields.len(),
        "replay tables configured"
    );
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let local = listener.local_addr().context("reading the bound address")?;
    if args.metrics_listen.is_some() {
        let registry = telemetry::Registry::new("fleetrl_replay");
        telemetry::metrics::serve_if(args.metrics_listen.as_deref(), &registry).await?;
        fleet_replay_server::metrics::spawn_exporter(registry, local);
    }
    telemetry::announce_listening(local);
    fleet_replay_server::serve(listener, vec![table], shutdown_signal()).await?;
    tracing::info!("replay server stopped");
    Ok(())
}

/// Resolves on SIGTERM (Kubernetes, the launcher) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
