//! What any client on the network can send, against the real binaries (replay server, learner,
//! actors on loopback): none of it stops, stalls or corrupts a run.
//!
//! - a rollout or transition that passes the table's signature but holds an action outside the
//!   env's space (1000 in CartPole's 2) is dropped by the learner and counted
//!   (`fleetrl_learner_items_rejected_total`); training goes on and the learner stays SERVING;
//!   a refused transition is deleted from its table once, the rest of its batch is trained on,
//!   and the run's progress counts accepted transitions only;
//! - a sample request for more items than the table holds, or than the server's
//!   `--max-batch-items` / `--max-batch-bytes` allow, gets INVALID_ARGUMENT naming the limit,
//!   before anything is allocated, and the server keeps serving;
//! - a table name that is a path or holds control characters is refused;
//! - a forged episode report (a billion env steps, a count near 2^64, a NaN return) neither
//!   ends nor advances the run: progress is counted from accepted data, and non-finite returns
//!   are refused.

use std::path::Path;
use std::time::Duration;

use fleetrl_core::envs;
use fleetrl_core::items::{rollout, transition};
use fleetrl_proto::table::{RateLimiterSpec, Signature, TableSpec};
use fleetrl_proto::v1::{
    EnsureTableRequest, InfoRequest, InsertRequest, ReportEpisodesRequest, SampleRequest,
    SaveCheckpointRequest,
};
use fleetrl_proto::{Dtype, Tensor, TensorMap};
use fleetrl_tests::compose::metric_at_least;
use fleetrl_tests::Sandbox;
use tokio_stream::StreamExt;
use tonic::Code;

const GENEROUS: Duration = Duration::from_secs(180);

/// One well-formed item of `sig` (stacked, as inserts carry items) whose actions are all
/// 1000 and whose policy version is `version`.
fn impossible_actions(sig: &Signature, version: i64) -> TensorMap {
    item_with_action(sig, 1000, version)
}

/// One well-formed item of `sig` whose actions are all `action`, with zero observations and
/// rewards.
fn item_with_action(sig: &Signature, action: i64, version: i64) -> TensorMap {
    TensorMap::from_pairs(sig.fields.iter().map(|f| {
        let shape = [&[1i64][..], &f.shape].concat();
        let n = shape.iter().product::<i64>() as usize;
        let tensor = match f.dtype {
            Dtype::F32 => Tensor::from_slice(&shape, &vec![0.0f32; n]),
            Dtype::I64 if f.name == "action" => Tensor::from_slice(&shape, &vec![action; n]),
            Dtype::I64 => Tensor::from_slice(&shape, &vec![version; n]),
            _ => Tensor::from_slice(&shape, &vec![false; n]),
        };
        (f.name.clone(), tensor)
    }))
}

async fn insert(sandbox: &Sandbox, table: &str, item: TensorMap, n: usize) -> anyhow::Result<()> {
    let mut replay = sandbox.replay().await?;
    let requests: Vec<InsertRequest> = (0..n)
        .map(|_| InsertRequest {
            table: table.into(),
            items: Some(item.clone()),
            priorities: vec![],
        })
        .collect();
    let mut acks = replay
        .insert(tokio_stream::iter(requests))
        .await?
        .into_inner();
    let mut acked = 0;
    while let Some(ack) = acks.next().await {
        acked += ack?.keys.len();
    }
    anyhow::ensure!(acked == n, "the replay server acked {acked} of {n} items");
    Ok(())
}

