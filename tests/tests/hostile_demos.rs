//! What a client of the demo service (PPO+D's buffers on the real replay server) can send:
//!
//! - an offered demo whose `action_space` header is `discrete(` or ends in a multi-byte
//!   character gets INVALID_ARGUMENT naming the header; the next good offer, the state and
//!   the replay checkpoint still work (such a demo once panicked while the buffers' lock was
//!   held, and the poisoned lock then failed every later demo call and checkpoint);
//! - a Configure naming a demo directory outside the server's `--demos-root` (an absolute
//!   path elsewhere, `..`, a symbolic link that leads out, the server's own checkpoint
//!   directory) gets INVALID_ARGUMENT naming the field, the path and the root, and nothing is
//!   read or created there; names under the root (relative to it, or absolute) still work.

use fleetrl_proto::v1::{
    CandidateDemo, CheckpointRequest, ConfigureDemosRequest, DemoBuffersSpec, DemoStateRequest,
    OfferDemosRequest, SyncDemosRequest,
};
use fleetrl_runtime::demo::{self, Demo, DemoSource};
use fleetrl_tests::ReplayProcess;
use tonic::Code;

const ENV: &str = "SparseMountainCar-v0";

/// The demo buffers of [`ENV`], with `ppod.*_dir` keys set by `dirs`.
fn buffers(dirs: impl FnOnce(&mut fleetrl_core::config::PpodConfig)) -> DemoBuffersSpec {
    let mut ppod = fleetrl_core::config::PpodConfig {
        enabled: true,
        capacity: 5,
        ..Default::default()
    };
    dirs(&mut ppod);
    let env = fleetrl_core::envs::make(ENV).expect("a registered env");
    ppod.buffers_spec(ENV, &env.observation_space(), &env.action_space())
}

fn configure(spec: DemoBuffersSpec) -> ConfigureDemosRequest {
    ConfigureDemosRequest { spec: Some(spec) }
}

fn scripted(seed: u64) -> Demo {
    fleetrl_core::acting::scripted::play(ENV, seed, DemoSource::Agent).expect("a scripted episode")
}

fn offer(demo: Vec<u8>) -> OfferDemosRequest {
    OfferDemosRequest {
        candidates: vec![CandidateDemo {
            demo,
            max_value: 0.5,
        }],
        refreshes: vec![],
    }
}

/// `demo`'s bytes with its 13-byte `"discrete(3)"` header value replaced by `forged` (padded
/// with spaces, which JSON allows after a string, so the header keeps its length).
fn with_action_space(demo: &Demo, forged: &str) -> Vec<u8> {
    let mut bytes = demo.to_bytes().expect("a valid demo");
    let want = b"\"discrete(3)\"";
    let at = bytes
        .windows(want.len())
        .position(|w| w == want)
        .expect("the action_space header");
    let mut value = format!("\"{forged}\"").into_bytes();
    assert!(value.len() <= want.len(), "{forged} is too long");
    value.resize(want.len(), b' ');
    bytes[at..at + want.len()].copy_from_slice(&value);
    bytes
}

#[tokio::test]
async fn a_malformed_offer_is_refused_and_the_buffers_and_checkpoints_keep_working(
) -> anyhow::Result<()> {
    let dir = fleetrl_tests::scratch("fleetrl-hostile-demos-offer");
    let checkpoints = dir.join("checkpoints");
    let mut server = ReplayProcess::start(&dir, "replay", "", Some(&checkpoints)).await?;
    let mut demos = server.demos().await?;
    demos.configure(configure(buffers(|_| {}))).await?;

    let good = scripted(9);
    for forged in ["discrete(", "discrete(\u{e9}", "box(\u{e9}"] {
        let refused = demos
            .offer(offer(with_action_space(&good, forged)))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{forged}: {refused}");
        assert!(
            refused.message().contains("action_space"),
            "{forged}: {refused}"
        );
    }

    let state = demos.offer(offer(good.to_bytes()?)).await?.into_inner();
    // No initial demo sets a reward threshold, so it joins the value buffer.
    assert_eq!(state.value_demos, 1, "{state:?}");
    demos.state(DemoStateRequest {}).await?;
    let synced = demos.sync(SyncDemosRequest::default()).await?.into_inner();
    assert_eq!(synced.demos.len(), 1);
    server
        .client()
        .await?
        .checkpoint(CheckpointRequest {})
        .await?;
    assert!(server.role.exited().is_none(), "the replay server exited");
    server.role.kill().await;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[tokio::test]
async fn demo_directories_outside_the_demos_root_are_refused() -> anyhow::Result<()> {
    let dir = fleetrl_tests::scratch("fleetrl-hostile-demos-dirs");
    let (root, outside) = (dir.join("root"), dir.join("outside"));
    for d in [root.join("human"), outside.clone()] {
        std::fs::create_dir_all(&d)?;
        demo::write(&scripted(5), &d.join(format!("one{}", demo::EXTENSION)))?;
    }
    std::os::unix::fs::symlink(&outside, root.join("link"))?;
    let checkpoints = root.join("checkpoints");
    let flags = ["--demos-root".to_string(), root.display().to_string()];
    let mut server =
        ReplayProcess::start_with(&dir, "replay", "", Some(&checkpoints), &flags).await?;
    let mut demos = server.demos().await?;
    let root = root.canonicalize()?;

    let escapes: [(&str, String); 6] = [
        ("demos_dir", "/etc".into()),
        ("demos_dir", "../outside".into()),
        ("initial_agent_demos_dir", "link".into()),
        ("supplementary_dir", outside.display().to_string()),
        ("target_dir", outside.join("new").display().to_string()),
        ("target_dir", "checkpoints/demos".into()),
    ];
    for (field, path) in &escapes {
        let spec = buffers(|p| match *field {
            "demos_dir" => p.demos_dir = path.clone(),
            "initial_agent_demos_dir" => p.initial_agent_demos_dir = path.clone(),
            "supplementary_dir" => p.supplementary_dir = path.clone(),
            _ => p.target_dir = path.clone(),
        });
        let refused = demos.configure(configure(spec)).await.unwrap_err();
        let message = refused.message();
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "{field}={path}: {message}"
        );
        assert!(message.contains(&format!("ppod.{field}")), "{message}");
        assert!(message.contains(path.as_str()), "{message}");
        let names_the_root = message.contains(&root.display().to_string());
        assert!(
            names_the_root || message.contains("keeps for itself"),
            "{message}"
        );
    }
    assert!(
        !outside.join("new").exists(),
        "a refused target was created"
    );

    let top = root.join("top");
    let spec = buffers(|p| {
        p.demos_dir = "human".into();
        p.target_dir = top.display().to_string();
    });
    let state = demos.configure(configure(spec)).await?.into_inner();
    assert_eq!(state.initial_demos, 1, "{state:?}");
    assert!(server.role.exited().is_none(), "the replay server exited");
    server.role.kill().await;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
