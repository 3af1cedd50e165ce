//! Recurrent SAC's and TD3's networks (pytorchrl's `recurrent_net` for off-policy actors): the
//! policy `pi` and every critic `qf<i>` is a [`RecurrentNet`] with its own core. Separate cores,
//! not one shared by actor and critics: the critics' regression and the policy's gradient
//! would otherwise pull one memory two ways, which Ni et al. 2022 ("Recurrent Model-Free RL
//! Can Be a Strong Baseline for Many POMDPs", arXiv:2110.05038) found to destabilise
//! recurrent SAC and TD3. The action enters a critic at its head, not its core, so every
//! core's state depends on observations only: the actor carries all of them, side by side
//! (the policy's, then each critic's), and stores them with each sequence. The policy's head
//! gives a squashed Gaussian's mean and log-std (SAC) or a deterministic action before its
//! `tanh` (TD3, DDPG).

use tch::{nn, Tensor};

use super::{gaussian_parts, squashed_sample, OffPolicyModel, PolicyKind};
use crate::models::config::ModelConfig;
use crate::models::{ModelError, PolicyStep, RecurrentNet, RnnState};

/// Refuses the policy kinds that have no recurrent form.
pub(super) fn check_kind(kind: PolicyKind) -> Result<(), ModelError> {
    if kind != PolicyKind::Categorical {
        return Ok(());
    }
    Err(ModelError::Config {
        key: "model.lstm_size",
        message: "recurrent SAC needs continuous actions, and this env's are discrete (SAC \
                  trains a feed-forward categorical policy there): set lstm_size = 0, or use \
                  algo.name = \"dqn\" (R2D2) for a recurrent agent on discrete actions"
            .into(),
    })
}

/// The policy `pi` (its head giving `out` values) and `num_critics` critics `qf<i>` (their
/// heads reading `act_dim` action values), each with its own core.
pub(super) fn build(
    root: &nn::Path,
    config: &ModelConfig,
    obs_dim: i64,
    (act_dim, out): (i64, i64),
    num_critics: u32,
) -> (RecurrentNet, Vec<RecurrentNet>) {
    let pi = RecurrentNet::new(&(root / "pi"), config, obs_dim, 0, out);
    let critics = (0..num_critics.max(1))
        .map(|i| RecurrentNet::new(&(root / format!("qf{i}")), config, obs_dim, act_dim, 1))
        .collect();
    (pi, critics)
}

impl OffPolicyModel {
    /// Recurrent SAC's or TD3's critics (empty for other models).
    pub fn recurrent_critics(&self) -> &[RecurrentNet] {
        &self.recurrent_critics
    }

    fn recurrent_policy(&self) -> &RecurrentNet {
        self.recurrent
            .as_ref()
            .expect("a recurrent actor-critic model has a recurrent policy")
    }

    /// A carried (or stored) state `[N, (1 + K) H]` split per network: the policy's, then
    /// each critic's, `[N, H]` each.
    pub fn split_state(&self, state: &RnnState) -> Vec<RnnState> {
        let width = self.recurrent_policy().state_size();
        let hs = state.h.split(width, 1);
        let cs = state.c.split(width, 1);
        hs.into_iter()
            .zip(cs)
            .map(|(h, c)| RnnState { h, c })
            .collect()
    }

    /// A reparameterised sample in [-1, 1] `[..., A]` and its log-likelihood `[...]`, from
    /// the policy's head at its core's outputs `h` `[..., H]`.
    pub fn recurrent_sample(&self, h: &Tensor) -> (Tensor, Tensor) {
        let (mean, log_std) = gaussian_parts(&self.recurrent_policy().head(h, None));
        squashed_sample(&mean, &log_std)
    }

    /// Every critic's Q value of env-scale actions `[..., A]`, critic k's head reading its
    /// core's outputs `hs[k]` `[..., H]`: stacked `[K, ...]`.
    pub fn recurrent_qs(&self, hs: &[Tensor], action: &Tensor) -> Tensor {
        let unit = self.to_unit_scale(action);
        let qs: Vec<Tensor> = (self.recurrent_critics.iter().zip(hs))
            .map(|(net, h)| net.head(h, Some(&unit)).squeeze_dim(-1))
            .collect();
        Tensor::stack(&qs, 0)
    }

