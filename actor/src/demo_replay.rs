//! PPO+D on the actor: the link of the rollout collector that replays demos at episode starts
//! (`fleetrl_core::acting::ppod`) to the replay server's `DemoService` (on the first replay
//! shard): sync the demo buffers before each rollout, offer the finished episodes after it,
//! and mirror rho, phi, the threshold and the demo counts into the metrics.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use fleetrl_core::acting::ppod::{DemoActing, DemoSet, ReplayDemo};
use fleetrl_core::config::RunConfig;
use fleetrl_proto::v1::demo_service_client::DemoServiceClient;
use fleetrl_proto::v1::{
    self as pb, CandidateDemo, ConfigureDemosRequest, DemoState, OfferDemosRequest,
    SyncDemosRequest, ValueRefresh,
};
use fleetrl_runtime::demo::{Demo, DemoError, DemoKind};
use fleetrl_runtime::net;
use fleetrl_runtime::net::Channel;
use fleetrl_runtime::telemetry::metrics::{Gauge, Registry};
use tokio::runtime::Handle;

/// The demo buffers this run needs: the `[ppod]` section and the spaces of the env demos are
/// recorded in (the raw env, as the demo files store them).
fn demo_buffers_spec(config: &RunConfig) -> anyhow::Result<pb::DemoBuffersSpec> {
    let env = fleetrl_core::envs::make(&config.env.id)
        .with_context(|| format!("building {} to declare the demo buffers", config.env.id))?;
    Ok(config.ppod.buffers_spec(
        &config.env.id,
        &env.observation_space(),
        &env.action_space(),
    ))
}

/// Why syncing with or offering to the demo buffers failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoLinkError {
    /// The demo service refused or could not be reached.
    #[error("{what}: {status}")]
    Rpc {
        /// The call.
        what: &'static str,
        /// The service's answer.
        status: tonic::Status,
    },
    /// The service answered a sync without the buffers' state.
    #[error("demo sync reply without state")]
    NoState,
    /// A demo could not be encoded or decoded.
    #[error(transparent)]
    Demo(#[from] DemoError),
}

/// Gauges of the server's demo buffers, as this actor last saw them.
struct DemoGauges {
    rho: Gauge,
    phi: Gauge,
    threshold: Gauge,
    initial: Gauge,
    agent: Gauge,
    value: Gauge,
    successes: Gauge,
    replayed_steps: Gauge,
}

impl DemoGauges {
    fn new(r: &Registry) -> DemoGauges {
        DemoGauges {
            rho: r.gauge("ppod_rho", "PPO+D: probability of replaying a reward demo."),
            phi: r.gauge("ppod_phi", "PPO+D: probability of replaying a value demo."),
            threshold: r.gauge(
                "ppod_reward_threshold",
                "PPO+D: return an episode needs to become a reward demo.",
            ),
            initial: r.gauge("ppod_initial_demos", "PPO+D: initial demos held."),
            agent: r.gauge("ppod_agent_demos", "PPO+D: agent reward demos held."),
            value: r.gauge("ppod_value_demos", "PPO+D: value demos held."),
            successes: r.gauge(
                "ppod_successes",
                "PPO+D: agent episodes admitted to the reward buffer.",
            ),
            replayed_steps: r.gauge(
                "ppod_replayed_steps_last_rollout",
                "PPO+D: steps of this actor's last rollout replayed from demos.",
            ),
        }
    }

    fn show(&self, s: &DemoState) {
        self.rho.set(s.rho);
        self.phi.set(s.phi);
        self.threshold.set(s.reward_threshold);
        self.initial.set(f64::from(s.initial_demos));
        self.agent.set(f64::from(s.agent_demos));
        self.value.set(f64::from(s.value_demos));
        self.successes.set(s.successes as f64);
    }
}

/// The actor's connection to the demo buffers.
pub(crate) struct DemoLink {
    client: DemoServiceClient<Channel>,
    generation: Option<u64>,
    gauges: DemoGauges,
}

