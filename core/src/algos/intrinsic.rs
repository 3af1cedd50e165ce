//! Intrinsic rewards from random network distillation (Burda et al. 2018, RND), for PPO (and
//! PPO+D) and A2C: pytorchrl's `IntrinsicReward` / `IntrinsicReturn` / `IntrinsicValue` /
//! `IntrinsicAdvantage` storage fields and `normalize_int_rewards`.
//!
//! A fixed random `target` network and a `predictor` trained to match it read observations
//! normalised by their running statistics (clipped to +-5). The novelty of the observation a
//! step leads to, `mean((predictor(s') - target(s'))^2)`, is its intrinsic reward. Per batch:
//!
//! 1. `s'` is the next row's observation in the same column (the bootstrap observation after
//!    the last step); the intrinsic stream is non-episodic, as in RND, so an episode's end
//!    neither stops it nor zeroes it;
//! 2. with `normalize_int_rewards`, each column's discounted intrinsic return is run forward
//!    over the rollout (`R_t = gamma_int R_{t-1} + r_t`, from 0), every `R_t` is merged into a
//!    running variance (which weighs at most the last 50,000 returns against a new batch), and
//!    the rewards are divided by its square root;
//! 3. a second value function `V_int` (its own MLP) gives GAE advantages of the intrinsic
//!    stream with `discount` and the algorithm's lambda, never cut at episode ends;
//! 4. the policy trains on `ext_coeff x A_ext + int_coeff x A_int`; the extrinsic value target
//!    is unchanged;
//! 5. the predictor (on the batch's `s'`) and `V_int` (on the intrinsic returns) take one Adam
//!    step per batch, at the algorithm's learning rate.
//!
//! Everything is computed on the learner from the observations it already has: nothing about
//! intrinsic rewards crosses the network, so an actor can neither forge them nor needs the RND
//! networks. They live in this module's own variable store and go into checkpoints with the
//! algorithm's state (`intrinsic.*`).

use serde::{Deserialize, Serialize};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

use super::pg::floats;
use super::returns::{gae, Returns, StepData};
use crate::checkpoint::state::{find, StateError, StatePart};
use crate::config::error::{check, ConfigError};
use crate::items::rollout::RolloutBatch;
use crate::models::config::Activation;
use crate::models::{Mlp, ObsNorm};
use crate::optim::Adam;

/// Intrinsic rewards by random network distillation for PPO (and PPO+D) and A2C
/// (`[algo.intrinsic]`, present: on; pytorchrl's intrinsic-reward storage, Burda et al. 2018):
/// the learner computes them from each batch's observations (see `algos/intrinsic.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntrinsicConfig {
    /// Weight of the extrinsic advantages in the policy's advantage (RND: 2).
    pub ext_coeff: f64,
    /// Weight of the intrinsic advantages (RND: 1).
    pub int_coeff: f64,
    /// Discount of the intrinsic stream (non-episodic; RND: 0.99).
    pub discount: f64,
    /// Divide intrinsic rewards by a running standard deviation of their discounted returns.
    pub normalize_int_rewards: bool,
    /// Hidden widths of the target, predictor and intrinsic value networks (ReLU).
    pub hidden_sizes: Vec<i64>,
    /// Width of the target and predictor embeddings.
    pub features: i64,
}

impl Default for IntrinsicConfig {
    fn default() -> Self {
        IntrinsicConfig {
            ext_coeff: 2.0,
            int_coeff: 1.0,
            discount: 0.99,
            normalize_int_rewards: true,
            hidden_sizes: vec![64, 64],
            features: 64,
        }
    }
}

impl IntrinsicConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            (0.0..=1.0).contains(&self.discount),
            "algo.intrinsic.discount",
            "must be in [0, 1]",
        )?;
        check(
            self.ext_coeff >= 0.0 && self.int_coeff >= 0.0,
            "algo.intrinsic.int_coeff",
            "the coefficients must be >= 0",
        )?;
        check(
            self.features >= 1 && self.hidden_sizes.iter().all(|&h| h >= 1),
            "algo.intrinsic.features",
            "widths must be >= 1",
        )
    }
}

