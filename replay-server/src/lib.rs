//! fleet-replay-server: named replay tables served over gRPC.
//!
//! [`serve`] runs `fleetrl.v1.ReplayService` (stream protocols in
//! `proto/proto/fleetrl/v1/replay.proto`) and `grpc.health.v1.Health` until a shutdown future
//! resolves. The table engine is [`buffers`]; `service` only
//! adapts them to gRPC and `error` maps their errors to status codes. The binary is
//! `src/main.rs`.

pub mod buffers;
mod demos;
mod error;
pub mod metrics;
mod persistence;
mod service;

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleetrl_proto::table::TableSpec;
use fleetrl_proto::v1::replay_service_server::ReplayServiceServer;
use fleetrl_runtime::telemetry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{error, info, warn};

pub use metrics::ReplayMetrics;
use persistence::Checkpointer;
use service::{Replay, Tables};

/// Largest gRPC message the server decodes or encodes: a batch of image rollouts is large.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// How long open streams get to finish after shutdown before their connections are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// HTTP/2 pings that detect clients which vanished without closing their streams.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How a server runs, apart from where it listens.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Tables declared at start (from the server's tables file). Tables
    /// restored from a checkpoint must match the declaration of the same name.
    pub tables: Vec<TableSpec>,
    /// Where checkpoints go and are restored from; `None` keeps everything in memory only.
    pub checkpoint_dir: Option<PathBuf>,
    /// The directory PPO+D's demo directories must lie under (`--demos-root`): the names a
    /// `DemoService.Configure` sends are taken relative to it, and any leading out of it are
    /// refused. `None`: the server reads and writes no demo directories.
    pub demos_root: Option<fleetrl_runtime::confine::Root>,
    /// Time between periodic checkpoints; `None` writes them only on request and at shutdown.
    pub checkpoint_interval: Option<Duration>,
    /// What one item and one sampled batch may take.
    pub limits: Limits,
    /// Where the service records insert and sample latency (in the binary's registry).
    pub metrics: ReplayMetrics,
}

impl ServerOptions {
    /// In-memory tables, no checkpoints, metrics in a registry of their own (not served).
    pub fn in_memory(tables: Vec<TableSpec>) -> ServerOptions {
        ServerOptions {
            tables,
            checkpoint_dir: None,
            demos_root: None,
            checkpoint_interval: None,
            limits: Limits::default(),
            metrics: ReplayMetrics::new(Registry::new("fleetrl_replay")),
        }
    }
}

/// Default limit on one item's size: as large as one gRPC message can carry.
pub const DEFAULT_MAX_ITEM_BYTES: u64 = MAX_MESSAGE_BYTES as u64;

/// Default limit on the items of one sampled batch.
pub const DEFAULT_MAX_BATCH_ITEMS: u64 = 65_536;

/// Default limit on one sampled batch's bytes: one gRPC message could not carry more.
pub const DEFAULT_MAX_BATCH_BYTES: u64 = MAX_MESSAGE_BYTES as u64;

/// Server-wide size limits, checked before anything is allocated for a request: a client
/// cannot make the server allocate more than these, whatever its tables allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest item a table may declare, in bytes (`--max-item-bytes`).
    pub max_item_bytes: u64,
    /// Most items one sample request may ask for (`--max-batch-items`).
    pub max_batch_items: u64,
    /// Most bytes one sampled batch may take (`--max-batch-bytes`).
    pub max_batch_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_item_bytes: DEFAULT_MAX_ITEM_BYTES,
            max_batch_items: DEFAULT_MAX_BATCH_ITEMS,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
        }
    }
}

/// Background work the server supervises beside its own tasks (the metrics exporter): a task
/// that ends, with an error, a panic or even `Ok`, stops the server as a failure.
pub type Tasks = JoinSet<anyhow::Result<()>>;

