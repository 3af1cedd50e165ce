//! The table each kind of item goes into, as the run's configuration declares it: the one
//! place items meet the whole run config, so the item layouts themselves depend only on
//! the env and the algorithm's own options.

/// The on-policy queue table a run's actors insert into.
use fleetrl_proto::table::{FieldSpec, RateLimiterSpec, SelectorKind, TableSpec};
use fleetrl_proto::Dtype;

use super::{observations_as_bytes, rollout, round, sequence, transition};
use crate::algos::offpolicy::ReplayOptions;
use crate::algos::pearl::PearlConfig;
use crate::config::RunConfig;
use crate::envs::{self, EnvError};

/// The on-policy queue table a run's actors insert into.
pub fn rollouts(config: &RunConfig) -> Result<TableSpec, EnvError> {
    let env = envs::make_configured(&config.env)?;
    // A meta-RL item is one task's adaptation: every stage's steps, and the task.
    let stages = i64::from(config.algo.stages());
    let mut sig = rollout::signature_with_state(
        &env.observation_space(),
        &env.action_space(),
        stages * config.actors.rollout_length as i64,
        config.actors.envs_per_actor as i64,
        config.model.lstm_size as i64,
    );
    if config.item_tasks().is_some() {
        sig.fields
            .push(FieldSpec::new(rollout::field::TASK, Dtype::I64, &[]));
    }
    if env.byte_observations() {
        observations_as_bytes(&mut sig);
    }
    Ok(TableSpec::queue(
        &config.replay.table,
        config.replay.max_size,
        sig,
    ))
}

/// The replay table of a PEARL run: uniform sampling of rounds, FIFO eviction, and the
/// samples-per-insert rate limiter in rounds ([`PearlConfig::replay`]).
pub fn rounds(config: &RunConfig, pearl: &PearlConfig) -> Result<TableSpec, EnvError> {
    let env = envs::make_configured(&config.env)?;
    let replay = pearl.replay(&config.tasks);
    Ok(TableSpec {
        name: config.replay.table.clone(),
        max_size: replay.capacity,
        sampler: SelectorKind::Uniform,
        remover: SelectorKind::Fifo,
        max_times_sampled: 0,
        rate_limiter: RateLimiterSpec::SamplesPerInsert {
            samples_per_insert: replay.samples_per_insert,
            min_size_to_sample: replay.min_size,
            error_buffer: replay.effective_error_buffer(),
        },
        allow_non_finite: false,
        signature: round::signature(
            &env.observation_space(),
            &env.action_space(),
            pearl.round_steps(),
        ),
    })
}

/// The replay table an off-policy run's actors insert into: uniform or prioritized sampling,
/// FIFO eviction, and the samples-per-insert rate limiter.
pub fn transitions(config: &RunConfig, replay: &ReplayOptions) -> Result<TableSpec, EnvError> {
    // The env as the actors make it, wrappers included: they set the observation width.
    let env = envs::make_configured(&config.env)?;
    let sampler = if replay.prioritized {
        SelectorKind::Prioritized {
            exponent: replay.priority_exponent,
        }
    } else {
        SelectorKind::Uniform
    };
    let mut signature = match config.sequence_replay() {
        // R2D2, recurrent SAC: each item is a stored sequence with the recurrent state at its
        // first step.
        Some(sequences) => sequence::signature(
            &env.observation_space(),
            &env.action_space(),
            replay.sequence_length,
            sequences.state_size,
        ),
        None => transition::signature(&env.observation_space(), &env.action_space()),
    };
    if env.byte_observations() {
        observations_as_bytes(&mut signature);
    }
    // Each learner rank samples a batch for every update (their union is the update), so the
    // table serves `world_size` times the samples per insert: updates per env step stay one
    // learner's.
    let ranks = f64::from(config.learner.world_size.max(1));
    Ok(TableSpec {
        name: config.replay.table.clone(),
        max_size: replay.capacity,
        sampler,
        remover: SelectorKind::Fifo,
        max_times_sampled: 0,
        rate_limiter: RateLimiterSpec::SamplesPerInsert {
            samples_per_insert: replay.samples_per_insert * ranks,
            min_size_to_sample: replay.min_size,
            error_buffer: replay.effective_error_buffer() * ranks,
        },
        allow_non_finite: false,
        signature,
    })
}