    /// The policy's deterministic action in [-1, 1] `[..., A]` from its head at its core's
    /// outputs `h` `[..., H]`: TD3's `tanh` action, or the squashed Gaussian's mean.
    pub fn recurrent_mean_action(&self, h: &Tensor) -> Tensor {
        let out = self.recurrent_policy().head(h, None);
        match self.kind {
            PolicyKind::SquashedGaussian => gaussian_parts(&out).0.tanh(),
            _ => out.tanh(),
        }
    }

    /// [`OffPolicyModel::recurrent_qs`] for a policy loss, without the critics' weight
    /// gradients (as [`OffPolicyModel::qs_for_policy`]).
    pub fn recurrent_qs_for_policy(&self, hs: &[Tensor], action: &Tensor) -> Tensor {
        self.critics_frozen(|| self.recurrent_qs(hs, action))
    }

    /// One acting step of recurrent SAC or TD3: every core steps on `obs` `[N, D]` from its
    /// part of `state`; the policy's head gives the action (SAC: a sample, or the squashed
    /// mean when `deterministic`; TD3: its deterministic action, to which the actor adds its
    /// noise), the first critic's head its value.
    pub(super) fn act_recurrent_actor(
        &self,
        obs: &Tensor,
        state: &RnnState,
        deterministic: bool,
    ) -> (PolicyStep, RnnState) {
        let states = self.split_state(state);
        let pi = self.recurrent_policy().core_step(obs, &states[0]);
        let (unit, log_prob) = match deterministic || self.kind == PolicyKind::Deterministic {
            true => {
                let mean = self.recurrent_mean_action(&pi.h);
                let zeros = mean.select(1, 0).zeros_like();
                (mean, zeros)
            }
            false => self.recurrent_sample(&pi.h),
        };
        let mut next = vec![pi];
        for (net, s) in self.recurrent_critics.iter().zip(&states[1..]) {
            next.push(net.core_step(obs, s));
        }
        let value = self.recurrent_critics[0]
            .head(&next[1].h, Some(&unit))
            .squeeze_dim(-1);
        let joined = RnnState {
            h: Tensor::cat(&next.iter().map(|s| &s.h).collect::<Vec<_>>(), 1),
            c: Tensor::cat(&next.iter().map(|s| &s.c).collect::<Vec<_>>(), 1),
        };
        let step = PolicyStep {
            action: self.to_env_scale(&unit),
            log_prob,
            value,
        };
        (step, joined)
    }
}

/// A recurrent SAC (or, by `kind`, TD3) model for tests (also the learner's):
/// PendulumNoVel-v1's spaces (2
/// observations, 1 action in [-2, 2]), 8-unit heads and 4-unit LSTM cores, two critics.
#[cfg(test)]
pub(crate) fn tiny(kind: PolicyKind) -> Result<OffPolicyModel, ModelError> {
    tiny_with(kind, crate::models::config::RecurrentCell::Lstm)
}

