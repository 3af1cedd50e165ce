//! PEARL's networks (Rakelly et al. 2019): a context encoder that maps each context
//! transition `(s, a, r[, s'])` to a Gaussian over the latent task variable `z`, combined
//! over transitions as a product of Gaussians (the posterior), and a SAC actor-critic whose
//! policy, two Q functions and value function all read `[s, z]`.
//!
//! Actors hold the encoder and the policy: they infer the posterior from the context they
//! collected themselves and act on a `z` drawn from it.

use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

use super::config::ModelConfig;
use super::mlp::Mlp;
use super::offpolicy::{OffPolicyModel, PolicyKind};
use super::{weights, ModelError};
use crate::config::PearlConfig;
use fleetrl_proto::space::Space;
use fleetrl_proto::TensorMap;

/// Per-transition variances are kept at or above this before their product is taken.
const MIN_VARIANCE: f64 = 1e-7;

/// The product of K sets of n Gaussians `N(mu_i, var_i)`, `[K, n, L]` each: the Gaussian
/// proportional to their densities' product, `var = 1 / sum(1 / var_i)` and
/// `mu = var * sum(mu_i / var_i)`, `[K, L]` each.
pub fn product_of_gaussians(mu: &Tensor, var: &Tensor) -> (Tensor, Tensor) {
    let var = var.clamp_min(MIN_VARIANCE);
    let precision = var.reciprocal().sum_dim_intlist(1, false, Kind::Float);
    let combined = precision.reciprocal();
    let mean = &combined * (mu / &var).sum_dim_intlist(1, false, Kind::Float);
    (mean, combined)
}

/// `KL(N(mu, var) || N(0, I))` summed over the latent dimensions and the K posteriors.
pub fn kl_from_prior(mu: &Tensor, var: &Tensor) -> Tensor {
    let var = var.clamp_min(MIN_VARIANCE);
    ((&var + mu.square() - 1.0 - var.log()) * 0.5).sum(Kind::Float)
}

/// The encoder, the latent-conditioned actor-critic and the value function.
#[derive(Debug)]
pub struct PearlModel {
    /// Holds `encoder.*` and `vf.*`.
    vs: nn::VarStore,
    encoder: Mlp,
    vf: Mlp,
    /// `pi.*`, `qf0.*`, `qf1.*` over observations widened by `z`.
    sac: OffPolicyModel,
    latent_dim: i64,
    obs_dim: i64,
    bottleneck: bool,
    next_obs_in_context: bool,
    /// `explore.mean` and `explore.var` `[P, L]`: the posteriors of the last P training
    /// contexts, newest last (`algo.exploration_pool`; the prior's until the learner has
    /// encoded that many). None: exploration draws from the prior.
    pool: Option<(Tensor, Tensor)>,
}

