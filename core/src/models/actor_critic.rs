//! Actor-critic with separate policy (`pi`) and value (`vf`) MLPs, as SB3's `MlpPolicy` for
//! PPO: a categorical head for discrete actions, a diagonal Gaussian with a learned
//! state-independent log-std (`pi.log_std`, rlpyt's MuJoCo model) for continuous ones.

use fleetrl_proto::TensorMap;
use tch::nn::{self, Module};
use tch::{Device, Tensor};

use super::config::{Activation, ModelConfig};
use super::conv::{image_frame, value_scale};
use super::script::{Interface, PolicyOut, ScriptNet};
use super::{
    weights, ConvEncoder, ConvInit, ConvSpec, Dist, LstmCore, Mlp, ModelError, ObsNorm, Policy,
    RnnState,
};
use fleetrl_proto::space::Space;

/// What [`Policy::act`] returns for a batch.
#[derive(Debug)]
pub struct PolicyStep {
    /// Actions `[N]` (i64).
    pub action: Tensor,
    /// Log-probabilities of those actions `[N]`.
    pub log_prob: Tensor,
    /// Value estimates `[N]`.
    pub value: Tensor,
}

/// What the learner needs to score actions it did not pick.
#[derive(Debug)]
pub struct Evaluation {
    /// log pi(a|s) `[N]`.
    pub log_prob: Tensor,
    /// Entropy of pi(.|s) `[N]`.
    pub entropy: Tensor,
    /// V(s) `[N]`.
    pub value: Tensor,
}

/// The two networks, without the store that owns their parameters: cheap to clone as a
/// handle (see [`Heads::shallow_clone`]) so another thread can run them.
#[derive(Debug)]
pub struct Heads {
    /// The convolutional encoder for image observations (`[C, H, W]` boxes), applied before
    /// everything else.
    encoder: Option<ConvEncoder>,
    /// Running observation normalisation of flat observations (never with an encoder).
    obs_norm: Option<ObsNorm>,
    /// An LSTM between the observation and both heads, for recurrent models.
    core: Option<LstmCore>,
    /// Hidden layers before the LSTM (`model.pre_lstm_sizes`), each followed by the
    /// activation; `None` feeds the observation to the core.
    pre_core: Option<(Mlp, Activation)>,
    /// Hidden layers shared by both heads (`model.shared_trunk`), with their activation;
    /// `None` gives the policy and value separate hidden layers.
    trunk: Option<(Mlp, Activation)>,
    /// The policy and value networks.
    nets: Nets,
    /// A Gaussian policy's learned, state-independent log-std `[A]`; `None` for categorical
    /// and for a TorchScript module that returns its own.
    log_std: Option<Tensor>,
    /// A Gaussian policy's nonlinearity on its mean (`model.mu_nonlinearity`).
    mu_nonlinearity: Option<Activation>,
}

/// The policy and value networks: fleetrl's own MLPs, or the user's TorchScript module that
/// computes both in one forward pass.
#[derive(Debug)]
enum Nets {
    /// Separate policy (`pi`) and value (`vf`) heads.
    Mlps { pi: Mlp, vf: Mlp },
    /// `model.torchscript`: `forward(obs) -> (policy, value)` (see [`ScriptNet`]).
    Script(ScriptNet),
}

impl Nets {
    fn shallow_clone(&self) -> Nets {
        match self {
            Nets::Mlps { pi, vf } => Nets::Mlps {
                pi: pi.shallow_clone(),
                vf: vf.shallow_clone(),
            },
            Nets::Script(script) => Nets::Script(script.clone()),
        }
    }
}

/// How a `[T x B]` block of rows unrolls through a recurrent core: rows are time-major
/// (`t * B + b`), each column starts from `init` and is reset to zero before step t where
/// `reset[t]` (`[T, B]`) is 1.
#[derive(Debug)]
pub struct Sequence {
    /// Steps T.
    pub t: i64,
    /// Columns B.
    pub b: i64,
    /// 1 where an episode ended at the step before, `[T, B]` float.
    pub reset: Tensor,
    /// The state each column starts from, `[B, H]`.
    pub init: RnnState,
}

