//! Fixtures for the algorithms' unit tests.

use tch::{Device, Tensor};

use crate::items::rollout::{Actions, Observations, RolloutBatch};
use crate::models::config::ModelConfig;
use crate::models::ActorCritic;
use fleetrl_proto::space::Space;

/// A fresh CartPole-shaped (4 observations, 2 actions) actor-critic, seeded.
pub(crate) fn cartpole_model(seed: i64) -> ActorCritic {
    cartpole_model_with(seed, &ModelConfig::default())
}

/// [`cartpole_model`] as `config` describes it (e.g. with an LSTM core).
pub(crate) fn cartpole_model_with(seed: i64, config: &ModelConfig) -> ActorCritic {
    tch::manual_seed(seed);
    let obs = Space::Box {
        shape: vec![4],
        low: vec![-1.0; 4],
        high: vec![1.0; 4],
    };
    ActorCritic::new(config, &obs, &Space::Discrete { n: 2 }, Device::Cpu)
        .expect("the model builds")
}

/// A fresh actor-critic on 2x5x5 image observations (a 4-channel 3x3 convolution and 8
/// units in front of the heads), seeded.
pub(crate) fn image_model(seed: i64) -> ActorCritic {
    tch::manual_seed(seed);
    let config = ModelConfig {
        channels: vec![4],
        kernel_sizes: vec![3],
        fc_sizes: Some(vec![8]),
        hidden_sizes: vec![8],
        ..ModelConfig::default()
    };
    let obs = Space::Box {
        shape: vec![2, 5, 5],
        low: vec![0.0; 50],
        high: vec![1.0; 50],
    };
    ActorCritic::new(&config, &obs, &Space::Discrete { n: 2 }, Device::Cpu)
        .expect("the model builds")
}

/// [`tiny_batch`] with 2x5x5 image observations in place of its flat ones.
pub(crate) fn image_batch() -> RolloutBatch {
    let n = 8;
    RolloutBatch {
        obs_dim: 50,
        obs: (0..n * 50)
            .map(|i| ((i * 7) % 11) as f32 / 10.0)
            .collect::<Vec<f32>>()
            .into(),
        bootstrap_obs: vec![0.1; 2 * 50],
        ..tiny_batch()
    }
}

/// A copy of every parameter of `model`, by name.
pub(crate) fn snapshot(model: &ActorCritic) -> Vec<(String, Tensor)> {
    (model.named_parameters().into_iter())
        .map(|(name, t)| (name, t.copy()))
        .collect()
}

/// The names of the parameters under `prefix` that differ between `before` (a
/// [`snapshot`]) and `after`.
pub(crate) fn moved(before: &[(String, Tensor)], after: &ActorCritic, prefix: &str) -> Vec<String> {
    let after = after.named_parameters();
    (before.iter())
        .zip(&after)
        .filter(|((name, x), (_, y))| name.starts_with(prefix) && !x.equal(y))
        .map(|((name, _), _)| name.clone())
        .collect()
}

/// A deterministic `[T = 4, B = 2]` batch with one terminal step.
pub(crate) fn tiny_batch() -> RolloutBatch {
    let (t, b) = (4usize, 2usize);
    let n = t * b;
    RolloutBatch {
        t,
        b,
        obs_dim: 4,
        obs: (0..n * 4)
            .map(|i| ((i * 7) % 11) as f32 / 10.0 - 0.5)
            .collect::<Vec<f32>>()
            .into(),
        action: Actions::Discrete((0..n).map(|i| (i % 2) as i64).collect()),
        reward: (0..n)
            .map(|i| if i % 3 == 0 { 1.0 } else { -0.5 })
            .collect(),
        terminated: (0..n).map(|i| i == 5).collect(),
        truncated: vec![false; n],
        log_prob: vec![-0.7; n],
        value: (0..n).map(|i| i as f32 / 10.0).collect(),
        final_value: vec![0.0; n],
        bootstrap_value: vec![0.3; b],
        bootstrap_obs: vec![0.1; b * 4],
        policy_version: vec![0],
        init_state: None,
        valid: None,
    }
}

/// [`tiny_batch`] with its padding marked (`mid_batch_reset = false`: column 1 ends at row 2,
/// so its row 3, entry 7, is padding), and a twin whose padding row holds other data.
pub(crate) fn padded_twins() -> (RolloutBatch, RolloutBatch) {
    let mut batch = tiny_batch();
    batch.mark_padding();
    assert_eq!(
        batch.valid.as_deref(),
        Some(&[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0][..])
    );
    let mut twin = batch.clone();
    if let Observations::F32(obs) = &mut twin.obs {
        obs[7 * 4..8 * 4].copy_from_slice(&[0.9, -0.9, 0.4, 0.2]);
    }
    if let Actions::Discrete(a) = &mut twin.action {
        a[7] = 1 - a[7];
    }
    twin.reward[7] = 40.0;
    twin.value[7] = -3.0;
    twin.log_prob[7] = -2.5;
    (batch, twin)
}

/// Every parameter of `a` and `b` agrees within float rounding.
pub(crate) fn same_parameters(a: &ActorCritic, b: &ActorCritic) -> bool {
    (a.named_parameters().iter())
        .zip(b.named_parameters())
        .all(|((_, x), (_, y))| x.allclose(&y, 1e-5, 1e-6, false))
}
