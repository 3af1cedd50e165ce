//! `model.torchscript`: modules written and scripted in PyTorch (`torchscript_modules.py`, run
//! with the project's `.venv`) load as the actor-critic with their parameters in the model's
//! store, train, travel as weights, and the ones that do not fit the interface are refused
//! with an error that names the file and what was expected.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fleetrl_core::models::config::ModelConfig;
use fleetrl_core::models::{ActorCritic, Policy};
use fleetrl_proto::space::Space;
use tch::{Device, Kind, Tensor};

/// The modules, written once per test process.
fn modules() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = std::env::temp_dir().join(format!("fleetrl-torchscript-{}", std::process::id()));
        let output = Command::new(root.join("../.venv/bin/python"))
            .arg(root.join("tests/torchscript_modules.py"))
            .arg(&dir)
            .output()
            .expect("python runs (run scripts/setup.sh for .venv)");
        assert!(
            output.status.success(),
            "torchscript_modules.py: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(dir.join("not_torchscript.pt"), b"not a zip archive").expect("written");
        dir
    })
}

fn obs_space() -> Space {
    Space::Box {
        shape: vec![4],
        low: vec![-1.0; 4],
        high: vec![1.0; 4],
    }
}

fn gaussian() -> Space {
    Space::Box {
        shape: vec![2],
        low: vec![-1.0; 2],
        high: vec![1.0; 2],
    }
}

fn build(file: &str, actions: &Space) -> Result<ActorCritic, String> {
    let config = ModelConfig {
        torchscript: Some(modules().join(file)),
        ..ModelConfig::default()
    };
    ActorCritic::new(&config, &obs_space(), actions, Device::Cpu).map_err(|e| e.to_string())
}

fn names(model: &ActorCritic) -> Vec<String> {
    model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// Each module that does not fit is refused by the key, naming its file and the interface.
#[test]
fn modules_that_do_not_fit_are_refused_naming_the_file() {
    let discrete = Space::Discrete { n: 2 };
    let cases = [
        ("one_tensor.pt", "a single tensor, not a tuple"),
        ("wrong_width.pt", "returned shapes [[2, 3], [2, 1]]"),
        ("no_forward.pt", "calling it failed"),
        ("not_torchscript.pt", "is not a TorchScript module"),
    ];
    for (file, why) in cases {
        let error = build(file, &discrete).expect_err(file);
        let path = modules().join(file).display().to_string();
        assert!(error.starts_with("model.torchscript: "), "{error}");
        assert!(error.contains(&path), "{error}");
        assert!(error.contains(why), "{file}: {error}");
        if file != "not_torchscript.pt" {
            let want = "forward(obs: Tensor[N, 4]) -> (logits [N, 2], value [N, 1] or [N])";
            assert!(error.contains(want), "{error}");
        }
    }
    // Three outputs are a Gaussian's (mean, log_std, value), never a categorical's.
    let error = build("own_log_std.pt", &discrete).expect_err("3 outputs, discrete");
    assert!(error.contains("returned shapes"), "{error}");
}

/// A module that fits acts, trains (the optimiser's step through the store changes the
/// module's own outputs) and its trained weights, broadcast, make an identical policy.
#[test]
fn a_module_that_fits_trains_and_travels_as_weights() {
    let discrete = Space::Discrete { n: 2 };
    let model = build("fits.pt", &discrete).expect("fits");
    let names = names(&model);
    assert!(names.contains(&"script.body.0.weight".into()), "{names:?}");
    assert!(names.contains(&"script.body.1.weight".into()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("pi.")), "{names:?}");
    let obs = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
    let step = model.act(&obs, false);
    assert_eq!(step.action.size(), [16]);
    assert_eq!(step.value.size(), [16]);
    let before = model.value(&obs);
    let mut opt =
        tch::nn::OptimizerConfig::build(tch::nn::Adam::default(), model.var_store(), 1e-2)
            .expect("an optimiser");
    let eval = model.evaluate(&obs, &step.action);
    opt.backward_step(&(eval.value.square().mean(Kind::Float) - eval.log_prob.mean(Kind::Float)));
    let after = model.value(&obs);
    assert!(
        !before.allclose(&after, 1e-6, 1e-6, false),
        "training changed nothing"
    );
    // A second load of the same file starts from the file's weights; the broadcast makes it
    // the trained policy.
    let mut actor = build("fits.pt", &discrete).expect("fits");
    assert!(!actor.value(&obs).allclose(&after, 1e-6, 1e-6, false));
    actor
        .import(&model.export().expect("finite"))
        .expect("same names");
    assert!(actor.value(&obs).allclose(&after, 0.0, 0.0, false));
}

/// A Gaussian policy gets fleetrl's learned `pi.log_std` unless the module returns its own.
#[test]
fn gaussian_modules_take_or_bring_a_log_std() {
    let fleetrl_std = build("fits.pt", &gaussian()).expect("2 outputs");
    assert!(names(&fleetrl_std).contains(&"pi.log_std".into()));
    let own = build("own_log_std.pt", &gaussian()).expect("3 outputs");
    let names = names(&own);
    assert!(names.contains(&"script.log_std".into()), "{names:?}");
    assert!(!names.contains(&"pi.log_std".into()), "{names:?}");
    let obs = Tensor::randn([8, 4], (Kind::Float, Device::Cpu));
    let step = own.act(&obs, false);
    let eval = own.evaluate(&obs, &step.action);
    assert!(eval.log_prob.allclose(&step.log_prob, 1e-5, 1e-5, false));
    // The module's log-std of -0.5 in both dimensions: 2 x (-0.5 + 0.5 + ln(2 pi) / 2).
    let want = (2.0 * std::f64::consts::PI).ln();
    assert!((eval.entropy.double_value(&[0]) - want).abs() < 1e-5);
}