/// [`tiny`] with `cell` cores.
#[cfg(test)]
fn tiny_with(
    kind: PolicyKind,
    cell: crate::models::config::RecurrentCell,
) -> Result<OffPolicyModel, ModelError> {
    let obs = fleetrl_proto::space::Space::Box {
        shape: vec![2],
        low: vec![-1.0; 2],
        high: vec![1.0; 2],
    };
    let act = fleetrl_proto::space::Space::Box {
        shape: vec![1],
        low: vec![-2.0],
        high: vec![2.0],
    };
    let config = ModelConfig {
        hidden_sizes: vec![8],
        lstm_size: 4,
        recurrent_cell: cell,
        ..ModelConfig::default()
    };
    OffPolicyModel::new(&config, kind, 2, &obs, &act, tch::Device::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Policy;
    use tch::{Device, Kind};

    /// The policy and both critics have their own core under their own path; the carried
    /// state is the three states side by side, and acting step by step matches the heads on
    /// an unroll of each core from its part.
    #[test]
    fn acting_carries_every_cores_state_and_matches_an_unroll() {
        let model = tiny(PolicyKind::SquashedGaussian).unwrap();
        let names: Vec<String> = model.var_store().variables().into_keys().collect();
        for net in ["pi", "qf0", "qf1"] {
            assert!(
                names.contains(&format!("{net}.core.ih.weight")),
                "{names:?}"
            );
        }
        assert_eq!(model.state_size(), 12);
        let obs = Tensor::randn([5, 3, 2], (Kind::Float, Device::Cpu));
        let mut state = RnnState::zeros(3, 12, Device::Cpu);
        let mut values = Vec::new();
        for t in 0..5 {
            let (step, next) = model.act_recurrent(&obs.get(t), &state, true);
            assert_eq!(step.action.size(), vec![3, 1]);
            values.push(step.value);
            state = next;
        }
        let parts = model.split_state(&RnnState::zeros(3, 12, Device::Cpu));
        assert_eq!(parts.len(), 3);
        let resets = Tensor::zeros([5, 3], (Kind::Float, Device::Cpu));
        let pi = model.recurrent().unwrap().unroll(&obs, &parts[0], &resets);
        let q0 = model.recurrent_critics()[0].unroll(&obs, &parts[1], &resets);
        let head = model.recurrent().unwrap().head(&pi.h, None);
        let unit = gaussian_parts(&head).0.tanh();
        let q = model.recurrent_qs(&[q0.h.shallow_clone(), q0.h], &model.to_env_scale(&unit));
        assert!(q
            .get(0)
            .allclose(&Tensor::stack(&values, 0), 1e-5, 1e-5, false));
        let last = model.split_state(&state);
        assert!(last[0].h.allclose(&pi.h.get(4), 1e-6, 1e-6, false));
    }

    /// GRU cores (`model.recurrent_cell = "gru"`) build and act the same way.
    #[test]
    fn gru_cores_carry_their_state_too() {
        let gru = crate::models::config::RecurrentCell::Gru;
        let model = tiny_with(PolicyKind::SquashedGaussian, gru).unwrap();
        let state = RnnState::zeros(3, model.state_size(), Device::Cpu);
        let x = Tensor::randn([3, 2], (Kind::Float, Device::Cpu));
        let (step, next) = model.act_recurrent(&x, &state, false);
        assert_eq!(step.action.size(), vec![3, 1]);
        assert_eq!(next.h.size(), vec![3, 12]);
        assert!(!next.h.allclose(&state.h, 1e-6, 1e-6, false));
    }

    /// TD3's deterministic policy acts with `tanh` of its head whether or not the actor asks
    /// for the deterministic action (its exploration is the actor's noise), and its value is
    /// the first critic's at that action.
    #[test]
    fn a_recurrent_deterministic_policy_acts_with_its_tanh_action() {
        let model = tiny(PolicyKind::Deterministic).unwrap();
        assert_eq!(model.state_size(), 12);
        let obs = Tensor::randn([3, 2], (Kind::Float, Device::Cpu));
        let state = RnnState::zeros(3, 12, Device::Cpu);
        let (step, next) = model.act_recurrent(&obs, &state, false);
        let (again, _) = model.act_recurrent(&obs, &state, true);
        assert!(step.action.allclose(&again.action, 1e-6, 1e-6, false));
        let parts = model.split_state(&next);
        let unit = model.recurrent().unwrap().head(&parts[0].h, None).tanh();
        assert!(step
            .action
            .allclose(&model.to_env_scale(&unit), 1e-6, 1e-6, false));
        let q = model.recurrent_qs(
            &[parts[1].h.shallow_clone(), parts[2].h.shallow_clone()],
            &step.action,
        );
        assert!(q.get(0).allclose(&step.value, 1e-6, 1e-6, false));
    }

    /// SAC's categorical policy (discrete actions) has no recurrent form: refused by the key.
    #[test]
    fn a_recurrent_categorical_policy_is_refused_by_name() {
        let err = tiny(PolicyKind::Categorical).unwrap_err().to_string();
        assert!(err.starts_with("model.lstm_size: "), "{err}");
    }
}
