//! Every RPC of every fleetrl service refuses a caller without the run's token, or with a wrong
//! one, with UNAUTHENTICATED, before any handler runs; `grpc.health.v1.Health` stays open for
//! probes; the run itself (roles started with the token in their environment) trains; and a
//! server asked to listen beyond loopback without a token, with a short one, or with a token
//! file others can read refuses to start.

use std::time::Duration;

use fleetrl_proto::v1::demo_service_client::DemoServiceClient;
use fleetrl_proto::v1::learner_service_client::LearnerServiceClient;
use fleetrl_proto::v1::replay_service_client::ReplayServiceClient;
use fleetrl_proto::v1::*;
use fleetrl_runtime::net::auth::{self, Token};
use fleetrl_tests::Sandbox;
use tonic::codegen::http::header::AUTHORIZATION;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const GENEROUS: Duration = Duration::from_secs(180);

/// A plain channel that sends no token (or the one this interceptor adds).
async fn raw(addr: std::net::SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// Sends `authorization: Bearer <token>` when it has a token, nothing otherwise.
#[derive(Clone)]
struct Bearer(Option<MetadataValue<tonic::metadata::Ascii>>);

impl Bearer {
    fn none() -> Bearer {
        Bearer(None)
    }

    fn of(token: &str) -> Bearer {
        Bearer(Some(format!("Bearer {token}").parse().unwrap()))
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert(AUTHORIZATION.as_str(), value.clone());
        }
        Ok(request)
    }
}

