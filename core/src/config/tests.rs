use super::*;
use crate::algos::pg::PgOptions;
use std::path::Path;

/// A loaded config changed by `--set`s keeps everything else, and a bad value is
/// refused naming the `--set` that brought it.
#[test]
fn overrides_apply_to_a_loaded_config_and_name_the_one_that_breaks_it() {
    let config = RunConfig::load("point-robot-sparse-pearl", &[]).unwrap();
    let changed = config
        .with_overrides(&["algo.n_posterior_eps=15".into()])
        .unwrap();
    assert_eq!(changed.algo.as_pearl().unwrap().n_posterior_eps, 15);
    let mut back = changed.clone();
    back.algo = config.algo.clone();
    assert_eq!(back, config, "only the key that was set changed");
    let err = config
        .with_overrides(&["algo.n_posterior_eps=-1".into()])
        .unwrap_err();
    assert!(
        err.to_string().contains("--set algo.n_posterior_eps=-1"),
        "{err}"
    );
}

#[test]
fn nan_and_infinities_are_refused_naming_the_key_except_where_they_mean_no_limit() {
    for (set, says) in [
        (
            "algo.learning_rate=inf",
            "`algo.learning_rate` = inf must be a finite number",
        ),
        (
            "algo.learning_rate=nan",
            "`algo.learning_rate` = nan is not a number",
        ),
        (
            "algo.ratio_clip=-inf",
            "`algo.ratio_clip` = -inf must be a finite number",
        ),
    ] {
        let err = RunConfig::load("cartpole-ppo", &[set.into()]).unwrap_err();
        assert!(err.to_string().contains(says), "{set}: {err}");
    }
    let err = RunConfig::from_toml(
        "[model]\nhidden_sizes = [64, 64]\ninit_log_std = nan\n",
        "t",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("`model.init_log_std` = nan"),
        "{err}"
    );
    let never = RunConfig::load("cartpole-ppo", &["stop.target_return=inf".into()]).unwrap();
    assert_eq!(never.stop.target_return, Some(f64::INFINITY));
    // A live change (`fleetrl set`) re-reads the whole config: refused there too, while
    // TD3's default infinite clip_return (targets left unclipped) passes.
    let ppo = RunConfig::load("cartpole-ppo", &[]).unwrap();
    let err = ppo
        .with_live_change("algo.learning_rate", "inf")
        .unwrap_err();
    assert!(
        err.to_string().contains("`algo.learning_rate` = inf"),
        "{err}"
    );
    let td3 = RunConfig::load("pendulum-td3", &[]).unwrap();
    assert!(td3.with_live_change("algo.discount", "0.98").is_ok());
}

#[test]
fn resume_differences_name_the_algorithm_and_network_keys_only() {
    let trained = RunConfig::load("cartpole-ppo", &[]).unwrap();
    let same = RunConfig::load(
        "cartpole-ppo",
        &[
            "stop.total_env_steps=1".into(),
            "algo.learning_rate=1e-5".into(),
        ],
    )
    .unwrap();
    assert_eq!(same.resume_differences(&trained), Vec::<String>::new());
    let wider = RunConfig::load("cartpole-ppo", &["model.hidden_sizes=[128]".into()]).unwrap();
    assert_eq!(
        wider.resume_differences(&trained),
        ["`model.hidden_sizes`: [64, 64] in the checkpoint, [128] here"]
    );
    let dqn = RunConfig::load("cartpole-dqn", &[]).unwrap();
    let err = dqn
        .check_resumes(&trained, Path::new("run/checkpoints/ckpt-00000001"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "run/checkpoints/ckpt-00000001 was trained with another algorithm or network \
             than this config's (`algo.name`: \"ppo\" in the checkpoint, \"dqn\" here; "
        ),
        "{err}"
    );
    assert!(same.check_resumes(&trained, Path::new("x")).is_ok());
}