impl PearlModel {
    /// Fresh networks for `obs_space` and `action_space` (a box): `[model]` sizes the policy,
    /// Q and value networks, `algo.encoder_hidden_sizes` the encoder.
    pub fn new(
        model: &ModelConfig,
        pearl: &PearlConfig,
        obs_space: &Space,
        action_space: &Space,
        device: Device,
    ) -> Result<PearlModel, ModelError> {
        let (Space::Box { .. }, Space::Box { .. }) = (obs_space, action_space) else {
            return Err(ModelError::Config {
                key: "env.id",
                message: "PEARL acts in continuous action spaces from flat observations (its \
                          policy is SAC's squashed Gaussian)"
                    .into(),
            });
        };
        let obs_dim = obs_space.flat_dim() as i64;
        let action_dim = action_space.flat_dim() as i64;
        let latent_dim = i64::from(pearl.latent_dim);
        let widened = Space::Box {
            shape: vec![obs_dim + latent_dim],
            low: vec![f32::NEG_INFINITY; (obs_dim + latent_dim) as usize],
            high: vec![f32::INFINITY; (obs_dim + latent_dim) as usize],
        };
        let sac = OffPolicyModel::new(
            model,
            PolicyKind::SquashedGaussian,
            2,
            &widened,
            action_space,
            device,
        )?;
        let vs = nn::VarStore::new(device);
        let context_dim = obs_dim
            + action_dim
            + 1
            + if pearl.use_next_obs_in_context {
                obs_dim
            } else {
                0
            };
        let encoder_out = if pearl.use_information_bottleneck {
            2 * latent_dim
        } else {
            latent_dim
        };
        let encoder = Mlp::new(
            &(vs.root() / "encoder"),
            context_dim,
            &pearl.encoder_hidden_sizes,
            encoder_out,
            super::config::Activation::Relu,
            None,
        );
        let vf = Mlp::new(
            &(vs.root() / "vf"),
            obs_dim + latent_dim,
            &model.hidden_sizes,
            1,
            model.activation,
            None,
        );
        let pool = (pearl.exploration_pool > 0).then(|| {
            let explore = vs.root() / "explore";
            let size = [i64::from(pearl.exploration_pool), latent_dim];
            (
                explore.zeros_no_train("mean", &size),
                explore.ones_no_train("var", &size),
            )
        });
        Ok(PearlModel {
            vs,
            encoder,
            vf,
            sac,
            latent_dim,
            obs_dim,
            bottleneck: pearl.use_information_bottleneck,
            next_obs_in_context: pearl.use_next_obs_in_context,
            pool,
        })
    }

    /// The latent size L.
    pub fn latent_dim(&self) -> i64 {
        self.latent_dim
    }

    /// The observation width D.
    pub fn obs_dim(&self) -> i64 {
        self.obs_dim
    }

    /// The var store of the encoder and the value function.
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// The latent-conditioned SAC networks (policy and Q functions).
    pub fn sac(&self) -> &OffPolicyModel {
        &self.sac
    }

    /// The value function's network (for a target copy of the same shape).
    pub fn vf(&self) -> &Mlp {
        &self.vf
    }

    /// Context rows `[.., C]` from transitions' observations, actions, scores `[..]` and next
    /// observations (used only with `use_next_obs_in_context`).
    pub fn context(
        &self,
        obs: &Tensor,
        action: &Tensor,
        score: &Tensor,
        next_obs: &Tensor,
    ) -> Tensor {
        let mut parts = vec![
            obs.shallow_clone(),
            action.shallow_clone(),
            score.unsqueeze(-1),
        ];
        if self.next_obs_in_context {
            parts.push(next_obs.shallow_clone());
        }
        Tensor::cat(&parts, -1)
    }

    /// The posterior over `z` of each of K tasks from its context `[K, n, C]`: mean and
    /// variance `[K, L]`. Without the information bottleneck the mean of the encoder's outputs
    /// and a zero variance. A task with no context (n = 0) gets the prior `N(0, I)`.
    pub fn posterior(&self, context: &Tensor) -> (Tensor, Tensor) {
        let k = context.size()[0];
        if context.size()[1] == 0 {
            return self.prior(k);
        }
        let out = self.encoder.forward(context);
        if !self.bottleneck {
            let mean = out.mean_dim(1, false, Kind::Float);
            let var = mean.zeros_like();
            return (mean, var);
        }
        let parts = out.split(self.latent_dim, -1);
        let var = parts[1].softplus();
        product_of_gaussians(&parts[0], &var)
    }

    /// The prior `N(0, I)` for K tasks, `[K, L]` each.
    pub fn prior(&self, k: i64) -> (Tensor, Tensor) {
        let device = self.vs.device();
        (
            Tensor::zeros([k, self.latent_dim], (Kind::Float, device)),
            Tensor::ones([k, self.latent_dim], (Kind::Float, device)),
        )
    }

    /// A reparameterised draw `mu + sqrt(var) eps`, `[K, L]`.
    pub fn sample_z(mu: &Tensor, var: &Tensor) -> Tensor {
        mu + var.sqrt() * mu.randn_like()
    }