impl Heads {
    /// Scores `actions` `[N]` taken at `obs` `[N, D]`, with gradients (a recurrent model
    /// starts every row from a zero state; see [`Heads::evaluate_sequence`]).
    pub fn evaluate(&self, obs: &Tensor, actions: &Tensor) -> Evaluation {
        self.evaluate_features(&self.features(obs), actions)
    }

    /// Observations as the networks see them: normalised and clipped when configured.
    fn input(&self, obs: &Tensor) -> Tensor {
        let encoded = self.encoder.as_ref().map(|cnn| cnn.forward(obs));
        let obs = encoded.as_ref().unwrap_or(obs);
        match &self.obs_norm {
            Some(norm) => norm.apply(obs),
            None => obs.shallow_clone(),
        }
    }

    /// What the recurrent core reads: the input through the layers before it, if any.
    fn core_input(&self, obs: &Tensor) -> Tensor {
        let x = self.input(obs);
        match &self.pre_core {
            None => x,
            Some((mlp, activation)) => activation.apply(&mlp.forward(&x)),
        }
    }

    /// Scores a time-major block of rows, unrolling the recurrent core over whole sequences;
    /// the same as [`Heads::evaluate`] for a feed-forward model.
    pub fn evaluate_sequence(&self, obs: &Tensor, actions: &Tensor, seq: &Sequence) -> Evaluation {
        self.evaluate_sequence_with_state(obs, actions, seq).0
    }

    /// [`Heads::evaluate_sequence`], also returning the core's state after the last step
    /// (`None` for a feed-forward model): where the columns go on from.
    pub fn evaluate_sequence_with_state(
        &self,
        obs: &Tensor,
        actions: &Tensor,
        seq: &Sequence,
    ) -> (Evaluation, Option<RnnState>) {
        let Some(core) = &self.core else {
            return (self.evaluate(obs, actions), None);
        };
        let x = self.core_input(obs).view([seq.t, seq.b, -1]);
        let (h, last) = core.unroll_with_state(&x, &seq.init, &seq.reset);
        let features = self.shared(&h.view([seq.t * seq.b, core.size()]));
        (self.evaluate_features(&features, actions), Some(last))
    }

    fn evaluate_features(&self, features: &Tensor, actions: &Tensor) -> Evaluation {
        let (dist, value) = self.outputs(features);
        Evaluation {
            log_prob: dist.log_prob(actions),
            entropy: dist.entropy(),
            value,
        }
    }

    /// The action distributions and values the heads give for `features`.
    fn outputs(&self, features: &Tensor) -> (Dist, Tensor) {
        match &self.nets {
            Nets::Mlps { pi, vf } => (
                self.dist_from(pi.forward(features), self.log_std.as_ref()),
                vf.forward(features).squeeze_dim(1),
            ),
            Nets::Script(script) => {
                let out = script.forward(features);
                let log_std = out.log_std.as_ref().or(self.log_std.as_ref());
                (self.dist_from(out.policy, log_std), out.value)
            }
        }
    }

    /// V for `features`, `[N]`.
    fn value_of(&self, features: &Tensor) -> Tensor {
        match &self.nets {
            Nets::Mlps { vf, .. } => vf.forward(features).squeeze_dim(1),
            Nets::Script(script) => script.forward(features).value,
        }
    }

    /// The recurrent core's width H; 0 for a feed-forward model.
    pub fn state_size(&self) -> i64 {
        self.core.as_ref().map_or(0, LstmCore::size)
    }

    /// What the heads see: the observation, or the core's output from a zero state.
    fn features(&self, obs: &Tensor) -> Tensor {
        let h = match &self.core {
            None => self.input(obs),
            Some(core) => {
                let x = self.core_input(obs);
                let zero = RnnState::zeros(x.size()[0], core.size(), x.device());
                core.step(&x, &zero).h
            }
        };
        self.shared(&h)
    }

    /// The shared hidden layers, if any.
    fn shared(&self, x: &Tensor) -> Tensor {
        match &self.trunk {
            None => x.shallow_clone(),
            Some((trunk, activation)) => activation.apply(&trunk.forward(x)),
        }
    }