/// Serves the tables `options` declares (after restoring the newest checkpoint, if any) on
/// `listener` until `shutdown` resolves, supervising `tasks` and its own.
///
/// Every task is joined here. If one ends unexpectedly (the gRPC server, the periodic
/// checkpointer, or one of `tasks`: by panic, error or return) the cause is logged and the
/// server stops as on shutdown, then returns that cause as an error so the binary exits
/// non-zero and its supervisor restarts it.
///
/// On shutdown the health status turns NOT_SERVING, every table closes (waiting inserts and
/// samples end with UNAVAILABLE), a final checkpoint is written (so nothing acknowledged is
/// lost), idle streams end, and open connections get [`SHUTDOWN_GRACE`] to finish before
/// they are dropped. Fails if a table spec is invalid, a checkpoint cannot be restored, or
/// the server cannot run.
pub async fn serve(
    listener: TcpListener,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
    mut tasks: Tasks,
) -> anyhow::Result<()> {
    let tables = Tables::new(options.limits, options.metrics.clone());
    // The demo buffers' own files (`<checkpoint-dir>/demos`) are no client's to name.
    let demos_root = match (options.demos_root.clone(), &options.checkpoint_dir) {
        (Some(root), Some(dir)) => Some(
            root.reserving(dir)
                .with_context(|| format!("resolving --checkpoint-dir {}", dir.display()))?,
        ),
        (root, _) => root,
    };
    let demo_hub = Arc::new(demos::DemoHub::new(
        options.checkpoint_dir.clone(),
        demos_root,
    ));
    let checkpointer = options
        .checkpoint_dir
        .clone()
        .map(|dir| Arc::new(Checkpointer::new(dir).with_demos(demo_hub.clone())));
    if let Some(checkpointer) = &checkpointer {
        checkpointer.restore(&tables).with_context(|| {
            format!(
                "restoring replay tables from {}",
                checkpointer.dir().display()
            )
        })?;
    }
    for spec in &options.tables {
        tables
            .ensure(spec)
            .with_context(|| format!("declaring table `{}`", spec.name))?;
    }
    let addr = listener
        .local_addr()
        .context("listener has no local address")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let replay = ReplayServiceServer::new(Replay::new(
        tables.clone(),
        stop_rx.clone(),
        checkpointer.clone(),
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<ReplayServiceServer<Replay>>().await;

    let mut server_stop = stop_rx;
    let incoming = fleetrl_runtime::net::incoming(listener);
    let server = fleetrl_runtime::net::server()?
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(health_service)
        .add_service(replay)
        .add_service(
            fleetrl_proto::v1::demo_service_server::DemoServiceServer::new(demos::Demos {
                hub: demo_hub,
            })
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = server_stop.wait_for(|&stopped| stopped).await;
        });
    let mut server = pin!(server);
    info!(%addr, tables = ?tables.names(), "replay server serving");
    // Announced only now, with every table restored: whoever waits for this line may use them.
    fleetrl_runtime::telemetry::announce_listening(addr);

    if let (Some(checkpointer), Some(period)) = (&checkpointer, options.checkpoint_interval) {
        let (checkpointer, tables) = (checkpointer.clone(), tables.clone());
        tasks.spawn(async move {
            checkpointer.periodically(tables, period).await;
            anyhow::bail!("the periodic checkpointer stopped")
        });
    }
    let mut server_ended = false;
    let failure = tokio::select! {
        result = &mut server => {
            server_ended = true;
            Some(match result {
                Ok(()) => anyhow::anyhow!("the gRPC server stopped on its own"),
                Err(e) => anyhow::Error::new(e).context("the gRPC server failed"),
            })
        }
        () = shutdown => None,
        Some(joined) = tasks.join_next() => Some(task_ended(joined)),
    };
    match &failure {
        Some(error) => error!(
            error = format!("{error:#}"),
            "replay server task ended; stopping"
        ),
        None => info!("replay server shutting down"),
    }
    tasks.abort_all();
    health
        .set_not_serving::<ReplayServiceServer<Replay>>()
        .await;
    tables.close_all();
    let saved = match &checkpointer {
        Some(checkpointer) => checkpointer.write(&tables).await.map(Some),
        None => Ok(None),
    };
    stop_tx.send_replace(true);
    if !server_ended {
        match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
            Ok(result) => result.context("replay server failed while draining")?,
            Err(_) => warn!(
                grace_s = SHUTDOWN_GRACE.as_secs(),
                "streams still open after the grace period; dropping them"
            ),
        }
    }
    if let Err(error) = saved {
        let error = error.context("writing the final replay checkpoint");
        return Err(match failure {
            Some(cause) => cause.context(format!("{error:#}")),
            None => error,
        });
    }
    failure.map_or(Ok(()), Err)
}

/// The error of a supervised task that ended: its own, its panic, or that it returned at all.
fn task_ended(joined: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Error {
    match joined {
        Ok(Ok(())) => anyhow::anyhow!("a supervised task returned"),
        Ok(Err(error)) => error,
        Err(join) if join.is_panic() => anyhow::anyhow!("a supervised task panicked: {join}"),
        Err(join) => anyhow::anyhow!("a supervised task was cancelled: {join}"),
    }
}