/// Each activation against its definition at -1, 0 and 2, and by its config name.
#[test]
fn activations_by_name_and_value() {
    let x = tch::Tensor::from_slice(&[-1.0f32, 0.0, 2.0]);
    let e = (-1.0f32).exp();
    let cases = [
        ("tanh", [(-1.0f32).tanh(), 0.0, 2.0f32.tanh()]),
        ("relu", [0.0, 0.0, 2.0]),
        ("elu", [e - 1.0, 0.0, 2.0]),
        // x * Phi(x): Phi(-1) = 0.158655, Phi(2) = 0.977250
        ("gelu", [-0.158_655, 0.0, 1.954_5]),
        ("leaky_relu", [-0.01, 0.0, 2.0]),
        (
            "sigmoid",
            [1.0 / (1.0 + 1.0 / e), 0.5, 1.0 / (1.0 + (-2.0f32).exp())],
        ),
    ];
    for (name, want) in cases {
        let toml = format!("[model]\nactivation = \"{name}\"\n");
        let config = RunConfig::from_toml(&toml, "test").unwrap();
        let got = Vec::<f32>::try_from(config.model.activation.apply(&x)).unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{name}: {got:?} vs {want:?}");
        }
    }
    let err = RunConfig::from_toml("[model]\nactivation = \"swish\"\n", "test").unwrap_err();
    assert!(err.to_string().contains("swish"), "{err}");
}

#[test]
fn defaults_round_trip_through_toml() {
    let c = RunConfig::default();
    assert_eq!(RunConfig::from_toml(&c.to_toml(), "test").unwrap(), c);
    // TD3's default clip_return is infinite: TOML writes and reads `inf`.
    let td3 = RunConfig::from_toml("[algo]\nname = \"td3\"\n", "test").unwrap();
    assert_eq!(RunConfig::from_toml(&td3.to_toml(), "test").unwrap(), td3);
    let clipped = "[algo]\nname = \"ddpg\"\nclip_return = 10.0\nclip_pos_returns = true\n";
    let ddpg = RunConfig::from_toml(clipped, "test").unwrap();
    assert_eq!(RunConfig::from_toml(&ddpg.to_toml(), "test").unwrap(), ddpg);
    let err = RunConfig::from_toml("[algo]\nname = \"td3\"\nqf_weight_decay = -1.0\n", "test")
        .unwrap_err();
    assert!(err.to_string().contains("algo.qf_weight_decay"), "{err}");
}

#[test]
fn a_mistyped_value_names_its_dotted_key() {
    for (text, key) in [
        ("[actors]\ncount = 2.5\n", "actors.count"),
        (
            "[algo]\nname = \"ppo\"\nlearning_rate = \"fast\"\n",
            "algo.learning_rate",
        ),
        (
            "[model]\nhidden_sizes = [64, \"x\"]\n",
            "model.hidden_sizes",
        ),
    ] {
        let error = RunConfig::from_toml(text, "test").unwrap_err().to_string();
        assert!(error.contains(key), "{text}: {error}");
    }
}

#[test]
fn unknown_key_is_named() {
    let err = RunConfig::from_toml("[algo]\nlearning_rat = 1.0\n", "test").unwrap_err();
    assert!(err.to_string().contains("learning_rat"), "{err}");
}

#[test]
fn algo_name_selects_the_section_and_defaults_to_ppo() {
    let ppo = RunConfig::from_toml("[algo]\nratio_clip = 0.3\n", "test").unwrap();
    assert_eq!(ppo.algo.as_ppo().map(|c| c.ratio_clip), Some(0.3));
    let a2c = RunConfig::from_toml("[algo]\nname = \"a2c\"\n", "test").unwrap();
    assert_eq!(a2c.algo.name(), "a2c");
    assert_eq!(RunConfig::from_toml(&a2c.to_toml(), "test").unwrap(), a2c);
    // A key of another algorithm is unknown to this one.
    let err =
        RunConfig::from_toml("[algo]\nname = \"a2c\"\nratio_clip = 0.2\n", "test").unwrap_err();
    assert!(err.to_string().contains("ratio_clip"), "{err}");
    let err = RunConfig::from_toml("[algo]\nname = \"dqn2\"\n", "test").unwrap_err();
    assert!(err.to_string().contains("dqn2"), "{err}");
}

