//! fleetrl: the front door. `fleetrl train` runs a whole actor-learner cluster on this machine;
//! `fleetrl eval` scores a checkpoint.

mod eval_cmd;
mod export_cmd;
mod health_cmd;
mod keyboard;
mod minari;
mod plot_cmd;
mod progress;
mod record_cmd;
mod summary;
mod train;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use fleetrl_core::config::RunConfig;
use fleetrl_runtime::telemetry;

/// fleetrl: distributed actor-learner reinforcement learning.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train: start a replay server, a learner and N actors on loopback and run to the stop condition.
    ///
    /// Ctrl-C or SIGTERM stops the run: a checkpoint, a final evaluation (a second one skips
    /// it), summary.json, exit status 130.
    Train {
        /// A TOML file or a preset name from configs/ [default: cartpole-ppo; with --resume,
        /// the checkpoint's own config].
        #[arg(long)]
        config: Option<String>,
        /// Config overrides, `dotted.key=value` (e.g. seed=1, actors.count=4).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        overrides: Vec<String>,
        /// Output directory (config, logs, checkpoints, TensorBoard, summary.json).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Resume from a checkpoint directory, a run directory (its newest checkpoint), or
        /// `latest`: the newest in <out>/checkpoints.
        #[arg(long)]
        resume: Option<String>,
        /// Start a new run from this checkpoint's model weights only (sets
        /// `learner.init_from`; on-policy algorithms).
        #[arg(long, value_name = "CHECKPOINT", conflicts_with = "resume")]
        init_from: Option<PathBuf>,
        /// Serve every role's Prometheus metrics on HOST, from PORT up: the replay server on
        /// PORT, learner rank r on PORT+1+r, actor i on PORT+1+learner.world_size+i (each
        /// address is printed at start).
        #[arg(long, value_name = "HOST:PORT")]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// Evaluate a checkpoint's deterministic policy.
    Eval {
        /// Checkpoint directory (…/checkpoints/ckpt-NNNNNNNN), or a run directory (or its
        /// checkpoints/) for the newest one.
        #[arg(long)]
        checkpoint: PathBuf,
        /// Episodes to play.
        #[arg(long, default_value_t = 20, value_parser = at_least_one)]
        episodes: usize,
        /// Seed of the first episode's env (default: the run's evaluation seed, as in training).
        #[arg(long)]
        seed: Option<u64>,
        /// Play on this env id instead of the run's (same spaces and wrappers), e.g.
        /// `gym:CartPole-v1` for gymnasium's own implementation of a native env.
        #[arg(long)]
        env: Option<String>,
        /// Meta-RL checkpoints: adapt on this task only (an id of the run's task set) instead
        /// of on every held-out test task.
        #[arg(long)]
        task: Option<u64>,
        /// KEY=VALUE: change how the checkpoint is played for this evaluation (repeatable):
        /// `eval.*` keys, and PEARL's meta-test `algo.n_exploration_eps`,
        /// `algo.n_posterior_eps` and `algo.exploration_pool=0` (explore from the prior).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Export a checkpoint's policy as a standalone TorchScript or ONNX file (observation
    /// normalisation folded in) that needs neither fleetrl nor its config (docs/torchscript.md).
    Export {
        /// Checkpoint directory (…/checkpoints/ckpt-NNNNNNNN), or a run directory (or its
        /// checkpoints/) for the newest one.
        #[arg(long)]
        checkpoint: PathBuf,
        /// The file format.
        #[arg(long, value_enum)]
        format: export_cmd::Format,
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
        /// Return the action distribution's parameters (log-probabilities, or mean and
        /// log-std) instead of the deterministic action.
        #[arg(long)]
        distribution: bool,
    },
    /// Record demonstrations: play a checkpoint's policy (or a scripted controller, or the
    /// keyboard) and write each episode as a demo file (format: fleetrl-demo, see the README).
    Record {
        /// Checkpoint directory (…/checkpoints/ckpt-NNNNNNNN) whose policy plays, or a run
        /// directory (or its checkpoints/) for the newest one.
        #[arg(
            long,
            required_unless_present_any = ["scripted", "keyboard"],
            conflicts_with_all = ["scripted", "keyboard"]
        )]
        checkpoint: Option<PathBuf>,
        /// Instead of a checkpoint, play this env id with its hand-written controller
        /// (MountainCar-v0, SparseMountainCar-v0, CartPole-v1).
        #[arg(long, conflicts_with = "keyboard")]
        scripted: Option<String>,
        /// Instead of a checkpoint, play this discrete env id from the terminal: one line per
        /// step with an action index (Enter repeats the last one, q stops the episode).
        #[arg(long)]
        keyboard: Option<String>,
        /// Directory the demo files go to (created if missing), or `minari:ID` for a Minari
        /// dataset of that id under MINARI_DATASETS_PATH (default ~/.minari/datasets).
        #[arg(long)]
        out: PathBuf,
        /// Episodes to play.
        #[arg(long, default_value_t = 1, value_parser = at_least_one)]
        episodes: usize,
        /// Env seed of the first episode (episode i uses seed + i).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Sample actions from the policy instead of taking its most likely action.
        #[arg(long)]
        stochastic: bool,
        /// Keep only episodes whose return is at least this.
        #[arg(long)]
        min_return: Option<f64>,
    },
    /// Draw learning curves: evaluation return against env steps and against wall time, one
    /// line per run, as a PNG. Runs that share a label are one line: their median at each
    /// evaluation, over a band from the lowest to the highest.
    Plot {
        /// Run output directories (their summary.json), or JSON files with an `evaluations`
        /// list (e.g. what bench/sb3_*.py print); `LABEL=RUN` names the run's line (seeds of
        /// one system under one label are drawn as one).
        #[arg(required = true)]
        runs: Vec<PathBuf>,
        /// The PNG to write.
        #[arg(long, default_value = "curves.png")]
        out: PathBuf,
        /// Title above the two panels.
        #[arg(long)]
        title: Option<String>,
    },
    /// Change a hyperparameter of a running learner (pytorchrl's `update_storage_parameter`),
    /// e.g. `fleetrl set runs/x algo.learning_rate=1e-4`: the next updates use it and the
    /// run's checkpoints record it. Keys: algo.learning_rate, entropy_loss_coeff,
    /// value_loss_coeff, clip_grad_norm, ratio_clip, epochs, normalize_advantage, discount,
    /// gae_lambda, vtrace_lambda, rho_bar, pg_rho_bar, c_bar (ppo, a2c, impala).
    Set {
        /// The run's output directory (`fleetrl train --out`): its learner's address and token.
        run: PathBuf,
        /// `algo.KEY=VALUE` (a TOML value).
        assignment: String,
        /// The learner's `host:port` instead of the run directory's `learner.addr` (a compose or
        /// Kubernetes run; the token then comes from FLEETRL_TOKEN_FILE or FLEETRL_TOKEN).
        #[arg(long)]
        learner: Option<String>,
    },
    /// Check a role's `grpc.health.v1.Health`: exit 0 if it reports SERVING (container health checks).
    Health {
        /// The server, `host:port`.
        addr: String,
        /// Service name to ask about ("" is the whole server).
        #[arg(long, default_value = "")]
        service: String,
        /// Seconds to wait for an answer.
        #[arg(long, default_value_t = 3.0)]
        timeout_s: f64,
    },
}