/// RND's clip of normalised observations.
const OBS_CLIP: f64 = 5.0;
/// The intrinsic returns' variance weighs at most this many past returns against each new
/// batch: novelty falls as the predictor learns, and a variance over all time would shrink
/// the rewards with it until the value function's noise drowns them.
const RETURN_WINDOW: f64 = 50_000.0;

/// The RND networks, the intrinsic value function and their statistics.
#[derive(Debug)]
pub struct Intrinsic {
    config: IntrinsicConfig,
    vs: nn::VarStore,
    obs_norm: ObsNorm,
    /// Running variance of the intrinsic returns (a one-component [`ObsNorm`]).
    return_norm: ObsNorm,
    target: Mlp,
    predictor: Mlp,
    value: Mlp,
    optim: Adam,
}

/// What one batch's intrinsic stream gives the algorithm.
#[derive(Debug)]
pub struct IntrinsicBatch {
    /// The (normalised) intrinsic rewards `[T, B]`.
    pub reward: Vec<f32>,
    /// The intrinsic stream's GAE advantages and returns.
    pub returns: Returns,
    /// The observations the steps led to, normalised, `[N, D]` (the predictor's inputs).
    next_obs: Tensor,
    /// The steps' observations, normalised, `[N, D]` (the intrinsic value function's inputs).
    obs: Tensor,
}

impl IntrinsicBatch {
    /// The mean intrinsic reward (a metric).
    pub fn mean_reward(&self) -> f64 {
        let n = self.reward.len().max(1) as f64;
        self.reward.iter().map(|r| f64::from(*r)).sum::<f64>() / n
    }
}

impl Intrinsic {
    /// The networks for `obs_dim`-wide observations on `device`.
    pub fn new(config: &IntrinsicConfig, obs_dim: i64, device: Device) -> Intrinsic {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let mlp = |path: nn::Path, out: i64| {
            Mlp::new(
                &path,
                obs_dim,
                &config.hidden_sizes,
                out,
                Activation::Relu,
                None,
            )
        };
        let target = mlp(&root / "fixed" / "target", config.features);
        let predictor = mlp(&root / "train" / "predictor", config.features);
        let value = mlp(&root / "train" / "value", 1);
        let obs_norm = ObsNorm::new(&(&root / "fixed" / "obs_norm"), obs_dim, OBS_CLIP, 1e-8);
        let return_norm = ObsNorm::new(&(&root / "fixed" / "return_norm"), 1, f64::INFINITY, 1e-8)
            .windowed(RETURN_WINDOW);
        let optim = Adam::over(&vs, 1e-5, "train.");
        Intrinsic {
            config: config.clone(),
            vs,
            obs_norm,
            return_norm,
            target,
            predictor,
            value,
            optim,
        }
    }

    /// The intrinsic rewards, advantages and returns of `batch` (updating the observation and
    /// return statistics first); `lambda` is the algorithm's GAE lambda.
    pub fn process(&self, batch: &RolloutBatch, lambda: f32) -> IntrinsicBatch {
        let _guard = tch::no_grad_guard();
        let device = self.vs.device();
        let (t, b, d) = (batch.t, batch.b, batch.obs_dim);
        let n = (t * b) as i64;
        let obs = batch.obs.to_tensor(device).view([n, d as i64]);
        let boot = Tensor::from_slice(&batch.bootstrap_obs)
            .to_device(device)
            .view([b as i64, d as i64]);
        // Row t*B + b leads to row (t+1)*B + b; the last step of a column to its bootstrap.
        let next = Tensor::cat(
            &[obs.narrow(0, b as i64, n - b as i64), boot.shallow_clone()],
            0,
        );
        self.obs_norm.update(&next);
        let next = self.obs_norm.apply(&next);
        let raw = self.novelty(&next);
        let raw = floats(&raw);
        let reward = if self.config.normalize_int_rewards {
            let returns = forward_returns(&raw, t, b, self.config.discount as f32);
            self.return_norm
                .update(&Tensor::from_slice(&returns).to_device(device).view([n, 1]));
            let var = self.return_norm.stats().1.double_value(&[0]).max(1e-8);
            let scale = var.sqrt() as f32;
            raw.iter().map(|r| r / scale).collect()
        } else {
            raw
        };
        let obs = self.obs_norm.apply(&obs);
        let values = |x: &Tensor| floats(&self.value.forward(x).view([-1]));
        let value = values(&obs);
        let bootstrap = values(&self.obs_norm.apply(&boot));
        let never = vec![false; t * b];
        let data = StepData {
            t,
            b,
            reward: &reward,
            value: &value,
            terminated: &never,
            truncated: &never,
            final_value: &value,
            bootstrap_value: &bootstrap,
        };
        let returns = gae(&data, self.config.discount as f32, lambda, true);
        IntrinsicBatch {
            reward,
            returns,
            next_obs: next,
            obs,
        }
    }