/// `tasks.multi_task` hands random training tasks to algorithms that play one policy,
/// on-policy or off-policy; meta-RL algorithms, which draw their own, are refused by key.
#[test]
fn multi_task_is_for_algorithms_that_play_one_policy() {
    let load = |algo: &str| {
        let text = format!(
            "[env]\nid = \"PointGoal-v0\"\n[algo]\nname = \"{algo}\"\n\
             [tasks]\nmulti_task = true\n[actors]\nenvs_per_actor = 1\n[replay]\n\
             table = \"{}\"\n",
            if algo == "ppo" {
                "rollouts"
            } else {
                "transitions"
            }
        );
        RunConfig::from_toml(&text, "t")
    };
    for algo in ["ppo", "sac", "td3", "ddpg"] {
        assert!(load(algo).is_ok(), "{algo}: {:?}", load(algo).err());
    }
    for algo in ["pearl", "maml_trpo"] {
        let err = load(algo).unwrap_err().to_string();
        assert!(err.contains("tasks.multi_task"), "{algo}: {err}");
    }
}

/// PEARL's settings that cannot work are refused by key: several envs per actor, a context
/// mini-batch that does not divide the context batch, a round without context, hindsight
/// goals out of range or on a family without them, and the replay table counts in rounds.
#[test]
fn pearl_refuses_what_cannot_work_and_counts_its_table_in_rounds() {
    let load = |extra: &str| {
        let text = format!(
            "[env]\nid = \"PointGoal-v0\"\n[algo]\nname = \"pearl\"\n{extra}\n\
             [actors]\nenvs_per_actor = 1\n"
        );
        RunConfig::from_toml(&text, "t")
    };
    let pearl = load("").unwrap();
    let replay = pearl.algo.as_pearl().unwrap().replay(&pearl.tasks);
    // Defaults: rounds of 200 steps, 1M steps held, 1000 updates per 100 rounds of 64 tasks,
    // 100 initial steps for each of 100 training tasks (50 rounds).
    assert_eq!(replay.capacity, 5000);
    assert_eq!(replay.batch_size, 64);
    assert_eq!(replay.samples_per_insert, 640.0);
    assert_eq!(replay.min_size, 50);
    let refused = |extra: &str, key: &str| {
        let err = load(extra).unwrap_err().to_string();
        assert!(err.contains(key), "{extra}: {err}");
    };
    refused(
        "embedding_mini_batch_size = 300",
        "algo.embedding_mini_batch_size",
    );
    refused(
        "num_steps_prior = 0\nnum_steps_posterior = 0",
        "algo.num_steps_prior",
    );
    refused("meta_batch_size = 0", "algo.meta_batch_size");
    refused("relabel_fraction = 1.5", "algo.relabel_fraction");
    refused("exploration_pool = 100000", "algo.exploration_pool");
    // Hindsight goals are the sparse robot's: PointGoal-v0's rounds cannot be relabelled.
    refused("relabel_fraction = 0.5", "env.id is \"PointGoal-v0\"");
    // The initial collection is per training task: 2,000 x 100 tasks outlasts the budget.
    refused(
        "num_initial_steps = 2000\n[stop]\ntotal_env_steps = 100000",
        "algo.num_initial_steps x tasks.num_train (200000 env steps)",
    );
    refused(
        "num_initial_steps = 2000\nreplay_buffer_size = 100000\n\
         [stop]\ntotal_env_steps = 1000000",
        "must fit in algo.replay_buffer_size (100000)",
    );
    let text = "[env]\nid = \"PointGoal-v0\"\n[algo]\nname = \"pearl\"\n\
                [actors]\nenvs_per_actor = 4\n";
    let err = RunConfig::from_toml(text, "t").unwrap_err().to_string();
    assert!(err.contains("actors.envs_per_actor"), "{err}");
}

/// Every preset shipped in `configs/` parses and passes validation as it stands.
#[test]
fn every_preset_is_a_valid_config() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let origin = path.display().to_string();
            if let Err(err) = RunConfig::from_toml(&text, &origin) {
                panic!("{origin}: {err}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} presets in {}", dir.display());
}

/// A mistyped preset name says which preset was probably meant and lists them all (the
/// test binary finds `configs/` above `target/`); a path that does not exist stays a file
/// error.
#[test]
fn a_mistyped_preset_names_the_nearest_and_lists_the_presets() {
    let err = RunConfig::load("cartpole-pp", &[]).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "no config file or preset named `cartpole-pp` (did you mean `cartpole-ppo`?); \
             the presets: acrobot-ppo, "
        ),
        "{err}"
    );
    assert!(err.contains(", pendulum-sac, "), "{err}");
    let err = RunConfig::load("no/such.toml", &[])
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("cannot read config no/such.toml"), "{err}");
}

