//! The off-policy actor, as pytorchrl's `OffPolicyActor` describes it: a policy plus
//! `num_critics` Q networks, each network reading observation features (`obs_features`),
//! action features (`act_features`, critics only) and a common trunk (`common_features`)
//! over their concatenation. One model covers the three policy kinds:
//!
//! - `QValues` (DQN): `q` maps features to one Q value per discrete action; the policy is the
//!   argmax.
//! - `Deterministic` (DDPG, TD3): `pi` maps features to `tanh` actions in [-1, 1], scaled to
//!   the action box; critics score (features, action).
//! - `SquashedGaussian` (SAC): `pi` outputs a mean and a log-std; actions are `tanh` of a
//!   Gaussian sample, with the log-likelihood corrected for the squashing.
//! - `Categorical` (SAC on discrete actions, Christodoulou 2019, arXiv:1910.07207): `pi`
//!   outputs one logit per action; each critic `qf<i>` maps observation features to one Q
//!   value per action (no action input).
//!
//! Paths: `pi.*`, `q.*`, `qf<i>.*`, each with its own `obs.*`/`act.*`/`common.*` layers, or
//! the user's TorchScript module under `<net>.script.*` (`model.torchscript` for `pi` or `q`,
//! `model.torchscript_critic` for every `qf<i>`; docs/torchscript.md).
//! With `model.lstm_size > 0` a `QValues` model is recurrent instead (R2D2): `q` is then a
//! [`RecurrentNet`] (`q.encoder.*`, `q.core.*`, `q.head.*`) and the policy carries its state.
//! So is a `SquashedGaussian` or `Deterministic` one (recurrent SAC, TD3 and DDPG,
//! `offpolicy/recurrent.rs`): `pi` and every `qf<i>` are then a [`RecurrentNet`] each, with its
//! own core, and the policy carries all their states.
//! Target networks are a second model of the same shape (see [`OffPolicyModel::copy_from`]).

use std::path::Path;

use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

use super::config::{Activation, ModelConfig};
use super::conv::{image_frame, value_scale};
use super::recurrent_net::RecurrentNet;
use super::script::{Interface, ScriptNet};
use super::{
    weights, ConvEncoder, ConvInit, ConvSpec, FrameShape, Mlp, ModelError, ObsNorm, Policy,
    PolicyStep, RnnState,
};
use fleetrl_proto::space::Space;

pub(crate) mod recurrent;

/// The key of the user's policy or Q-network module.
const POLICY_KEY: &str = "model.torchscript";
/// The key of the user's critic module.
const CRITIC_KEY: &str = "model.torchscript_critic";

/// The log-std range of the squashed Gaussian (SAC's usual bounds).
const LOG_STD_RANGE: (f64, f64) = (-20.0, 2.0);

/// Which policy the model carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Greedy over Q values (discrete actions).
    QValues,
    /// A deterministic `tanh` policy.
    Deterministic,
    /// A `tanh`-squashed Gaussian.
    SquashedGaussian,
    /// A categorical over discrete actions, with critics that score every action at once.
    Categorical,
}

/// One network: its observation statistics, then fleetrl's layers or the user's module.
#[derive(Debug)]
struct Net {
    /// The model's running observation statistics (one set, shared by every network).
    norm: Option<ObsNorm>,
    body: Body,
}

/// What a network computes with.
#[derive(Debug)]
enum Body {
    /// fleetrl's own layers (`[model]`).
    Layers(Layers),
    /// The user's TorchScript module (`model.torchscript`, `model.torchscript_critic`), in
    /// the layout of the layers it replaces (see [`ScriptNet::joined`]).
    Script(ScriptNet),
}

/// A convolutional encoder for image observations, observation features, optional action
/// features, a common trunk.
#[derive(Debug)]
struct Layers {
    encoder: Option<ConvEncoder>,
    obs: Option<Mlp>,
    act: Option<Mlp>,
    common: Mlp,
    activation: Activation,
}

/// Where a network comes from the user's module: the key, its file, and the interface.
type ScriptSource<'a> = Option<(&'static str, &'a Path, Interface)>;

impl Net {
    /// The network at `path`: the user's module when `script` names one, otherwise fleetrl's
    /// layers reading `act_dim` action values (0: none) and giving `out` values per row.
    fn new(
        path: &nn::Path,
        config: &ModelConfig,
        input: &Input,
        (act_dim, out): (i64, i64),
        script: ScriptSource<'_>,
    ) -> Result<Net, ModelError> {
        let body = match script {
            Some((key, file, interface)) => Body::Script(ScriptNet::load(
                key,
                file,
                &(path / "script"),
                input.flat,
                interface,
            )?),
            None => Body::Layers(Layers::new(path, config, input, act_dim, out)?),
        };
        Ok(Net {
            norm: input.norm.as_ref().map(ObsNorm::shallow_clone),
            body,
        })
    }

    fn forward(&self, obs: &Tensor, action: Option<&Tensor>) -> Tensor {
        let normalised = self.norm.as_ref().map(|n| n.apply(obs));
        let obs = normalised.as_ref().unwrap_or(obs);
        match &self.body {
            Body::Layers(layers) => layers.forward(obs, action),
            Body::Script(script) => script.joined(obs, action),
        }
    }

