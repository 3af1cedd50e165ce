//! The model section (`[model]`): the layers, activations and encoders every network is
//! built from.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::error::{check, ConfigError};

/// The cell of a recurrent core (`model.recurrent_cell`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecurrentCell {
    /// Long short-term memory: hidden and cell state.
    #[default]
    Lstm,
    /// Gated recurrent unit: hidden state only, three gates to the LSTM's four.
    Gru,
}

/// Hidden-layer activation (garage's `hidden_nonlinearity`, rlpyt's `nonlinearity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// tanh (SB3's default for PPO).
    Tanh,
    /// ReLU.
    Relu,
    /// ELU with alpha 1.
    Elu,
    /// GELU (exact, with the normal CDF).
    Gelu,
    /// Leaky ReLU with negative slope 0.01 (PyTorch's default).
    LeakyRelu,
    /// The logistic sigmoid.
    Sigmoid,
}

impl Activation {
    /// Applies the activation.
    pub fn apply(self, x: &tch::Tensor) -> tch::Tensor {
        match self {
            Activation::Tanh => x.tanh(),
            Activation::Relu => x.relu(),
            Activation::Elu => x.elu(),
            Activation::Gelu => x.gelu("none"),
            Activation::LeakyRelu => x.leaky_relu(),
            Activation::Sigmoid => x.sigmoid(),
        }
    }
}