/// The status code and message of the first answer to `request` on the sandbox's replay server.
async fn sample_refusal(sandbox: &Sandbox, request: SampleRequest) -> (Code, String) {
    let mut replay = sandbox.replay().await.expect("replay client");
    let status = match replay.sample(request).await {
        Err(status) => status,
        Ok(stream) => match stream.into_inner().next().await {
            Some(Err(status)) => status,
            other => panic!("the sample request was served: {other:?}"),
        },
    };
    (status.code(), status.message().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_policy_run_survives_poison_huge_samples_and_forged_reports() -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder("hostile-ppo")
        .set("stop.total_env_steps=10_000_000")
        .set("learner.update_threads=1")
        .metrics()
        .start()
        .await?;
    let metrics = sandbox.metrics().expect("asked for");
    let status = sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 2)
        .await?;

    // Poison: ahead of the learner's version, so it is not dropped as stale first.
    let env = envs::make("CartPole-v1").expect("CartPole-v1 is registered");
    let sig = rollout::signature(&env.observation_space(), &env.action_space(), 32, 4);
    let poisoned = impossible_actions(&sig, status.policy_version + 1_000);
    insert(&sandbox, "rollouts", poisoned, 4).await?;
    metric_at_least(
        metrics.learner,
        "fleetrl_learner_items_rejected_total",
        1.0,
        GENEROUS,
    )
    .await?;
    let after = status.updates;
    sandbox
        .wait_for("updates after the poison", GENEROUS, |s| {
            s.updates >= after + 5
        })
        .await?;

    // Huge samples: the queue's own size, then the server-wide caps on a uniform table.
    let (code, message) = sample_refusal(
        &sandbox,
        SampleRequest {
            table: "rollouts".into(),
            batch_size: u32::MAX,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(code, Code::InvalidArgument, "{message}");
    assert!(message.contains("batch_size must be in 1..="), "{message}");
    let mut big = TableSpec::replay("probe", 10_000_000, 1.0, 1, sig.clone());
    big.rate_limiter = RateLimiterSpec::MinSize { min_size: 1 };
    sandbox
        .replay()
        .await?
        .ensure_table(EnsureTableRequest {
            table: Some((&big).into()),
        })
        .await?;
    for (batch_size, limit) in [
        (1_000_000, "--max-batch-items"),
        (65_536, "--max-batch-bytes"),
    ] {
        let (code, message) = sample_refusal(
            &sandbox,
            SampleRequest {
                table: "probe".into(),
                batch_size,
                ..Default::default()
            },
        )
        .await;
        assert_eq!(code, Code::InvalidArgument, "{message}");
        assert!(message.contains(limit), "{batch_size}: {message}");
    }
    // A table name that is a path (with a newline) is refused.
    let mut evil = big.clone();
    evil.name = "../../etc/x\n".into();
    let refused = sandbox
        .replay()
        .await?
        .ensure_table(EnsureTableRequest {
            table: Some((&evil).into()),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("table name"), "{refused:?}");
    let tables = sandbox
        .replay()
        .await?
        .info(InfoRequest {})
        .await?
        .into_inner();
    assert!(tables.tables.iter().any(|t| t.name == "probe"));

    // Forged reports.
    let mut learner = sandbox.learner().await?;
    let report = |env_steps, returns: Vec<f64>| ReportEpisodesRequest {
        actor_id: 999,
        lengths: vec![1; returns.len()],
        returns,
        env_steps,
    };
    let nan = learner
        .report_episodes(report(10, vec![f64::NAN]))
        .await
        .unwrap_err();
    assert_eq!(nan.code(), Code::InvalidArgument, "{nan:?}");
    assert!(nan.message().contains("finite"), "{nan:?}");
    for env_steps in [
        1_000_000_000,
        u64::MAX - 1_000_000_000_000_000,
        u64::MAX - 1_000_000_000_000_000,
    ] {
        learner
            .report_episodes(report(env_steps, vec![1.0]))
            .await?;
    }
    let status = sandbox.status().await?;
    assert!(
        status.env_steps_trained < 1_000_000_000,
        "a report moved the run's progress: {status:?}"
    );
    assert_eq!(status.env_steps_reported, u64::MAX, "reports saturate");
    let updates = status.updates;
    sandbox
        .wait_for("updates after the reports", GENEROUS, |s| {
            s.updates >= updates + 5
        })
        .await?;
    assert!(sandbox.learner_exited().is_none(), "the learner exited");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_off_policy_run_survives_poison_and_forged_reports() -> anyhow::Result<()> {
    let mut sandbox = Sandbox::builder("hostile-dqn")
        .preset("cartpole-dqn")
        .actors(1)
        .set("stop.total_env_steps=10_000_000")
        .metrics()
        .start()
        .await?;
    let metrics = sandbox.metrics().expect("asked for");
    sandbox
        .wait_for("the first updates", GENEROUS, |s| s.updates >= 2)
        .await?;

    // A forged billion env steps used to end this run at once (stop_reason = step_budget).
    let mut learner = sandbox.learner().await?;
    learner
        .report_episodes(ReportEpisodesRequest {
            actor_id: 999,
            returns: vec![1e9],
            lengths: vec![1],
            env_steps: 1_000_000_000,
        })
        .await?;

    // Transitions whose action is outside the space, among good ones, with the actor gone so
    // that the table's insert count stays put: each poison item is refused once, deleted
    // from the table (it was sampled again and again, failing every batch it was in) and
    // taken off the run's progress; the good rows of its batches are still trained on.
    sandbox.kill_actor(0).await?;
    let env = envs::make("CartPole-v1").expect("CartPole-v1 is registered");
    let sig = transition::signature(&env.observation_space(), &env.action_space());
    let updates = sandbox.status().await?.updates;
    insert(&sandbox, "transitions", impossible_actions(&sig, 0), POISON).await?;
    insert(&sandbox, "transitions", item_with_action(&sig, 0, 0), 2_000).await?;
    metric_at_least(
        metrics.learner,
        "fleetrl_learner_items_rejected_total",
        POISON as f64,
        GENEROUS,
    )
    .await?;
    let table = transitions_info(&sandbox).await?;
    assert_eq!(table.num_deleted, POISON as u64, "{table:?}");
    let status = sandbox
        .wait_for("updates after the poison", GENEROUS, |s| {
            s.updates >= updates + 50
        })
        .await?;
    // A checkpoint holds the run's progress as of now (the status's, as of the last update).
    let mut saved = 0;
    for _ in 0..100 {
        let path = learner.save_checkpoint(SaveCheckpointRequest {}).await?;
        saved = fleetrl_core::checkpoint::load(Path::new(&path.into_inner().path))?
            .meta
            .env_steps;
        if saved + POISON as u64 == table.num_inserted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        saved + POISON as u64,
        table.num_inserted,
        "the run's progress counts refused items: {table:?}"
    );
    assert!(
        status.env_steps_trained < 1_000_000,
        "a forged report counted as progress: {status:?}"
    );
    assert!(sandbox.learner_exited().is_none(), "the learner exited");
    Ok(())
}

/// Poison transitions the off-policy scenario inserts.
const POISON: usize = 64;

async fn transitions_info(sandbox: &Sandbox) -> anyhow::Result<fleetrl_proto::v1::TableInfo> {
    let info = sandbox
        .replay()
        .await?
        .info(InfoRequest {})
        .await?
        .into_inner();
    info.tables
        .into_iter()
        .find(|t| t.name == "transitions")
        .ok_or_else(|| anyhow::anyhow!("no transitions table"))
}