    /// Keeps the posteriors `[K, L]` of K training contexts in the exploration pool, dropping
    /// the oldest K (a no-op without a pool). Fixed shapes and no host state, so it runs
    /// inside a captured CUDA graph.
    pub fn remember_posteriors(&self, mu: &Tensor, var: &Tensor) {
        let Some((pool_mu, pool_var)) = &self.pool else {
            return;
        };
        let _guard = tch::no_grad_guard();
        let (p, k) = (pool_mu.size()[0], mu.size()[0]);
        for (pool, new) in [(pool_mu, mu), (pool_var, var)] {
            let rolled = if k >= p {
                new.narrow(0, k - p, p)
            } else {
                Tensor::cat(&[pool.narrow(0, k, p - k), new.shallow_clone()], 0)
            };
            pool.shallow_clone().copy_(&rolled);
        }
    }

    /// One exploration `z` `[1, L]` for the meta-test: drawn from the posterior of a training
    /// context picked from the pool by `rng`, or from the prior without a pool.
    pub fn exploration_z(&self, rng: &mut impl rand::Rng) -> Tensor {
        let Some((pool_mu, pool_var)) = &self.pool else {
            let (mu, var) = self.prior(1);
            return PearlModel::sample_z(&mu, &var);
        };
        let i = rng.random_range(0..pool_mu.size()[0]);
        PearlModel::sample_z(&pool_mu.narrow(0, i, 1), &pool_var.narrow(0, i, 1))
    }

    /// Observations `[N, D]` widened by task variables `[N, L]`.
    pub fn with_z(obs: &Tensor, z: &Tensor) -> Tensor {
        Tensor::cat(&[obs, z], 1)
    }

    /// V(s, z), `[N]`.
    pub fn value(&self, obs_z: &Tensor) -> Tensor {
        self.vf.forward(obs_z).squeeze_dim(1)
    }

    /// Env-scale actions `[N, A]` for observations `[N, D]` and task variables `[N, L]`:
    /// sampled, or the squashed mean when `deterministic`.
    pub fn act(&self, obs: &Tensor, z: &Tensor, deterministic: bool) -> Tensor {
        let _guard = tch::no_grad_guard();
        let obs_z = PearlModel::with_z(obs, z);
        let unit = if deterministic {
            self.sac.mean_action(&obs_z)
        } else {
            self.sac.sample_action(&obs_z).0
        };
        self.sac.to_env_scale(&unit)
    }

    /// Every parameter as a proto tensor, by path.
    pub fn export(&self) -> Result<TensorMap, ModelError> {
        let mut map = self.sac.export()?;
        map.tensors.extend(weights::export(&self.vs)?.tensors);
        Ok(map)
    }

    /// Every parameter, by path, sorted.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut named = self.sac.named_parameters();
        named.extend(weights::named(&self.vs));
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named
    }

    /// Copies named weights in; every parameter must be present with its exact shape.
    pub fn load_named(&mut self, named: &[(String, Tensor)]) -> Result<(), ModelError> {
        self.sac.load_named(named)?;
        weights::load_named(&self.vs, named)
    }
}

/// The policy with `z` at the prior's mean (0): the unadapted policy, what `fleetrl record`
/// plays and what a task-agnostic evaluation of a PEARL checkpoint sees.
impl super::Policy for PearlModel {
    fn act(&self, obs: &Tensor, deterministic: bool) -> super::PolicyStep {
        let _guard = tch::no_grad_guard();
        let z = Tensor::zeros(
            [obs.size()[0], self.latent_dim],
            (Kind::Float, obs.device()),
        );
        let obs_z = PearlModel::with_z(obs, &z);
        let (unit, log_prob) = if deterministic {
            let a = self.sac.mean_action(&obs_z);
            let zeros = a.select(1, 0).zeros_like();
            (a, zeros)
        } else {
            self.sac.sample_action(&obs_z)
        };
        super::PolicyStep {
            action: self.sac.to_env_scale(&unit),
            log_prob,
            value: self.value(&obs_z),
        }
    }

