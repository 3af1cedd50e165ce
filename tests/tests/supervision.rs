//! A learner whose trainer dies does not keep answering SERVING with training frozen: a
//! rollout that passes the table's signature but holds an action outside the env's action
//! space (1000 in CartPole's 2) makes the trainer thread panic in the real binary; the
//! learner must then report NOT_SERVING and exit non-zero so its supervisor restarts it.

use std::time::{Duration, Instant};

use fleetrl_core::envs;
use fleetrl_core::items::rollout::{self, field};
use fleetrl_proto::v1::InsertRequest;
use fleetrl_proto::{Tensor, TensorMap};
use fleetrl_tests::Sandbox;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const GENEROUS: Duration = Duration::from_secs(180);

/// A well-formed CartPole rollout (one item, stacked) of `version` whose actions are all 1000.
fn rollout_with_impossible_actions(version: i64) -> TensorMap {
    let env = envs::make("CartPole-v1").expect("CartPole-v1 is registered");
    let sig = rollout::signature(&env.observation_space(), &env.action_space(), 32, 4);
    TensorMap::from_pairs(sig.fields.iter().map(|f| {
        let shape = [&[1i64][..], &f.shape].concat();
        let n = shape.iter().product::<i64>() as usize;
        let tensor = match f.dtype {
            fleetrl_proto::Dtype::F32 => Tensor::from_slice(&shape, &vec![0.0f32; n]),
            fleetrl_proto::Dtype::I64 if f.name == field::ACTION => {
                Tensor::from_slice(&shape, &vec![1000i64; n])
            }
            fleetrl_proto::Dtype::I64 => Tensor::from_slice(&shape, &vec![version; n]),
            _ => Tensor::from_slice(&shape, &vec![false; n]),
        };
        (f.name.clone(), tensor)
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_trainer_turns_the_learner_not_serving_and_exits_non_zero() -> anyhow::Result<()>
{
    let mut sandbox = Sandbox::builder("supervision")
        .set("stop.total_env_steps=10_000_000")
        .set("learner.update_threads=1")
        .start()
        .await?;
    let status = sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 2)
        .await?;

    // Ahead of the learner's version, so it is not dropped as stale.
    let poisoned = rollout_with_impossible_actions(status.policy_version + 1_000);
    let mut replay = sandbox.replay().await?;
    let requests = (0..4).map(|_| InsertRequest {
        table: "rollouts".into(),
        items: Some(poisoned.clone()),
        priorities: vec![],
    });
    let mut acks = replay
        .insert(tokio_stream::iter(requests.collect::<Vec<_>>()))
        .await?
        .into_inner();
    acks.message()
        .await?
        .expect("the replay server acknowledges the inserts");

    let channel =
        fleetrl_runtime::net::connect(&sandbox.learner_addr.to_string(), Duration::from_secs(30))
            .await?;
    let mut health = HealthClient::new(channel);
    let started = Instant::now();
    loop {
        let request = HealthCheckRequest {
            service: String::new(),
        };
        let status = health.check(request).await?.into_inner().status;
        if status == ServingStatus::NotServing as i32 {
            break;
        }
        anyhow::ensure!(
            sandbox.learner_exited().is_none(),
            "the learner exited without reporting NOT_SERVING"
        );
        anyhow::ensure!(
            started.elapsed() < GENEROUS,
            "the learner kept reporting SERVING with a dead trainer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let exit = loop {
        if let Some(exit) = sandbox.learner_exited() {
            break exit;
        }
        anyhow::ensure!(
            started.elapsed() < GENEROUS,
            "the learner did not exit after its trainer died"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!exit.success(), "the learner exited with {exit}");
    let log = std::fs::read_to_string(sandbox.dir.join("learner.log")).unwrap_or_default();
    assert!(
        log.contains("trainer thread panicked"),
        "the learner should log the cause; logs in {}",
        sandbox.dir.display()
    );
    Ok(())
}
