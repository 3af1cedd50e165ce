//! The policy server (`fleet-serve`) against the real binaries on loopback:
//!
//! - serving a checkpoint, it answers Act with the actions `fleetrl eval`'s policy (the same
//!   checkpoint loaded by [`load_policy`]) takes for the same observations, row for row, and
//!   with the checkpoint's version; requests sent together share forward passes;
//! - it refuses observations of the wrong shape, dtype or size, an empty or oversized batch,
//!   and NaN, with INVALID_ARGUMENT naming the problem, and keeps serving;
//! - following a live learner, it serves the learner's newer versions as they are published.
//!
//! Token refusal and garbage on every RPC, this one's included, are `auth.rs`'s.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fleetrl_core::acting::policy_loader::load_policy;
use fleetrl_proto::v1::policy_service_client::PolicyServiceClient;
use fleetrl_proto::v1::{ActRequest, DescribeRequest, SaveCheckpointRequest};
use fleetrl_proto::Tensor;
use fleetrl_runtime::net::Channel;
use fleetrl_tests::Sandbox;
use rand::{Rng, SeedableRng};
use tonic::Code;

const GENEROUS: Duration = Duration::from_secs(180);
/// Rows per request, and requests sent at once.
const ROWS: usize = 25;
const CALLERS: usize = 8;

async fn client(addr: std::net::SocketAddr) -> anyhow::Result<PolicyServiceClient<Channel>> {
    let channel = fleetrl_runtime::net::connect(&addr.to_string(), GENEROUS).await?;
    Ok(PolicyServiceClient::new(channel))
}

/// `rows` CartPole-like observations (position, velocity, angle, angular velocity).
fn observations(rng: &mut rand::rngs::SmallRng, rows: usize) -> Vec<f32> {
    let scale = [2.0f32, 2.0, 0.2, 2.0];
    (0..rows * 4)
        .map(|i| rng.random_range(-1.0f32..1.0) * scale[i % 4])
        .collect()
}

fn act_request(shape: &[i64], values: &[f32]) -> ActRequest {
    ActRequest {
        observations: Some(Tensor::from_slice(shape, values)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_policy_acts_as_fleetrl_eval_refuses_bad_requests_and_follows_the_learner(
) -> anyhow::Result<()> {
    let sandbox = Sandbox::builder("serve")
        .actors(1)
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    sandbox
        .wait_for("a first update", GENEROUS, |s| s.updates >= 1)
        .await?;
    let saved = sandbox
        .learner()
        .await?
        .save_checkpoint(SaveCheckpointRequest {})
        .await?
        .into_inner();
    let checkpoint = PathBuf::from(&saved.path);
    let args = [
        "--checkpoint".to_string(),
        saved.path.clone(),
        "--batch-window-ms".to_string(),
        "20".to_string(),
        "--max-request-rows".to_string(),
        "64".to_string(),
    ];
    let (_served, addr) = sandbox.start_serve("checkpoint", &args).await?;
    let mut policy = client(addr).await?;
    let described = policy.describe(DescribeRequest {}).await?.into_inner();
    assert_eq!(described.policy_version, saved.policy_version);
    assert_eq!(described.env, "CartPole-v1");

    // The same checkpoint as `fleetrl eval` loads it, deterministic as it plays by default.
    let (local, _) = load_policy(&checkpoint)?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let batches: Vec<Vec<f32>> = (0..CALLERS).map(|_| observations(&mut rng, ROWS)).collect();
    let calls = batches.iter().map(|obs| {
        let mut policy = policy.clone();
        let request = act_request(&[ROWS as i64, 4], obs);
        async move { policy.act(request).await }
    });
    let answers = futures::future::join_all(calls).await;
    let mut shared = 0;
    for (obs, answer) in batches.iter().zip(answers) {
        let answer = answer?.into_inner();
        assert_eq!(answer.policy_version, saved.policy_version);
        shared += usize::from(answer.batch_rows as usize > ROWS);
        let served: Vec<i64> = answer.actions.expect("actions").to_vec()?;
        let batch = tch::Tensor::from_slice(obs).view([ROWS as i64, 4]);
        let expected = Vec::<i64>::try_from(&local.act(&batch, true).action)?;
        assert_eq!(
            served, expected,
            "served actions differ from the checkpoint's policy"
        );
    }
    assert!(shared > 0, "no request shared a forward pass with another");

    refuses_bad_requests(&mut policy).await?;
    follows_the_learner(&sandbox).await
}

/// Each bad request gets INVALID_ARGUMENT naming what is wrong; a good one works afterwards.
async fn refuses_bad_requests(policy: &mut PolicyServiceClient<Channel>) -> anyhow::Result<()> {
    let nan = [0.0, f32::NAN, 0.0, 0.0];
    let cases = [
        ("shape", act_request(&[2, 3], &[0.0; 6])),
        ("1 to 64", act_request(&[65, 4], &[0.0; 65 * 4])),
        ("1 to 64", act_request(&[0, 4], &[])),
        ("NaN", act_request(&[1, 4], &nan)),
        ("no observations", ActRequest { observations: None }),
        (
            "send F32",
            ActRequest {
                observations: Some(Tensor::from_slice(&[1, 4], &[0i64; 4])),
            },
        ),
    ];
    for (says, request) in cases {
        let status = policy
            .act(request)
            .await
            .expect_err("a bad request was served");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(says), "{says}: {status:?}");
    }
    let ok = policy.act(act_request(&[1, 4], &[0.0; 4])).await?;
    assert_eq!(ok.into_inner().actions.expect("actions").shape, vec![1]);
    Ok(())
}

/// A server following the learner serves a version newer than the first one it served.
async fn follows_the_learner(sandbox: &Sandbox) -> anyhow::Result<()> {
    let follow = ["--follow".to_string(), sandbox.learner_addr.to_string()];
    let (_following, addr) = sandbox.start_serve("follow", &follow).await?;
    let serving = tonic_health::pb::health_check_response::ServingStatus::Serving;
    fleetrl_tests::wait_health(addr, serving, GENEROUS).await?;
    let mut policy = client(addr).await?;
    let request = || act_request(&[1, 4], &[0.0; 4]);
    let first = policy.act(request()).await?.into_inner().policy_version;
    let started = Instant::now();
    loop {
        let now = policy.act(request()).await?.into_inner().policy_version;
        if now > first {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < GENEROUS,
            "still serving version {now} (first {first}); logs in {}",
            sandbox.dir.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
