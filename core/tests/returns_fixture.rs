//! GAE, discounted returns, V-trace, valid masks and advantage normalisation against the
//! numpy reference in `fixtures/returns_reference.json`, which `scripts/gen_returns_fixture.py`
//! writes from the papers' closed forms (an implementation independent of ours).

use fleetrl_core::algos::returns::{
    discounted_returns, gae, normalize_advantage, valid_from_done, StepData,
};
use fleetrl_core::algos::vtrace::{vtrace, VtraceParams};
use serde_json::Value;

const TOLERANCE: f32 = 2e-5;

struct Case {
    t: usize,
    b: usize,
    reward: Vec<f32>,
    value: Vec<f32>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
    final_value: Vec<f32>,
    bootstrap_value: Vec<f32>,
    log_rho: Vec<f32>,
    json: Value,
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

fn flags(v: &Value) -> Vec<bool> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_bool().expect("bool"))
        .collect()
}

impl Case {
    fn new(json: Value) -> Case {
        Case {
            t: json["t"].as_u64().expect("t") as usize,
            b: json["b"].as_u64().expect("b") as usize,
            reward: floats(&json["reward"]),
            value: floats(&json["value"]),
            terminated: flags(&json["terminated"]),
            truncated: flags(&json["truncated"]),
            final_value: floats(&json["final_value"]),
            bootstrap_value: floats(&json["bootstrap_value"]),
            log_rho: floats(&json["log_rho"]),
            json,
        }
    }

    fn data(&self) -> StepData<'_> {
        StepData {
            t: self.t,
            b: self.b,
            reward: &self.reward,
            value: &self.value,
            terminated: &self.terminated,
            truncated: &self.truncated,
            final_value: &self.final_value,
            bootstrap_value: &self.bootstrap_value,
        }
    }
}

fn cases() -> Vec<Case> {
    let text = include_str!("fixtures/returns_reference.json");
    let root: Value = serde_json::from_str(text).expect("fixture parses");
    let cases: Vec<Case> = root["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .cloned()
        .map(Case::new)
        .collect();
    assert!(!cases.is_empty());
    cases
}

fn assert_close(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= TOLERANCE * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs reference {w}"
        );
    }
}

fn f(v: &Value) -> f32 {
    v.as_f64().expect("number") as f32
}

#[test]
fn gae_matches_the_reference() {
    for (n, case) in cases().iter().enumerate() {
        for spec in case.json["gae"].as_array().expect("gae") {
            let bt = spec["bootstrap_truncation"].as_bool().expect("bool");
            let got = gae(&case.data(), f(&spec["discount"]), f(&spec["lambda"]), bt);
            let what = format!("case {n} gae lambda {}", spec["lambda"]);
            assert_close(&what, &got.advantage, &floats(&spec["advantage"]));
            assert_close(&what, &got.returns, &floats(&spec["returns"]));
        }
    }
}

#[test]
fn discounted_returns_match_the_reference() {
    for (n, case) in cases().iter().enumerate() {
        for spec in case.json["discounted"].as_array().expect("discounted") {
            let bt = spec["bootstrap_truncation"].as_bool().expect("bool");
            let got = discounted_returns(&case.data(), f(&spec["discount"]), bt);
            assert_close(
                &format!("case {n} discounted"),
                &got,
                &floats(&spec["returns"]),
            );
        }
    }
}

#[test]
fn vtrace_matches_the_reference() {
    for (n, case) in cases().iter().enumerate() {
        for (k, spec) in case.json["vtrace"]
            .as_array()
            .expect("vtrace")
            .iter()
            .enumerate()
        {
            let params = VtraceParams {
                discount: f(&spec["discount"]),
                lambda: f(&spec["lambda"]),
                rho_bar: f(&spec["rho_bar"]),
                pg_rho_bar: f(&spec["pg_rho_bar"]),
                c_bar: f(&spec["c_bar"]),
                bootstrap_truncation: spec["bootstrap_truncation"].as_bool().expect("bool"),
            };
            let got = vtrace(&case.data(), &case.log_rho, &params);
            let what = format!("case {n} vtrace {k}");
            assert_close(&what, &got.vs, &floats(&spec["vs"]));
            assert_close(&what, &got.pg_advantage, &floats(&spec["pg_advantage"]));
        }
    }
}

#[test]
fn valid_mask_and_normalisation_match_the_reference() {
    for (n, case) in cases().iter().enumerate() {
        let done: Vec<bool> = case
            .terminated
            .iter()
            .zip(&case.truncated)
            .map(|(a, b)| *a || *b)
            .collect();
        let valid = valid_from_done(&done, case.t, case.b);
        assert_close(
            &format!("case {n} valid"),
            &valid,
            &floats(&case.json["valid"]),
        );
        let advantage = gae(&case.data(), 0.99, 0.95, true).advantage;
        assert_close(
            &format!("case {n} normalized over valid"),
            &normalize_advantage(&advantage, Some(&valid)),
            &floats(&case.json["normalized_advantage"]),
        );
        assert_close(
            &format!("case {n} normalized over all"),
            &normalize_advantage(&advantage, None),
            &floats(&case.json["normalized_advantage_all"]),
        );
    }
}
