//! A user error (an unknown config key, an address that cannot be served) ends every binary
//! with its message and context chain on stderr and exit code 1, and no backtrace even with
//! `RUST_BACKTRACE=1` (see `fleetrl_runtime::telemetry::exit_code`).

use std::process::Command;

use fleetrl_tests::compose::repo_root;

/// Runs `binary ARGS` from the repository root with backtraces asked for; its stderr, after
/// checking that it failed with exit code 1 and printed no backtrace.
fn failing(binary: &str, args: &[&str]) -> anyhow::Result<String> {
    let path = fleetrl_runtime::launch::bin_dir()?.join(binary);
    let run = Command::new(path)
        .current_dir(repo_root())
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()?;
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert_eq!(run.status.code(), Some(1), "{binary}: {stderr}");
    assert!(
        !stderr.to_lowercase().contains("backtrace"),
        "{binary} printed a backtrace: {stderr}"
    );
    Ok(stderr)
}

#[test]
fn the_learner_names_an_unknown_key_without_a_backtrace() -> anyhow::Result<()> {
    let stderr = failing(
        "fleet-learner",
        &[
            "--listen",
            "127.0.0.1:0",
            "--replay",
            "127.0.0.1:9",
            "--config",
            "configs/cartpole-ppo.toml",
            "--set",
            "learner.no_such_key=1",
        ],
    )?;
    assert!(stderr.contains("error: loading the run config"), "{stderr}");
    assert!(
        stderr.contains("caused by: ") && stderr.contains("no_such_key"),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn the_replay_server_names_an_unknown_key_without_a_backtrace() -> anyhow::Result<()> {
    let tables = fleetrl_tests::scratch("fleetrl-bad-tables").with_extension("toml");
    std::fs::write(&tables, "[[table]]\nname = \"t\"\nno_such_key = 1\n")?;
    let path = tables.display().to_string();
    let stderr = failing(
        "fleet-replay-server",
        &["--listen", "127.0.0.1:0", "--tables", &path],
    )?;
    std::fs::remove_file(&tables)?;
    assert!(stderr.contains("error: parsing tables file"), "{stderr}");
    assert!(stderr.contains("no_such_key"), "{stderr}");
    Ok(())
}

#[test]
fn the_cli_names_an_unknown_key_without_a_backtrace() -> anyhow::Result<()> {
    let out = fleetrl_tests::scratch("fleetrl-user-errors");
    let out = out.to_string_lossy().into_owned();
    let stderr = failing(
        "fleetrl",
        &[
            "train",
            "--config",
            "cartpole-ppo",
            "--set",
            "algo.no_such_key=1",
            "--out",
            &out,
        ],
    )?;
    assert!(stderr.contains("error: loading the run config"), "{stderr}");
    assert!(stderr.contains("no_such_key"), "{stderr}");
    Ok(())
}

#[test]
fn the_actor_names_an_address_it_cannot_serve_without_a_backtrace() -> anyhow::Result<()> {
    let stderr = failing(
        "fleet-actor",
        &[
            "--metrics-listen",
            "127.0.0.1:99999",
            "--connect-patience-s",
            "1",
        ],
    )?;
    assert!(
        stderr.contains("error: serving metrics on 127.0.0.1:99999"),
        "{stderr}"
    );
    Ok(())
}

/// `fleetrl train`'s own mistakes: each error names what to fix, where the user will look.
#[test]
fn fleetrl_train_names_the_mistake_itself() -> anyhow::Result<()> {
    let out = fleetrl_tests::scratch("fleetrl-user-errors");
    let out = out.display().to_string();
    let train = |set: &str| failing("fleetrl", &["train", "--set", set, "--out", &out]);

    // No actors: refused at once rather than a minute of nothing.
    let stderr = train("actors.count=0")?;
    assert!(stderr.contains("actors.count = 0"), "{stderr}");

    // A bad `--set` value names the `--set`, not the preset file it overrides.
    let stderr = train("seed=abc")?;
    assert!(stderr.contains("--set seed=abc"), "{stderr}");
    assert!(!stderr.contains("cartpole-ppo.toml"), "{stderr}");

    // A role that fails to start: its own error is in the launcher's message.
    let stderr = train("env.id=CartPol-v1")?;
    assert!(
        stderr.contains("exited before listening")
            && stderr.contains("unknown environment `CartPol-v1` (did you mean `CartPole-v1`?)"),
        "{stderr}"
    );

    // A mistyped preset: the nearest preset is named, before anything starts.
    let stderr = failing(
        "fleetrl",
        &["train", "--config", "cartpole-pp", "--out", &out],
    )?;
    assert!(
        stderr.contains(
            "no config file or preset named `cartpole-pp` (did you mean `cartpole-ppo`?)"
        ),
        "{stderr}"
    );

    // A convolution key on CartPole's flat observations: the learner names the key.
    let stderr = train("model.use_maxpool=true")?;
    assert!(
        stderr.contains("model.use_maxpool") && stderr.contains("image observations"),
        "{stderr}"
    );

    // Recurrent TD3 on discrete actions: the learner names the algorithm key.
    let stderr = failing(
        "fleetrl",
        &[
            "train",
            "--config",
            "pendulumnovel-td3-lstm",
            "--set",
            "env.id=CartPole-v1",
            "--out",
            &out,
        ],
    )?;
    assert!(
        stderr.contains("algo.name: td3 trains a deterministic policy of continuous actions"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}
