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

fn curve(label: &str, points: &[(f64, f64)]) -> Curve {
    Curve {
        label: label.to_string(),
        points: points
            .iter()
            .map(|&(env_steps, mean_return)| Point {
                env_steps,
                mean_return,
                wall_seconds: Some(env_steps / 100.0),
            })
            .collect(),
    }
}

#[test]
fn runs_that_share_a_label_are_one_line_of_their_medians() {
    let drawn = lines(vec![
        curve("a", &[(25e3, 1.0), (50e3, 2.0), (75e3, 9.0)]),
        curve("b", &[(25e3, 7.0)]),
        curve("a", &[(25_040.0, 5.0), (50_010.0, 10.0)]),
        curve("a", &[(25_020.0, 3.0), (50_020.0, 4.0)]),
    ])
    .unwrap();
    assert_eq!(drawn.len(), 2);
    let (a, b) = (&drawn[0], &drawn[1]);
    assert_eq!((a.label.as_str(), a.runs, a.left_out), ("a", 3, 1));
    // Drawn to the two evaluations every run reached: the median of each column.
    let medians: Vec<(f64, f64)> = a
        .points
        .iter()
        .map(|p| (p.env_steps, p.mean_return))
        .collect();
    assert_eq!(medians, vec![(25_020.0, 3.0), (50_010.0, 4.0)]);
    assert_eq!(a.points[1].wall_seconds, Some(500.1));
    assert_eq!(a.range, vec![(1.0, 5.0), (2.0, 10.0)]);
    assert_eq!(a.legend(), "a (median of 3; band: lowest to highest)");
    // A label of one run is that run.
    assert_eq!(
        (b.runs, b.range.clone(), b.legend()),
        (1, vec![(7.0, 7.0)], "b".into())
    );
    // An even count's median is the mean of the middle two.
    let even = lines(vec![curve("c", &[(1.0, 2.0)]), curve("c", &[(1.0, 5.0)])]).unwrap();
    assert_eq!(even[0].points[0].mean_return, 3.5);
}

#[test]
fn runs_of_one_label_on_other_schedules_are_refused() {
    let err = lines(vec![
        curve("sb3", &[(25e3, 1.0), (50e3, 2.0)]),
        curve("sb3", &[(10e3, 1.0), (20e3, 2.0)]),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`sb3` evaluate at different env steps") && err.contains("LABEL=RUN"),
        "{err}"
    );
}

#[test]
fn a_label_before_the_run_names_its_line() {
    let dir = std::env::temp_dir().join(format!("fleetrl-plot-label-{}", std::process::id()));
    // A path that exists is a run even with a `=` in it.
    let odd = dir.join("lr=1e-3");
    std::fs::create_dir_all(&odd).unwrap();
    let summary = summary_like(None, &[(5e3, 20.0, 1.0)]).to_string();
    std::fs::write(odd.join("summary.json"), &summary).unwrap();
    assert_eq!(load_arg(&odd).unwrap().label, "lr=1e-3");
    let labelled = PathBuf::from(format!("ppo={}", odd.display()));
    assert_eq!(load_arg(&labelled).unwrap().label, "ppo");
    // LABEL=RUN with no run there: the error names the run's path, not the argument.
    let missing = dir.join("nothing");
    let arg = PathBuf::from(format!("ppo={}", missing.display()));
    let err = format!("{:#}", load_arg(&arg).unwrap_err());
    assert!(
        err.starts_with(&format!("reading {}:", missing.display())),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Whether `p` is `c` laid over white at an opacity between 0.1 and 0.3.
fn is_tint_of(p: &image::Rgb<u8>, c: RGBColor) -> bool {
    let c = [c.0, c.1, c.2].map(f64::from);
    let t = (255.0 - f64::from(p.0[0])) / (255.0 - c[0]);
    (0.1..=0.3).contains(&t)
        && (0..3).all(|k| (f64::from(p.0[k]) - (255.0 + t * (c[k] - 255.0))).abs() <= 2.0)
}

#[test]
fn a_label_of_several_runs_is_drawn_over_its_band() {
    let dir = std::env::temp_dir().join(format!("fleetrl-plot-band-{}", std::process::id()));
    let mut args = Vec::new();
    for (seed, top) in [(0, 300.0), (1, 500.0), (2, 100.0)] {
        let run = dir.join(format!("run-{seed}"));
        std::fs::create_dir_all(&run).unwrap();
        let points = [(5e3, 20.0, 1.0), (1e4, top / 2.0, 2.0), (2e4, top, 4.0)];
        std::fs::write(
            run.join("summary.json"),
            summary_like(None, &points).to_string(),
        )
        .unwrap();
        args.push(PathBuf::from(format!("fleetrl={}", run.display())));
    }
    let tinted = |args: &[PathBuf], name: &str| {
        let out = dir.join(name);
        run(args, &out, None).unwrap();
        let img = image::open(&out).unwrap().to_rgb8();
        let half = img.width() / 2;
        let band = |x0: u32, x1: u32| {
            img.enumerate_pixels()
                .filter(|(x, _, p)| (x0..x1).contains(x) && is_tint_of(p, colour(0)))
                .count()
        };
        (
            band(0, half),
            band(half, img.width()),
            count(&img, colour(0), 0, half),
        )
    };
    let (left, right, line) = tinted(&args, "three.png");
    assert!(
        left > 2_000 && right > 2_000,
        "band: {left} px left, {right} right"
    );
    assert!(line > 200, "the median line: {line} px");
    // The same runs under their own names: three lines, no band.
    let own: Vec<PathBuf> = args
        .iter()
        .map(|a| PathBuf::from(a.to_str().unwrap().split_once('=').unwrap().1))
        .collect();
    let (left, _, _) = tinted(&own, "own.png");
    assert!(left < 100, "a band for single runs: {left} px");
    std::fs::remove_dir_all(&dir).ok();
}
