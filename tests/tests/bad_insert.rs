//! A malformed insert is rejected with INVALID_ARGUMENT naming the field, while the real
//! replay server keeps serving the actors of a running training job.

use std::time::Duration;

use fleetrl_core::envs;
use fleetrl_core::items::rollout::{self, field};
use fleetrl_proto::v1::InsertRequest;
use fleetrl_proto::{Tensor, TensorMap};
use fleetrl_tests::Sandbox;
use tonic::Code;

const GENEROUS: Duration = Duration::from_secs(180);

/// A rollout that matches the table's signature except for `obs`, which has one column too many.
fn rollout_with_bad_obs() -> TensorMap {
    let env = envs::make("CartPole-v1").expect("CartPole-v1 is registered");
    let sig = rollout::signature(&env.observation_space(), &env.action_space(), 32, 4);
    TensorMap::from_pairs(sig.fields.iter().map(|f| {
        // One item, stacked: a leading dimension of 1.
        let mut shape = [&[1i64][..], &f.shape].concat();
        if f.name == field::OBS {
            shape[3] += 1;
        }
        let n: i64 = shape.iter().product();
        let tensor = match f.dtype {
            fleetrl_proto::Dtype::F32 => Tensor::from_slice(&shape, &vec![0.0f32; n as usize]),
            fleetrl_proto::Dtype::I64 => Tensor::from_slice(&shape, &vec![0i64; n as usize]),
            _ => Tensor::from_slice(&shape, &vec![false; n as usize]),
        };
        (f.name.clone(), tensor)
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_insert_is_rejected_and_training_goes_on() -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder("bad-insert")
        .set("stop.total_env_steps=10_000_000")
        .start()
        .await?;
    let before = sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 3)
        .await?;

    let mut replay = sandbox.replay().await?;
    let request = InsertRequest {
        table: "rollouts".into(),
        items: Some(rollout_with_bad_obs()),
        priorities: vec![],
    };
    let outcome = async {
        let mut acks = replay
            .insert(tokio_stream::iter(vec![request]))
            .await?
            .into_inner();
        acks.message().await
    };
    let status = tokio::time::timeout(GENEROUS, outcome)
        .await?
        .expect_err("a bad rollout must be rejected");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("obs"),
        "the error should name the field: {}",
        status.message()
    );

    let target = before.env_steps_trained + 3_000;
    sandbox
        .wait_for("training to go on after the bad insert", GENEROUS, |s| {
            s.env_steps_trained >= target
        })
        .await?;
    sandbox.check_servers()?;
    Ok(())
}