    /// One recurrent step: the action distributions, values and next state at `obs` `[N, D]`
    /// from `state` `[N, H]`. Panics on a feed-forward model (an invariant of the callers,
    /// which check [`Heads::state_size`]).
    pub fn step(&self, obs: &Tensor, state: &RnnState) -> (Dist, Tensor, RnnState) {
        let core = self.core.as_ref().expect("step needs a recurrent model");
        let next = core.step(&self.core_input(obs), state);
        let (dist, value) = self.outputs(&self.shared(&next.h));
        (dist, value, next)
    }

    /// The policy's action distributions at `obs` `[N, D]`, with gradients.
    pub fn dist(&self, obs: &Tensor) -> Dist {
        self.dist_of(&self.features(obs))
    }

    fn dist_of(&self, features: &Tensor) -> Dist {
        match &self.nets {
            Nets::Mlps { pi, .. } => self.dist_from(pi.forward(features), self.log_std.as_ref()),
            Nets::Script(_) => self.outputs(features).0,
        }
    }

    /// The action distributions and values at `obs` `[N, D]` (one pass of a TorchScript
    /// module), with gradients.
    pub fn dist_and_value(&self, obs: &Tensor) -> (Dist, Tensor) {
        self.outputs(&self.features(obs))
    }

    /// The distribution the policy network's output `out` stands for.
    fn dist_from(&self, out: Tensor, log_std: Option<&Tensor>) -> Dist {
        match log_std {
            None => Dist::categorical(&out),
            Some(log_std) => Dist::Gaussian {
                mean: match self.mu_nonlinearity {
                    Some(f) => f.apply(&out),
                    None => out,
                },
                log_std: log_std.shallow_clone(),
            },
        }
    }

    /// Whether the policy is a plain MLP on the raw observation (no encoder, normalisation,
    /// recurrent core, shared trunk or TorchScript module): what [`Heads::dist_with`] can run.
    pub fn is_plain_policy(&self) -> bool {
        matches!(self.nets, Nets::Mlps { .. })
            && self.encoder.is_none()
            && self.obs_norm.is_none()
            && self.core.is_none()
            && self.trunk.is_none()
    }

    /// The policy's parameters in [`Heads::dist_with`]'s order: the MLP's layers, then the
    /// Gaussian log-std if there is one. Handles on the model's own tensors.
    pub fn policy_params(&self) -> Vec<Tensor> {
        let mut params = match &self.nets {
            Nets::Mlps { pi, .. } => pi.params(),
            Nets::Script(_) => Vec::new(),
        };
        params.extend(self.log_std.as_ref().map(Tensor::shallow_clone));
        params
    }

    /// The policy's action distributions at `obs` with `params` (shaped as
    /// [`Heads::policy_params`]) in place of its own: the functional form MAML adapts. Needs
    /// a [plain policy](Heads::is_plain_policy).
    pub fn dist_with(&self, obs: &Tensor, params: &[Tensor]) -> Dist {
        let (mlp, log_std) = match &self.log_std {
            Some(_) => {
                let (log_std, mlp) = params.split_last().expect("policy parameters");
                (mlp, Some(log_std))
            }
            None => (params, None),
        };
        let Nets::Mlps { pi, .. } = &self.nets else {
            panic!("dist_with needs a plain policy (see Heads::is_plain_policy)");
        };
        self.dist_from(pi.forward_with(obs, mlp), log_std)
    }

    /// V(obs), `[N]`, with gradients.
    pub fn value(&self, obs: &Tensor) -> Tensor {
        self.value_of(&self.features(obs))
    }