impl DemoLink {
    /// Connects to the demo service on `replay` (the first shard) and configures it with the
    /// run config, when `[ppod] enabled`; `None` otherwise.
    pub(crate) async fn connect_if(
        config: &RunConfig,
        replay: &[String],
        registry: &Registry,
        patience: Duration,
    ) -> anyhow::Result<Option<DemoLink>> {
        if !config.ppod.enabled {
            return Ok(None);
        }
        anyhow::ensure!(
            config.model.lstm_size == 0,
            "ppod replays demos with feed-forward policies only (model.lstm_size must be 0)"
        );
        let addr = replay.first().context("no replay server address")?;
        let channel = net::connect(addr, patience)
            .await
            .context("connecting to the demo service")?;
        let mut client = DemoServiceClient::new(channel)
            .max_decoding_message_size(fleetrl_runtime::net::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(fleetrl_runtime::net::MAX_MESSAGE_BYTES);
        let state = client
            .configure(ConfigureDemosRequest {
                spec: Some(demo_buffers_spec(config)?),
            })
            .await
            .context("configuring the demo buffers")?
            .into_inner();
        tracing::info!(?state, "demo buffers ready");
        let gauges = DemoGauges::new(registry);
        gauges.show(&state);
        Ok(Some(DemoLink {
            client,
            generation: None,
            gauges,
        }))
    }

    /// Fetches the demo buffers if they changed and hands them to `acting`.
    pub(crate) fn sync(&mut self, acting: &mut DemoActing) -> Result<(), DemoLinkError> {
        let request = SyncDemosRequest {
            known_generation: self.generation.unwrap_or(u64::MAX),
        };
        let mut client = self.client.clone();
        let reply = Handle::current()
            .block_on(async move { client.sync(request).await })
            .map_err(|status| DemoLinkError::Rpc {
                what: "syncing the demo buffers",
                status,
            })?
            .into_inner();
        let state = reply.state.ok_or(DemoLinkError::NoState)?;
        self.gauges.show(&state);
        if !reply.changed {
            acting.set_probabilities(state.rho, state.phi);
            return Ok(());
        }
        let mut demos = Vec::with_capacity(reply.demos.len());
        for d in reply.demos {
            let demo = Demo::from_bytes(&d.demo, Path::new("<synced demo>"))?;
            let kind = match pb::DemoKind::try_from(d.kind) {
                Ok(pb::DemoKind::Initial) => DemoKind::Initial,
                Ok(pb::DemoKind::Agent) => DemoKind::Agent,
                _ => DemoKind::Value,
            };
            demos.push(ReplayDemo {
                id: d.id,
                kind,
                max_value: d.max_value,
                demo,
            });
        }
        self.generation = Some(state.generation);
        acting.set_demos(DemoSet::new(demos, state.rho, state.phi, state.alpha));
        Ok(())
    }

    /// Offers the episodes `acting` finished and the max values of its replayed value demos.
    pub(crate) fn offer(&mut self, acting: &mut DemoActing) -> Result<(), DemoLinkError> {
        let (candidates, refreshes, counts) = acting.take_offers();
        self.gauges.replayed_steps.set(counts.replayed_steps as f64);
        let request = OfferDemosRequest {
            candidates: candidates
                .into_iter()
                .map(|c| {
                    Ok(CandidateDemo {
                        demo: c.demo.to_bytes()?,
                        max_value: c.max_value,
                    })
                })
                .collect::<Result<_, DemoError>>()?,
            refreshes: refreshes
                .into_iter()
                .map(|(id, max_value)| ValueRefresh { id, max_value })
                .collect(),
        };
        let mut client = self.client.clone();
        let state = Handle::current()
            .block_on(async move { client.offer(request).await })
            .map_err(|status| DemoLinkError::Rpc {
                what: "offering episodes to the demo buffers",
                status,
            })?
            .into_inner();
        self.gauges.show(&state);
        Ok(())
    }
}
