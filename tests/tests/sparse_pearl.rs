//! PEARL on the sparse point robot through the real binaries: the long tier, a test binary of
//! its own whose one scenario is `#[ignore]`d, so the default suite builds it and lists it as
//! ignored. Run it with `cargo test --release --workspace --test sparse_pearl -- --ignored`.
//!
//! Its PEARL run keeps a learner busy for its whole run: 515 s for the binary alone on this
//! 2-core VM (2026-12-07; 484 s of it the preset's 62k updates, 7.8 ms each), about a quarter
//! of the last CI run that had it (36 minutes), where the suite has to stay under 25. Beside the other scenarios
//! it starved their actors (a CI run of 2026-12-01 saw the LSTM-IMPALA scenario lag 4.5
//! versions and miss its target), so it cannot hide in their binary either. PEARL's learning
//! stays in the default suite with `meta_learns::pearl_adapts_to_held_out_goals_and_refuses_
//! unknown_tasks` (the dense goals), and the mechanisms this run depends on (hindsight goals,
//! the exploration pool, the success rate and its controls) with their unit tests; run this
//! one when PEARL, its preset or its evaluation changes.

use fleetrl_tests::cli::fleetrl_ok;
use fleetrl_tests::meta::{eval_report, newest_checkpoint, train};

/// The sparse robot's meta-test plays this many held-out goals: ids 80-179, the run's own 20
/// test goals and 80 more that training never drew either. The no-context control, a fixed
/// path, scored 25-35% on training seed 0's 20 goals and 9-20% on these 100.
const SPARSE_TEST_GOALS: &str = "tasks.num_test=100";

/// `keys` of `fleetrl eval --checkpoint ckpt --seed S` on [`SPARSE_TEST_GOALS`] for evaluation
/// seeds 1-5, each seed's values in order.
fn success_by_seed<const N: usize>(ckpt: &str, keys: [&str; N]) -> Vec<[f64; N]> {
    (1..=5u32)
        .map(|seed| {
            let seed = seed.to_string();
            fleetrl_ok(&[
                "eval",
                "--checkpoint",
                ckpt,
                "--seed",
                &seed,
                "--set",
                SPARSE_TEST_GOALS,
            ]);
            let report = eval_report(ckpt);
            assert_eq!(report["tasks"], 100, "{report:#}");
            keys.map(|key| {
                report[key]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{key}: {report:#}"))
            })
        })
        .collect()
}

/// The mean of column `i` of `rows`.
fn column_mean<const N: usize>(rows: &[[f64; N]], i: usize) -> f64 {
    rows.iter().map(|row| row[i]).sum::<f64>() / rows.len() as f64
}

/// PEARL on the sparse point robot (`point-robot-sparse-pearl`, the PEARL paper's §6.3): a
/// goal scores only within 0.2 of it, so the policy must find it while exploring and then
/// read it from the context. Over five meta-tests of 100 held-out goals (evaluation seeds
/// 1-5), the adapted success rate beats a task-agnostic SAC's on the same goals, and both of
/// the meta-test's controls, the same policy played with no context and with another task's
/// belief: a path that passes many goals whatever the context scores alike on all three.
///
/// Measured (README, "A test for the sparse robot"): eight runs of the preset as shipped
/// scored 38-46% adapted against 9-20% with no context, 10-18% with another task's belief
/// and 0% for the SAC; a run took 790-900 s beside another on 2 cores.
#[test]
#[ignore = "the long tier (8-9 minutes): cargo test --release --workspace --test sparse_pearl -- --ignored"]
fn pearl_finds_sparse_goals_from_its_context() {
    let (_, sac_out) = train(
        "sac-sparse",
        "point-sac-multitask",
        &[
            "env.id=PointRobotSparse-v0",
            "tasks.num_train=80",
            "stop.total_env_steps=10_000",
        ],
    );
    let sac = success_by_seed(&newest_checkpoint(&sac_out), ["success_rate"]);
    let sac = column_mean(&sac, 0);
    let (summary, out) = train("pearl-sparse", "point-robot-sparse-pearl", &[]);
    assert_eq!(summary["env"], "PointRobotSparse-v0");
    let tests = success_by_seed(
        &newest_checkpoint(&out),
        [
            "success_rate",
            "success_rate_no_context",
            "success_rate_other_task",
        ],
    );
    let [adapted, no_context, other_task] = [0, 1, 2].map(|i| column_mean(&tests, i));
    eprintln!(
        "sparse PEARL: adapted success {adapted:.3}, no context {no_context:.3}, another \
         task's belief {other_task:.3}, task-agnostic SAC {sac:.3} ({tests:?})"
    );
    assert!(
        adapted >= sac + 0.15,
        "adapted success {adapted:.3} does not clearly beat the task-agnostic SAC's {sac:.3}"
    );
    for (control, rate) in [
        ("no context", no_context),
        ("another task's belief", other_task),
    ] {
        assert!(
            adapted >= rate + 0.05,
            "adapted success {adapted:.3} is not clearly above the same policy with \
             {control} ({rate:.3}): a path, not adaptation ({tests:?})"
        );
    }
    let _ = std::fs::remove_dir_all(sac_out);
    let _ = std::fs::remove_dir_all(out);
}
