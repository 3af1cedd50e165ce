//! What actors write and learners read: fixed-length rollouts (on-policy), n-step
//! transitions and burn-in sequences (off-policy). The demo file format is `fleetrl_runtime::demo`.
//!
//! Observations of envs with byte-valued frames ([`Env::byte_observations`]: Atari, MinAtar)
//! travel and are stored as U8, a quarter of f32's bytes and exact: the actor narrows them
//! ([`narrow_observations`]), the table's signature says U8 ([`observations_as_bytes`]), and
//! the learner keeps them as bytes until they reach the device it trains on, where they are
//! widened to f32 just before the network ([`rollout::Observations`] for rollouts; transition
//! and sequence batches widen after their move to the device).
//!
//! [`Env::byte_observations`]: crate::envs::Env::byte_observations

use fleetrl_proto::table::Signature;
use fleetrl_proto::{Dtype, TensorError, TensorMap};

pub mod check;
pub mod rollout;
pub mod round;
pub mod sequence;
pub mod steps;
pub mod tables;
pub mod transition;

/// The observation fields of every item kind.
const OBSERVATION_FIELDS: [&str; 4] = [
    rollout::field::OBS,
    rollout::field::BOOTSTRAP_OBS,
    transition::field::NEXT_OBS,
    sequence::field::FINAL_OBS,
];

/// Declares `signature`'s observation fields as U8.
pub fn observations_as_bytes(signature: &mut Signature) {
    for field in &mut signature.fields {
        if OBSERVATION_FIELDS.contains(&field.name.as_str()) && field.dtype == Dtype::F32 {
            field.dtype = Dtype::U8;
        }
    }
}

/// Narrows `item`'s f32 observation fields to U8; a value that is not a whole number in
/// 0..=255 is refused (an env that claims byte observations and does not deliver them).
pub fn narrow_observations(item: &mut TensorMap) -> Result<(), TensorError> {
    for name in OBSERVATION_FIELDS {
        if let Some(tensor) = item.tensors.get_mut(name) {
            if tensor.checked_dtype()? == Dtype::F32 {
                *tensor = tensor.narrowed_to_bytes()?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;
    use fleetrl_proto::Tensor;

    fn dtypes(signature: &Signature) -> Vec<(String, Dtype)> {
        (signature.fields.iter())
            .filter(|f| OBSERVATION_FIELDS.contains(&f.name.as_str()))
            .map(|f| (f.name.clone(), f.dtype))
            .collect()
    }

    /// MinAtar grids (and Atari frames) are declared U8 in every table kind; CartPole's
    /// observations stay f32.
    #[test]
    fn byte_valued_envs_get_byte_observation_fields() {
        let rollouts = |env: &str| {
            let text = format!("[env]\nid = \"{env}\"\n[algo]\nname = \"ppo\"\n");
            tables::rollouts(&RunConfig::from_toml(&text, "t").unwrap()).unwrap()
        };
        let u8s = |names: &[&str]| -> Vec<(String, Dtype)> {
            names.iter().map(|n| (n.to_string(), Dtype::U8)).collect()
        };
        let minatar = rollouts("MinAtar/Breakout-v1");
        assert_eq!(dtypes(&minatar.signature), u8s(&["obs", "bootstrap_obs"]));
        let cartpole = rollouts("CartPole-v1");
        assert!(dtypes(&cartpole.signature)
            .iter()
            .all(|(_, d)| *d == Dtype::F32));
        for extra in ["", "[model]\nlstm_size = 16\n"] {
            let text =
                format!("[env]\nid = \"MinAtar/Breakout-v1\"\n{extra}[algo]\nname = \"dqn\"\n");
            let config = RunConfig::from_toml(&text, "t").unwrap();
            let replay = crate::algos::registry::spec(&config).replay.unwrap();
            let table = tables::transitions(&config, &replay).unwrap();
            let want = match extra.is_empty() {
                true => u8s(&["obs", "next_obs"]),
                false => u8s(&["obs", "final_obs"]),
            };
            assert_eq!(dtypes(&table.signature), want, "{extra}");
        }
    }

    /// Narrowing is exact, the learner's batch is the same as from f32 observations, and a
    /// value that is not a byte is refused by value.
    #[test]
    fn narrowed_rollouts_read_back_exactly_and_fractions_are_refused() {
        let (t, m, d) = (3, 2, 4);
        let mut builder = rollout::RolloutBuilder::new(t, m, d);
        for step in 0..t {
            let obs: Vec<f32> = (0..m * d)
                .map(|i| ((step * 97 + i * 31) % 256) as f32)
                .collect();
            let zeros = vec![0.0; m];
            builder.push(rollout::StepRecord {
                obs: &obs,
                action: &rollout::Actions::Discrete(vec![1; m]),
                log_prob: &zeros,
                value: &zeros,
                reward: &zeros,
                terminated: &[false; 2],
                truncated: &[false; 2],
                final_value: &zeros,
            });
        }
        let bootstrap = rollout::Bootstrap {
            value: vec![0.0; m],
            obs: vec![255.0; m * d],
        };
        let wide = builder.finish(&bootstrap, 3);
        let mut narrow = wide.clone();
        narrow_observations(&mut narrow).unwrap();
        let obs = narrow.field(rollout::field::OBS).unwrap();
        assert_eq!(obs.checked_dtype().unwrap(), Dtype::U8);
        assert_eq!(obs.bytes().len(), t * m * d);
        let stacked = |item: &TensorMap| {
            TensorMap::from_pairs(
                (item.tensors.iter()).map(|(k, v)| (k.clone(), Tensor::stack(&[v]).unwrap())),
            )
        };
        let from_bytes = rollout::RolloutBatch::from_stacked(&stacked(&narrow)).unwrap();
        let from_floats = rollout::RolloutBatch::from_stacked(&stacked(&wide)).unwrap();
        // The learner keeps the bytes until they reach the device, and widens them there.
        assert!(matches!(from_bytes.obs, rollout::Observations::U8(_)));
        assert!(from_bytes
            .obs
            .to_tensor(tch::Device::Cpu)
            .equal(&from_floats.obs.to_tensor(tch::Device::Cpu)));
        let same_obs = rollout::RolloutBatch {
            obs: from_floats.obs.clone(),
            ..from_bytes
        };
        assert_eq!(same_obs, from_floats);
        let mut fractional =
            TensorMap::from_pairs([("obs", Tensor::from_slice(&[2], &[1.0f32, 0.5]))]);
        let error = narrow_observations(&mut fractional).unwrap_err();
        assert_eq!(error, TensorError::NotAByte("0.5".into()));
        let mut negative = TensorMap::from_pairs([("next_obs", Tensor::scalar(-1.0f32))]);
        assert!(narrow_observations(&mut negative).is_err());
    }
}
