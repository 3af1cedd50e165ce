//! The multi-device learner and the weight broadcast over the real binaries: PPO on two CPU
//! replicas with f16 chunked weights learns CartPole; an old-style subscriber still gets whole
//! f32 weights; several learner processes are refused with a clear error.

use std::process::Command;
use std::time::Duration;

use fleetrl_core::broadcast::Receiver;
use fleetrl_proto::v1::SubscribeWeightsRequest;
use fleetrl_proto::Dtype;
use fleetrl_tests::requires::{self, Need};
use fleetrl_tests::Sandbox;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cpu_replicas_with_f16_chunked_weights_learn_cartpole() -> anyhow::Result<()> {
    let sandbox = Sandbox::builder("multi-device")
        .actors(2)
        .set("seed=0")
        .set(r#"learner.devices=["cpu", "cpu"]"#)
        .set("learner.broadcast_dtype=f16")
        .set("stop.total_env_steps=200000")
        .start()
        .await?;

    // An actor of the previous protocol (no chunk size) gets one f32 message per version.
    let mut client = sandbox.learner().await?;
    let request = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: 0,
        ..Default::default()
    };
    let mut legacy = client.subscribe_weights(request).await?.into_inner();
    let whole = legacy.message().await?.expect("a first version");
    let params = whole.params.expect("legacy messages carry params");
    assert!(params
        .tensors
        .values()
        .all(|t| t.dtype == Dtype::F32 as i32));
    drop(legacy);

    // A chunked subscriber gets the f16 tensors in several chunks and widens them to f32.
    let request = SubscribeWeightsRequest {
        after_version: -1,
        chunk_bytes: 4096,
        ..Default::default()
    };
    let mut chunked = client.subscribe_weights(request).await?.into_inner();
    let mut receiver = Receiver::default();
    let (mut chunks, mut f16) = (0, std::collections::HashSet::new());
    let weights = loop {
        let message = chunked.message().await?.expect("chunks until complete");
        assert!(message.params.is_none() && message.chunk.len() <= 4096);
        let slice = message.slice.clone().expect("chunks say where they belong");
        if slice.dtype == Dtype::F16 as i32 {
            f16.insert(slice.name);
        }
        chunks += 1;
        if let Some(w) = receiver.push(message)? {
            break w;
        }
    };
    drop(chunked);
    assert!(chunks > 1, "{chunks} chunk(s)");
    assert!(f16.len() >= 6, "the MLP weights travel as f16: {f16:?}");
    let all_f32 = weights.with_tensors(|tensors| {
        tensors.len() >= 6 && tensors.iter().all(|(_, t)| t.kind() == tch::Kind::Float)
    });
    assert!(all_f32, "and arrive as f32");
    assert!(weights.published_unix_nanos > 0);

    // And the run learns: a random CartPole policy averages about 22.
    let status = sandbox
        .wait_for(
            "a recent training return of 150",
            Duration::from_secs(400),
            |s| s.recent_return >= 150.0,
        )
        .await?;
    assert!(status.updates > 0);
    Ok(())
}

/// Starts `fleet-learner` on `preset` with `sets` (no replay server: it must fail before
/// needing one) in a run directory of its own, as the tests of this file run side by side and
/// a learner locks its run directory; its stderr.
fn refused_learner(preset: &str, sets: &[&str]) -> anyhow::Result<String> {
    let run_dir = fleetrl_tests::scratch("fleetrl-refused-learner");
    let learner = fleetrl_runtime::launch::bin_dir()?.join("fleet-learner");
    let config = fleetrl_tests::compose::repo_root().join(format!("configs/{preset}.toml"));
    let mut command = Command::new(learner);
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--replay",
            "127.0.0.1:9",
            "--run-dir",
        ])
        .arg(&run_dir)
        .arg("--config")
        .arg(config);
    for set in sets {
        command.args(["--set", set]);
    }
    let run = command.output()?;
    let _ = std::fs::remove_dir_all(&run_dir);
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(!run.status.success(), "{stderr}");
    Ok(stderr)
}

#[test]
fn an_algorithm_that_cannot_train_across_learner_processes_is_refused_by_name() -> anyhow::Result<()>
{
    let stderr = refused_learner("cartpole-trpo", &["learner.world_size=2", "learner.rank=1"])?;
    assert!(
        stderr.contains("learner.world_size")
            && stderr.contains("\"trpo\" trains in one learner process only"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn devices_the_learner_cannot_use_are_refused_by_name() -> anyhow::Result<()> {
    let stderr = refused_learner("cartpole-vpg", &[r#"learner.devices=["cpu", "cpu"]"#])?;
    assert!(
        stderr.contains("\"vpg\" updates on one device only"),
        "{stderr}"
    );
    // No machine has 64 GPUs: refused as unavailable (no CUDA) or as missing (a GPU machine).
    let stderr = refused_learner(
        "cartpole-ppo",
        &[r#"learner.devices=["cuda:0", "cuda:63"]"#],
    )?;
    assert!(
        stderr.contains("CUDA is not available") || stderr.contains("Cuda(63) does not exist"),
        "{stderr}"
    );
    Ok(())
}

/// The learner binary keeps libtorch's CUDA library among its dynamic dependencies whenever the
/// libtorch it was built against has one (the PyPI wheel does), so `tch::Cuda::is_available()`
/// can be true on a GPU machine. A linker's `--as-needed` drops it silently otherwise; it did
/// once, when another build script replaced learner/build.rs. The name appears in the binary
/// only as a DT_NEEDED entry of its dynamic string table.
#[test]
fn learner_binary_links_libtorch_cuda() -> anyhow::Result<()> {
    let libtorch = fleetrl_tests::compose::repo_root().join(".venv/libtorch/lib");
    let missing = (!libtorch.join("libtorch_cuda.so").exists())
        .then(|| format!("{} has no libtorch_cuda.so", libtorch.display()));
    if !requires::should_run("learner_binary_links_libtorch_cuda", Need::Gpu, missing)? {
        return Ok(());
    }
    let learner = fleetrl_runtime::launch::bin_dir()?.join("fleet-learner");
    let bytes = std::fs::read(&learner)?;
    let needle = b"libtorch_cuda.so\0";
    assert!(
        bytes.windows(needle.len()).any(|w| w == needle),
        "{} does not link libtorch_cuda.so: CUDA would be unavailable on a GPU machine",
        learner.display()
    );
    Ok(())
}
