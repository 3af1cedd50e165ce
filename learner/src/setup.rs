//! Building the learner: its algorithm (fresh, or restored from a checkpoint), the tables it
//! declares on the replay server, and the run spec actors bootstrap from. One path for every
//! algorithm.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use fleetrl_core::algos::registry::{self, DemoRole};
use fleetrl_core::algos::Algorithm;
use fleetrl_core::checkpoint;
use fleetrl_core::collective::Group;
use fleetrl_core::config::{check_available, RunConfig};
use fleetrl_core::envs;
use fleetrl_core::items::tables;
use fleetrl_core::replay_client;
use fleetrl_proto::space::Space;
use fleetrl_proto::table::{RateLimiterSpec, TableSpec};
use fleetrl_proto::v1::RunSpec;

use crate::demos;
use crate::stats::Stats;

/// The algorithm, the counters it resumes from, and the device it trains on first.
pub(crate) struct Restored {
    pub(crate) algo: Box<dyn Algorithm>,
    pub(crate) stats: Stats,
    pub(crate) device: tch::Device,
    /// The env's action space, which every item the trainer takes is checked against.
    pub(crate) action_space: Space,
    /// The other learner processes (`learner.world_size > 1`), joined and in rank 0's state.
    pub(crate) group: Option<Arc<Group>>,
}

/// A fresh learner for `config.algo`, or one restored from `resume`: a checkpoint directory,
/// a run directory (its newest checkpoint), `latest` (the newest checkpoint under
/// `checkpoint_dir`, which must exist) or `auto` (the newest if any, else fresh: what a
/// container that restarts in place wants).
pub(crate) fn build_algorithm(
    config: &RunConfig,
    resume: Option<&str>,
    checkpoint_dir: &Path,
) -> anyhow::Result<Restored> {
    let mut restored = restore(config, resume, checkpoint_dir)?;
    let Some(spec) = config.learner.group_spec(restored.device)? else {
        return Ok(restored);
    };
    tracing::info!(rank = spec.rank, world_size = spec.world_size, rendezvous = %spec.rendezvous, backend = ?spec.backend, "joining the other learner processes");
    let group = Arc::new(Group::join(&spec, &config.to_toml())?);
    fleetrl_core::algos::join_ranks(restored.algo.as_mut(), &group)?;
    if let Some(stats) = leader_stats(&group, &restored.stats)? {
        restored.stats = stats;
    }
    tracing::info!(
        rank = spec.rank,
        "joined: every rank holds rank 0's weights and state"
    );
    restored.group = Some(group);
    Ok(restored)
}

/// Rank 0's counters (version, updates, env steps trained), which every other rank goes on
/// from; `None` on rank 0 itself.
fn leader_stats(group: &Group, mine: &Stats) -> anyhow::Result<Option<Stats>> {
    let counters = tch::Tensor::from_slice(&[
        mine.policy_version as f64,
        mine.updates as f64,
        mine.env_steps_trained as f64,
    ]);
    group.broadcast(&[counters.shallow_clone()])?;
    let read = |i: i64| counters.double_value(&[i]);
    let meta = checkpoint::CheckpointMeta {
        policy_version: read(0) as i64,
        updates: read(1) as u64,
        env_steps: read(2) as u64,
        ..Default::default()
    };
    Ok((group.rank() != 0).then(|| Stats::new(Some(&meta))))
}