    /// A second or later critic from the user's file starts elsewhere than the first (see
    /// [`ScriptNet::shuffle_parameters`]); fleetrl's layers draw their own initialisation.
    fn decorrelate(&self) -> Result<(), ModelError> {
        match &self.body {
            Body::Script(script) => script.shuffle_parameters(),
            Body::Layers(_) => Ok(()),
        }
    }
}

impl Layers {
    fn new(
        path: &nn::Path,
        config: &ModelConfig,
        input: &Input,
        act_dim: i64,
        out: i64,
    ) -> Result<Layers, ModelError> {
        let activation = config.activation;
        let encoder = match input.frame {
            Some(frame) => Some(ConvEncoder::new(
                &(path / "encoder"),
                frame,
                input.scale,
                &ConvSpec::from_config(config),
                ConvInit::Torch,
            )?),
            None => None,
        };
        let obs_dim = encoder.as_ref().map_or(input.flat, ConvEncoder::width);
        let feature = |name: &str, dim: i64, sizes: &[i64]| match sizes.split_last() {
            Some((&last, inner)) => (
                Some(Mlp::new(&(path / name), dim, inner, last, activation, None)),
                last,
            ),
            None => (None, dim),
        };
        let (obs, obs_width) = feature("obs", obs_dim, &config.obs_features);
        let (act, act_width) = if act_dim > 0 {
            feature("act", act_dim, &config.act_features)
        } else {
            (None, 0)
        };
        let common = Mlp::new(
            &(path / "common"),
            obs_width + act_width,
            &config.hidden_sizes,
            out,
            activation,
            None,
        );
        Ok(Layers {
            encoder,
            obs,
            act,
            common,
            activation,
        })
    }

    /// The layers on (normalised) observations.
    fn forward(&self, obs: &Tensor, action: Option<&Tensor>) -> Tensor {
        let features = |net: &Option<Mlp>, x: &Tensor| match net {
            Some(m) => self.activation.apply(&m.forward(x)),
            None => x.shallow_clone(),
        };
        let encoded = self.encoder.as_ref().map(|cnn| cnn.forward(obs));
        let x = features(&self.obs, encoded.as_ref().unwrap_or(obs));
        let x = match action {
            Some(a) => Tensor::cat(&[x, features(&self.act, a)], 1),
            None => x,
        };
        self.common.forward(&x)
    }
}

/// What a network reads: flat observations of width `flat`, or image frames.
#[derive(Debug)]
struct Input {
    flat: i64,
    frame: Option<FrameShape>,
    scale: f64,
    /// `model.normalize_obs`: running statistics applied before everything else.
    norm: Option<ObsNorm>,
}

/// A policy (or Q network) plus critics, with the var store that owns them.
#[derive(Debug)]
pub struct OffPolicyModel {
    /// Running observation statistics (`model.normalize_obs`), shared by every network.
    obs_norm: Option<ObsNorm>,
    vs: nn::VarStore,
    kind: PolicyKind,
    pi: Option<Net>,
    critics: Vec<Net>,
    /// The recurrent Q network (`QValues` with a recurrent core), or the recurrent policy
    /// (`SquashedGaussian` or `Deterministic`: recurrent SAC, TD3, DDPG); `pi` and `critics`
    /// are then empty.
    recurrent: Option<RecurrentNet>,
    /// Recurrent SAC's critics, each with its own core.
    recurrent_critics: Vec<RecurrentNet>,
    /// Half-width and centre of the action box, `[A]` (continuous kinds).
    scale: Tensor,
    bias: Tensor,
    /// The number of discrete actions (`QValues`, `Categorical`).
    discrete_actions: Option<i64>,
}

