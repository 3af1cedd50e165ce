//! The recurrent networks of the off-policy algorithms: an optional MLP encoder
//! (`model.obs_features`), an LSTM or GRU core (`model.lstm_size`, `model.recurrent_cell`) and
//! an MLP head (`model.hidden_sizes`), encoder -> core -> head. The head is an MLP, not one
//! linear layer, because the core's output is bounded in [-1, 1] while Q values are not.
//!
//! - R2D2's Q network (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
//!   Reinforcement Learning"): the head maps the core's output to one Q value per action.
//! - Recurrent SAC (as pytorchrl's `recurrent_net` for off-policy actors): the policy's head
//!   maps the core's output to the Gaussian's mean and log-std; each critic's head reads the
//!   core's output and the action (which does not enter the core, so a critic's state
//!   depends on observations only and the actor can carry it).
//!
//! Paths: `<net>.encoder.*` (absent without obs features), `<net>.core.ih`, `<net>.core.hh`,
//! `<net>.head.*`.

use tch::nn::{self, Module};
use tch::Tensor;

use super::config::{Activation, ModelConfig};
use super::{LstmCore, Mlp, RnnState};

/// The core's states along a sequence.
#[derive(Debug)]
pub struct Unrolled {
    /// Hidden state (the core's output) after each step `[T, B, H]` (before any reset of the
    /// next step).
    pub h: Tensor,
    /// Cell state after each step `[T, B, H]`.
    pub c: Tensor,
}

impl Unrolled {
    /// Both states without gradient.
    pub fn detach(&self) -> Unrolled {
        Unrolled {
            h: self.h.detach(),
            c: self.c.detach(),
        }
    }
}

/// Encoder, recurrent core and head.
#[derive(Debug)]
pub struct RecurrentNet {
    encoder: Option<Mlp>,
    activation: Activation,
    core: LstmCore,
    head: Mlp,
}

impl RecurrentNet {
    /// A network from `obs_dim` inputs to `out` values under `path`, its head also reading
    /// `act_dim` action values (0: none): the encoder's widths are `config.obs_features`, the
    /// core has `config.lstm_size` units, the head's hidden widths are `config.hidden_sizes`.
    pub fn new(
        path: &nn::Path,
        config: &ModelConfig,
        obs_dim: i64,
        act_dim: i64,
        out: i64,
    ) -> RecurrentNet {
        let activation = config.activation;
        let (encoder, width) = match config.obs_features.split_last() {
            Some((&last, inner)) => (
                Some(Mlp::new(
                    &(path / "encoder"),
                    obs_dim,
                    inner,
                    last,
                    activation,
                    None,
                )),
                last,
            ),
            None => (None, obs_dim),
        };
        let size = config.lstm_size as i64;
        let core = LstmCore::with_cell(&(path / "core"), width, size, config.recurrent_cell);
        let head = Mlp::new(
            &(path / "head"),
            size + act_dim,
            &config.hidden_sizes,
            out,
            activation,
            None,
        );
        RecurrentNet {
            encoder,
            activation,
            core,
            head,
        }
    }

    /// Width H of the recurrent state.
    pub fn state_size(&self) -> i64 {
        self.core.size()
    }

    /// Encoder features of observations of any leading shape `[..., D]`.
    fn encode(&self, obs: &Tensor) -> Tensor {
        match &self.encoder {
            Some(m) => self.activation.apply(&m.forward(obs)),
            None => obs.shallow_clone(),
        }
    }

    /// The head on core outputs `h` `[..., H]` (and actions `[..., A]` for a critic):
    /// `[..., out]`.
    pub fn head(&self, h: &Tensor, action: Option<&Tensor>) -> Tensor {
        match action {
            Some(a) => self.head.forward(&Tensor::cat(&[h, a], -1)),
            None => self.head.forward(h),
        }
    }

    /// One step of the core: observations `[N, D]` from `state` -> the next state, whose `h`
    /// the head reads.
    pub fn core_step(&self, obs: &Tensor, state: &RnnState) -> RnnState {
        self.core.step(&self.encode(obs), state)
    }