    fn value(&self, obs: &Tensor) -> Tensor {
        let _guard = tch::no_grad_guard();
        let z = Tensor::zeros(
            [obs.size()[0], self.latent_dim],
            (Kind::Float, obs.device()),
        );
        PearlModel::value(self, &PearlModel::with_z(obs, &z))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box of `d` dimensions within `[-bound, bound]`.
    fn space(d: usize, bound: f32) -> Space {
        Space::Box {
            shape: vec![d as i64],
            low: vec![-bound; d],
            high: vec![bound; d],
        }
    }

    /// The product of two 1-D Gaussians N(1, 1) and N(3, 1) is N(2, 1/2); of N(0, 4) and
    /// N(6, 2) it is N(4, 4/3): the closed form `var = 1/(1/a + 1/b)`,
    /// `mu = var (mu_a/a + mu_b/b)`.
    #[test]
    fn product_of_gaussians_matches_the_closed_form() {
        let mu = Tensor::from_slice(&[1.0f32, 3.0, 0.0, 6.0]).view([2, 2, 1]);
        let var = Tensor::from_slice(&[1.0f32, 1.0, 4.0, 2.0]).view([2, 2, 1]);
        let (m, v) = product_of_gaussians(&mu, &var);
        let m = Vec::<f32>::try_from(m.reshape([-1])).unwrap();
        let v = Vec::<f32>::try_from(v.reshape([-1])).unwrap();
        let close = |a: f32, b: f32| (a - b).abs() < 1e-5;
        assert!(close(m[0], 2.0) && close(v[0], 0.5), "{m:?} {v:?}");
        assert!(close(m[1], 4.0) && close(v[1], 4.0 / 3.0), "{m:?} {v:?}");
    }

    /// KL(N(mu, var) || N(0, 1)) = (var + mu^2 - 1 - ln var) / 2: 0 at the prior, and for
    /// N(1, 2) (2 + 1 - 1 - ln 2) / 2.
    #[test]
    fn kl_from_the_prior_matches_the_closed_form() {
        let zero = kl_from_prior(
            &Tensor::zeros([1, 3], (Kind::Float, Device::Cpu)),
            &Tensor::ones([1, 3], (Kind::Float, Device::Cpu)),
        );
        assert!(zero.double_value(&[]).abs() < 1e-7);
        let kl = kl_from_prior(
            &Tensor::from_slice(&[1.0f32]).view([1, 1]),
            &Tensor::from_slice(&[2.0f32]).view([1, 1]),
        );
        let want = (2.0 - 2f64.ln()) / 2.0;
        assert!((kl.double_value(&[]) - want).abs() < 1e-6);
    }

    /// A discrete action space is refused with a message that says why.
    #[test]
    fn discrete_actions_are_refused_by_name() {
        let err = PearlModel::new(
            &ModelConfig::default(),
            &PearlConfig::default(),
            &Space::Box {
                shape: vec![4],
                low: vec![-1.0; 4],
                high: vec![1.0; 4],
            },
            &Space::Discrete { n: 2 },
            Device::Cpu,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("continuous action"), "{err}");
    }

    /// With no context a task's posterior is the prior; with context the posterior narrows
    /// (every per-transition variance is below the product's inverse sum).
    #[test]
    fn posterior_is_the_prior_without_context_and_narrows_with_it() {
        let pearl = PearlConfig {
            latent_dim: 3,
            encoder_hidden_sizes: vec![16],
            ..PearlConfig::default()
        };
        let model = PearlModel::new(
            &ModelConfig::default(),
            &pearl,
            &space(2, 2.0),
            &space(2, 1.0),
            Device::Cpu,
        )
        .unwrap();
        let empty = Tensor::zeros([2, 0, 5], (Kind::Float, Device::Cpu));
        let (mu, var) = model.posterior(&empty);
        assert_eq!(mu.size(), vec![2, 3]);
        assert_eq!(mu.abs().sum(Kind::Float).double_value(&[]), 0.0);
        assert_eq!(var.sum(Kind::Float).double_value(&[]), 6.0);
        let context = Tensor::randn([2, 10, 5], (Kind::Float, Device::Cpu));
        let (_, var) = model.posterior(&context);
        assert!(var.max().double_value(&[]) < 1.0, "{var}");
    }

    /// The exploration pool starts as the prior, keeps the newest posteriors it is given
    /// (the oldest dropped, newest last), travels with the weights, and exploration draws
    /// come from its rows; without a pool there is nothing to carry and draws come from the
    /// prior.
    #[test]
    fn the_exploration_pool_keeps_the_newest_posteriors_and_exploration_draws_from_them() {
        let model = |pool: u32| {
            let pearl = PearlConfig {
                latent_dim: 1,
                encoder_hidden_sizes: vec![8],
                exploration_pool: pool,
                ..PearlConfig::default()
            };
            PearlModel::new(
                &ModelConfig::default(),
                &pearl,
                &space(2, 1.0),
                &space(2, 1.0),
                Device::Cpu,
            )
            .unwrap()
        };
        let pool = |m: &PearlModel| -> (Vec<f32>, Vec<f32>) {
            let named = m.named_parameters();
            let get = |name: &str| {
                let t = &named.iter().find(|(n, _)| n == name).expect(name).1;
                Vec::<f32>::try_from(t.reshape([-1])).unwrap()
            };
            (get("explore.mean"), get("explore.var"))
        };
        let rows = |v: &[f32]| Tensor::from_slice(v).view([-1, 1]);
        let m = model(4);
        assert_eq!(pool(&m), (vec![0.0; 4], vec![1.0; 4]));
        m.remember_posteriors(&rows(&[10.0, 11.0, 12.0]), &rows(&[0.1, 0.2, 0.3]));
        assert_eq!(
            pool(&m),
            (vec![0.0, 10.0, 11.0, 12.0], vec![1.0, 0.1, 0.2, 0.3])
        );
        m.remember_posteriors(&rows(&[20.0, 21.0]), &rows(&[0.4, 0.5]));
        assert_eq!(pool(&m).0, vec![11.0, 12.0, 20.0, 21.0]);
        let six: Vec<f32> = (30..36).map(|v| v as f32).collect();
        m.remember_posteriors(&rows(&six), &rows(&[1e-6; 6]));
        assert_eq!(pool(&m).0, vec![32.0, 33.0, 34.0, 35.0]);
        // The pool reaches a fresh model (an actor, a checkpoint) with the weights.
        let mut copy = model(4);
        copy.load_named(&m.named_parameters()).unwrap();
        assert_eq!(pool(&copy), pool(&m));
        let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(0);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let z = copy.exploration_z(&mut rng).double_value(&[0, 0]);
            let row = z.round();
            assert!(
                (32.0..=35.0).contains(&row) && (z - row).abs() < 0.01,
                "z = {z}"
            );
            seen.insert(row as i64);
        }
        assert_eq!(seen.len(), 4, "draws use every row: {seen:?}");
        // Without a pool: no `explore.*` weights, and draws from N(0, 1).
        let plain = model(0);
        assert!(plain
            .named_parameters()
            .iter()
            .all(|(n, _)| !n.starts_with("explore.")));
        plain.remember_posteriors(&rows(&[50.0]), &rows(&[1e-6]));
        let draws: Vec<f64> = (0..200)
            .map(|_| plain.exploration_z(&mut rng).double_value(&[0, 0]))
            .collect();
        let mean = draws.iter().sum::<f64>() / 200.0;
        let var = draws.iter().map(|z| (z - mean).powi(2)).sum::<f64>() / 199.0;
        assert!(
            mean.abs() < 0.3 && (0.7..1.4).contains(&var),
            "N({mean}, {var})"
        );
        // A checkpoint without the pool does not load into a model with one.
        let err = model(4)
            .load_named(&plain.named_parameters())
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing `explore."), "{err}");
    }
}