impl OffPolicyModel {
    /// Builds a fresh model of `kind` with `num_critics` Q networks (ignored for `QValues`,
    /// which has one `q` network) on `device`.
    pub fn new(
        config: &ModelConfig,
        kind: PolicyKind,
        num_critics: u32,
        obs_space: &Space,
        action_space: &Space,
        device: Device,
    ) -> Result<OffPolicyModel, ModelError> {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let obs_dim = obs_space.flat_dim() as i64;
        let frame = image_frame(config, obs_space)?;
        if config.normalize_obs && (frame.is_some() || config.lstm_size > 0) {
            return Err(ModelError::Config {
                key: "model.normalize_obs",
                message: "off-policy models normalise flat observations of feed-forward \
                          networks; image observations and recurrent DQN are not normalised"
                    .into(),
            });
        }
        let norm = config.normalize_obs.then(|| {
            ObsNorm::new(
                &(&root / "obs_norm"),
                obs_dim,
                config.obs_clip,
                config.norm_obs_var_clip,
            )
        });
        let input = Input {
            flat: obs_dim,
            frame,
            scale: value_scale(obs_space),
            norm,
        };
        if input.frame.is_some() && config.lstm_size > 0 {
            return Err(ModelError::Config {
                key: "model.lstm_size",
                message: "recurrent off-policy networks (R2D2, recurrent SAC and TD3) read flat \
                          observations; image observations need lstm_size = 0 with an \
                          off-policy algorithm"
                    .into(),
            });
        }
        let policy_file = config.torchscript.as_deref();
        let critic_file = config.torchscript_critic.as_deref();
        let rows = |width: i64, what: &'static str| Interface::Rows { width, what };
        // `num_critics` critics, each with its own parameters.
        let critics = |count: u32, shape: (i64, i64), script: ScriptSource<'_>| {
            let mut nets = Vec::new();
            for i in 0..count.max(1) {
                let net = Net::new(&(&root / format!("qf{i}")), config, &input, shape, script)?;
                if i > 0 {
                    net.decorrelate()?;
                }
                nets.push(net);
            }
            Ok::<_, ModelError>(nets)
        };
        let mut recurrent = None;
        let mut recurrent_critics = Vec::new();
        if config.lstm_size > 0 {
            recurrent::check_kind(kind)?;
        }
        let (pi, critics, scale, bias) = match (kind, action_space) {
            (PolicyKind::QValues, Space::Discrete { n }) if config.lstm_size > 0 => {
                recurrent = Some(RecurrentNet::new(&(&root / "q"), config, obs_dim, 0, *n));
                (
                    None,
                    Vec::new(),
                    Tensor::ones([1], (Kind::Float, device)),
                    Tensor::zeros([1], (Kind::Float, device)),
                )
            }
            (PolicyKind::QValues, Space::Discrete { n }) => {
                let script = policy_file.map(|f| (POLICY_KEY, f, rows(*n, "q")));
                let q = Net::new(&(&root / "q"), config, &input, (0, *n), script)?;
                (
                    None,
                    vec![q],
                    Tensor::ones([1], (Kind::Float, device)),
                    Tensor::zeros([1], (Kind::Float, device)),
                )
            }
            (PolicyKind::Categorical, Space::Discrete { n }) => {
                let script = policy_file.map(|f| (POLICY_KEY, f, rows(*n, "logits")));
                let pi = Net::new(&(&root / "pi"), config, &input, (0, *n), script)?;
                let script = critic_file.map(|f| (CRITIC_KEY, f, rows(*n, "q")));
                let critics = critics(num_critics, (0, *n), script)?;
                (
                    Some(pi),
                    critics,
                    Tensor::ones([1], (Kind::Float, device)),
                    Tensor::zeros([1], (Kind::Float, device)),
                )
            }
            (
                PolicyKind::Deterministic | PolicyKind::SquashedGaussian,
                Space::Box { low, high, .. },
            ) => {
                let a = action_space.flat_dim() as i64;
                let out = if kind == PolicyKind::SquashedGaussian {
                    2 * a
                } else {
                    a
                };
                let (box_scale, box_bias) = box_scale(low, high, device);
                if config.lstm_size > 0 {
                    let (pi, critics) =
                        recurrent::build(&root, config, obs_dim, (a, out), num_critics);
                    recurrent = Some(pi);
                    recurrent_critics = critics;
                    (None, Vec::new(), box_scale, box_bias)
                } else {
                    let interface = if kind == PolicyKind::SquashedGaussian {
                        Interface::Gaussian(a)
                    } else {
                        rows(a, "action (before fleetrl's tanh)")
                    };
                    let script = policy_file.map(|f| (POLICY_KEY, f, interface));
                    let pi = Net::new(&(&root / "pi"), config, &input, (0, out), script)?;
                    let script = critic_file.map(|f| (CRITIC_KEY, f, Interface::Critic(a)));
                    let critics = critics(num_critics, (a, 1), script)?;
                    (Some(pi), critics, box_scale, box_bias)
                }
            }
            _ => return Err(ModelError::UnsupportedSpace(action_space.clone())),
        };
        Ok(OffPolicyModel {
            obs_norm: input.norm,
            vs,
            kind,
            pi,
            critics,
            recurrent,
            recurrent_critics,
            scale,
            bias,
            discrete_actions: match action_space {
                Space::Discrete { n } => Some(*n),
                Space::Box { .. } => None,
            },
        })
    }

    /// Merges a training batch's observations `[N, D]` into the running normalisation
    /// statistics (which travel with the weights); nothing without `model.normalize_obs`.
    pub fn observe(&self, obs: &Tensor) {
        if let Some(norm) = &self.obs_norm {
            norm.update(obs);
        }
    }

    /// The recurrent Q network (R2D2) or policy (recurrent SAC, TD3), if this model has one.
    pub fn recurrent(&self) -> Option<&RecurrentNet> {
        self.recurrent.as_ref()
    }

    /// The policy kind.
    pub fn kind(&self) -> PolicyKind {
        self.kind
    }

    /// The variable store (for optimisers and checkpoints).
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// Stops every parameter from requiring gradients (a policy to export or only to run).
    pub fn freeze(&mut self) {
        self.vs.freeze();
    }

    /// Number of Q networks.
    pub fn num_critics(&self) -> usize {
        self.critics.len()
    }

    /// The number of discrete actions; `None` for a continuous action box.
    pub fn discrete_actions(&self) -> Option<i64> {
        self.discrete_actions
    }

    /// Q values of every discrete action, `[N, n]` (`QValues` only; a recurrent model starts
    /// from a zero state).
    pub fn q_values(&self, obs: &Tensor) -> Tensor {
        match &self.recurrent {
            Some(net) => {
                let zeros = RnnState::zeros(obs.size()[0], net.state_size(), obs.device());
                net.step(obs, &zeros).0
            }
            None => self.critics[0].forward(obs, None),
        }
    }

    /// Q estimate of critic `i` for env-scale actions `[N, A]` (`Categorical`: action
    /// indices `[N]`), `[N]`.
    pub fn q(&self, i: usize, obs: &Tensor, action: &Tensor) -> Tensor {
        if self.kind == PolicyKind::Categorical {
            return (self.q_all(i, obs))
                .gather(1, &action.unsqueeze(1), false)
                .squeeze_dim(1);
        }
        self.critics[i]
            .forward(obs, Some(&self.to_unit_scale(action)))
            .squeeze_dim(1)
    }

    /// Critic `i`'s Q value of every discrete action, `[N, n]` (`Categorical`).
    pub fn q_all(&self, i: usize, obs: &Tensor) -> Tensor {
        debug_assert_eq!(self.kind, PolicyKind::Categorical);
        self.critics[i].forward(obs, None)
    }

    /// Every critic's Q value of every discrete action, stacked `[K, N, n]` (`Categorical`).
    pub fn qs_all(&self, obs: &Tensor) -> Tensor {
        let all: Vec<Tensor> = (0..self.critics.len())
            .map(|i| self.q_all(i, obs))
            .collect();
        Tensor::stack(&all, 0)
    }

    /// The categorical policy's probabilities and log-probabilities, `[N, n]` each
    /// (`Categorical`).
    pub fn categorical(&self, obs: &Tensor) -> (Tensor, Tensor) {
        debug_assert_eq!(self.kind, PolicyKind::Categorical);
        let log_probs = self
            .policy_net()
            .forward(obs, None)
            .log_softmax(-1, Kind::Float);
        (log_probs.exp(), log_probs)
    }

    /// Every critic's estimate, stacked `[K, N]`.
    pub fn qs(&self, obs: &Tensor, action: &Tensor) -> Tensor {
        let all: Vec<Tensor> = (0..self.critics.len())
            .map(|i| self.q(i, obs, action))
            .collect();
        Tensor::stack(&all, 0)
    }

    /// [`OffPolicyModel::qs`] for a policy loss: the critics' variables are left out of
    /// autograd while it is built, so its backward pass reaches the actions (and the policy)
    /// without computing the critics' weight gradients, which only the critics' optimiser
    /// would read and which it clears before its own step. Same values as `qs`.
    pub fn qs_for_policy(&self, obs: &Tensor, action: &Tensor) -> Tensor {
        self.critics_frozen(|| self.qs(obs, action))
    }

    /// [`OffPolicyModel::q`] for a policy loss, as [`OffPolicyModel::qs_for_policy`].
    pub fn q_for_policy(&self, i: usize, obs: &Tensor, action: &Tensor) -> Tensor {
        self.critics_frozen(|| self.q(i, obs, action))
    }

    /// Runs `f` with every trainable critic variable (`qf<i>.*`) excluded from autograd.
    fn critics_frozen<R>(&self, f: impl FnOnce() -> R) -> R {
        let critics: Vec<Tensor> = (self.vs.variables().into_iter())
            .filter(|(name, t)| name.starts_with("qf") && t.requires_grad())
            .map(|(_, t)| t)
            .collect();
        for t in &critics {
            let _ = t.shallow_clone().set_requires_grad(false);
        }
        let out = f();
        for t in &critics {
            let _ = t.shallow_clone().set_requires_grad(true);
        }
        out
    }

    /// The deterministic action in [-1, 1] `[N, A]` (the Gaussian's squashed mean; continuous
    /// kinds).
    pub fn mean_action(&self, obs: &Tensor) -> Tensor {
        debug_assert!(
            self.discrete_actions.is_none(),
            "a continuous policy's action"
        );
        let out = self.policy_net().forward(obs, None);
        match self.kind {
            PolicyKind::SquashedGaussian => out.chunk(2, 1)[0].tanh(),
            _ => out.tanh(),
        }
    }

    /// The squashed Gaussian's mean and clamped log-std before the squash, `[N, A]` each.
    pub(crate) fn gaussian(&self, obs: &Tensor) -> (Tensor, Tensor) {
        gaussian_parts(&self.policy_net().forward(obs, None))
    }

    /// A reparameterised sample in [-1, 1] `[N, A]` and its log-likelihood `[N]`
    /// (`SquashedGaussian`).
    pub fn sample_action(&self, obs: &Tensor) -> (Tensor, Tensor) {
        let (mean, log_std) = self.gaussian(obs);
        squashed_sample(&mean, &log_std)
    }

    /// [`OffPolicyModel::sample_action`] with what PEARL's policy regularisers read: the
    /// sample in [-1, 1] `[N, A]`, its log-likelihood `[N]`, and the Gaussian's mean,
    /// clamped log-std and pre-squash sample, `[N, A]` each.
    pub fn sample_action_parts(&self, obs: &Tensor) -> [Tensor; 5] {
        let (mean, log_std) = self.gaussian(obs);
        let noise = mean.randn_like();
        let pre_tanh = &mean + log_std.exp() * &noise;
        let a = pre_tanh.tanh();
        let log_prob = squashed_log_prob(&noise, &log_std, &a);
        [a, log_prob, mean, log_std, pre_tanh]
    }

    /// The log-likelihood `[N]` and entropy `[N]` of given actions under the policy
    /// (pytorchrl's off-policy `evaluate_actions`). `QValues`: indices `[N]` under the
    /// softmax over Q values (the policy BC trains). `SquashedGaussian`: values in [-1, 1]
    /// `[N, A]` (the box mapped to [-1, 1]; values at the bounds are moved 1e-6 inside, where
    /// the squash is invertible), with the entropy of the Gaussian before the squash (the
    /// squashed one has no closed form). `Categorical`: indices `[N]` under the policy's own
    /// softmax. A deterministic policy has no likelihood: `None`.
    pub fn evaluate_actions(&self, obs: &Tensor, actions: &Tensor) -> Option<(Tensor, Tensor)> {
        match self.kind {
            PolicyKind::QValues | PolicyKind::Categorical => {
                let log_probs = match self.kind {
                    PolicyKind::QValues => self.q_values(obs).log_softmax(-1, Kind::Float),
                    _ => self.categorical(obs).1,
                };
                let entropy =
                    -(log_probs.exp() * &log_probs).sum_dim_intlist(-1, false, Kind::Float);
                let chosen = log_probs
                    .gather(1, &actions.unsqueeze(1), false)
                    .squeeze_dim(1);
                Some((chosen, entropy))
            }
            PolicyKind::SquashedGaussian => {
                let (mean, log_std) = self.gaussian(obs);
                let a = actions.clamp(-1.0 + 1e-6, 1.0 - 1e-6);
                let noise = (a.atanh() - mean) / log_std.exp();
                let log_prob = squashed_log_prob(&noise, &log_std, &a);
                let entropy = (log_std + 0.5 * (1.0 + (2.0 * std::f64::consts::PI).ln()))
                    .sum_dim_intlist(-1, false, Kind::Float);
                Some((log_prob, entropy))
            }
            PolicyKind::Deterministic => None,
        }
    }

    /// Env-scale actions `[N, A]` mapped to the policy's [-1, 1].
    pub fn to_unit_scale(&self, action: &Tensor) -> Tensor {
        (action - &self.bias) / &self.scale
    }

    /// Maps [-1, 1] actions to the env's box.
    pub fn to_env_scale(&self, unit: &Tensor) -> Tensor {
        unit * &self.scale + &self.bias
    }

    /// The action box's half-widths `[A]`.
    pub fn action_scale(&self) -> &Tensor {
        &self.scale
    }

    fn policy_net(&self) -> &Net {
        self.pi
            .as_ref()
            .expect("every policy kind but `QValues` builds `pi`")
    }

    /// Every parameter as a proto tensor, by path.
    pub fn export(&self) -> Result<fleetrl_proto::TensorMap, ModelError> {
        weights::export(&self.vs)
    }

    /// Copies weights in from a proto map; every parameter must be present with its shape.
    pub fn import(&mut self, map: &fleetrl_proto::TensorMap) -> Result<(), ModelError> {
        weights::import(&self.vs, map)
    }

    /// Every parameter, by path (for checkpoints).
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        weights::named(&self.vs)
    }

    /// Copies named weights in; every parameter must be present with its exact shape.
    pub fn load_named(&mut self, named: &[(String, Tensor)]) -> Result<(), ModelError> {
        weights::load_named(&self.vs, named)
    }

    /// Moves every parameter `tau` of the way to `online`'s (1.0: a hard copy).
    pub fn copy_from(&mut self, online: &OffPolicyModel, tau: f64) {
        let _guard = tch::no_grad_guard();
        let source = online.vs.variables();
        for (name, mut var) in self.vs.variables() {
            if let Some(src) = source.get(&name) {
                // Observation statistics are not weights: the target reads observations as
                // the online model does.
                if tau >= 1.0 || name.starts_with("obs_norm.") {
                    var.copy_(src);
                } else {
                    let _ = var.lerp_(src, tau);
                }
            }
        }
    }
}