/// The algorithm, fresh or from `resume` (see [`build_algorithm`]).
fn restore(
    config: &RunConfig,
    resume: Option<&str>,
    checkpoint_dir: &Path,
) -> anyhow::Result<Restored> {
    let devices = config.learner.resolve_devices(config.algo.name())?;
    check_available(&devices)?;
    tracing::info!(?devices, "learner devices");
    tch::manual_seed(config.seed as i64);
    let env = envs::make_configured(&config.env)?;
    let (obs_space, action_space) = (env.observation_space(), env.action_space());
    let mut algo = registry::build(config, &obs_space, &action_space, &devices)?;
    let fresh = |mut algo: Box<dyn Algorithm>| -> anyhow::Result<Restored> {
        if !config.learner.init_from.is_empty() {
            init_weights(algo.as_mut(), config)?;
        }
        Ok(Restored {
            algo,
            stats: Stats::new(None),
            device: devices[0],
            action_space: action_space.clone(),
            group: None,
        })
    };
    // `auto` and `latest` take the newest checkpoint that loads (see `load_newest`).
    let ckpt = match resume {
        None => return fresh(algo),
        Some("auto") => match checkpoint::load_newest(checkpoint_dir)? {
            Some(ckpt) => ckpt,
            None => {
                tracing::info!(dir = %checkpoint_dir.display(), "no checkpoint yet; starting fresh");
                return fresh(algo);
            }
        },
        Some("latest") => checkpoint::load_newest(checkpoint_dir)?.with_context(|| {
            format!(
                "no checkpoint under {} to resume from",
                checkpoint_dir.display()
            )
        })?,
        // A checkpoint, or a run directory (or its checkpoints/) for its newest one.
        Some(explicit) => checkpoint::load(
            &checkpoint::resolve(Path::new(explicit))
                .with_context(|| format!("--resume {explicit} (or `latest`, or `auto`)"))?,
        )?,
    };
    let path = ckpt.path.clone();
    config.check_resumes(&ckpt.config, &path)?;
    algo.trained_mut()
        .model_mut()
        .load_named(&ckpt.model)
        .context("restoring model weights")?;
    algo.load_state(&ckpt.state)
        .context("restoring optimiser state")?;
    tracing::info!(path = %path.display(), version = ckpt.meta.policy_version, env_steps = ckpt.meta.env_steps, "resumed");
    let stats = Stats::new(Some(&ckpt.meta));
    Ok(Restored {
        algo,
        stats,
        device: devices[0],
        action_space,
        group: None,
    })
}

/// Loads `learner.init_from`'s model weights into a fresh algorithm (nothing else: optimiser,
/// counters and schedules start anew). Off-policy algorithms are refused: their target
/// networks and replay would not match the loaded weights.
fn init_weights(algo: &mut dyn Algorithm, config: &RunConfig) -> anyhow::Result<()> {
    let path = Path::new(&config.learner.init_from);
    if registry::spec(config).family != registry::Family::OnPolicy {
        bail!(
            "learner.init_from: starting from a checkpoint's weights is supported for on-policy \
             algorithms only, not {} (resume the run instead)",
            config.algo.name()
        );
    }
    let ckpt = checkpoint::load(path).with_context(|| {
        format!(
            "learner.init_from: cannot read the checkpoint {}",
            path.display()
        )
    })?;
    algo.trained_mut()
        .model_mut()
        .load_named(&ckpt.model)
        .with_context(|| {
            format!(
                "learner.init_from: the weights in {} do not fit this run's model (trained on \
                 {} with another [model] or env?)",
                path.display(),
                ckpt.meta.env_id
            )
        })?;
    tracing::info!(path = %path.display(), trained_env_steps = ckpt.meta.env_steps, "model weights initialised from a checkpoint");
    Ok(())
}

/// The table the learner samples from, and how many items one sample takes.
pub(crate) struct Table {
    pub(crate) name: String,
    pub(crate) batch_size: u32,
    /// Prefetched batches (the channel to the trainer holds one more).
    pub(crate) prefetch: usize,
    /// Its definition, declared again on a shard that lost it (a restart without checkpoint).
    pub(crate) spec: TableSpec,
    /// Items the learner inserted itself that are no env steps (an off-policy table's
    /// `algo.replay.initial_demos`; BC's demos are its only steps, and count).
    pub(crate) uncounted_items: u64,
}