#[test]
fn an_off_policy_budget_that_never_fills_the_table_is_refused() {
    let text = "[algo]\nname = \"sac\"\n[algo.replay]\nmin_size = 10000\n\
                [stop]\ntotal_env_steps = 5000\n";
    let err = RunConfig::from_toml(text, "test").unwrap_err().to_string();
    assert!(
        err.contains("stop.total_env_steps") && err.contains("10000"),
        "{err}"
    );
    let text = text.replace("5000", "20000");
    assert!(RunConfig::from_toml(&text, "test").is_ok());
}

#[test]
fn garage_entropy_checks_are_enforced() {
    let text = "[algo]\nname = \"vpg\"\nentropy_method = \"max\"\npolicy_ent_coeff = 0.1\n";
    let err = RunConfig::from_toml(text, "test").unwrap_err();
    assert!(err.to_string().contains("algo.center_adv"), "{err}");
}

#[test]
fn the_advantage_and_entropy_keys_are_one_group() {
    let keys: Vec<String> = toml::Table::try_from(PgOptions::default())
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut listed: Vec<&str> = PgOptions::KEYS.to_vec();
    listed.sort_unstable();
    assert_eq!(keys, listed, "PgOptions::KEYS names every field");
    for name in ["vpg", "trpo", "maml_trpo"] {
        let text = format!(
            "[algo]\nname = \"{name}\"\ncenter_adv = false\npositive_adv = true\ndiscount = 0.9\n"
        );
        let c = RunConfig::from_toml(&text, "test").unwrap();
        let options = c.algo.section().options().copied().unwrap();
        assert!(!options.center_adv && options.positive_adv, "{name}");
        assert_eq!(c.algo.discount(), 0.9);
        assert_eq!(RunConfig::from_toml(&c.to_toml(), "test").unwrap(), c);
        let err = RunConfig::from_toml(&text.replace("false", "3"), "test").unwrap_err();
        assert!(err.to_string().contains("algo.center_adv"), "{name}: {err}");
    }
    let err =
        RunConfig::from_toml("[algo]\nname = \"dqn\"\ncenter_adv = false\n", "t").unwrap_err();
    assert!(err.to_string().contains("center_adv"), "{err}");
    let err = RunConfig::from_toml("[algo]\nname = \"vpg\"\ncenter_ad = false\n", "t").unwrap_err();
    assert!(err.to_string().contains("center_ad"), "{err}");
}

#[test]
fn off_policy_sections_parse_and_ddpg_gets_its_defaults() {
    let text = "[algo]\nname = \"ddpg\"\n[algo.replay]\nbatch_size = 32\n";
    let c = RunConfig::from_toml(text, "test").unwrap();
    let AlgoConfig::Ddpg(d) = &c.algo else {
        panic!("{:?}", c.algo)
    };
    assert_eq!((d.num_critics, d.policy_delay, d.target_noise), (1, 1, 0.0));
    assert_eq!(d.replay.batch_size, 32);
    assert!(c.algo.is_off_policy());
    assert_eq!(RunConfig::from_toml(&c.to_toml(), "test").unwrap(), c);
    let err = RunConfig::from_toml("[algo]\nname = \"sac\"\n[algo.replay]\nn_stp = 3\n", "t")
        .unwrap_err();
    assert!(err.to_string().contains("n_stp"), "{err}");
    let err = RunConfig::from_toml("[algo]\nname = \"bc\"\n", "t").unwrap_err();
    assert!(err.to_string().contains("algo.demos"), "{err}");
    // Recurrent SAC, TD3 and DDPG replay sequences as R2D2 does, with the states of the
    // policy's core and each critic's; BC stays feed-forward.
    let err =
        RunConfig::from_toml("[model]\nlstm_size = 8\n[algo]\nname = \"bc\"\n", "t").unwrap_err();
    assert!(err.to_string().contains("model.lstm_size: "), "{err}");
    for (algo, state_size) in [("dqn", 8), ("sac", 24), ("td3", 24), ("ddpg", 16)] {
        let text = format!("[model]\nlstm_size = 8\n[algo]\nname = \"{algo}\"\n");
        let config = RunConfig::from_toml(&text, "t").unwrap();
        let sequences = config.sequence_replay();
        assert_eq!(sequences.map(|s| s.state_size), Some(state_size), "{algo}");
    }
    let rsac = "[model]\nlstm_size = 8\n[algo]\nname = \"sac\"\n";
    for (extra, key) in [
        (
            "[algo.replay]\nsequence_length = 8\nburn_in = 7\n",
            "algo.replay.burn_in",
        ),
        ("[algo.caps]\ntemporal_weight = 0.1\n", "algo.caps"),
        (
            "[algo.replay]\ninitial_demos = \"d\"\n",
            "algo.replay.initial_demos",
        ),
    ] {
        let err = RunConfig::from_toml(&format!("{rsac}{extra}"), "t").unwrap_err();
        assert!(err.to_string().contains(&format!("{key}: ")), "{err}");
    }
    let r2d2 = "[model]\nlstm_size = 8\n[algo]\nname = \"dqn\"\n";
    assert!(RunConfig::from_toml(r2d2, "t").is_ok());
    let text = format!("{r2d2}[algo.replay]\nsequence_length = 10\nburn_in = 9\n");
    let err = RunConfig::from_toml(&text, "t").unwrap_err();
    assert!(err.to_string().contains("algo.replay.burn_in"), "{err}");
    let text = "[algo]\nname = \"sac\"\n[ppod]\nenabled = true\ndemos_dir = \"d\"\n";
    let err = RunConfig::from_toml(text, "t").unwrap_err();
    assert!(err.to_string().contains("ppod.enabled"), "{err}");
}