impl OffPolicyModel {
    /// A categorical policy's step: its mode (deterministic) or a sample, the action's
    /// log-probability, and its first critic's Q value.
    fn act_categorical(&self, obs: &Tensor, deterministic: bool) -> PolicyStep {
        let (probs, log_probs) = self.categorical(obs);
        let action = if deterministic {
            probs.argmax(1, false)
        } else {
            probs.multinomial(1, true).squeeze_dim(1)
        };
        let chosen = action.unsqueeze(1);
        PolicyStep {
            log_prob: log_probs.gather(1, &chosen, false).squeeze_dim(1),
            value: self.q(0, obs, &action),
            action,
        }
    }
}

/// The greedy action and its Q value.
fn greedy(q: &Tensor) -> PolicyStep {
    let (value, action) = q.max_dim(1, false);
    PolicyStep {
        log_prob: value.zeros_like(),
        action,
        value,
    }
}

/// Half-widths and centres `[A]` of an action box (an infinite bound counts as +-1).
fn box_scale(low: &[f32], high: &[f32], device: Device) -> (Tensor, Tensor) {
    let finite = |v: &f32, default: f32| if v.is_finite() { *v } else { default };
    let low: Vec<f32> = low.iter().map(|v| finite(v, -1.0)).collect();
    let high: Vec<f32> = high.iter().map(|v| finite(v, 1.0)).collect();
    let half: Vec<f32> = low.iter().zip(&high).map(|(l, h)| (h - l) / 2.0).collect();
    let mid: Vec<f32> = low.iter().zip(&high).map(|(l, h)| (h + l) / 2.0).collect();
    (
        Tensor::from_slice(&half).to_device(device),
        Tensor::from_slice(&mid).to_device(device),
    )
}