    /// `mean((predictor(x) - target(x))^2)` per row, `[N]`.
    fn novelty(&self, next: &Tensor) -> Tensor {
        (self.predictor.forward(next) - self.target.forward(next))
            .square()
            .mean_dim(1, false, Kind::Float)
    }

    /// The policy's advantages: `ext_coeff x A_ext + int_coeff x A_int`.
    pub fn combine(&self, extrinsic: &[f32], intrinsic: &IntrinsicBatch) -> Vec<f32> {
        let (e, i) = (self.config.ext_coeff as f32, self.config.int_coeff as f32);
        extrinsic
            .iter()
            .zip(&intrinsic.returns.advantage)
            .map(|(a, b)| e * a + i * b)
            .collect()
    }

    /// One Adam step of the predictor (distillation loss) and the intrinsic value function
    /// (squared error to the intrinsic returns) on the batch `intrinsic` came from; returns
    /// the two losses.
    pub fn train(&mut self, intrinsic: &IntrinsicBatch, lr: f64) -> [f64; 2] {
        let device = self.vs.device();
        let distill = self.novelty(&intrinsic.next_obs).mean(Kind::Float);
        let returns = Tensor::from_slice(&intrinsic.returns.returns).to_device(device);
        let value = self.value.forward(&intrinsic.obs).view([-1]);
        let vf = (value - returns).square().mean(Kind::Float);
        let loss = &distill + &vf * 0.5;
        self.optim.zero_grad();
        loss.backward();
        self.optim.step(lr);
        [distill.double_value(&[]), vf.double_value(&[])]
    }
}

impl StatePart for Intrinsic {
    /// The networks, statistics and optimiser state, for checkpoints.
    fn save(&self) -> Vec<(String, Tensor)> {
        let mut state: Vec<(String, Tensor)> = self
            .vs
            .variables()
            .into_iter()
            .map(|(name, t)| (format!("intrinsic.{name}"), t))
            .collect();
        state.extend(
            self.optim
                .save()
                .into_iter()
                .map(|(name, t)| (format!("intrinsic.{name}"), t)),
        );
        state
    }

