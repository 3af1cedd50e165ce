use super::*;
use serde_json::json;

fn summary_like(label: Option<&str>, points: &[(f64, f64, f64)]) -> Value {
    let evaluations: Vec<Value> = points
        .iter()
        .map(|&(s, r, w)| json!({"env_steps": s, "mean_return": r, "wall_seconds": w, "std_return": 0.0}))
        .collect();
    let mut v = json!({"env": "CartPole-v1", "algo": "ppo", "evaluations": evaluations});
    if let Some(l) = label {
        v["label"] = json!(l);
    }
    v
}

#[test]
fn reads_summaries_and_peer_arrays() {
    let ours = parse(
        &summary_like(None, &[(5e3, 20.0, 1.0), (1e4, 500.0, 2.5)]),
        "run-a",
    )
    .unwrap();
    assert_eq!(ours.label, "run-a");
    assert_eq!(
        ours.points[1],
        Point {
            env_steps: 1e4,
            mean_return: 500.0,
            wall_seconds: Some(2.5)
        }
    );
    // bench/sb3_*.py print `system` and [steps, return(, wall)] pairs.
    let peer = json!({"system": "sb3-2.9.2", "evaluations": [[5000, 9.5], [10000, 200.0, 7.0]]});
    let peer = parse(&peer, "ignored").unwrap();
    assert_eq!(peer.label, "sb3-2.9.2");
    assert_eq!(peer.points[0].wall_seconds, None);
    assert_eq!(peer.points[1].wall_seconds, Some(7.0));
}

#[test]
fn bad_curves_are_named() {
    let err = |v: Value| format!("{:#}", parse(&v, "x").unwrap_err());
    assert!(err(json!({"algo": "ppo"})).contains("no `evaluations` list"));
    assert!(err(json!({"evaluations": []})).contains("made no evaluation"));
    assert!(err(json!({"evaluations": [{"env_steps": 1}]})).contains("`mean_return` is missing"));
    assert!(err(json!({"evaluations": [[1, 2, 3, 4]]})).contains("evaluation 0"));
    let dir = std::env::temp_dir().join(format!("fleetrl-plot-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = format!("{:#}", load(&dir).unwrap_err());
    assert!(
        e.contains("summary.json") && e.contains("finished `fleetrl train`"),
        "{e}"
    );
}

/// Pixels of exactly `c` in the columns `[x0, x1)`.
fn count(img: &image::RgbImage, c: RGBColor, x0: u32, x1: u32) -> usize {
    img.enumerate_pixels()
        .filter(|(x, _, p)| (x0..x1).contains(x) && p.0 == [c.0, c.1, c.2])
        .count()
}

#[test]
fn draws_each_run_in_both_panels() {
    let dir = std::env::temp_dir().join(format!("fleetrl-plot-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("run-a")).unwrap();
    std::fs::write(
        dir.join("run-a/summary.json"),
        summary_like(
            None,
            &[(5e3, 20.0, 1.0), (1e4, 150.0, 2.0), (2e4, 500.0, 4.0)],
        )
        .to_string(),
    )
    .unwrap();
    // A peer without wall times: it is drawn against env steps only.
    let peer = dir.join("peer.json");
    std::fs::write(
        &peer,
        json!({"system": "peer", "evaluations": [[5e3, 10.0], [2e4, 300.0]]}).to_string(),
    )
    .unwrap();
    let out = dir.join("curves.png");
    run(&[dir.join("run-a"), peer], &out, Some("CartPole-v1")).unwrap();

    let img = image::open(&out).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (1280, 480));
    let half = img.width() / 2;
    // Run 0 is drawn in both panels, run 1 (no wall times) only on the env-steps side, apart
    // from its legend entry's short line sample.
    assert!(
        count(&img, colour(0), 0, half) > 200,
        "run 0 missing on the left"
    );
    assert!(
        count(&img, colour(0), half, img.width()) > 200,
        "run 0 missing on the right"
    );
    assert!(
        count(&img, colour(1), 0, half) > 200,
        "run 1 missing on the left"
    );
    assert!(
        count(&img, colour(1), half, img.width()) < 100,
        "run 1 drawn against wall time"
    );
    std::fs::remove_dir_all(&dir).ok();
}