/// The code of every RPC of the learner, replay and demo services, called with `bearer`.
async fn every_rpc(
    learner: &Channel,
    replay: &Channel,
    bearer: Bearer,
) -> Vec<(&'static str, Code)> {
    let mut demos = DemoServiceClient::with_interceptor(replay.clone(), bearer.clone());
    let mut learner = LearnerServiceClient::with_interceptor(learner.clone(), bearer.clone());
    let mut replay = ReplayServiceClient::with_interceptor(replay.clone(), bearer);
    fn code<T>(r: Result<T, Status>) -> Code {
        r.err().map_or(Code::Ok, |s| s.code())
    }
    vec![
        (
            "GetRunSpec",
            code(learner.get_run_spec(GetRunSpecRequest {}).await),
        ),
        (
            "SubscribeWeights",
            code(
                learner
                    .subscribe_weights(SubscribeWeightsRequest::default())
                    .await,
            ),
        ),
        (
            "ReportEpisodes",
            code(
                learner
                    .report_episodes(ReportEpisodesRequest::default())
                    .await,
            ),
        ),
        (
            "GetStatus",
            code(learner.get_status(GetStatusRequest {}).await),
        ),
        (
            "SaveCheckpoint",
            code(
                learner
                    .save_checkpoint(SaveCheckpointRequest::default())
                    .await,
            ),
        ),
        (
            "SetParameter",
            code(
                learner
                    .set_parameter(SetParameterRequest {
                        key: "algo.learning_rate".into(),
                        value: "1.0".into(),
                    })
                    .await,
            ),
        ),
        (
            "Insert",
            code(
                replay
                    .insert(tokio_stream::iter(Vec::<InsertRequest>::new()))
                    .await,
            ),
        ),
        (
            "Sample",
            code(
                replay
                    .sample(SampleRequest {
                        table: "rollouts".into(),
                        batch_size: 1,
                        ..Default::default()
                    })
                    .await,
            ),
        ),
        (
            "UpdatePriorities",
            code(
                replay
                    .update_priorities(UpdatePrioritiesRequest::default())
                    .await,
            ),
        ),
        (
            "Delete",
            code(replay.delete(DeleteRequest::default()).await),
        ),
        ("Reset", code(replay.reset(ResetRequest::default()).await)),
        (
            "EnsureTable",
            code(replay.ensure_table(EnsureTableRequest::default()).await),
        ),
        (
            "Checkpoint",
            code(replay.checkpoint(CheckpointRequest::default()).await),
        ),
        ("Info", code(replay.info(InfoRequest {}).await)),
        (
            "Configure",
            code(demos.configure(ConfigureDemosRequest::default()).await),
        ),
        ("Sync", code(demos.sync(SyncDemosRequest::default()).await)),
        (
            "Offer",
            code(demos.offer(OfferDemosRequest::default()).await),
        ),
        ("State", code(demos.state(DemoStateRequest {}).await)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_needs_the_runs_token() -> anyhow::Result<()> {
    let token = Token::random()?;
    auth::install(Some(token.clone()));
    // The roles get the token in their environment; this process's clients send it.
    let sandbox = Sandbox::builder("auth")
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    sandbox
        .wait_for("updates with the token", GENEROUS, |s| s.updates >= 2)
        .await?;

    let (l, r) = (
        raw(sandbox.learner_addr).await,
        raw(sandbox.replay_addr).await,
    );
    let refused = every_rpc(&l, &r, Bearer::none()).await;
    assert_eq!(refused.len(), 18);
    for (rpc, code) in &refused {
        assert_eq!(*code, Code::Unauthenticated, "{rpc} without a token");
    }
    let refused = every_rpc(&l, &r, Bearer::of("not-the-token")).await;
    for (rpc, code) in &refused {
        assert_eq!(*code, Code::Unauthenticated, "{rpc} with a wrong token");
    }
    // The right token opens them (whatever the handler then says of an empty request).
    let right = Bearer::of(token.expose());
    let mut learner = LearnerServiceClient::with_interceptor(l.clone(), right.clone());
    let spec = learner
        .get_run_spec(GetRunSpecRequest {})
        .await?
        .into_inner();
    assert!(spec.config_toml.contains("CartPole-v1"));
    let mut replay = ReplayServiceClient::with_interceptor(r.clone(), right);
    assert!(!replay
        .info(InfoRequest {})
        .await?
        .into_inner()
        .tables
        .is_empty());

    // Health needs no token.
    for addr in [sandbox.learner_addr, sandbox.replay_addr] {
        let mut health = HealthClient::new(raw(addr).await);
        health
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await?;
    }
    let before = sandbox.status().await?.updates;
    sandbox
        .wait_for("training goes on", GENEROUS, |s| s.updates >= before + 5)
        .await?;
    Ok(())
}

#[test]
fn no_server_listens_beyond_loopback_without_a_token() -> anyhow::Result<()> {
    let bin = fleetrl_runtime::launch::bin_dir()?;
    for (binary, args) in [
        ("fleet-replay-server", vec!["--listen", "0.0.0.0:0"]),
        (
            "fleet-learner",
            vec!["--listen", "0.0.0.0:0", "--replay", "127.0.0.1:9"],
        ),
    ] {
        let run = std::process::Command::new(bin.join(binary))
            .current_dir(fleetrl_tests::compose::repo_root())
            .args(&args)
            .env_remove(auth::TOKEN_ENV)
            .env_remove(auth::TOKEN_FILE_ENV)
            .env_remove(auth::INSECURE_ENV)
            .output()?;
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{binary} served openly: {stderr}");
        assert!(
            stderr.contains("refusing to serve on 0.0.0.0")
                && stderr.contains("FLEETRL_TOKEN_FILE"),
            "{binary}: {stderr}"
        );
    }
    Ok(())
}

/// How the replay server, asked to listen on 0.0.0.0 with `env`, fails to start; panics if it
/// starts (it is killed after 10 s).
fn refusal_beyond_loopback(env: &[(&str, &std::ffi::OsStr)]) -> anyhow::Result<String> {
    let bin = fleetrl_runtime::launch::bin_dir()?;
    let mut child = std::process::Command::new(bin.join("fleet-replay-server"))
        .args(["--listen", "0.0.0.0:0"])
        .env_remove(auth::TOKEN_ENV)
        .env_remove(auth::TOKEN_FILE_ENV)
        .env_remove(auth::INSECURE_ENV)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let started = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            child.kill()?;
            panic!("the replay server started with {env:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output()?;
    Ok(String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn a_short_token_or_a_readable_token_file_is_refused_beyond_loopback() -> anyhow::Result<()> {
    let stderr = refusal_beyond_loopback(&[(auth::TOKEN_ENV, "hunter2".as_ref())])?;
    assert!(
        stderr.contains("a token of 7 characters") && stderr.contains("at least 32"),
        "{stderr}"
    );

    use std::os::unix::fs::PermissionsExt;
    let dir = fleetrl_tests::scratch("fleetrl-token-mode");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("token");
    std::fs::write(&file, Token::random()?.expose())?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    let stderr = refusal_beyond_loopback(&[(auth::TOKEN_FILE_ENV, file.as_os_str())])?;
    assert!(
        stderr.contains("has mode 0644") && stderr.contains("chmod 600"),
        "{stderr}"
    );
    Ok(())
}