    /// Another handle on the same parameters: no copy, and gradients from either handle
    /// accumulate in the same place (libtorch serialises that accumulation).
    pub fn shallow_clone(&self) -> Heads {
        Heads {
            encoder: self.encoder.as_ref().map(ConvEncoder::shallow_clone),
            obs_norm: self.obs_norm.as_ref().map(ObsNorm::shallow_clone),
            core: self.core.as_ref().map(LstmCore::shallow_clone),
            pre_core: self
                .pre_core
                .as_ref()
                .map(|(mlp, activation)| (mlp.shallow_clone(), *activation)),
            trunk: self
                .trunk
                .as_ref()
                .map(|(mlp, activation)| (mlp.shallow_clone(), *activation)),
            nets: self.nets.shallow_clone(),
            log_std: self.log_std.as_ref().map(Tensor::shallow_clone),
            mu_nonlinearity: self.mu_nonlinearity,
        }
    }
}

/// The running normalisation of `dim`-wide observations, when `model.normalize_obs`.
fn obs_norm(config: &ModelConfig, root: &nn::Path, dim: i64) -> Option<ObsNorm> {
    config.normalize_obs.then(|| {
        ObsNorm::new(
            &(root / "obs_norm"),
            dim,
            config.obs_clip,
            config.norm_obs_var_clip,
        )
    })
}

/// A Gaussian policy's learned, state-independent log-std `pi.log_std` `[n]`.
fn log_std(config: &ModelConfig, root: &nn::Path, n: i64) -> Tensor {
    (root / "pi").var("log_std", &[n], nn::Init::Const(config.init_log_std))
}

/// The network and the variable store that owns its parameters.
#[derive(Debug)]
pub struct ActorCritic {
    vs: nn::VarStore,
    heads: Heads,
}

impl ActorCritic {
    /// Builds a fresh network on `device` for these spaces.
    pub fn new(
        config: &ModelConfig,
        obs_space: &Space,
        action_space: &Space,
        device: Device,
    ) -> Result<ActorCritic, ModelError> {
        let (n_actions, gaussian) = match action_space {
            Space::Discrete { n } => (*n, false),
            Space::Box { .. } => (action_space.flat_dim() as i64, true),
        };
        if let Some(path) = &config.torchscript {
            return ActorCritic::scripted(config, path, obs_space, n_actions, gaussian, device);
        }
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        // Image observations ([C, H, W] boxes, e.g. stacked Atari frames) go through the
        // convolutional encoder, whose features take the place of the flat observation.
        let frame = image_frame(config, obs_space)?;
        if config.normalize_obs && frame.is_some() {
            return Err(ModelError::Config {
                key: "model.normalize_obs",
                message: "normalises flat observations; image observations ([C, H, W]) are \
                          scaled by the convolutional encoder instead (divided by the box's \
                          high, 255 for frames), so set model.normalize_obs = false"
                    .into(),
            });
        }
        let encoder = match frame {
            Some(frame) => Some(ConvEncoder::new(
                &(&root / "encoder"),
                frame,
                value_scale(obs_space),
                &ConvSpec::from_config(config),
                ConvInit::KaimingRelu,
            )?),
            None => None,
        };
        let raw_dim = encoder
            .as_ref()
            .map_or(obs_space.flat_dim() as i64, ConvEncoder::width);
        let lstm = config.lstm_size as i64;
        let ortho = config.orthogonal_init;
        // Layers before the core: hidden ones, then the last width as the output layer.
        let pre_core = match config.pre_lstm_sizes.split_last() {
            Some((&last, inner)) if lstm > 0 => Some(Mlp::new(
                &(&root / "pre_core"),
                raw_dim,
                inner,
                last,
                config.activation,
                ortho.then_some(2f64.sqrt()),
            )),
            _ => None,
        };
        let core_in = config
            .pre_lstm_sizes
            .last()
            .copied()
            .filter(|_| pre_core.is_some())
            .unwrap_or(raw_dim);
        let core = (lstm > 0)
            .then(|| LstmCore::with_cell(&(&root / "core"), core_in, lstm, config.recurrent_cell));
        let obs_norm = obs_norm(config, &root, raw_dim);
        let obs_dim = if lstm > 0 { lstm } else { raw_dim };
        let (trunk, head_in, hidden) = match config.hidden_sizes.split_last() {
            Some((&last, inner)) if config.shared_trunk => {
                let trunk = Mlp::new(
                    &(&root / "trunk"),
                    obs_dim,
                    inner,
                    last,
                    config.activation,
                    ortho.then_some(2f64.sqrt()),
                );
                (Some((trunk, config.activation)), last, &[][..])
            }
            _ => (None, obs_dim, &config.hidden_sizes[..]),
        };
        let obs_dim = head_in;
        let pi = Mlp::new(
            &(&root / "pi"),
            obs_dim,
            hidden,
            n_actions,
            config.activation,
            ortho.then_some(0.01),
        );
        let vf = Mlp::new(
            &(&root / "vf"),
            obs_dim,
            hidden,
            1,
            config.activation,
            ortho.then_some(1.0),
        );
        let log_std = gaussian.then(|| log_std(config, &root, n_actions));
        Ok(ActorCritic {
            vs,
            heads: Heads {
                encoder,
                obs_norm,
                core,
                pre_core: pre_core.map(|mlp| (mlp, config.activation)),
                trunk,
                nets: Nets::Mlps { pi, vf },
                log_std,
                mu_nonlinearity: config.mu_nonlinearity,
            },
        })
    }

