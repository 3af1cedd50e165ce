use super::*;
use std::path::Path;

fn discrete_demo() -> Demo {
    let space = Space::Discrete { n: 2 };
    let mut rec = Recorder::new(
        "CartPole-v1",
        DemoSource::Scripted,
        vec![2],
        &space,
        &[0., 1.],
    );
    rec.push(&Action::Discrete(1), 1.0, &[2., 3.], None);
    rec.push(&Action::Discrete(0), 0.5, &[4., 5.], None);
    rec.finish(true)
}

#[test]
fn discrete_demo_round_trips_through_a_file() {
    let dir = tempdir();
    let demo = discrete_demo();
    let path = dir.join(format!("a{EXTENSION}"));
    write(&demo, &path).unwrap();
    let back = read(&path).unwrap();
    assert_eq!(back, demo);
    assert_eq!(back.len(), 2);
    assert_eq!(back.total_reward(), 1.5);
    assert_eq!(back.obs(2), &[4., 5.]);
    assert_eq!(back.action(0), Action::Discrete(1));
    assert_eq!(list(&dir).unwrap(), vec![path]);
}

#[test]
fn continuous_demo_with_values_round_trips() {
    let space = Space::Box {
        shape: vec![1],
        low: vec![-2.0],
        high: vec![2.0],
    };
    let mut rec = Recorder::new(
        "Pendulum-v1",
        DemoSource::Checkpoint,
        vec![3],
        &space,
        &[0.; 3],
    );
    rec.push(&Action::Continuous(vec![1.5]), -1.0, &[1.; 3], Some(-3.0));
    rec.push(&Action::Continuous(vec![-0.5]), -2.0, &[2.; 3], Some(-2.5));
    let demo = rec.finish(false);
    let back = Demo::from_bytes(&demo.to_bytes().unwrap(), Path::new("x")).unwrap();
    assert_eq!(back, demo);
    assert_eq!(back.values, Some(vec![-3.0, -2.5]));
    back.check_env(
        "Pendulum-v1",
        &Space::Box {
            shape: vec![3],
            low: vec![-1.; 3],
            high: vec![1.; 3],
        },
        &space,
    )
    .unwrap();
}

#[test]
fn mismatches_and_foreign_files_get_named_errors() {
    let demo = discrete_demo();
    let obs = Space::Box {
        shape: vec![4],
        low: vec![-1.; 4],
        high: vec![1.; 4],
    };
    let err = demo.check_env("CartPole-v1", &obs, &Space::Discrete { n: 2 });
    assert!(err.unwrap_err().to_string().contains("observation size"));
    let err = demo.check_env("Acrobot-v1", &obs, &Space::Discrete { n: 3 });
    assert!(err.unwrap_err().to_string().contains("env id"));

    let err = Demo::from_bytes(b"not a safetensors file", Path::new("junk")).unwrap_err();
    assert!(
        err.to_string().contains("junk is not a fleetrl demo file"),
        "{err}"
    );

    let mut newer = demo.to_bytes().unwrap();
    let at = find(&newer, b"\"version\":\"2\"").expect("version in header");
    newer[at + 11] = b'9';
    let err = Demo::from_bytes(&newer, Path::new("new")).unwrap_err();
    assert!(err.to_string().contains("version 9"), "{err}");

    let mut bad = demo.clone();
    bad.rewards.push(1.0);
    assert!(matches!(bad.to_bytes(), Err(DemoError::Inconsistent(_))));
}

/// Whole-number observations in a byte's range are stored as U8 (version 2, a quarter of
/// the bytes) and read back exactly; anything else stays F32 (version 1); a version 1 file
/// claiming U8 observations is refused.
#[test]
fn byte_valued_observations_are_stored_as_bytes() {
    let grid = |k: usize| -> Vec<f32> { (0..400).map(|i| ((i + k) % 2) as f32).collect() };
    let space = Space::Discrete { n: 3 };
    let mut rec = Recorder::new(
        "MinAtar/Breakout-v1",
        DemoSource::Agent,
        vec![4, 10, 10],
        &space,
        &grid(0),
    );
    for t in 1..=50 {
        rec.push(&Action::Discrete(1), 0.0, &grid(t), None);
    }
    let demo = rec.finish(true);
    let bytes = demo.to_bytes().unwrap();
    assert!(find(&bytes, b"\"version\":\"2\"").is_some());
    assert!(bytes.len() < 51 * 400 + 2_000, "{} bytes", bytes.len());
    assert_eq!(Demo::from_bytes(&bytes, Path::new("g")).unwrap(), demo);

    let mut fractional = demo.clone();
    fractional.observations[7] = 0.5;
    let bytes = fractional.to_bytes().unwrap();
    assert!(find(&bytes, b"\"version\":\"1\"").is_some());
    assert!(bytes.len() > 51 * 400 * 4);
    assert_eq!(
        Demo::from_bytes(&bytes, Path::new("f")).unwrap(),
        fractional
    );

    let mut old = demo.to_bytes().unwrap();
    let at = find(&old, b"\"version\":\"2\"").unwrap();
    old[at + 11] = b'1';
    let err = Demo::from_bytes(&old, Path::new("old")).unwrap_err();
    assert!(
        err.to_string().contains("`observations` is U8, not F32"),
        "{err}"
    );
}

/// Headers a network client may send in an `Offer`: each is refused by name, none panics
/// (`"discrete("` and a multi-byte last character once sliced past a char boundary).
#[test]
fn malformed_action_space_headers_are_refused_without_panicking() {
    let good = discrete_demo().to_bytes().unwrap();
    let at = find(&good, b"\"discrete(2)\"").expect("action_space in header");
    // Same length as `"discrete(2)"`, so the header's length prefix still holds; JSON
    // allows the padding spaces after a string.
    for forged in [
        "\"discrete(\"  ",
        "\"discrete(\u{e9}\"",
        "\"discrete(0)\"",
        "\"box(two)\"   ",
        "\"\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\" ",
    ] {
        assert_eq!(forged.len(), 13, "{forged}");
        let mut bytes = good.clone();
        bytes[at..at + 13].copy_from_slice(forged.as_bytes());
        let err = Demo::from_bytes(&bytes, Path::new("offered")).unwrap_err();
        assert!(
            matches!(&err, DemoError::NotADemo { reason, .. } if reason.contains("action_space")),
            "{forged}: {err}"
        );
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "fleetrl-demo-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
