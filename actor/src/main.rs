//! fleet-actor: steps M environments with a CPU copy of the policy, streams fixed-length
//! rollouts to a replay server, and follows the learner's weights. Stateless: kill it and start
//! another anywhere; it needs only the learner's and the replay server's addresses. Exits 0
//! after SIGTERM, non-zero when a part of it fails ([`supervisor`]).

mod collect;
mod demo_replay;
mod identity;
mod inserter;
mod learner_link;
mod metrics;
mod supervisor;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use fleetrl_core::broadcast;
use fleetrl_core::config::RunConfig;
use fleetrl_core::replay_client;
use fleetrl_proto::v1::GetRunSpecRequest;
use fleetrl_runtime::signals::Signals;
use fleetrl_runtime::{net, telemetry};
use supervisor::{Part, Supervisor};
use tokio::sync::{mpsc, watch};

/// The fleetrl actor.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Learner to get the run spec and weights from.
    #[arg(long, env = "FLEETRL_LEARNER_ADDR", default_value = "127.0.0.1:50052")]
    learner: String,
    /// Replay server(s) to insert rollouts into: `host:port`, or a comma-separated list of
    /// shards that share the rollouts.
    #[arg(long, env = "FLEETRL_REPLAY_ADDR", default_value = "127.0.0.1:50051")]
    replay: String,
    /// This actor's id: it picks the env seeds and names the actor in the learner's status.
    /// `auto` derives it from the host name (replicas of one compose service or Kubernetes
    /// Deployment share their environment but not their host names).
    #[arg(long, env = "FLEETRL_ACTOR_ID", default_value = "0", value_parser = identity::parse_actor_id)]
    actor_id: u32,
    /// Address to serve `grpc.health.v1.Health` on (port 0 picks a free one).
    #[arg(
        long,
        env = "FLEETRL_ACTOR_HEALTH_LISTEN",
        default_value = "127.0.0.1:50053"
    )]
    health_listen: String,
    /// Seconds to keep trying to reach the learner at startup, and to get its weight stream
    /// back after losing it (then the actor exits non-zero).
    #[arg(long, default_value_t = 120)]
    connect_patience_s: u64,
    /// Serve Prometheus metrics on this address (`GET /metrics`); off when unset.
    #[arg(long, env = "FLEETRL_METRICS_LISTEN")]
    metrics_listen: Option<String>,
}

/// How long the acting loop and the inserter get to finish at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

fn main() -> ExitCode {
    fleetrl_runtime::private::private_files();
    telemetry::init("info");
    let args = Args::parse();
    tch::set_num_threads(1);
    tch::set_num_interop_threads(1);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    // The acting thread may be blocked in an env step or an insert: do not wait for it.
    runtime.shutdown_timeout(Duration::from_secs(1));
    telemetry::exit_code(result)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let signals = Signals::listen().context("listening for SIGTERM and Ctrl-C")?;
    fleetrl_runtime::net::load_security()?;
    let (registry, metrics) = metrics::build();
    telemetry::metrics::serve_if(args.metrics_listen.as_deref(), &registry).await?;
    let (health, health_server) = net::health::bind(&args.health_listen)
        .await
        .with_context(|| format!("serving health on {}", args.health_listen))?;
    let mut parts = Supervisor::default();
    parts.spawn(Part::Health, health_server);
    let patience = Duration::from_secs(args.connect_patience_s);
    // The waits for the learner and the demo buffers (each up to the patience) run beside the
    // stop, as the learner's setup does: nothing has been collected yet to finish.
    let stopped = || {
        tracing::info!("stopped before acting: nothing was collected");
        Ok(())
    };
    tracing::info!(learner = %args.learner, patience_s = patience.as_secs(), "waiting for the learner");
    let connecting = net::connect_weights_subscriber(&args.learner, patience);
    let Some(learner) = signals.before_stop(connecting).await else {
        return stopped();
    };
    let learner = learner.context("connecting to the learner")?;
    let spec = learner_link::client(learner.clone())
        .get_run_spec(GetRunSpecRequest {})
        .await
        .context("asking the learner for the run spec")?
        .into_inner();
    let config = RunConfig::from_toml(&spec.config_toml, "the learner's run spec")?;
    tracing::info!(actor_id = args.actor_id, run_id = %spec.run_id, env = %config.env.id, "joined run");

    let (weights_tx, weights_rx) = watch::channel(None);
    let follower = broadcast::Follower {
        run_id: spec.run_id.clone(),
        actor_id: Some(args.actor_id),
        patience,
    };
    let received = metrics.weights_received.clone();
    let follow = broadcast::follow_weights(
        learner.clone(),
        follower,
        weights_tx,
        received,
        health.clone(),
    );
    parts.spawn(Part::Weights, follow);
    let progress = Arc::new(Mutex::new(collect::Progress::default()));
    let interval = Duration::from_secs_f64(config.actors.report_interval_s.max(0.05));
    let report = learner_link::report_episodes(learner, args.actor_id, progress.clone(), interval);
    parts.spawn(Part::Reporter, report);

    // Off-policy actors insert single transitions: batch them per request and keep that many
    // times as many in flight.
    let per_request = collect::items_per_request(&config);
    let (items_tx, items_rx) = mpsc::channel(per_request);
    let shards = replay_client::parse_shards(&args.replay)?;
    let connecting = demo_replay::DemoLink::connect_if(&config, &shards, &registry, patience);
    let Some(demos) = signals.before_stop(connecting).await else {
        return stopped();
    };
    let demos = demos?;
    let inserter = inserter::Inserter {
        shards,
        table: spec.table.clone(),
        max_in_flight: config.actors.max_in_flight as usize * per_request,
        max_items_per_request: per_request,
        metrics: metrics.clone(),
    };
    parts.spawn(Part::Inserter, inserter.run(items_rx));
    // The acting thread finishes its rollout and the inserter flushes what it holds: a
    // learner that is training takes it within milliseconds. Longer waits are on the replay
    // server's rate limiter (a full queue at the end of a run, transitions ahead of the
    // learner): at shutdown those items are worth less than a prompt exit, which `fleetrl
    // train` (stopping the actors, then the learner) and every orchestrator wait on.
    let grace = SHUTDOWN_GRACE;
    let (stop, stop_rx) = watch::channel(false);
    let actor_id = args.actor_id;
    let acting_loop = collect::ActingLoop {
        actor_id,
        config,
        weights: weights_rx,
        items: items_tx,
        progress,
        stop: stop_rx,
        metrics,
    };
    parts.spawn_blocking(Part::Acting, move || {
        let collector = collect::collector(&acting_loop.config, actor_id, demos)?;
        acting_loop.run(collector)
    });
    parts.run(signals.stop(), stop, health, grace).await?;
    Ok(())
}