    /// The TorchScript family (`model.torchscript`): the module at `path` on the (optionally
    /// normalised) flat observation, with fleetrl's `pi.log_std` for a Gaussian policy unless
    /// the module returns its own.
    fn scripted(
        config: &ModelConfig,
        path: &std::path::Path,
        obs_space: &Space,
        n_actions: i64,
        gaussian: bool,
        device: Device,
    ) -> Result<ActorCritic, ModelError> {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let obs_dim = obs_space.flat_dim() as i64;
        let policy = match gaussian {
            true => PolicyOut::Mean(n_actions),
            false => PolicyOut::Logits(n_actions),
        };
        let script = ScriptNet::load(
            "model.torchscript",
            path,
            &(&root / "script"),
            obs_dim,
            Interface::ActorCritic(policy),
        )?;
        let obs_norm = obs_norm(config, &root, obs_dim);
        let log_std =
            (gaussian && !script.own_log_std()).then(|| log_std(config, &root, n_actions));
        let heads = Heads {
            encoder: None,
            obs_norm,
            core: None,
            pre_core: None,
            trunk: None,
            nets: Nets::Script(script),
            log_std,
            mu_nonlinearity: config.mu_nonlinearity,
        };
        Ok(ActorCritic { vs, heads })
    }

    /// Merges the observations `[N, D]` of a training batch into the running normalisation
    /// statistics; nothing without `model.normalize_obs`.
    pub fn observe(&self, obs: &Tensor) {
        if let Some(norm) = &self.heads.obs_norm {
            norm.update(obs);
        }
    }

    /// The variable store (for optimisers and checkpoints).
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// Stops every parameter from requiring gradients (a policy to export or only to run).
    pub fn freeze(&mut self) {
        self.vs.freeze();
    }

    /// The user's TorchScript module (`model.torchscript`), sharing this model's parameters;
    /// `None` for fleetrl's own networks.
    pub fn script_module(&self) -> Option<&tch::CModule> {
        match &self.heads.nets {
            Nets::Script(script) => Some(script.module()),
            Nets::Mlps { .. } => None,
        }
    }

    /// Scores `actions` `[N]` taken at `obs` `[N, D]`, with gradients.
    pub fn evaluate(&self, obs: &Tensor, actions: &Tensor) -> Evaluation {
        self.heads.evaluate(obs, actions)
    }

    /// The networks, to run on another thread (see [`Heads::shallow_clone`]).
    pub fn heads(&self) -> &Heads {
        &self.heads
    }

    /// Every parameter as a proto tensor, by path.
    pub fn export(&self) -> Result<TensorMap, ModelError> {
        weights::export(&self.vs)
    }

    /// Copies weights in from a proto map; every parameter must be present with its shape.
    pub fn import(&mut self, weights: &TensorMap) -> Result<(), ModelError> {
        weights::import(&self.vs, weights)
    }

    /// Every parameter, by path (for checkpoints).
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        weights::named(&self.vs)
    }

    /// Copies named weights in; every parameter must be present with its exact shape.
    pub fn load_named(&mut self, weights: &[(String, Tensor)]) -> Result<(), ModelError> {
        weights::load_named(&self.vs, weights)
    }
}

