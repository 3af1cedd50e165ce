//! A malformed insert is rejected with INVALID_ARGUMENT naming the field, while the real
//! replay server keeps serving the actors of a running training job; a table whose signature
//! is empty or has a zero-length dimension (items that hold no data) is refused, so nothing is
//! ever inserted into one.

use std::time::Duration;

use fleetrl_core::envs;
use fleetrl_core::items::rollout::{self, field};
use fleetrl_proto::table::{FieldSpec, Signature, TableSpec};
use fleetrl_proto::v1::{EnsureTableRequest, InfoRequest, InsertRequest};
use fleetrl_proto::{Dtype, Tensor, TensorMap};
use fleetrl_tests::{ReplayProcess, Sandbox};
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

const TABLES: &str = r#"
[[table]]
name = "transitions"
max_size = 1000
sampler = { kind = "fifo" }
remover = { kind = "fifo" }
rate_limiter = { kind = "min_size", min_size = 1 }
signature = [{ name = "obs", dtype = "f32", shape = [4] }]
"#;

/// Inserts one stacked item into `table`, returning the first ack or the error.
async fn insert_one(
    server: &ReplayProcess,
    table: &str,
    items: TensorMap,
) -> Result<(), tonic::Status> {
    let request = InsertRequest {
        table: table.into(),
        items: Some(items),
        priorities: vec![],
    };
    let mut client = server
        .client()
        .await
        .expect("a client of the replay server");
    let mut acks = client
        .insert(tokio_stream::iter(vec![request]))
        .await?
        .into_inner();
    acks.message().await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_signatures_are_refused() -> anyhow::Result<()> {
    let dir = fleetrl_tests::scratch("fleetrl-empty-signature");
    let server = ReplayProcess::start(&dir, "replay", TABLES, None).await?;
    let empty = TableSpec::queue("nothing", 8, Signature { fields: vec![] });
    let zero = TableSpec::queue(
        "hollow",
        8,
        Signature {
            fields: vec![
                FieldSpec::new("obs", Dtype::F32, &[4, 0]),
                FieldSpec::new("step", Dtype::I64, &[]),
            ],
        },
    );
    for (spec, expected) in [
        (&empty, "the signature is empty"),
        (
            &zero,
            "field `obs`: shape [4, 0] has a zero-length dimension",
        ),
    ] {
        let refused = server
            .client()
            .await?
            .ensure_table(EnsureTableRequest {
                table: Some(spec.into()),
            })
            .await
            .expect_err("a table of items that hold no data must be refused");
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        assert!(
            refused
                .message()
                .contains(&format!("table `{}`", spec.name))
                && refused.message().contains(expected),
            "the refusal should name the table and say what is wrong: {}",
            refused.message()
        );
        // Nothing was created, so an insert of a zero-sized item finds no table.
        let hollow_item = TensorMap::from_pairs([
            ("obs", Tensor::from_slice::<f32>(&[1, 4, 0], &[])),
            ("step", Tensor::from_slice(&[1], &[7i64])),
        ]);
        let status = insert_one(&server, &spec.name, hollow_item)
            .await
            .expect_err("no table, no insert");
        assert_eq!(status.code(), Code::NotFound, "{status:?}");
    }
    let tables = server
        .client()
        .await?
        .info(InfoRequest {})
        .await?
        .into_inner();
    let names: Vec<&str> = tables.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["transitions"]);

    // A zero-length item in the good table is refused, naming the field; a real one goes in.
    let status = insert_one(
        &server,
        "transitions",
        TensorMap::from_pairs([("obs", Tensor::from_slice::<f32>(&[1, 0], &[]))]),
    )
    .await
    .expect_err("an item of no data must be refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("field `obs`"), "{status:?}");
    insert_one(
        &server,
        "transitions",
        TensorMap::from_pairs([("obs", Tensor::from_slice(&[1, 4], &[1.0f32; 4]))]),
    )
    .await?;
    assert_eq!(server.info("transitions").await?.current_size, 1);
    Ok(())
}