#[test]
fn vtrace_section_turns_vtrace_on_and_is_checked() {
    let config = RunConfig::from_toml("[algo]\nname = \"a2c\"\n[algo.vtrace]\n", "t").unwrap();
    let AlgoConfig::A2c(a2c) = &config.algo else {
        panic!("a2c")
    };
    assert_eq!(a2c.vtrace, Some(VtraceClips::default()));
    let err = RunConfig::from_toml("[algo.vtrace]\nc_bar = 0.0\n", "t").unwrap_err();
    assert!(err.to_string().contains("algo.vtrace.c_bar"), "{err}");
    // A live change is refused where learners would disagree.
    let mut several = RunConfig::default();
    several.learner.world_size = 2;
    let err = several
        .with_live_change("algo.learning_rate", "1e-4")
        .unwrap_err();
    assert!(err.to_string().contains("learner.world_size"), "{err}");
    let (_, before, after) = (RunConfig::default())
        .with_live_change("algo.learning_rate", "1e-4")
        .unwrap();
    assert_eq!((before.as_str(), after.as_str()), ("0.0003", "0.0001"));
    // Layers before the LSTM need one, and an on-policy algorithm.
    let err = RunConfig::from_toml("[model]\npre_lstm_sizes = [32]\n", "t").unwrap_err();
    assert!(err.to_string().contains("model.pre_lstm_sizes"), "{err}");
    let text = "[model]\nlstm_size = 8\npre_lstm_sizes = [32]\n[algo]\nname = \"dqn\"\n";
    let err = RunConfig::from_toml(text, "t").unwrap_err();
    assert!(err.to_string().contains("model.pre_lstm_sizes"), "{err}");
    let text = "[model]\nlstm_size = 8\npre_lstm_sizes = [32]\n[algo]\nname = \"impala\"\n";
    assert!(RunConfig::from_toml(text, "t").is_ok());
    // Padding after episode ends (mid_batch_reset = false) is masked by ppo and a2c only;
    // alternating acting needs two equal groups and plain on-policy rollouts. Each key
    // accepts its first case and refuses the others by name.
    let cases: [(&str, &str, &[&str]); 2] = [
        (
            "mid_batch_reset = false",
            "[algo]\nname = \"a2c\"\n",
            &[
                "[algo]\nname = \"impala\"\n",
                "[algo]\nname = \"dqn\"\n",
                "[ppod]\nenabled = true\n",
                "[env]\nid = \"gym:CartPole-v1\"\nvectorization = \"async\"\n",
            ],
        ),
        (
            "alternating = true",
            "",
            &[
                "envs_per_actor = 3\n",
                "[algo]\nname = \"dqn\"\n",
                "[algo]\nname = \"maml_vpg\"\n",
                "[ppod]\nenabled = true\n",
            ],
        ),
    ];
    for (setting, accepted, refused) in cases {
        let parse = |rest: &str| RunConfig::from_toml(&format!("[actors]\n{setting}\n{rest}"), "t");
        assert!(parse(accepted).is_ok(), "{setting}");
        let key = format!("actors.{}", setting.split(' ').next().unwrap_or_default());
        for rest in refused {
            let err = parse(rest).unwrap_err();
            assert!(err.to_string().contains(&key), "{rest}: {err}");
        }
    }
    // V-trace scores a recurrent batch by unrolling over its sequences.
    assert!(RunConfig::from_toml("[algo.vtrace]\n[model]\nlstm_size = 8\n", "t").is_ok());
    let err = RunConfig::from_toml("[algo]\nname = \"vpg\"\n[algo.vtrace]\n", "t");
    assert!(err.unwrap_err().to_string().contains("vtrace"));
    // Intrinsic rewards are for PPO and A2C; an off-policy algorithm names the key.
    let err = RunConfig::from_toml("[algo]\nname = \"dqn\"\n[algo.intrinsic]\n", "t");
    assert!(err.unwrap_err().to_string().contains("intrinsic"));
    let text = "[algo.intrinsic]\ndiscount = 1.5\n";
    let err = RunConfig::from_toml(text, "t").unwrap_err();
    assert!(err.to_string().contains("algo.intrinsic.discount"), "{err}");
}

