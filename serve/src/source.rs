//! Where the served policy comes from: a checkpoint (`--checkpoint`, loaded once) or a live
//! learner (`--follow`: its run spec says what the policy is, its weight stream keeps it at
//! the newest version, through the same subscription the actors use).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleetrl_core::broadcast::{self, Follower, LearnerLost};
use fleetrl_core::checkpoint;
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs;
use fleetrl_proto::space::Space;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::GetRunSpecRequest;
use fleetrl_runtime::net::{self, health::HealthReporter};
use tokio::sync::watch;

use crate::batcher::Weights;
use crate::metrics::ServeMetrics;

/// A policy to serve, before its inference thread builds it.
pub(crate) struct Opened {
    /// The run config it was trained with.
    pub(crate) config: RunConfig,
    pub(crate) obs_space: Space,
    pub(crate) action_space: Space,
    pub(crate) weights: Weights,
}

/// The policy of checkpoint `path` (a checkpoint directory, or a run directory for its newest).
pub(crate) fn checkpoint(path: &Path) -> anyhow::Result<Opened> {
    let path = checkpoint::resolve(path)?;
    let ckpt = checkpoint::load(&path)?;
    let (obs_space, action_space) = spaces(&ckpt.config)?;
    tracing::info!(
        checkpoint = %path.display(),
        version = ckpt.meta.policy_version,
        env = %ckpt.config.env.id,
        algo = ckpt.config.algo.name(),
        "serving a checkpoint"
    );
    Ok(Opened {
        config: ckpt.config,
        obs_space,
        action_space,
        weights: Weights::Checkpoint {
            tensors: ckpt.model,
            version: ckpt.meta.policy_version,
        },
    })
}

/// The policy the learner at `addr` trains, and the subscription that keeps it current (to be
/// run by the caller until it fails: the learner gone for `patience`, or restarted).
pub(crate) async fn follow(
    addr: &str,
    patience: Duration,
    metrics: &ServeMetrics,
    health: HealthReporter,
) -> anyhow::Result<(Opened, impl Future<Output = Result<(), LearnerLost>>)> {
    tracing::info!(
        learner = addr,
        patience_s = patience.as_secs(),
        "waiting for the learner"
    );
    let channel = net::connect_weights_subscriber(addr, patience)
        .await
        .with_context(|| format!("connecting to the learner at {addr}"))?;
    let spec = LearnerServiceClient::new(channel.clone())
        .max_decoding_message_size(net::MAX_MESSAGE_BYTES)
        .get_run_spec(GetRunSpecRequest {})
        .await
        .context("asking the learner for the run spec")?
        .into_inner();
    let config = RunConfig::from_toml(&spec.config_toml, "the learner's run spec")?;
    let (obs_space, action_space) = spaces(&config)?;
    tracing::info!(run_id = %spec.run_id, env = %config.env.id, algo = config.algo.name(), "following the learner");
    let (latest, weights) = watch::channel(None::<Arc<broadcast::Received>>);
    let follower = Follower {
        run_id: spec.run_id,
        actor_id: None,
        patience,
    };
    let received = metrics.weights_received.clone();
    let follow = broadcast::follow_weights(channel, follower, latest, received, health);
    let opened = Opened {
        config,
        obs_space,
        action_space,
        weights: Weights::Following(weights),
    };
    Ok((opened, follow))
}

/// The observation and action spaces of `config`'s env (made once, then dropped).
fn spaces(config: &RunConfig) -> anyhow::Result<(Space, Space)> {
    let env = envs::make_configured(&config.env)
        .with_context(|| format!("making the policy's env {}", config.env.id))?;
    Ok((env.observation_space(), env.action_space()))
}