/// The actor-critic MLP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Hidden layer widths of the policy and of the value network (separate networks, or
    /// one shared trunk with `shared_trunk`).
    pub hidden_sizes: Vec<i64>,
    /// One set of hidden layers feeds both a linear policy head and a linear value head
    /// (rlpyt's Atari models); false gives each its own MLP (SB3's default). PPO, A2C and
    /// IMPALA only: VPG and TRPO optimise the policy and the value function separately.
    pub shared_trunk: bool,
    /// Hidden-layer activation: "tanh" or "relu".
    pub activation: Activation,
    /// Orthogonal initialisation (gain sqrt 2 hidden, 0.01 policy head, 1 value head).
    pub orthogonal_init: bool,
    /// Initial log standard deviation of a Gaussian policy (continuous actions): a learned
    /// parameter per action dimension, independent of the state (rlpyt's MuJoCo model).
    pub init_log_std: f64,
    /// Units of an LSTM core between the observation and both heads (0: feed-forward). The
    /// state is carried across rollouts, reset at episode ends, and trained over whole
    /// rollouts (PPO), or stored with replayed sequences (DQN, as R2D2, and SAC, TD3 and
    /// DDPG, with a core each for the policy and every critic; see
    /// `algo.replay.sequence_length`). Other algorithms are feed-forward only.
    pub lstm_size: u32,
    /// The recurrent core's cell: "lstm", or "gru" (PyTorch's `nn.GRU` gates; pytorchrl's
    /// `recurrent_net` choices), with `lstm_size` units.
    pub recurrent_cell: RecurrentCell,
    /// Hidden layers between the observation and the LSTM core, each followed by
    /// `activation` (rlpyt's `MujocoLstmModel` `hidden_sizes`; empty: the observation feeds the
    /// core). Needs `lstm_size > 0`; on-policy models (ppo, a2c, impala) only.
    pub pre_lstm_sizes: Vec<i64>,
    /// Normalise observations by running mean and variance (updated by the learner from
    /// every batch; the statistics travel with the weights and into checkpoints). Flat
    /// observations only: image observations are refused (the conv encoder scales them).
    pub normalize_obs: bool,
    /// Clip normalised observations to +-this.
    pub obs_clip: f64,
    /// Smallest variance normalisation divides by (rlpyt's `norm_obs_var_clip`).
    pub norm_obs_var_clip: f64,
    /// Gaussian policies: a nonlinearity on the action mean (rlpyt's `mu_nonlinearity`, e.g.
    /// "tanh"); absent: a linear mean.
    pub mu_nonlinearity: Option<Activation>,
    /// Off-policy models: hidden widths of the observation feature extractor each network
    /// applies before its common layers (empty: none; pytorchrl's `obs_feature_extractor`).
    pub obs_features: Vec<i64>,
    /// Off-policy critics: hidden widths of the action feature extractor (empty: none).
    pub act_features: Vec<i64>,
    /// Image observations (`[C, H, W]` boxes) go through a convolutional encoder first:
    /// output channels of each convolution (rlpyt's `channels`; empty: the Nature DQN encoder,
    /// 32x8x8/4, 64x4x4/2, 64x3x3/1).
    pub channels: Vec<i64>,
    /// Kernel size of each convolution (one per `channels` entry).
    pub kernel_sizes: Vec<i64>,
    /// Stride of each convolution (empty: 1 each).
    pub strides: Vec<i64>,
    /// Zero padding of each convolution (empty: 0 each).
    pub paddings: Vec<i64>,
    /// Convolve with stride 1 and max-pool by each stride instead (rlpyt's `use_maxpool`).
    pub use_maxpool: bool,
    /// Fully connected widths after the convolutions (absent: [512]; [] : none).
    pub fc_sizes: Option<Vec<i64>>,
    /// Your own network instead of the layers above: a `torch.jit.script`ed `nn.Module` saved
    /// with `torch.jit.save` (docs/torchscript.md), whose parameters the learner trains: PPO
    /// and A2C's actor-critic `forward(obs[N, D]) -> (logits or mean, value)`, DQN's Q-network
    /// `-> q[N, n]`, SAC's actor `-> (mean, log_std)`, TD3's and DDPG's `-> action`; every
    /// role reads the file (absent: fleetrl builds the network).
    pub torchscript: Option<PathBuf>,
    /// SAC's, TD3's and DDPG's critic as your own module (docs/torchscript.md), `forward(obs,
    /// action in [-1, 1]) -> q[N, 1]` (discrete SAC: `forward(obs) -> q[N, n]`); each of
    /// `algo.num_critics` is a copy with its own parameters (absent: fleetrl's critics).
    pub torchscript_critic: Option<PathBuf>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            hidden_sizes: vec![64, 64],
            shared_trunk: false,
            activation: Activation::Tanh,
            orthogonal_init: true,
            init_log_std: 0.0,
            lstm_size: 0,
            recurrent_cell: RecurrentCell::default(),
            pre_lstm_sizes: Vec::new(),
            normalize_obs: false,
            obs_clip: 10.0,
            norm_obs_var_clip: 1e-8,
            mu_nonlinearity: None,
            obs_features: Vec::new(),
            act_features: Vec::new(),
            channels: Vec::new(),
            kernel_sizes: Vec::new(),
            strides: Vec::new(),
            paddings: Vec::new(),
            use_maxpool: false,
            fc_sizes: None,
            torchscript: None,
            torchscript_critic: None,
        }
    }
}

impl ModelConfig {
    /// The convolution keys agree in length and range (whether they apply at all depends on
    /// the env, checked where the model is built).
    pub(crate) fn validate_conv(&self) -> Result<(), ConfigError> {
        let n = self.channels.len();
        let lists = [
            ("model.kernel_sizes", &self.kernel_sizes, 1, false),
            ("model.strides", &self.strides, 1, true),
            ("model.paddings", &self.paddings, 0, true),
        ];
        check(
            self.channels.iter().all(|&c| c >= 1),
            "model.channels",
            "every convolution needs >= 1 output channel",
        )?;
        for (key, list, least, optional) in lists {
            let fits = list.len() == n || (optional && list.is_empty());
            let message = if n == 0 {
                "needs model.channels too (without it the encoder is the Nature DQN one)"
                    .to_string()
            } else {
                format!("needs one entry per model.channels entry ({n})")
            };
            check(fits, key, &message)?;
            check(
                list.iter().all(|&v| v >= least),
                key,
                &format!("entries must be >= {least}"),
            )?;
        }
        check(
            self.fc_sizes.iter().flatten().all(|&u| u >= 1),
            "model.fc_sizes",
            "entries must be >= 1",
        )
    }
}
