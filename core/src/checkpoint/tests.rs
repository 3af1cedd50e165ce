use super::*;

/// A learner that died mid-write left a `.tmp-ckpt-*` directory; the next start removes
/// it and keeps every whole checkpoint.
#[test]
fn partial_checkpoints_are_removed_and_whole_ones_kept() {
    let dir = std::env::temp_dir().join(format!("fleetrl-partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let partial = dir.join(".tmp-ckpt-00000004-77");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::write(partial.join("model.safetensors"), b"half").unwrap();
    std::fs::create_dir_all(dir.join("ckpt-00000003")).unwrap();
    assert_eq!(remove_partial(&dir).unwrap(), 1);
    assert!(!partial.exists());
    assert!(dir.join("ckpt-00000003").is_dir());
    assert_eq!(remove_partial(&dir.join("absent")).unwrap(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A disk that fills mid-write (the model file's bytes go to `/dev/full`): the error names
/// the file and the cause, no partial directory is left to keep the disk full, and the newest
/// whole checkpoint still loads.
#[test]
fn a_full_disk_names_the_file_and_keeps_the_last_checkpoint() {
    let dir = std::env::temp_dir().join(format!("fleetrl-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = RunConfig::default();
    let meta = |policy_version| CheckpointMeta {
        policy_version,
        env_id: "CartPole-v1".into(),
        ..CheckpointMeta::default()
    };
    let model = vec![("pi.w".to_string(), Tensor::from_slice(&[1.0f32; 64]))];
    save(&dir, &model, &[], &meta(1), &config).unwrap();
    let tmp = dir.join(format!("{PARTIAL_PREFIX}{:08}-{}", 2, std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::os::unix::fs::symlink("/dev/full", tmp.join("model.safetensors")).unwrap();
    let error = save(&dir, &model, &[], &meta(2), &config)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("model.safetensors") && error.contains("No space left"),
        "{error}"
    );
    assert!(!tmp.exists(), "the partial checkpoint is removed");
    let newest = latest(&dir).unwrap();
    assert!(newest.ends_with("ckpt-00000001"), "{newest:?}");
    assert_eq!(load(&newest).unwrap().meta.policy_version, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn save_load_prune() {
    let dir = std::env::temp_dir().join(format!("fleetrl-ckpt-{}", std::process::id()));
    let config = RunConfig::default();
    for version in 1..=3 {
        let meta = CheckpointMeta {
            policy_version: version,
            updates: 5,
            env_steps: 640,
            env_id: "CartPole-v1".into(),
            progress: RunProgress {
                episodes: 12,
                recent_returns: vec![9.0, 31.5],
                ..RunProgress::default()
            },
        };
        let model = vec![(
            "pi.out.bias".to_string(),
            Tensor::from_slice(&[version as f32, 2.0]),
        )];
        let state = vec![("adam.steps".to_string(), Tensor::from(7i64))];
        save(&dir, &model, &state, &meta, &config).unwrap();
    }
    prune(&dir, 2).unwrap();
    let newest = latest(&dir).unwrap();
    assert!(newest.ends_with("ckpt-00000003"));
    // A checkpoint, the directory above it, and a run directory all mean it.
    assert_eq!(resolve(&newest).unwrap(), newest);
    assert_eq!(resolve(&dir).unwrap(), newest);
    let run = dir.parent().unwrap();
    let run_dir = run.join(format!("fleetrl-ckpt-run-{}", std::process::id()));
    std::fs::create_dir_all(&run_dir).unwrap();
    let _ = std::fs::remove_file(run_dir.join("checkpoints"));
    std::os::unix::fs::symlink(&dir, run_dir.join("checkpoints")).unwrap();
    assert_eq!(
        resolve(&run_dir).unwrap(),
        run_dir.join("checkpoints/ckpt-00000003")
    );
    std::fs::remove_dir_all(&run_dir).unwrap();
    let err = resolve(Path::new("/nonexistent/run"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("no checkpoint at /nonexistent/run: "),
        "{err}"
    );
    let ckpt = load(&newest).unwrap();
    assert_eq!(ckpt.meta.policy_version, 3);
    assert_eq!(ckpt.meta.progress.episodes, 12);
    assert_eq!(ckpt.meta.progress.recent_returns, vec![9.0, 31.5]);
    assert_eq!(ckpt.config, config);
    assert_eq!(
        Vec::<f32>::try_from(&ckpt.model[0].1).unwrap(),
        vec![3.0, 2.0]
    );
    assert_eq!(list(&dir).len(), 2);

    // A newest checkpoint that does not load (empty files, as a machine that went down
    // mid-write leaves them) is skipped for the one before.
    assert_eq!(load_newest(&dir).unwrap().unwrap().meta.policy_version, 3);
    std::fs::write(newest.join("model.safetensors"), b"").unwrap();
    assert_eq!(load_newest(&dir).unwrap().unwrap().meta.policy_version, 2);
    std::fs::write(dir.join("ckpt-00000002/meta.json"), b"").unwrap();
    let err = load_newest(&dir).unwrap_err().to_string();
    assert!(err.contains("ckpt-00000003/model.safetensors"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(load_newest(&dir).unwrap().is_none());
}

/// The same version written again while another thread reads it: every read finds a
/// whole checkpoint (the learner's final checkpoint can rewrite the version a
/// `fleetrl train` evaluation is loading).
#[test]
fn rewriting_a_version_never_hides_it_from_a_reader() {
    let dir = std::env::temp_dir().join(format!("fleetrl-ckpt-rw-{}", std::process::id()));
    let config = RunConfig::default();
    let meta = CheckpointMeta {
        policy_version: 9,
        updates: 9,
        env_steps: 900,
        env_id: "CartPole-v1".into(),
        progress: RunProgress::default(),
    };
    let model = vec![(
        "pi.out.weight".to_string(),
        Tensor::zeros([64, 64], tch::kind::FLOAT_CPU),
    )];
    let state = vec![("adam.steps".to_string(), Tensor::from(9i64))];
    let path = save(&dir, &model, &state, &meta, &config).unwrap();
    let writer = {
        let (dir, config) = (dir.clone(), config.clone());
        std::thread::spawn(move || {
            for _ in 0..100 {
                save(&dir, &model, &state, &meta, &config).unwrap();
            }
        })
    };
    let (mut reads, mut failures) = (0, Vec::new());
    while !writer.is_finished() {
        reads += 1;
        if let Err(e) = load(&path) {
            failures.push(e.to_string());
        }
    }
    writer.join().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(reads > 0);
    assert!(
        failures.is_empty(),
        "{} of {reads} reads failed during 100 rewrites, e.g. {}",
        failures.len(),
        failures[0]
    );
}

#[test]
fn a_checkpoint_without_progress_loads_with_zero_counters() {
    let meta: CheckpointMeta = serde_json::from_str(
        r#"{"policy_version": 4, "updates": 4, "env_steps": 512, "env_id": "CartPole-v1"}"#,
    )
    .unwrap();
    assert_eq!(meta.progress, RunProgress::default());
}

#[test]
fn missing_checkpoint_names_the_file() {
    let err = load(Path::new("/nonexistent/ckpt-1"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/ckpt-1/meta.json"), "{err}");
}

/// A checkpoint's directory and each of its files with its bytes.
type Files = (PathBuf, Vec<(&'static str, Vec<u8>)>);

/// A whole checkpoint, written once: the files the corruption tests start from.
fn pristine() -> &'static Files {
    static PRISTINE: std::sync::OnceLock<Files> = std::sync::OnceLock::new();
    PRISTINE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fleetrl-ckpt-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let meta = CheckpointMeta {
            policy_version: 1,
            updates: 1,
            env_steps: 64,
            env_id: "CartPole-v1".into(),
            progress: RunProgress::default(),
        };
        let model = vec![("pi.w".to_string(), Tensor::from_slice(&[1.0f32, 2.0, 3.0]))];
        let state = vec![("adam.steps".to_string(), Tensor::from(7i64))];
        let path = save(&dir, &model, &state, &meta, &RunConfig::default()).unwrap();
        let files = [
            "meta.json",
            "config.toml",
            "model.safetensors",
            "state.safetensors",
        ]
        .map(|name| (name, std::fs::read(path.join(name)).unwrap()));
        (dir, files.to_vec())
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// One file of a checkpoint cut short, with a byte changed, or replaced by other bytes:
    /// loading it is an error (or, for a change the format cannot see, a checkpoint), never a
    /// panic.
    #[test]
    fn a_corrupted_checkpoint_file_is_an_error_not_a_panic(
        file in 0usize..4,
        cut in proptest::prelude::any::<proptest::sample::Index>(),
        flip in proptest::prelude::any::<Option<(proptest::sample::Index, u8)>>(),
        replacement in proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)),
        case in proptest::prelude::any::<u32>(),
    ) {
        let (dir, files) = pristine();
        let copy = dir.join(format!("corrupt-{case}"));
        std::fs::create_dir_all(&copy).unwrap();
        for (i, (name, bytes)) in files.iter().enumerate() {
            let mut bytes = bytes.clone();
            if i == file {
                bytes.truncate(cut.index(bytes.len() + 1));
                if let (Some((at, value)), false) = (flip, bytes.is_empty()) {
                    let at = at.index(bytes.len());
                    bytes[at] ^= value.max(1);
                }
                if let Some(other) = &replacement {
                    bytes = other.clone();
                }
            }
            std::fs::write(copy.join(name), bytes).unwrap();
        }
        let _ = load(&copy);
        std::fs::remove_dir_all(&copy).unwrap();
    }
}