#[test]
fn minibatch_size_must_divide_the_batch() {
    // The default batch: 2 rollouts x 32 steps x 4 envs = 256 env steps.
    assert!(RunConfig::from_toml("[algo]\nminibatch_size = 64\n", "t").is_ok());
    let err = RunConfig::from_toml("[algo]\nminibatch_size = 100\n", "t").unwrap_err();
    assert!(err.to_string().contains("algo.minibatch_size"), "{err}");
    let text = "[algo]\nminibatch_size = 64\n[model]\nlstm_size = 8\n";
    let err = RunConfig::from_toml(text, "t").unwrap_err();
    assert!(err.to_string().contains("algo.minibatch_size"), "{err}");
}

#[test]
fn convolution_keys_must_agree_in_length() {
    let text = "[model]\nchannels = [16, 32]\nkernel_sizes = [3]\n";
    let err = RunConfig::from_toml(text, "t").unwrap_err().to_string();
    assert!(
        err.contains("model.kernel_sizes") && err.contains("(2)"),
        "{err}"
    );
    let err = RunConfig::from_toml("[model]\nstrides = [2]\n", "t").unwrap_err();
    assert!(err.to_string().contains("model.strides"), "{err}");
    let text = "[model]\nchannels = [16]\nkernel_sizes = [3]\nfc_sizes = [0]\n";
    let err = RunConfig::from_toml(text, "t").unwrap_err();
    assert!(err.to_string().contains("model.fc_sizes"), "{err}");
    let text = "[model]\nchannels = [16]\nkernel_sizes = [3]\nfc_sizes = []\n";
    let config = RunConfig::from_toml(text, "t").unwrap();
    assert_eq!(config.model.fc_sizes, Some(vec![]));
}

#[test]
fn out_of_range_is_named() {
    let err = RunConfig::from_toml("[algo]\ndiscount = 1.5\n", "test").unwrap_err();
    assert!(err.to_string().contains("algo.discount"), "{err}");
}

/// An insert request stacks 1 to 1,024 items: 0 would never send, and the cap bounds the size of
/// one request.
#[test]
fn items_per_request_is_bounded_and_named() {
    let config = RunConfig::load("halfcheetah-td3", &[]).unwrap();
    let replay = |c: &RunConfig| {
        crate::algos::registry::spec(c)
            .replay
            .unwrap()
            .items_per_request
    };
    assert_eq!(replay(&config), 64, "the default");
    let lockstep = config
        .with_overrides(&["algo.replay.items_per_request=1".into()])
        .unwrap();
    assert_eq!(replay(&lockstep), 1);
    for bad in ["0", "1025"] {
        let set = format!("algo.replay.items_per_request={bad}");
        let err = config.with_overrides(&[set]).unwrap_err().to_string();
        assert!(
            err.contains("algo.replay.items_per_request") && err.contains("[1, 1024]"),
            "{err}"
        );
    }
}

/// The presets' text, one string a preset: what the config fuzzing below mutates.
fn preset_texts() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut texts: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
        .collect();
    texts.sort();
    texts
}