    /// Restores [`StatePart::save`]'s tensors.
    fn restore(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError> {
        let _guard = tch::no_grad_guard();
        for (name, mut dst) in self.vs.variables() {
            let key = format!("intrinsic.{name}");
            let src = find(state, &key)?;
            if src.size() != dst.size() {
                return Err(StateError::Shape {
                    name: key,
                    found: src.size(),
                    expected: dst.size(),
                });
            }
            dst.copy_(src);
        }
        let prefix = "intrinsic.";
        let own: Vec<(String, Tensor)> = state
            .iter()
            .filter_map(|(n, t)| {
                n.strip_prefix(prefix)
                    .map(|s| (s.to_string(), t.shallow_clone()))
            })
            .collect();
        self.optim.restore(&own)
    }
}

/// Each column's discounted return run forward from 0 over the rollout, `[T, B]`:
/// `R_t = discount R_{t-1} + r_t` (RND's reward filter).
pub fn forward_returns(reward: &[f32], t: usize, b: usize, discount: f32) -> Vec<f32> {
    let mut out = vec![0.0; t * b];
    for col in 0..b {
        let mut running = 0.0;
        for step in 0..t {
            let i = step * b + col;
            running = discount * running + reward[i];
            out[i] = running;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algos::testing::tiny_batch;

    fn config() -> IntrinsicConfig {
        IntrinsicConfig::default()
    }

    /// The normalisation by hand: rewards [1, 2, 3] in one column with discount 0.5 have
    /// forward returns [1, 2.5, 4.25]; a fresh running variance merges them into their own
    /// variance (the prior count is 1e-4), and the rewards are divided by its square root.
    #[test]
    fn forward_returns_and_their_running_std_by_hand() {
        assert_eq!(
            forward_returns(&[1.0, 2.0, 3.0], 3, 1, 0.5),
            vec![1.0, 2.5, 4.25]
        );
        // Two columns interleave row-major ([T, B]).
        assert_eq!(
            forward_returns(&[1.0, 10.0, 1.0, 10.0], 2, 2, 0.5),
            vec![1.0, 10.0, 1.5, 15.0]
        );
        let vs = nn::VarStore::new(Device::Cpu);
        let norm = ObsNorm::new(&vs.root(), 1, f64::INFINITY, 1e-8);
        norm.update(&Tensor::from_slice(&[1.0f32, 2.5, 4.25]).view([3, 1]));
        let var = norm.stats().1.double_value(&[0]);
        let mean = (1.0 + 2.5 + 4.25) / 3.0;
        let population = [1.0f64, 2.5, 4.25]
            .iter()
            .map(|r| (r - mean).powi(2))
            .sum::<f64>()
            / 3.0;
        // The prior (mean 0, variance 1, count 1e-4) shifts it by about 1e-4 relative.
        assert!(
            (var - population).abs() < 1e-3 * population,
            "{var} vs {population}"
        );
    }

    /// On a batch: rewards are positive, the intrinsic stream ignores episode ends, the
    /// combined advantage weighs the two streams, and training the predictor on the same
    /// observations lowers their novelty.
    #[test]
    fn rnd_rewards_fall_as_the_predictor_learns_the_observations() {
        tch::manual_seed(0);
        let batch = tiny_batch();
        let mut rnd = Intrinsic::new(&config(), 4, Device::Cpu);
        let first = rnd.process(&batch, 0.95);
        assert!(first.reward.iter().all(|r| *r > 0.0), "{:?}", first.reward);
        let ext = vec![1.0; 8];
        let combined = rnd.combine(&ext, &first);
        let c = config();
        for (k, a) in combined.iter().enumerate() {
            let want = c.ext_coeff as f32 + c.int_coeff as f32 * first.returns.advantage[k];
            assert!((a - want).abs() < 1e-6);
        }
        let raw_before = rnd
            .novelty(&first.next_obs)
            .mean(Kind::Float)
            .double_value(&[]);
        let target_before = rnd.vs.variables()["fixed.target.out.weight"].copy();
        for _ in 0..200 {
            let b = rnd.process(&batch, 0.95);
            rnd.train(&b, 1e-3);
        }
        let after = rnd.process(&batch, 0.95);
        let raw_after = rnd
            .novelty(&after.next_obs)
            .mean(Kind::Float)
            .double_value(&[]);
        assert!(
            raw_after < 0.2 * raw_before,
            "novelty {raw_before} -> {raw_after}"
        );
        let target_after = &rnd.vs.variables()["fixed.target.out.weight"];
        assert!(
            target_after.equal(&target_before),
            "the target network must not train"
        );
        let state = rnd.save();
        let mut fresh = Intrinsic::new(&config(), 4, Device::Cpu);
        fresh.restore(&state).unwrap();
        let again = fresh
            .novelty(&after.next_obs)
            .mean(Kind::Float)
            .double_value(&[]);
        assert!(
            (again - raw_after).abs() < 1e-9,
            "a checkpoint restores the predictor"
        );
    }
}