    /// One step without action input: observations `[N, D]` from `state` -> the head's
    /// output `[N, out]` and the next state.
    pub fn step(&self, obs: &Tensor, state: &RnnState) -> (Tensor, RnnState) {
        let next = self.core_step(obs, state);
        (self.head(&next.h, None), next)
    }

    /// Unrolls the core over `obs` `[T, B, D]` from `init` (`[B, H]`), zeroing the state
    /// before step t where `reset[t]` (`[T, B]`, 1 = an episode ended at step t - 1).
    pub fn unroll(&self, obs: &Tensor, init: &RnnState, reset: &Tensor) -> Unrolled {
        let x = self.encode(obs);
        let steps = x.size()[0];
        let mut state = init.shallow_clone();
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        for t in 0..steps {
            state = state.masked(&(1.0 - reset.get(t)));
            state = self.core.step(&x.get(t), &state);
            hs.push(state.h.shallow_clone());
            cs.push(state.c.shallow_clone());
        }
        Unrolled {
            h: Tensor::stack(&hs, 0),
            c: Tensor::stack(&cs, 0),
        }
    }

    /// The core's output `[T, B, H]` at each step's final observation `[T, B, D]`, one core
    /// step on from the state `run` reached after that step (the head reads it).
    pub fn final_obs_core(&self, final_obs: &Tensor, run: &Unrolled) -> Tensor {
        let (t, b, d) = final_obs.size3().expect("final_obs is [T, B, D]");
        let h = run.h.size()[2];
        let state = RnnState {
            h: run.h.reshape([t * b, h]),
            c: run.c.reshape([t * b, h]),
        };
        let next = self.core_step(&final_obs.reshape([t * b, d]), &state);
        next.h.reshape([t, b, h])
    }
}

/// A small network for tests: 3 inputs, an 8-unit encoder and head layer, `state_size` LSTM
/// units, 2 outputs.
#[cfg(test)]
pub(crate) fn tiny(vs: &nn::VarStore, state_size: u32) -> RecurrentNet {
    let config = ModelConfig {
        obs_features: vec![8],
        hidden_sizes: vec![8],
        lstm_size: state_size,
        ..ModelConfig::default()
    };
    RecurrentNet::new(&(vs.root() / "q"), &config, 3, 0, 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn unroll_matches_single_steps() {
        let vs = nn::VarStore::new(Device::Cpu);
        let net = tiny(&vs, 6);
        let obs = Tensor::randn([5, 4, 3], (Kind::Float, Device::Cpu));
        let init = RnnState::zeros(4, 6, Device::Cpu);
        let reset = Tensor::zeros([5, 4], (Kind::Float, Device::Cpu));
        let out = net.unroll(&obs, &init, &reset);
        let q = net.head(&out.h, None);
        assert_eq!(q.size(), vec![5, 4, 2]);
        let mut state = init;
        for t in 0..5 {
            let (q_t, next) = net.step(&obs.get(t), &state);
            assert!(q.get(t).allclose(&q_t, 1e-5, 1e-5, false));
            state = next;
        }
        assert!(out.c.get(4).allclose(&state.c, 1e-5, 1e-5, false));
    }

    /// A critic's head reads the core's output and the action: `[T, B, H + A]` in, one value
    /// per step out, and the action changes it.
    #[test]
    fn critic_heads_read_the_action_beside_the_state() {
        let vs = nn::VarStore::new(Device::Cpu);
        let config = ModelConfig {
            hidden_sizes: vec![8],
            lstm_size: 4,
            ..ModelConfig::default()
        };
        let critic = RecurrentNet::new(&(vs.root() / "qf0"), &config, 3, 2, 1);
        let obs = Tensor::randn([5, 2, 3], (Kind::Float, Device::Cpu));
        let run = critic.unroll(
            &obs,
            &RnnState::zeros(2, 4, Device::Cpu),
            &Tensor::zeros([5, 2], (Kind::Float, Device::Cpu)),
        );
        let action = Tensor::randn([5, 2, 2], (Kind::Float, Device::Cpu));
        let q = critic.head(&run.h, Some(&action));
        assert_eq!(q.size(), vec![5, 2, 1]);
        let other = critic.head(&run.h, Some(&(&action + 1.0)));
        assert!(!q.allclose(&other, 1e-6, 1e-6, false));
    }
}
