//! The Kubernetes manifests (`deploy/k8s/`): every overlay renders with kustomize and passes
//! the Kubernetes API schemas in strict mode plus the checks in `deploy/k8s/check.py`, and a
//! broken overlay is caught (so the check can fail). Skipped, with a message saying why,
//! where neither `kubectl` nor `kustomize` is installed (a failure under `CI=true`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fleetrl_tests::compose::repo_root;
use fleetrl_tests::requires::{self, Need};

/// Runs `deploy/k8s/validate.sh` on `dirs` (none: the shipped overlays); `None` if no
/// kustomize is installed (exit code 3) and the test is to skip (see `requires`).
fn validate(dirs: &[&Path]) -> anyhow::Result<Option<Output>> {
    let out = Command::new("bash")
        .arg(repo_root().join("deploy/k8s/validate.sh"))
        .args(dirs)
        .output()?;
    let missing = (out.status.code() == Some(3))
        .then(|| String::from_utf8_lossy(&out.stderr).trim().to_string());
    if !requires::should_run("k8s_manifests", Need::Tool, missing)? {
        return Ok(None);
    }
    Ok(Some(out))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn overlays_render_and_validate() -> anyhow::Result<()> {
    let Some(out) = validate(&[])? else {
        return Ok(());
    };
    let log = text(&out);
    assert!(out.status.success(), "validation failed:\n{log}");
    for expected in [
        "cpu.yaml: 9 objects valid",
        "gpu.yaml: 9 objects valid",
        "cpu-tls.yaml: 9 objects valid",
        "cpu-ranks.yaml: 9 objects valid",
        "gpu-ranks.yaml: 9 objects valid",
        "HorizontalPodAutoscaler",
    ] {
        assert!(log.contains(expected), "no `{expected}` in:\n{log}");
    }
    Ok(())
}

/// A kustomization over the base with one patch, under target/ (kustomize wants relative
/// paths inside the tree).
fn broken_overlay(name: &str, patch: &str) -> anyhow::Result<PathBuf> {
    let dir = repo_root()
        .join("target/k8s-test")
        .join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let patch = patch.replace('\n', "\n      ");
    let kustomization = format!(
        "resources:\n  - ../../../deploy/k8s/base\npatches:\n  - patch: |-\n      {patch}\n"
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization)?;
    Ok(dir)
}

fn assert_rejected(name: &str, patch: &str, expected: &str) -> anyhow::Result<()> {
    let dir = broken_overlay(name, patch)?;
    let Some(out) = validate(&[&dir])? else {
        return Ok(());
    };
    let log = text(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        !out.status.success(),
        "{name}: a broken overlay passed:\n{log}"
    );
    assert!(log.contains(expected), "{name}: no `{expected}` in:\n{log}");
    Ok(())
}

#[test]
fn broken_overlays_are_rejected() -> anyhow::Result<()> {
    // A misspelt field: only a strict schema sees it.
    assert_rejected(
        "typo",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: fleetrl-actor\nspec:\n  replicaz: 3",
        "schema",
    )?;
    // Valid Kubernetes, but the actors' readiness no longer asks the gRPC health service.
    assert_rejected(
        "http-probe",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: fleetrl-actor\nspec:\n  template:\n    spec:\n      containers:\n        - name: actor\n          readinessProbe:\n            grpc: null\n            tcpSocket:\n              port: 50053",
        "readinessProbe is neither a gRPC health probe nor `fleetrl health`",
    )?;
    // The policy server follows the replay server instead of the actors' learner.
    assert_rejected(
        "serve-follows-replay",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: fleetrl-serve\nspec:\n  template:\n    spec:\n      containers:\n        - name: serve\n          env:\n            - name: FLEETRL_LEARNER_ADDR\n              value: fleetrl-replay:50051",
        "fleetrl-serve: follows FLEETRL_LEARNER_ADDR=fleetrl-replay:50051",
    )?;
    // The replay server is its container's PID 1 again, deaf to an early SIGTERM.
    assert_rejected(
        "replay-pid-1",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: fleetrl-replay\nspec:\n  template:\n    spec:\n      shareProcessNamespace: false",
        "fleetrl-replay: pod template lacks shareProcessNamespace: true",
    )?;
    // The learner asks for CUDA without requesting a GPU.
    assert_rejected(
        "cuda-no-gpu",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: fleetrl-learner\nspec:\n  template:\n    spec:\n      containers:\n        - name: learner\n          args: [\"--set\", \"learner.device=cuda\"]",
        "nvidia.com/gpu limit is False",
    )
}

/// The learner's ranks: each broken overlay is valid Kubernetes, but its ranks never form a
/// group (or the actors reach a rank that does not serve them).
#[test]
fn broken_learner_ranks_are_rejected() -> anyhow::Result<()> {
    let learner =
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: fleetrl-learner\nspec:";
    // Three pods, each told the group has one rank.
    assert_rejected(
        "ranks-replicas",
        &format!("{learner}\n  replicas: 3"),
        "learner.world_size=1 but replicas: 3",
    )?;
    // Two ranks started in order: pod 0 waits for pod 1, which waits for pod 0 to be ready.
    assert_rejected(
        "ranks-ordered",
        &format!(
            "{learner}\n  replicas: 2\n  podManagementPolicy: OrderedReady\n  template:\n    spec:\n      containers:\n        - name: learner\n          env:\n            - name: FLEETRL_WORLD_SIZE\n              value: \"2\""
        ),
        "podManagementPolicy must be Parallel",
    )?;
    // Every pod rank 0.
    assert_rejected(
        "ranks-same-rank",
        &format!(
            "{learner}\n  replicas: 2\n  template:\n    spec:\n      containers:\n        - name: learner\n          env:\n            - name: FLEETRL_WORLD_SIZE\n              value: \"2\"\n            - name: FLEETRL_POD_NAME\n              value: fleetrl-learner-0\n              valueFrom: null"
        ),
        "learner.rank=fleetrl-learner-0 is the same in every pod",
    )?;
    // The ranks meet at pod 1, which is no rendezvous store.
    assert_rejected(
        "ranks-rendezvous-pod-1",
        &format!(
            "{learner}\n  template:\n    spec:\n      containers:\n        - name: learner\n          args: [\"--set\", \"learner.rendezvous=fleetrl-learner-1.fleetrl-learner-ranks:29500\"]"
        ),
        "is not pod 0's name 'fleetrl-learner-0.fleetrl-learner-ranks'",
    )?;
    // Rank 0's name is published only once it is ready, which it is not before rank 1 joins.
    assert_rejected(
        "ranks-not-ready-dns",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: fleetrl-learner-ranks\nspec:\n  publishNotReadyAddresses: false",
        "publishNotReadyAddresses: true",
    )?;
    // The actors' Service spreads them over every rank.
    assert_rejected(
        "ranks-actors-every-rank",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: fleetrl-learner\nspec:\n  selector:\n    statefulset.kubernetes.io/pod-name: null",
        "must select rank 0 alone",
    )
}

/// The ConfigMap's run.toml is the cartpole-ppo preset, field for field; with two ranks too.
#[test]
fn run_config_is_the_preset() -> anyhow::Result<()> {
    let root = repo_root();
    let load = |p: &str, sets: &[String]| {
        fleetrl_core::config::RunConfig::load(&root.join(p).display().to_string(), sets)
    };
    assert_eq!(
        load("deploy/k8s/base/run.toml", &[])?,
        load("configs/cartpole-ppo.toml", &[])?,
        "deploy/k8s/base/run.toml drifted from configs/cartpole-ppo.toml"
    );
    // components/learner-ranks keeps it: it must train on two ranks as it is.
    load(
        "deploy/k8s/base/run.toml",
        &["learner.world_size=2".into(), "learner.rank=1".into()],
    )?;
    Ok(())
}