/// Values of every TOML type, and numbers at the edges of every range a key may have.
fn any_value() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        prop::sample::select(vec![
            "0",
            "-1",
            "1",
            "2",
            "1e308",
            "-1e308",
            "nan",
            "inf",
            "-inf",
            "0.0",
            "1e-320",
            "9223372036854775807",
            "-9223372036854775808",
            "true",
            "\"\"",
            "[]",
            "{}",
            "[0]",
            "[-1, 0]",
            "\"cpu\"",
            "\"cuda:99\"",
            "\"é€\"",
            "[[1]]",
        ])
        .prop_map(str::to_string),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        "\"[a-zA-Z0-9_.:-]{0,12}\"",
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

    /// A preset with one `key = value` line given any value, or any text at all:
    /// parsing gives a config or a `ConfigError`, never a panic.
    #[test]
    fn any_config_text_is_a_config_or_an_error(
        preset in proptest::prelude::any::<proptest::sample::Index>(),
        line in proptest::prelude::any::<proptest::sample::Index>(),
        value in any_value(),
        noise in ".{0,64}",
    ) {
        let texts = preset_texts();
        let text = preset.get(&texts);
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let keyed: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].contains(" = ")).collect();
        if !keyed.is_empty() {
            let at = *line.get(&keyed);
            let key = lines[at].split(" = ").next().unwrap_or_default().to_string();
            lines[at] = format!("{key} = {value}");
        }
        let _ = RunConfig::from_toml(&lines.join("\n"), "fuzz");
        let _ = RunConfig::from_toml(&noise, "fuzz");
        let _ = RunConfig::from_toml(&format!("{}\n{noise}", lines.join("\n")), "fuzz");
    }
}

/// A nested `[algo]` table fills what it leaves out from its algorithm's own defaults: SAC's
/// exploration has no epsilon and no added noise, its replay a batch of 256, and writing one
/// key of either table keeps the rest (serde alone filled them from epsilon-greedy's 1.0 ->
/// 0.05 and a batch of 32). A key the table does not know is still refused by name.
#[test]
fn a_nested_algo_table_keeps_its_algorithms_defaults_for_what_it_leaves_out() {
    let text = "[algo]\nname = \"sac\"\n[algo.explore]\nrandom_steps = 777\n\
                [algo.replay]\nmin_size = 500\n";
    let config = RunConfig::from_toml(text, "test").unwrap();
    let crate::algos::config::AlgoConfig::Sac(sac) = &config.algo else {
        panic!("not sac: {:?}", config.algo)
    };
    let default = crate::algos::sac::SacConfig::default();
    assert_eq!(sac.explore.random_steps, 777);
    assert_eq!(sac.explore.epsilon_start, 0.0);
    assert_eq!(
        sac.explore,
        crate::algos::offpolicy::Exploration {
            random_steps: 777,
            ..default.explore.clone()
        }
    );
    assert_eq!(sac.replay.min_size, 500);
    assert_eq!(sac.replay.batch_size, default.replay.batch_size);
    assert_eq!(sac.replay.batch_size, 256);
    let err = RunConfig::from_toml(
        "[algo]\nname = \"sac\"\n[algo.explore]\nrandom_stepz = 1\n",
        "test",
    )
    .unwrap_err();
    assert!(err.to_string().contains("random_stepz"), "{err}");
}

#[test]
fn on_policy_ranks_need_a_rollout_each_and_the_same_minibatch_count() {
    let ranks = "[learner]\nworld_size = 2\nbatch_rollouts = 2\n";
    assert!(RunConfig::from_toml(ranks, "t").is_ok());
    let err = RunConfig::from_toml("[learner]\nworld_size = 3\nbatch_rollouts = 2\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("learner.batch_rollouts") && err.contains("learner.world_size (3)"),
        "{err}"
    );
    let err = RunConfig::from_toml(&format!("{ranks}[algo]\nminibatch_size = 64\n"), "t")
        .unwrap_err()
        .to_string();
    assert!(err.contains("algo.minibatch_size"), "{err}");
    // Off-policy ranks sample on their own.
    let sac = "[algo]\nname = \"sac\"\n[learner]\nworld_size = 3\n";
    assert!(RunConfig::from_toml(sac, "t").is_ok());
}