/// The squashed Gaussian's mean and clamped log-std, `[..., A]` each, from a policy head's
/// output `[..., 2A]`.
fn gaussian_parts(out: &Tensor) -> (Tensor, Tensor) {
    let parts = out.chunk(2, -1);
    let log_std = parts[1].clamp(LOG_STD_RANGE.0, LOG_STD_RANGE.1);
    (parts[0].shallow_clone(), log_std)
}

/// A reparameterised sample `tanh(mean + std * noise)` in [-1, 1] and its log-likelihood.
fn squashed_sample(mean: &Tensor, log_std: &Tensor) -> (Tensor, Tensor) {
    let noise = mean.randn_like();
    let a = (mean + log_std.exp() * &noise).tanh();
    let log_prob = squashed_log_prob(&noise, log_std, &a);
    (a, log_prob)
}

/// log-likelihood `[N]` of `a = tanh(mean + std * noise)` under the squashed Gaussian: the
/// Gaussian's density of the pre-squash value (standardised as `noise`) less the squash's
/// log-Jacobian, summed over action dimensions.
fn squashed_log_prob(noise: &Tensor, log_std: &Tensor, a: &Tensor) -> Tensor {
    let gaussian = (noise.square() * -0.5 - log_std - 0.5 * (2.0 * std::f64::consts::PI).ln())
        .sum_dim_intlist(-1, false, Kind::Float);
    let squash = (a.square().neg() + (1.0 + 1e-6))
        .log()
        .sum_dim_intlist(-1, false, Kind::Float);
    gaussian - squash
}

