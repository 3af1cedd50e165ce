//! `model.torchscript` and `model.torchscript_critic`: modules written and scripted in PyTorch
//! (`torchscript_modules.py`, run with the project's `.venv`) load as the actor-critic, DQN's
//! Q-network or SAC's actor and critics with their parameters in the model's store, train,
//! travel as weights, and the ones that do not fit the interface are refused with an error
//! that names the key, the file and what was expected.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fleetrl_core::config::RunConfig;
use fleetrl_core::models::config::ModelConfig;
use fleetrl_core::models::{ActorCritic, OffPolicyModel, Policy, PolicyKind};
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

/// An off-policy model of `kind` with two critics from the user's modules, on the 4-d
/// observations and `actions`.
fn off_policy(
    kind: PolicyKind,
    actions: &Space,
    policy: Option<&str>,
    critic: Option<&str>,
) -> Result<OffPolicyModel, String> {
    let config = ModelConfig {
        torchscript: policy.map(|f| modules().join(f)),
        torchscript_critic: critic.map(|f| modules().join(f)),
        ..ModelConfig::default()
    };
    OffPolicyModel::new(&config, kind, 2, &obs_space(), actions, Device::Cpu)
        .map_err(|e| e.to_string())
}

/// A DQN Q-network, SAC's actor or SAC's critic that does not fit is refused by its key,
/// naming the file and the interface.
#[test]
fn off_policy_modules_that_do_not_fit_are_refused_naming_the_file() {
    let discrete = Space::Discrete { n: 2 };
    let q = |file| off_policy(PolicyKind::QValues, &discrete, Some(file), None);
    let actor = |file| off_policy(PolicyKind::SquashedGaussian, &gaussian(), Some(file), None);
    let critic = |file| off_policy(PolicyKind::SquashedGaussian, &gaussian(), None, Some(file));
    let q_interface = "expected forward(obs: Tensor[N, 4]) -> q [N, 2]";
    let actor_interface =
        "expected forward(obs: Tensor[N, 4]) -> (mean [N, 2], log_std [N, 2] or [2])";
    let critic_interface =
        "expected forward(obs: Tensor[N, 4], action: Tensor[N, 2]) -> q [N, 1] or [N]";
    let cases = [
        (
            q("fits.pt"),
            "model.torchscript",
            "fits.pt",
            q_interface,
            "returned a tuple of 2, not a single tensor",
        ),
        (
            q("q_wide.pt"),
            "model.torchscript",
            "q_wide.pt",
            q_interface,
            "it returned shape [2, 3]",
        ),
        (
            actor("q.pt"),
            "model.torchscript",
            "q.pt",
            actor_interface,
            "a single tensor, not a tuple",
        ),
        (
            critic("q.pt"),
            "model.torchscript_critic",
            "q.pt",
            critic_interface,
            "calling it failed",
        ),
        (
            critic("not_torchscript.pt"),
            "model.torchscript_critic",
            "not_torchscript.pt",
            "",
            "is not a TorchScript module",
        ),
    ];
    for (built, key, file, interface, why) in cases {
        let error = built.expect_err(file);
        let path = modules().join(file).display().to_string();
        assert!(error.starts_with(&format!("{key}: {path}: ")), "{error}");
        assert!(error.contains(interface), "{error}");
        assert!(error.contains(why), "{file}: {error}");
    }
}

/// Which algorithms take which module is the registry's: PPO's actor-critic, DQN's
/// Q-network, SAC's actor and critic; VPG takes none and DQN no critic.
#[test]
fn the_registry_decides_which_algorithms_take_a_module() {
    let config = |algo: &str, env: &str, keys: &str| {
        let text = format!("[env]\nid = \"{env}\"\n[algo]\nname = \"{algo}\"\n[model]\n{keys}\n");
        RunConfig::from_toml(&text, "t").and_then(|c| c.validate().map(|()| c))
    };
    let module = "torchscript = \"m.pt\"";
    let both = "torchscript = \"a.pt\"\ntorchscript_critic = \"c.pt\"";
    for (algo, env, keys) in [
        ("ppo", "CartPole-v1", module),
        ("dqn", "CartPole-v1", module),
        ("sac", "Pendulum-v1", both),
        ("td3", "Pendulum-v1", "torchscript_critic = \"c.pt\""),
    ] {
        config(algo, env, keys).unwrap_or_else(|e| panic!("{algo}: {e}"));
    }
    let refused = |algo, keys, key: &str| {
        let error = config(algo, "CartPole-v1", keys)
            .expect_err(algo)
            .to_string();
        let named = format!("invalid config value {key}: ");
        assert!(error.starts_with(&named), "{algo}: {error}");
    };
    refused("vpg", module, "model.torchscript");
    refused(
        "dqn",
        "torchscript_critic = \"c.pt\"",
        "model.torchscript_critic",
    );
    refused(
        "dqn",
        "torchscript = \"q.pt\"\nlstm_size = 16",
        "model.lstm_size",
    );
}

