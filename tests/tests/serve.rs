//! The policy server (`fleet-serve`) against the real binaries on loopback:
//!
//! - serving a checkpoint, it answers Act with the actions `fleetrl eval`'s policy (the same
//!   checkpoint loaded by [`load_policy`]) takes for the same observations, row for row, and
//!   with the checkpoint's version; requests sent together share forward passes;
//! - it refuses observations of the wrong shape, dtype or size, an empty or oversized batch,
//!   NaN, and a recurrent state sent to a feed-forward policy, with INVALID_ARGUMENT naming the problem, and keeps serving;
//! - following a live learner, it serves the learner's newer versions as they are published;
//! - a Gaussian policy's actions come back as `[N, action shape]`, the policy's mean clipped
//!   to the action space's bounds as `fleetrl eval` plays them.
//!
//! Waiting for a learner to follow, it stops at once on SIGTERM (`shutdown.rs`).
//!
//! Token refusal and garbage on every RPC, this one's included, are `auth.rs`'s.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fleetrl_core::acting::clipped;
use fleetrl_core::acting::policy_loader::{build_policy, load_policy, ActingPolicy};
use fleetrl_core::checkpoint::{self, CheckpointMeta};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs;
use fleetrl_core::models::RnnState;
use fleetrl_proto::space::{Action, Space};
use fleetrl_proto::v1::policy_service_client::PolicyServiceClient;
use fleetrl_proto::v1::{ActRequest, DescribeRequest, SaveCheckpointRequest};
use fleetrl_proto::Tensor;
use fleetrl_runtime::launch::Role;
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
        state: None,
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
        (
            "no observations",
            ActRequest {
                observations: None,
                state: None,
            },
        ),
        (
            "feed-forward",
            ActRequest {
                state: Some(Tensor::from_slice(&[1, 2], &[0.0f32; 2])),
                ..act_request(&[1, 4], &[0.0; 4])
            },
        ),
        (
            "send F32",
            ActRequest {
                observations: Some(Tensor::from_slice(&[1, 4], &[0i64; 4])),
                state: None,
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

/// A fresh Gaussian PPO policy on PointMass with its weights scaled up, saved as a checkpoint,
/// served: its means lie far past the action bounds, and the answer is that
/// mean clipped, row for row, with the checkpoint's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gaussian_policy_is_served_clipped_to_its_action_space() -> anyhow::Result<()> {
    let fresh = Fresh::serve("pointmass-ppo", 1000.0).await?;
    let (addr, policy, obs_space, action_space) = (
        fresh.addr,
        &fresh.policy,
        &fresh.obs_space,
        &fresh.action_space,
    );
    let dim = obs_space.flat_dim();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    let rows = 32;
    let obs: Vec<f32> = (0..rows * dim)
        .map(|_| rng.random_range(-50.0f32..50.0))
        .collect();
    let answer = client(addr)
        .await?
        .act(act_request(&[rows as i64, dim as i64], &obs))
        .await?
        .into_inner();
    assert_eq!(answer.policy_version, 5);
    let actions = answer.actions.expect("actions");
    let Space::Box { shape, low, high } = action_space else {
        panic!("PointMass has a box action space");
    };
    assert_eq!(actions.shape, [&[rows as i64][..], shape].concat());
    let served: Vec<f32> = actions.to_vec()?;
    let batch = tch::Tensor::from_slice(&obs).view([rows as i64, dim as i64]);
    let means = Vec::<f32>::try_from(&policy.act(&batch, true).action.reshape([-1]))?;
    let expected: Vec<f32> = clipped(action_space, &means, rows)
        .into_iter()
        .flat_map(|a| match a {
            Action::Continuous(v) => v,
            Action::Discrete(_) => unreachable!("a box space"),
        })
        .collect();
    for (s, e) in served.iter().zip(&expected) {
        assert!(
            (s - e).abs() <= 1e-6,
            "served {served:?}, expected {expected:?}"
        );
    }
    let bounds = low.iter().chain(high).copied().collect::<Vec<f32>>();
    assert!(
        served.iter().any(|v| bounds.contains(v)),
        "no action reached a bound, so clipping went untested: {served:?}"
    );
    Ok(())
}

/// A fresh policy of a preset, its weights scaled by `scale`, saved as a checkpoint (version
/// 5) and served by a `fleet-serve` process (killed on drop).
struct Fresh {
    addr: std::net::SocketAddr,
    policy: Box<dyn ActingPolicy>,
    obs_space: Space,
    action_space: Space,
    _role: Role,
}

impl Fresh {
    async fn serve(preset: &str, scale: f64) -> anyhow::Result<Fresh> {
        let dir = fleetrl_tests::scratch(&format!("fleetrl-serve-{preset}"));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let path = root.join(format!("configs/{preset}.toml"));
        let config = RunConfig::load(&path.to_string_lossy(), &[])?;
        let env = envs::make_configured(&config.env)?;
        let (obs_space, action_space) = (env.observation_space(), env.action_space());
        let mut policy = build_policy(&config, &obs_space, &action_space)?;
        let scaled: Vec<(String, tch::Tensor)> = policy
            .named_parameters()
            .into_iter()
            .map(|(name, t)| (name, t * scale))
            .collect();
        policy.load_named(&scaled)?;
        let meta = CheckpointMeta {
            policy_version: 5,
            env_id: config.env.id.clone(),
            ..CheckpointMeta::default()
        };
        let saved = checkpoint::save(&dir, &policy.named_parameters(), &[], &meta, &config)?;
        let log = dir.join("serve.log");
        let args = [
            "--listen".to_string(),
            "127.0.0.1:0".to_string(),
            "--checkpoint".to_string(),
            saved.display().to_string(),
        ];
        let mut role = Role::start(&format!("serve-{preset}"), "fleet-serve", &args, &log).await?;
        let addr = role.listening_addr(GENEROUS, &log).await?;
        Ok(Fresh {
            addr,
            policy,
            obs_space,
            action_space,
            _role: role,
        })
    }
}

/// An LSTM policy (CartPole without velocities) served step by step: the caller sends no
/// state at the first step and each answer's state with the next observations; the actions
/// and states are the ones the same policy gives in-process from zeros, for 3 rows x 6 steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recurrent_policy_is_served_with_its_state_carried_by_the_caller() -> anyhow::Result<()> {
    let fresh = Fresh::serve("cartpolenovel-ppo-lstm", 1.0).await?;
    let mut client = client(fresh.addr).await?;
    let described = client.describe(DescribeRequest {}).await?.into_inner();
    let h = fresh.policy.state_size();
    assert!(h > 0 && described.state_size == h, "{described:?}");
    let (rows, dim) = (3usize, fresh.obs_space.flat_dim());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut local = RnnState::zeros(rows as i64, h, tch::Device::Cpu);
    let mut state: Option<Tensor> = None;
    for step in 0..6 {
        let obs: Vec<f32> = (0..rows * dim)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let request = ActRequest {
            state: state.take(),
            ..act_request(&[rows as i64, dim as i64], &obs)
        };
        let answer = client.act(request).await?.into_inner();
        let batch = tch::Tensor::from_slice(&obs).view([rows as i64, dim as i64]);
        let (act, next) = fresh.policy.act_recurrent(&batch, &local, true);
        let served: Vec<i64> = answer.actions.expect("actions").to_vec()?;
        assert_eq!(served, Vec::<i64>::try_from(&act.action)?, "step {step}");
        let next_state = answer.state.expect("a recurrent answer carries the state");
        assert_eq!(next_state.shape, vec![rows as i64, 2 * h]);
        let values: Vec<f32> = next_state.to_vec()?;
        let expected = tch::Tensor::cat(&[&next.h, &next.c], 1).reshape([-1]);
        let expected = Vec::<f32>::try_from(&expected)?;
        let worst = values
            .iter()
            .zip(&expected)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst <= 1e-6, "step {step}: states differ by {worst}");
        local = next;
        state = Some(next_state);
    }
    Ok(())
}