impl Policy for OffPolicyModel {
    fn act(&self, obs: &Tensor, deterministic: bool) -> PolicyStep {
        let _guard = tch::no_grad_guard();
        if self.recurrent.is_some() {
            // A recurrent policy acting on single observations starts from a zero state.
            let zeros = RnnState::zeros(obs.size()[0], self.state_size(), obs.device());
            return self.act_recurrent(obs, &zeros, deterministic).0;
        }
        match self.kind {
            PolicyKind::QValues => greedy(&self.q_values(obs)),
            PolicyKind::Categorical => self.act_categorical(obs, deterministic),
            PolicyKind::Deterministic | PolicyKind::SquashedGaussian => {
                let (unit, log_prob) = if deterministic || self.kind == PolicyKind::Deterministic {
                    let a = self.mean_action(obs);
                    let zeros = a.select(1, 0).zeros_like();
                    (a, zeros)
                } else {
                    self.sample_action(obs)
                };
                let action = self.to_env_scale(&unit);
                let value = self.q(0, obs, &action);
                PolicyStep {
                    action,
                    log_prob,
                    value,
                }
            }
        }
    }

    fn value(&self, obs: &Tensor) -> Tensor {
        self.act(obs, true).value
    }

    /// Every recurrent network's state side by side: R2D2's Q network's, or recurrent SAC's
    /// or TD3's policy's then each critic's.
    fn state_size(&self) -> i64 {
        let nets = self.recurrent.iter().chain(&self.recurrent_critics);
        nets.map(RecurrentNet::state_size).sum()
    }

    fn act_recurrent(
        &self,
        obs: &Tensor,
        state: &RnnState,
        deterministic: bool,
    ) -> (PolicyStep, RnnState) {
        let Some(net) = &self.recurrent else {
            return (self.act(obs, deterministic), state.shallow_clone());
        };
        let _guard = tch::no_grad_guard();
        if self.kind != PolicyKind::QValues {
            return self.act_recurrent_actor(obs, state, deterministic);
        }
        let (q, next) = net.step(obs, state);
        (greedy(&q), next)
    }

