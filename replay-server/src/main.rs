//! fleet-replay-server: parses flags, declares the tables of a tables file and serves them
//! (and those learners declare with `EnsureTable`) until SIGTERM or Ctrl-C. It reads no run
//! config and builds no environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fleet_replay_server::{ReplayMetrics, ServerOptions};
use fleetrl_proto::table::TableSpec;
use fleetrl_runtime::signals::Signals;
use fleetrl_runtime::telemetry;
use serde::Deserialize;
use tokio::net::TcpListener;

/// Serves replay tables over gRPC: those of a tables file (`--tables`), those restored from
/// `--checkpoint-dir`, and any a learner creates with `EnsureTable` (every fleetrl learner
/// declares its tables that way).
#[derive(Debug, Parser)]
#[command(name = "fleet-replay-server", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port; the chosen one is printed).
    #[arg(long, env = "FLEETRL_REPLAY_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,

    /// A TOML file of `[[table]]` definitions to declare at start (see the crate README).
    #[arg(long, env = "FLEETRL_REPLAY_TABLES")]
    tables: Option<PathBuf>,

    /// Directory for table checkpoints: restored at start, written on SIGTERM, periodically,
    /// and on `Checkpoint` requests. Without it the tables live in memory only.
    #[arg(long, env = "FLEETRL_REPLAY_CHECKPOINT_DIR")]
    checkpoint_dir: Option<PathBuf>,

    /// Directory PPO+D's demo directories must lie under (default: the working directory).
    /// The `ppod.*_dir` names an actor sends are taken relative to it; absolute paths
    /// elsewhere, `..` and symbolic links that lead out of it are refused.
    #[arg(long, env = "FLEETRL_REPLAY_DEMOS_ROOT")]
    demos_root: Option<PathBuf>,

    /// Seconds between periodic checkpoints (0 turns them off); needs `--checkpoint-dir`.
    #[arg(
        long,
        env = "FLEETRL_REPLAY_CHECKPOINT_INTERVAL_S",
        default_value_t = 60
    )]
    checkpoint_interval_s: u64,

    /// Largest item, in bytes, a table may declare.
    #[arg(long, env = "FLEETRL_REPLAY_MAX_ITEM_BYTES", default_value_t = fleet_replay_server::DEFAULT_MAX_ITEM_BYTES)]
    max_item_bytes: u64,

    /// Most items one sample request may ask for; larger requests get INVALID_ARGUMENT.
    #[arg(long, env = "FLEETRL_REPLAY_MAX_BATCH_ITEMS", default_value_t = fleet_replay_server::DEFAULT_MAX_BATCH_ITEMS)]
    max_batch_items: u64,

    /// Most bytes one sampled batch may take (batch size x the table's item size); larger
    /// requests get INVALID_ARGUMENT.
    #[arg(long, env = "FLEETRL_REPLAY_MAX_BATCH_BYTES", default_value_t = fleet_replay_server::DEFAULT_MAX_BATCH_BYTES)]
    max_batch_bytes: u64,

    /// Serve Prometheus metrics on this address (`GET /metrics`); off when unset.
    #[arg(long, env = "FLEETRL_METRICS_LISTEN")]
    metrics_listen: Option<String>,
}

/// The `--tables` file: a list of table definitions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TablesFile {
    #[serde(default)]
    table: Vec<TableSpec>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fleetrl_runtime::private::private_files();
    telemetry::exit_code(run().await)
}

async fn run() -> anyhow::Result<()> {
    // Heard from here on, also while tables are being restored.
    let signals = Signals::listen().context("listening for SIGTERM and Ctrl-C")?;
    let args = Args::parse();
    telemetry::init("info");
    fleetrl_runtime::net::load_security()?;
    fleetrl_runtime::net::auth::check_exposure(args.listen)?;
    // Before restoring its tables: another server may be checkpointing into the directory.
    let _lock = match &args.checkpoint_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating --checkpoint-dir {}", dir.display()))?;
            Some(fleetrl_runtime::dir_lock::lock(
                dir,
                "replay.lock",
                "replay server",
                "two servers on one --checkpoint-dir overwrite each other's tables; stop that \
                 one, or give this one another --checkpoint-dir",
            )?)
        }
        None => None,
    };
    let mut tables = Vec::new();
    if let Some(path) = &args.tables {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading tables file {}", path.display()))?;
        let file: TablesFile = toml::from_str(&text)
            .with_context(|| format!("parsing tables file {}", path.display()))?;
        tables.extend(file.table);
    }
    for table in &tables {
        tracing::info!(
            table = %table.name,
            sampler = table.sampler.name(),
            rate_limiter = table.rate_limiter.name(),
            max_size = table.max_size,
            fields = table.signature.fields.len(),
            "table declared"
        );
    }
    let demos_root = demos_root(args.demos_root.as_deref())?;
    let registry = telemetry::Registry::new("fleetrl_replay");
    let options = ServerOptions {
        tables,
        checkpoint_interval: (args.checkpoint_dir.is_some() && args.checkpoint_interval_s > 0)
            .then(|| Duration::from_secs(args.checkpoint_interval_s)),
        checkpoint_dir: args.checkpoint_dir,
        demos_root: Some(demos_root),
        limits: fleet_replay_server::Limits {
            max_item_bytes: args.max_item_bytes,
            max_batch_items: args.max_batch_items,
            max_batch_bytes: args.max_batch_bytes,
        },
        metrics: ReplayMetrics::new(registry.clone()),
    };
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let local = listener.local_addr().context("reading the bound address")?;
    let mut tasks = fleet_replay_server::Tasks::new();
    if args.metrics_listen.is_some() {
        telemetry::metrics::serve_if(args.metrics_listen.as_deref(), &registry).await?;
        tasks.spawn(async move {
            fleet_replay_server::metrics::export(registry, local).await;
            anyhow::bail!("the metrics exporter stopped")
        });
    }
    fleet_replay_server::serve(
        listener,
        options,
        async move { signals.stop().await },
        tasks,
    )
    .await?;
    tracing::info!("replay server stopped");
    Ok(())
}

/// `--demos-root`, or the working directory, canonical (created if missing).
fn demos_root(dir: Option<&std::path::Path>) -> anyhow::Result<fleetrl_runtime::confine::Root> {
    let dir = match dir {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().context("reading the working directory")?,
    };
    let root = fleetrl_runtime::confine::Root::new(&dir, "--demos-root")
        .with_context(|| format!("opening --demos-root {}", dir.display()))?;
    tracing::info!(demos_root = %root.path().display(), "demo directories are confined");
    Ok(root)
}