/// Declares the run's table on every shard (`EnsureTable`) and fills it with BC's demos when
/// there are some: the one place the learner says which tables it needs.
pub(crate) async fn declare_tables(config: &RunConfig, shards: &[String]) -> anyhow::Result<Table> {
    let patience = Duration::from_secs(120);
    let spec = registry::spec(config);
    let Some(replay) = spec.replay else {
        let table = tables::rollouts(config).context("building the rollout table")?;
        replay_client::ensure_table(shards, &table, patience)
            .await
            .context("creating the rollout table on the replay server")?;
        // One rollout at a time: the trainer assembles batches so it can drop stale ones.
        return Ok(Table {
            name: table.name.clone(),
            batch_size: 1,
            prefetch: 0,
            spec: table,
            uncounted_items: 0,
        });
    };
    if let Some(pearl) = config.algo.as_pearl() {
        let table = tables::rounds(config, pearl)?;
        check_batch_size(&table, replay.batch_size)?;
        replay_client::ensure_table(shards, &table, patience)
            .await
            .context("creating the round table on the replay server")?;
        return Ok(Table {
            name: table.name.clone(),
            batch_size: replay.batch_size,
            prefetch: 2,
            spec: table,
            uncounted_items: 0,
        });
    }
    let mut table = tables::transitions(config, &replay)?;
    let demo_items = match spec.demos {
        Some(given) => Some((given.role, demos::items(config, given.dir)?)),
        None => None,
    };
    if let Some((role, items)) = &demo_items {
        table.rate_limiter = match (role, table.rate_limiter) {
            // Demos are all inserted up front; BC then samples them as often as it likes.
            (DemoRole::Dataset, _) => RateLimiterSpec::MinSize {
                min_size: replay.min_size.min(items.len() as u64).max(1),
            },
            // The demos fill the table first (inserts below the minimum size never wait);
            // then the learner samples at its ratio to the actors' inserts, from the start.
            (
                _,
                RateLimiterSpec::SamplesPerInsert {
                    samples_per_insert,
                    min_size_to_sample,
                    error_buffer,
                },
            ) => RateLimiterSpec::SamplesPerInsert {
                samples_per_insert,
                min_size_to_sample: min_size_to_sample.max(items.len() as u64),
                error_buffer,
            },
            (_, other) => other,
        };
        table.max_size = table.max_size.max(items.len() as u64);
    }
    check_batch_size(&table, replay.batch_size)?;
    replay_client::ensure_table(shards, &table, patience)
        .await
        .context("creating the transition table on the replay server")?;
    let mut uncounted_items = 0;
    if let Some((role, items)) = demo_items {
        if role == DemoRole::Prefill {
            uncounted_items = items.len() as u64;
        }
        demos::insert(shards, &table.name, items).await?;
    }
    Ok(Table {
        name: table.name.clone(),
        batch_size: replay.batch_size,
        prefetch: 2,
        spec: table,
        uncounted_items,
    })
}

/// Refuses, before the first insert, a batch size the replay server could never serve: it
/// would refuse every sample request, and only once the table had filled to its minimum size.
fn check_batch_size(table: &TableSpec, batch_size: u32) -> anyhow::Result<()> {
    let most = table.max_batch_size();
    anyhow::ensure!(
        u64::from(batch_size) <= most,
        "the algorithm samples batches of {batch_size} items (its batch_size key), but table \
         `{}` can hand out at most {most} at once (its capacity, {}, and its rate limiter's \
         bounds set that); lower the batch size or raise the capacity",
        table.name,
        table.max_size
    );
    Ok(())
}

/// What actors need to start: the effective config and the table to insert into.
pub(crate) fn run_spec(config: &RunConfig) -> RunSpec {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    RunSpec {
        run_id: format!("run-{started}-{}", std::process::id()),
        config_toml: config.to_toml(),
        table: config.replay.table.clone(),
    }
}

#[cfg(test)]
mod tests {
    use fleetrl_proto::table::{FieldSpec, Signature};
    use fleetrl_proto::Dtype;

    use super::*;

    #[test]
    fn a_batch_the_table_could_never_serve_is_refused_naming_the_bound() {
        let signature = Signature {
            fields: vec![FieldSpec::new("obs", Dtype::F32, &[4])],
        };
        let table = TableSpec::replay("transitions", 1000, 1.0, 100, signature);
        let most = table.max_batch_size();
        assert!(check_batch_size(&table, most as u32).is_ok());
        let error = check_batch_size(&table, most as u32 + 1)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("batches of {} items", most + 1))
                && error.contains(&format!("at most {most} at once")),
            "{error}"
        );
    }
}