/// SAC from the user's actor and critic: the parameters live under `pi.script.` and each
/// critic's `qf<i>.script.`, the twin critics start from different draws of the same
/// values, the policy acts in the action box, a gradient step through the store changes
/// the modules, and the trained weights, broadcast or copied to a target, make the same
/// networks.
#[test]
fn sac_modules_train_and_travel_as_weights() {
    let model = off_policy(
        PolicyKind::SquashedGaussian,
        &gaussian(),
        Some("actor.pt"),
        Some("critic.pt"),
    )
    .expect("fits");
    let params: std::collections::BTreeMap<String, Tensor> =
        model.named_parameters().into_iter().collect();
    for name in [
        "pi.script.mean.weight",
        "qf0.script.q.weight",
        "qf1.script.q.weight",
    ] {
        assert!(params.contains_key(name), "{:?}", params.keys());
    }
    assert!(
        !params.keys().any(|n| n.contains("common")),
        "{:?}",
        params.keys()
    );
    let (w0, w1) = (
        &params["qf0.script.body.0.weight"],
        &params["qf1.script.body.0.weight"],
    );
    assert!(!w0.equal(w1), "twin critics start as copies");
    let sorted = |t: &Tensor| t.reshape([-1]).sort(0, false).0;
    assert!(
        sorted(w0).equal(&sorted(w1)),
        "a permutation of the file's values"
    );

    let obs = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
    let step = model.act(&obs, false);
    assert_eq!(step.action.size(), [16, 2]);
    assert!(step.action.abs().max().double_value(&[]) <= 1.0);
    let before = model.qs(&obs, &step.action);
    assert_eq!(before.size(), [2, 16]);
    let mut opt =
        tch::nn::OptimizerConfig::build(tch::nn::Adam::default(), model.var_store(), 1e-2)
            .expect("an optimiser");
    let (action, log_prob) = model.sample_action(&obs);
    let q = model.qs(&obs, &model.to_env_scale(&action));
    opt.backward_step(&(q.square().mean(Kind::Float) + log_prob.mean(Kind::Float)));
    let after = model.qs(&obs, &step.action);
    assert!(
        !before.allclose(&after, 1e-6, 1e-6, false),
        "training changed nothing"
    );

    let mut actor = off_policy(
        PolicyKind::SquashedGaussian,
        &gaussian(),
        Some("actor.pt"),
        Some("critic.pt"),
    )
    .expect("fits");
    let mean = |m: &OffPolicyModel| m.act(&obs, true).action;
    assert!(!mean(&actor).equal(&mean(&model)));
    actor
        .import(&model.export().expect("finite"))
        .expect("same names");
    assert!(mean(&actor).equal(&mean(&model)));
    assert!(actor.qs(&obs, &step.action).equal(&after));
}

/// DQN from the user's Q-network: its parameters under `q.script.`, greedy actions over its
/// Q-values, and a target built from the same file is the online network after a hard copy.
#[test]
fn a_q_network_module_acts_greedily_and_copies_to_its_target() {
    let discrete = Space::Discrete { n: 2 };
    let online = off_policy(PolicyKind::QValues, &discrete, Some("q.pt"), None).expect("fits");
    let names: Vec<String> = online
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"q.script.q.weight".into()), "{names:?}");
    let obs = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
    let q = online.q_values(&obs);
    assert_eq!(q.size(), [16, 2]);
    assert!(online.act(&obs, true).action.equal(&q.argmax(1, false)));
    let mut opt =
        tch::nn::OptimizerConfig::build(tch::nn::Adam::default(), online.var_store(), 1e-2)
            .expect("an optimiser");
    opt.backward_step(&online.q_values(&obs).square().mean(Kind::Float));
    let mut target = off_policy(PolicyKind::QValues, &discrete, Some("q.pt"), None).expect("fits");
    assert!(!target.q_values(&obs).equal(&online.q_values(&obs)));
    target.copy_from(&online, 1.0);
    assert!(target.q_values(&obs).equal(&online.q_values(&obs)));
}

/// Discrete SAC from the user's modules: the actor's logits and each critic's Q-values, one
/// per action, both `forward(obs) -> [N, n]`; a critic that takes the action is refused.
#[test]
fn discrete_sac_takes_logits_and_q_value_modules() {
    let discrete = Space::Discrete { n: 2 };
    let model = off_policy(
        PolicyKind::Categorical,
        &discrete,
        Some("q.pt"),
        Some("q.pt"),
    )
    .expect("fits");
    let obs = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
    assert_eq!(model.qs_all(&obs).size(), [2, 16, 2]);
    let (probs, _) = model.categorical(&obs);
    assert!(model.act(&obs, true).action.equal(&probs.argmax(1, false)));
    let error = off_policy(PolicyKind::Categorical, &discrete, None, Some("critic.pt"))
        .expect_err("a critic of continuous actions");
    assert!(
        error.starts_with("model.torchscript_critic: ")
            && error.contains("expected forward(obs: Tensor[N, 4]) -> q [N, 2]"),
        "{error}"
    );
}