    fn value_recurrent(&self, obs: &Tensor, state: &RnnState) -> Tensor {
        self.act_recurrent(obs, state, true).0.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pendulum_spaces() -> (Space, Space) {
        let obs = Space::Box {
            shape: vec![3],
            low: vec![-1.0, -1.0, -8.0],
            high: vec![1.0, 1.0, 8.0],
        };
        let act = Space::Box {
            shape: vec![1],
            low: vec![-2.0],
            high: vec![2.0],
        };
        (obs, act)
    }

    /// A policy loss through `qs_for_policy` has the values and the policy gradient of one
    /// through `qs`, and leaves every critic weight without gradient; the critics train
    /// again afterwards.
    #[test]
    fn policy_losses_skip_the_critics_weight_gradients() {
        let (obs_space, act_space) = pendulum_spaces();
        let model = OffPolicyModel::new(
            &ModelConfig::default(),
            PolicyKind::SquashedGaussian,
            2,
            &obs_space,
            &act_space,
            Device::Cpu,
        )
        .unwrap();
        let vars = model.var_store().variables();
        let obs = Tensor::randn([7, 3], (Kind::Float, Device::Cpu));
        let grads = |frozen: bool| {
            for t in vars.values() {
                let mut g = t.grad();
                if g.defined() {
                    let _ = g.zero_();
                }
            }
            let action = model.to_env_scale(&model.mean_action(&obs));
            let qs = if frozen {
                model.qs_for_policy(&obs, &action)
            } else {
                model.qs(&obs, &action)
            };
            let loss = -qs.min_dim(0, false).0.mean(Kind::Float);
            loss.backward();
            let norm = |prefix: &str| {
                (vars.iter())
                    .filter(|(n, t)| n.starts_with(prefix) && t.grad().defined())
                    .map(|(_, t)| t.grad().square().sum(Kind::Float).double_value(&[]))
                    .sum::<f64>()
            };
            (loss.double_value(&[]), norm("pi."), norm("qf"))
        };
        let (plain_loss, plain_pi, plain_qf) = grads(false);
        let (loss, pi, qf) = grads(true);
        assert_eq!(loss, plain_loss);
        assert!(
            plain_pi > 0.0 && (pi - plain_pi).abs() <= 1e-6 * plain_pi,
            "{pi} vs {plain_pi}"
        );
        assert!(
            plain_qf > 0.0 && qf == 0.0,
            "critic gradients {qf} (plain {plain_qf})"
        );
        assert!(vars.iter().all(|(_, t)| t.requires_grad()));
    }

    #[test]
    fn continuous_actions_stay_in_the_box_and_log_probs_are_finite() {
        let (obs_space, act_space) = pendulum_spaces();
        let config = ModelConfig {
            obs_features: vec![16],
            act_features: vec![8],
            ..ModelConfig::default()
        };
        let model = OffPolicyModel::new(
            &config,
            PolicyKind::SquashedGaussian,
            2,
            &obs_space,
            &act_space,
            Device::Cpu,
        )
        .unwrap();
        let obs = Tensor::randn([5, 3], (Kind::Float, Device::Cpu));
        let step = model.act(&obs, false);
        let a = Vec::<f32>::try_from(&step.action.view([-1])).unwrap();
        assert!(a.iter().all(|v| (-2.0..=2.0).contains(v)), "{a:?}");
        let lp = Vec::<f32>::try_from(&step.log_prob).unwrap();
        assert!(lp.iter().all(|v| v.is_finite()));
        assert_eq!(model.qs(&obs, &step.action).size(), vec![2, 5]);
    }

    /// `model.normalize_obs` off-policy: one set of statistics that every network reads,
    /// updated from training batches, exported with the weights, copied exactly to a target
    /// even by a soft update; image observations refuse it by name.
    #[test]
    fn observation_statistics_are_shared_exported_and_copied_to_the_target() {
        let (obs_space, act_space) = pendulum_spaces();
        let config = ModelConfig {
            normalize_obs: true,
            ..ModelConfig::default()
        };
        let build = || {
            OffPolicyModel::new(
                &config,
                PolicyKind::SquashedGaussian,
                2,
                &obs_space,
                &act_space,
                Device::Cpu,
            )
            .unwrap()
        };
        let model = build();
        let obs = Tensor::randn([64, 3], (Kind::Float, Device::Cpu)) * 5.0 + 3.0;
        let action = Tensor::zeros([64, 1], (Kind::Float, Device::Cpu));
        let before = model.qs(&obs, &action);
        model.observe(&obs);
        let after = model.qs(&obs, &action);
        assert!(
            !before.allclose(&after, 1e-6, 1e-6, false),
            "the critics read the statistics"
        );
        let exported = model.export().unwrap();
        assert!(
            exported.tensors.contains_key("obs_norm.mean"),
            "statistics travel with the weights"
        );
        let mut target = build();
        target.copy_from(&model, 0.005);
        let mean = |m: &OffPolicyModel| m.var_store().variables()["obs_norm.mean"].copy();
        assert!(mean(&target).equal(&mean(&model)));
        let minatar = crate::envs::make("MinAtar/Breakout-v1")
            .unwrap()
            .observation_space();
        let err = OffPolicyModel::new(
            &config,
            PolicyKind::QValues,
            1,
            &minatar,
            &Space::Discrete { n: 3 },
            Device::Cpu,
        )
        .unwrap_err();
        assert!(err.to_string().contains("model.normalize_obs"), "{err}");
    }

    /// DQN on a MinAtar grid: the Q network convolves the frames (the paper's 16 3x3 filters
    /// and 128 units), and a recurrent Q network on frames is refused by name.
    #[test]
    fn q_network_reads_image_observations_through_the_encoder() {
        let obs_space = crate::envs::make("MinAtar/Breakout-v1")
            .unwrap()
            .observation_space();
        let config = ModelConfig {
            channels: vec![16],
            kernel_sizes: vec![3],
            fc_sizes: Some(vec![128]),
            hidden_sizes: vec![],
            ..ModelConfig::default()
        };
        let act_space = Space::Discrete { n: 3 };
        let model = OffPolicyModel::new(
            &config,
            PolicyKind::QValues,
            1,
            &obs_space,
            &act_space,
            Device::Cpu,
        )
        .unwrap();
        let names: Vec<String> = model.var_store().variables().into_keys().collect();
        assert!(
            names.iter().any(|n| n == "q.encoder.conv0.weight"),
            "{names:?}"
        );
        let obs = Tensor::ones([5, 400], (Kind::Float, Device::Cpu));
        assert_eq!(model.q_values(&obs).size(), vec![5, 3]);
        let recurrent = ModelConfig {
            lstm_size: 32,
            ..config
        };
        let err = OffPolicyModel::new(
            &recurrent,
            PolicyKind::QValues,
            1,
            &obs_space,
            &act_space,
            Device::Cpu,
        )
        .unwrap_err();
        assert!(err.to_string().contains("model.lstm_size"), "{err}");
    }

    #[test]
    fn polyak_moves_the_target_by_tau_and_a_hard_copy_matches() {
        let (obs_space, act_space) = pendulum_spaces();
        let config = ModelConfig::default();
        let build = || {
            OffPolicyModel::new(
                &config,
                PolicyKind::Deterministic,
                1,
                &obs_space,
                &act_space,
                Device::Cpu,
            )
            .unwrap()
        };
        let online = build();
        let mut target = build();
        let name = "pi.common.out.weight";
        let before = target.vs.variables()[name].copy();
        target.copy_from(&online, 0.25);
        let expected = &before + (&online.vs.variables()[name] - &before) * 0.25;
        let diff = (target.vs.variables()[name].copy() - expected).abs().max();
        assert!(diff.double_value(&[]) < 1e-6);
        target.copy_from(&online, 1.0);
        assert!(target.vs.variables()[name].equal(&online.vs.variables()[name]));
    }

    /// `evaluate_actions` gives back the likelihood `sample_action` reported for its own
    /// samples, the Gaussian's entropy, and for Q values the softmax's log-probabilities and
    /// entropy; a deterministic policy has none.
    #[test]
    fn evaluate_actions_agrees_with_sampling_and_with_a_hand_computation() {
        let (obs_space, act_space) = pendulum_spaces();
        let config = ModelConfig::default();
        let build = |kind| {
            OffPolicyModel::new(&config, kind, 1, &obs_space, &act_space, Device::Cpu).unwrap()
        };
        let _guard = tch::no_grad_guard();
        let model = build(PolicyKind::SquashedGaussian);
        let obs = Tensor::randn([64, 3], (Kind::Float, Device::Cpu));
        let (a, sampled) = model.sample_action(&obs);
        let (log_prob, entropy) = model.evaluate_actions(&obs, &a).unwrap();
        // atanh loses precision near the bounds in f32: compare the rows away from them.
        let inside = a.abs().lt(0.99).squeeze_dim(1);
        let diff = (log_prob - sampled).abs().masked_select(&inside).max();
        assert!(diff.double_value(&[]) < 1e-3, "{diff}");
        let (_, log_std) = model.gaussian(&obs);
        let want = (log_std + 0.5 + 0.5 * (2.0 * std::f64::consts::PI).ln()).squeeze_dim(1);
        assert!(entropy.allclose(&want, 1e-6, 1e-6, false));
        // Actions at the box's bounds are moved just inside: a finite likelihood.
        let bounds = Tensor::from_slice(&[-1.0f32, 1.0]).view([2, 1]);
        let (at_bounds, _) = model
            .evaluate_actions(&obs.narrow(0, 0, 2), &bounds)
            .unwrap();
        assert!(Vec::<f32>::try_from(&at_bounds)
            .unwrap()
            .iter()
            .all(|v| v.is_finite()));
        assert!(build(PolicyKind::Deterministic)
            .evaluate_actions(&obs, &a)
            .is_none());

        let q_model = OffPolicyModel::new(
            &config,
            PolicyKind::QValues,
            1,
            &obs_space,
            &Space::Discrete { n: 3 },
            Device::Cpu,
        )
        .unwrap();
        let actions = Tensor::from_slice(&[2i64, 0]);
        let two = obs.narrow(0, 0, 2);
        let (log_prob, entropy) = q_model.evaluate_actions(&two, &actions).unwrap();
        let q =
            Vec::<f64>::try_from(&q_model.q_values(&two).to_kind(Kind::Double).view([-1])).unwrap();
        for (row, action) in [(0usize, 2usize), (1, 0)] {
            let qs = &q[row * 3..row * 3 + 3];
            let total: f64 = qs.iter().map(|v| v.exp()).sum();
            let p: Vec<f64> = qs.iter().map(|v| v.exp() / total).collect();
            let want_lp = p[action].ln();
            let want_h: f64 = -p.iter().map(|v| v * v.ln()).sum::<f64>();
            assert!((log_prob.double_value(&[row as i64]) - want_lp).abs() < 1e-5);
            assert!((entropy.double_value(&[row as i64]) - want_h).abs() < 1e-5);
        }
    }
}