impl Policy for ActorCritic {
    fn act(&self, obs: &Tensor, deterministic: bool) -> PolicyStep {
        let _guard = tch::no_grad_guard();
        let (dist, value) = self.heads.dist_and_value(obs);
        let action = dist.pick(deterministic);
        PolicyStep {
            log_prob: dist.log_prob(&action),
            value,
            action,
        }
    }

    fn value(&self, obs: &Tensor) -> Tensor {
        let _guard = tch::no_grad_guard();
        self.heads.value(obs)
    }

    fn state_size(&self) -> i64 {
        self.heads.state_size()
    }

    fn act_recurrent(
        &self,
        obs: &Tensor,
        state: &RnnState,
        deterministic: bool,
    ) -> (PolicyStep, RnnState) {
        if self.heads.core.is_none() {
            return (self.act(obs, deterministic), state.shallow_clone());
        }
        let _guard = tch::no_grad_guard();
        let (dist, value, next) = self.heads.step(obs, state);
        let action = dist.pick(deterministic);
        let step = PolicyStep {
            log_prob: dist.log_prob(&action),
            value,
            action,
        };
        (step, next)
    }

    fn value_recurrent(&self, obs: &Tensor, state: &RnnState) -> Tensor {
        if self.heads.core.is_none() {
            return self.value(obs);
        }
        let _guard = tch::no_grad_guard();
        self.heads.step(obs, state).1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::config::{ModelConfig, RecurrentCell};
    use tch::Kind;

    /// `model.mu_nonlinearity = "tanh"` bounds a Gaussian policy's mean, whatever the input.
    #[test]
    fn mu_nonlinearity_bounds_the_gaussian_mean() {
        let space = |n: usize| Space::Box {
            shape: vec![n as i64],
            low: vec![-1.0; n],
            high: vec![1.0; n],
        };
        let config = ModelConfig {
            mu_nonlinearity: Some(Activation::Tanh),
            ..ModelConfig::default()
        };
        let model = ActorCritic::new(&config, &space(3), &space(2), Device::Cpu).unwrap();
        let obs = Tensor::from_slice(&[1e4f32, -1e4, 5e3, -3e3, 2e4, 7e3]).view([2, 3]);
        let mean = model.heads().dist(&obs).mode();
        let biggest = mean.abs().max().double_value(&[]);
        assert!(biggest <= 1.0, "{mean:?}");
        // The functional form MAML adapts agrees.
        let with = model
            .heads()
            .dist_with(&obs, &model.heads().policy_params())
            .mode();
        assert!(with.allclose(&mean, 1e-6, 1e-6, false));
    }

    /// Stacked 84x84 frames go through the Nature CNN: its parameters exist, a batch of flat
    /// frames acts, and the frames change the outputs (the encoder is on the path).
    #[test]
    fn image_observations_use_the_conv_encoder() {
        let obs_space = Space::Box {
            shape: vec![4, 84, 84],
            low: vec![0.0; 4 * 84 * 84],
            high: vec![255.0; 4 * 84 * 84],
        };
        let config = ModelConfig {
            hidden_sizes: vec![],
            ..ModelConfig::default()
        };
        let model =
            ActorCritic::new(&config, &obs_space, &Space::Discrete { n: 6 }, Device::Cpu).unwrap();
        let names: Vec<String> = model.named_parameters().into_iter().map(|p| p.0).collect();
        assert!(
            names.iter().any(|n| n == "encoder.conv0.weight"),
            "{names:?}"
        );
        let dark = Tensor::zeros([3, 4 * 84 * 84], (Kind::Float, Device::Cpu));
        let step = model.act(&dark, false);
        assert_eq!(step.action.size(), [3]);
        let bright = model.value(&(dark + 255.0));
        assert!(
            (bright - model.value(&Tensor::zeros([3, 4 * 84 * 84], (Kind::Float, Device::Cpu))))
                .abs()
                .max()
                .double_value(&[])
                > 0.0
        );
    }

    /// `model.normalize_obs` with image observations is refused by its key (the statistics
    /// would sit at the encoder's width and be fed raw frames); flat observations normalise.
    #[test]
    fn normalising_images_is_refused() {
        let config = ModelConfig {
            normalize_obs: true,
            channels: vec![4],
            kernel_sizes: vec![3],
            ..ModelConfig::default()
        };
        let frames = Space::Box {
            shape: vec![2, 5, 5],
            low: vec![0.0; 50],
            high: vec![1.0; 50],
        };
        let actions = Space::Discrete { n: 2 };
        let error = ActorCritic::new(&config, &frames, &actions, Device::Cpu)
            .expect_err("normalised images built")
            .to_string();
        assert!(error.starts_with("model.normalize_obs: "), "{error}");
        let flat = ModelConfig {
            normalize_obs: true,
            ..ModelConfig::default()
        };
        ActorCritic::new(&flat, &spaces().0, &actions, Device::Cpu).unwrap();
    }

    /// `model.recurrent_cell = "gru"` builds the core with the GRU's three gates (the LSTM's
    /// four otherwise), and the recurrent step runs it.
    #[test]
    fn the_recurrent_cell_shapes_the_core() {
        let rows = |cell| {
            let config = ModelConfig {
                lstm_size: 8,
                recurrent_cell: cell,
                ..ModelConfig::default()
            };
            let model = ActorCritic::new(&config, &spaces().0, &spaces().1, Device::Cpu).unwrap();
            let obs = Tensor::zeros([2, 4], (Kind::Float, Device::Cpu));
            let (step, next) = model.act_recurrent(&obs, &RnnState::zeros(2, 8, Device::Cpu), true);
            assert_eq!((step.action.size(), next.h.size()), (vec![2], vec![2, 8]));
            let named = model.named_parameters();
            let ih = named.iter().find(|(n, _)| n == "core.ih.weight").unwrap();
            ih.1.size()[0]
        };
        assert_eq!(rows(RecurrentCell::Gru), 24);
        assert_eq!(rows(RecurrentCell::Lstm), 32);
    }

    fn spaces() -> (Space, Space) {
        let obs = Space::Box {
            shape: vec![4],
            low: vec![-1.0; 4],
            high: vec![1.0; 4],
        };
        (obs, Space::Discrete { n: 2 })
    }

    #[test]
    fn export_import_round_trip_makes_identical_policies() {
        let (obs_space, act_space) = spaces();
        tch::manual_seed(1);
        let a =
            ActorCritic::new(&ModelConfig::default(), &obs_space, &act_space, Device::Cpu).unwrap();
        tch::manual_seed(2);
        let mut b =
            ActorCritic::new(&ModelConfig::default(), &obs_space, &act_space, Device::Cpu).unwrap();
        let obs = Tensor::randn([5, 4], (Kind::Float, Device::Cpu));
        assert!(!a.value(&obs).allclose(&b.value(&obs), 1e-6, 1e-6, false));
        b.import(&a.export().unwrap()).unwrap();
        assert!(a.value(&obs).allclose(&b.value(&obs), 1e-6, 1e-6, false));
    }

    #[test]
    fn evaluate_matches_act_log_prob_and_entropy_is_bounded() {
        let (obs_space, act_space) = spaces();
        let m =
            ActorCritic::new(&ModelConfig::default(), &obs_space, &act_space, Device::Cpu).unwrap();
        let obs = Tensor::randn([16, 4], (Kind::Float, Device::Cpu));
        let step = m.act(&obs, false);
        let eval = m.evaluate(&obs, &step.action);
        assert!(eval.log_prob.allclose(&step.log_prob, 1e-5, 1e-5, false));
        let max_entropy = 2f64.ln() + 1e-6;
        assert!(eval.entropy.max().double_value(&[]) <= max_entropy);
        assert!(eval.entropy.min().double_value(&[]) >= 0.0);
    }

    #[test]
    fn gaussian_policy_has_a_learned_log_std_and_consistent_log_probs() {
        let (obs_space, _) = spaces();
        let act_space = Space::Box {
            shape: vec![2],
            low: vec![-1.0; 2],
            high: vec![1.0; 2],
        };
        let config = ModelConfig {
            init_log_std: -0.5,
            ..ModelConfig::default()
        };
        let m = ActorCritic::new(&config, &obs_space, &act_space, Device::Cpu).unwrap();
        let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert!(names.contains(&"pi.log_std".to_string()), "{names:?}");
        let obs = Tensor::randn([8, 4], (Kind::Float, Device::Cpu));
        let step = m.act(&obs, false);
        assert_eq!(step.action.size(), vec![8, 2]);
        let eval = m.evaluate(&obs, &step.action);
        assert!(eval.log_prob.allclose(&step.log_prob, 1e-5, 1e-5, false));
        // Entropy of a 2-d Gaussian with log-std -0.5: 2 x (-0.5 + 0.5 + ln(2 pi) / 2).
        let want = (2.0 * std::f64::consts::PI).ln();
        assert!((eval.entropy.double_value(&[0]) - want).abs() < 1e-5);
        assert!(eval.log_prob.requires_grad());
    }

    /// The normalisation statistics are part of the weights: an actor importing them
    /// normalises exactly as the learner does.
    #[test]
    fn observation_statistics_travel_with_the_weights() {
        let (obs_space, act_space) = spaces();
        let config = ModelConfig {
            normalize_obs: true,
            obs_clip: 5.0,
            ..ModelConfig::default()
        };
        let learner = ActorCritic::new(&config, &obs_space, &act_space, Device::Cpu).unwrap();
        let mut actor = ActorCritic::new(&config, &obs_space, &act_space, Device::Cpu).unwrap();
        actor.import(&learner.export().unwrap()).unwrap();
        let obs = Tensor::randn([64, 4], (Kind::Float, Device::Cpu)) * 4.0 + 2.0;
        learner.observe(&obs);
        assert!(!learner
            .value(&obs)
            .allclose(&actor.value(&obs), 1e-6, 1e-6, false));
        let names: Vec<String> = learner
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert!(names.contains(&"obs_norm.mean".to_string()), "{names:?}");
        actor.import(&learner.export().unwrap()).unwrap();
        assert!(learner
            .value(&obs)
            .allclose(&actor.value(&obs), 1e-6, 1e-6, false));
    }

    /// With a shared trunk the hidden layers live once, under `trunk`, and both heads are
    /// single linear layers; gradients of the value loss reach the trunk.
    #[test]
    fn shared_trunk_feeds_both_heads() {
        let (obs_space, act_space) = spaces();
        let config = ModelConfig {
            shared_trunk: true,
            ..ModelConfig::default()
        };
        let m = ActorCritic::new(&config, &obs_space, &act_space, Device::Cpu).unwrap();
        let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert!(names.contains(&"trunk.l0.weight".to_string()), "{names:?}");
        assert!(names.contains(&"trunk.out.weight".to_string()), "{names:?}");
        assert!(!names.iter().any(|n| n.starts_with("pi.l0")), "{names:?}");
        let obs = Tensor::randn([8, 4], (Kind::Float, Device::Cpu));
        let step = m.act(&obs, false);
        let eval = m.evaluate(&obs, &step.action);
        assert!(eval.log_prob.allclose(&step.log_prob, 1e-5, 1e-5, false));
        eval.value.sum(Kind::Float).backward();
        let trunk = m
            .named_parameters()
            .into_iter()
            .find(|(n, _)| n == "trunk.l0.weight")
            .unwrap()
            .1;
        assert!(trunk.grad().abs().sum(Kind::Float).double_value(&[]) > 0.0);
    }

    #[test]
    fn import_names_the_missing_parameter() {
        let (obs_space, act_space) = spaces();
        let mut m =
            ActorCritic::new(&ModelConfig::default(), &obs_space, &act_space, Device::Cpu).unwrap();
        let mut weights = m.export().unwrap();
        weights.tensors.remove("vf.out.bias");
        let err = m.import(&weights).unwrap_err().to_string();
        assert!(err.contains("vf.out.bias"), "{err}");
    }
}