/// What `fleetrl train` trains without --config or --resume.
const DEFAULT_PRESET: &str = "cartpole-ppo";

fn default_out(config: &str) -> PathBuf {
    let stem = std::path::Path::new(config)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("run");
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("runs").join(format!("{stem}-{secs}"))
}

/// `--episodes`: a whole number of at least one (zero episodes have no mean return to report).
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The checkpoint `--checkpoint` means (a run directory or its `checkpoints/` mean the newest
/// one, which is then named on stderr).
fn resolve_checkpoint(path: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let resolved = fleetrl_core::checkpoint::resolve(path)?;
    if resolved != path {
        eprintln!(
            "[fleetrl] using the newest checkpoint, {}",
            resolved.display()
        );
    }
    Ok(resolved)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fleetrl_runtime::private::private_files();
    telemetry::exit_code(run().await)
}

async fn run() -> anyhow::Result<()> {
    telemetry::init("warn");
    tch::set_num_threads(1);
    let command = Cli::parse().command;
    // A bad token or certificate file is an error here, before anything connects.
    fleetrl_runtime::net::load_security()?;
    match command {
        Command::Train {
            config,
            overrides,
            out,
            resume,
            init_from,
            metrics_listen,
        } => {
            let out = out.unwrap_or_else(|| match (&config, &resume) {
                (Some(config), _) => default_out(config),
                (None, Some(_)) => default_out("resumed"),
                (None, None) => default_out(DEFAULT_PRESET),
            });
            // Before any role starts or anything is written: a --resume must have a
            // checkpoint to resume, and resumes with its config unless told otherwise.
            let resumed = train::resume_checkpoint(&out, resume.as_deref())?;
            let spec = match (&config, &resumed) {
                (Some(config), _) => config.clone(),
                (None, Some(ckpt)) => ckpt.path.join("config.toml").display().to_string(),
                (None, None) => DEFAULT_PRESET.to_string(),
            };
            let mut run = RunConfig::load(&spec, &overrides).context("loading the run config")?;
            if let Some(ckpt) = &resumed {
                run.check_resumes(&ckpt.config, &ckpt.path)?;
                let with = if config.is_some() {
                    spec.as_str()
                } else {
                    "its config"
                };
                eprintln!("[fleetrl] resuming {} with {with}", ckpt.path.display());
            }
            // Its weights and optimiser state are the learner's to load, not held here.
            drop(resumed);
            // Every role and every later `fleetrl eval` of its checkpoints reads the files.
            let model = &mut run.model;
            let modules = [
                ("model.torchscript", &mut model.torchscript),
                ("model.torchscript_critic", &mut model.torchscript_critic),
            ];
            for (key, module) in modules {
                if let Some(path) = module.as_mut() {
                    *path = std::fs::canonicalize(&*path)
                        .with_context(|| format!("{key} = {}", path.display()))?;
                }
            }
            if let Some(path) = init_from {
                let path = std::fs::canonicalize(&path)
                    .with_context(|| format!("--init-from {}", path.display()))?;
                run.learner.init_from = path.display().to_string();
            }
            let (summary, interrupted) =
                train::train(run, &out, resume.as_deref(), metrics_listen).await?;
            match summary {
                Some(summary) => {
                    println!("{}", serde_json::to_string_pretty(&summary)?);
                    eprintln!("[fleetrl] wrote {}", out.join("summary.json").display());
                }
                None => eprintln!(
                    "[fleetrl] interrupted before any evaluation finished: no summary.json; \
                     its checkpoints are in {} (`--resume latest` with the same --out continues the run)",
                    out.join("checkpoints").display()
                ),
            }
            if interrupted {
                std::process::exit(130);
            }
            Ok(())
        }
        Command::Set {
            run,
            assignment,
            learner,
        } => train::set_parameter(&run, &assignment, learner.as_deref()).await,
        Command::Eval {
            checkpoint,
            episodes,
            seed,
            env,
            task,
            sets,
        } => {
            let checkpoint = resolve_checkpoint(&checkpoint)?;
            tokio::task::spawn_blocking(move || {
                eval_cmd::run(&checkpoint, episodes, seed, env.as_deref(), task, &sets)
            })
            .await?
        }
        Command::Export {
            checkpoint,
            format,
            out,
            distribution,
        } => {
            let checkpoint = resolve_checkpoint(&checkpoint)?;
            tokio::task::spawn_blocking(move || {
                export_cmd::run(&checkpoint, format, &out, distribution)
            })
            .await?
        }
        Command::Record {
            checkpoint,
            scripted,
            keyboard,
            out,
            episodes,
            seed,
            stochastic,
            min_return,
        } => {
            let args = record_cmd::RecordArgs {
                episodes,
                seed,
                stochastic,
                min_return,
            };
            let player = match (checkpoint, scripted, keyboard) {
                (Some(checkpoint), _, _) => {
                    record_cmd::Player::Checkpoint(resolve_checkpoint(&checkpoint)?)
                }
                (None, Some(env_id), _) => record_cmd::Player::Scripted(env_id),
                (None, None, Some(env_id)) => record_cmd::Player::Keyboard(env_id),
                (None, None, None) => anyhow::bail!("give --checkpoint, --scripted or --keyboard"),
            };
            tokio::task::spawn_blocking(move || record_cmd::run(&player, &out, &args)).await?
        }
        Command::Plot { runs, out, title } => plot_cmd::run(&runs, &out, title.as_deref()),
        Command::Health {
            addr,
            service,
            timeout_s,
        } => {
            let timeout = std::time::Duration::from_secs_f64(timeout_s.max(0.1));
            health_cmd::run(&addr, &service, timeout).await
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn zero_episodes_are_refused_naming_the_flag() {
        for command in ["eval", "record"] {
            let args = ["fleetrl", command, "--checkpoint", "run", "--out", "demos"];
            let args = &args[..if command == "eval" { 4 } else { 6 }];
            let zero = [args, &["--episodes", "0"]].concat();
            let Err(error) = Cli::try_parse_from(&zero) else {
                panic!("`fleetrl {command} --episodes 0` was accepted");
            };
            let error = error.to_string();
            assert!(
                error.contains("--episodes") && error.contains("must be at least 1"),
                "{error}"
            );
            let three = [args, &["--episodes", "3"]].concat();
            assert!(Cli::try_parse_from(&three).is_ok(), "{command}");
        }
    }
}
