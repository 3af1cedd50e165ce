//! Every RPC of every fleetrl service, as the protos' descriptors list them
//! ([`fleetrl_tests::rpc`]), refuses a caller without the run's token, or with a wrong one, with
//! UNAUTHENTICATED, before any handler runs; with the token, garbage (random bytes, a truncated
//! request, the empty message, gRPC frames whose prefix lies) gets a gRPC status, never a broken
//! connection or a hang, and afterwards every server (the learner, the replay server and a
//! policy server following the learner) still reports SERVING and answers well-formed
//! calls; `grpc.health.v1.Health` stays open for probes; the run itself (roles started with the
//! token in their environment) trains; and a server asked to listen beyond loopback without a
//! token, with a short one, or with a token file others can read refuses to start.

use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use fleetrl_proto::v1::{DemoStateRequest, GetRunSpecRequest, InfoRequest};
use fleetrl_runtime::net::auth::{self, Token};
use fleetrl_tests::rpc::{self, Method, Server};
use fleetrl_tests::Sandbox;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

const GENEROUS: Duration = Duration::from_secs(180);

/// The RPCs docs/security.md counts; more is fine (a new one is found by itself), fewer means
/// the descriptors lost some.
const DOCUMENTED_RPCS: usize = 20;

/// A plain channel that sends no token unless a call adds one.
async fn raw(addr: std::net::SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// The sandbox's servers and a policy server following its learner, as plain channels.
struct Servers {
    learner: Channel,
    replay: Channel,
    serve: Channel,
}

impl Servers {
    fn of(&self, method: &Method) -> &Channel {
        match method.server {
            Server::Learner => &self.learner,
            Server::Replay => &self.replay,
            Server::Serve => &self.serve,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_needs_the_runs_token_and_survives_garbage() -> anyhow::Result<()> {
    let token = Token::random()?;
    auth::install(Some(token.clone()));
    // The roles get the token in their environment; this process's clients send it.
    let sandbox = Sandbox::builder("auth")
        .set("stop.total_env_steps=10_000_000")
        .metrics()
        .start()
        .await?;
    sandbox
        .wait_for("updates with the token", GENEROUS, |s| s.updates >= 2)
        .await?;
    let follow = ["--follow".to_string(), sandbox.learner_addr.to_string()];
    let (_serve, serve_addr) = sandbox.start_serve("auth", &follow).await?;
    let servers = Servers {
        learner: raw(sandbox.learner_addr).await,
        replay: raw(sandbox.replay_addr).await,
        serve: raw(serve_addr).await,
    };
    let methods = rpc::methods();
    assert!(
        methods.len() >= DOCUMENTED_RPCS,
        "the descriptors list {} RPCs",
        methods.len()
    );
    for method in &methods {
        for token in [None, Some("not-the-token")] {
            let code = rpc::call(servers.of(method), method, token, Bytes::new()).await;
            assert_eq!(code, Ok(Code::Unauthenticated), "{} {token:?}", method.path);
        }
    }
    refusals_are_counted(&sandbox, &methods).await?;
    well_formed_calls_work(&sandbox, serve_addr).await?;
    for method in &methods {
        survives_garbage(&servers, method, token.expose()).await;
        well_formed_calls_work(&sandbox, serve_addr).await?;
    }
    let before = sandbox.status().await?.updates;
    sandbox
        .wait_for("training goes on", GENEROUS, |s| s.updates >= before + 5)
        .await?;
    Ok(())
}

/// Each server counts the calls it refused, by reason: one without a token and one with a
/// wrong token per method it serves.
async fn refusals_are_counted(sandbox: &Sandbox, methods: &[Method]) -> anyhow::Result<()> {
    let metrics = sandbox.metrics().context("the sandbox serves metrics")?;
    for (addr, prefix, server) in [
        (metrics.replay, "fleetrl_replay", Server::Replay),
        (metrics.learner, "fleetrl_learner", Server::Learner),
    ] {
        let served = methods.iter().filter(|m| m.server == server).count() as f64;
        for reason in ["missing", "wrong"] {
            let series = format!("{prefix}_auth_refused_total{{reason=\"{reason}\"}}");
            let counted = fleetrl_tests::compose::metric(addr, &series).await?;
            anyhow::ensure!(
                counted >= served,
                "{series} = {counted}, expected >= {served}"
            );
        }
    }
    Ok(())
}

/// Each piece of garbage sent to `method` gets a status from the server that serves it.
async fn survives_garbage(servers: &Servers, method: &Method, token: &str) {
    let channel = servers.of(method);
    let mut answers = Vec::new();
    for (what, message) in method.garbage() {
        answers.push((what, rpc::call(channel, method, Some(token), message).await));
    }
    for (what, body) in rpc::bad_frames() {
        answers.push((what, rpc::call_framed(channel, method, token, body).await));
    }
    for (what, answer) in answers {
        let code = answer.unwrap_or_else(|e| panic!("{} with {what}: {e}", method.path));
        assert_ne!(
            code,
            Code::Unimplemented,
            "{} with {what}: {:?} does not serve it (see SERVED_BY in tests/src/rpc.rs)",
            method.path,
            method.server
        );
    }
}

/// Health (which needs no token) reports SERVING on every server, and each service answers a
/// well-formed call with the run's token.
async fn well_formed_calls_work(
    sandbox: &Sandbox,
    serve_addr: std::net::SocketAddr,
) -> anyhow::Result<()> {
    for addr in [sandbox.learner_addr, sandbox.replay_addr, serve_addr] {
        let mut health = tonic_health::pb::health_client::HealthClient::new(raw(addr).await);
        let request = tonic_health::pb::HealthCheckRequest::default();
        let status = health.check(request).await?.into_inner().status;
        anyhow::ensure!(status == ServingStatus::Serving as i32, "{addr}: {status}");
    }
    let spec = sandbox
        .learner()
        .await?
        .get_run_spec(GetRunSpecRequest {})
        .await?
        .into_inner();
    anyhow::ensure!(spec.config_toml.contains("CartPole-v1"), "{spec:?}");
    let channel = fleetrl_runtime::net::connect(&serve_addr.to_string(), GENEROUS).await?;
    let observations = fleetrl_proto::Tensor::from_slice(&[1, 4], &[0.0f32; 4]);
    let act = fleetrl_proto::v1::policy_service_client::PolicyServiceClient::new(channel)
        .act(fleetrl_proto::v1::ActRequest {
            observations: Some(observations),
            state: None,
        })
        .await?
        .into_inner();
    anyhow::ensure!(act.policy_version >= 0, "{act:?}");
    let info = sandbox.replay().await?.info(InfoRequest {}).await?;
    anyhow::ensure!(!info.into_inner().tables.is_empty(), "no tables");
    let channel = fleetrl_runtime::net::connect(&sandbox.replay_addr.to_string(), GENEROUS).await?;
    // A run without PPO+D has no demo buffers: the service answers FAILED_PRECONDITION.
    let state = fleetrl_proto::v1::demo_service_client::DemoServiceClient::new(channel)
        .state(DemoStateRequest {})
        .await;
    match state {
        Ok(_) => Ok(()),
        Err(status) if status.code() == Code::FailedPrecondition => Ok(()),
        Err(status) => Err(status.into()),
    }
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
        (
            "fleet-serve",
            vec![
                "--listen",
                "0.0.0.0:0",
                "--checkpoint",
                "no-such-checkpoint",
            ],
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
