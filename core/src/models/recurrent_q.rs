//! The recurrent Q network of R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in
//! Distributed Reinforcement Learning"): an optional MLP encoder (`model.obs_features`), an
//! LSTM core (`model.lstm_size`) and an MLP Q head (`model.hidden_sizes`), encoder -> core ->
//! head. The head is an MLP, not one linear layer, because the LSTM's output is bounded in
//! [-1, 1] while Q values are not. Paths: `q.encoder.*` (absent without obs features),
//! `q.core.ih`, `q.core.hh`, `q.head.*`.

use tch::nn::{self, Module};
use tch::Tensor;

use super::config::{Activation, ModelConfig};
use super::{LstmCore, Mlp, RnnState};

/// Q values along a sequence, with the recurrent state after every step.
#[derive(Debug)]
pub struct Unrolled {
    /// Q values `[T, B, A]`.
    pub q: Tensor,
    /// Hidden state after each step `[T, B, H]` (before any reset of the next step).
    pub h: Tensor,
    /// Cell state after each step `[T, B, H]`.
    pub c: Tensor,
}

/// Encoder, LSTM core and Q head.
#[derive(Debug)]
pub struct RecurrentQ {
    encoder: Option<Mlp>,
    activation: Activation,
    core: LstmCore,
    head: Mlp,
}

impl RecurrentQ {
    /// A network from `obs_dim` inputs to `actions` Q values under `path`: the encoder's
    /// widths are `config.obs_features`, the core has `config.lstm_size` units, the head's
    /// hidden widths are `config.hidden_sizes`.
    pub fn new(path: &nn::Path, config: &ModelConfig, obs_dim: i64, actions: i64) -> RecurrentQ {
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
            size,
            &config.hidden_sizes,
            actions,
            activation,
            None,
        );
        RecurrentQ {
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

    /// One step: observations `[N, D]` from `state` -> Q values `[N, A]` and the next state.
    pub fn step(&self, obs: &Tensor, state: &RnnState) -> (Tensor, RnnState) {
        let next = self.core.step(&self.encode(obs), state);
        (self.head.forward(&next.h), next)
    }

    /// Unrolls over `obs` `[T, B, D]` from `init` (`[B, H]`), zeroing the state before step
    /// t where `reset[t]` (`[T, B]`, 1 = an episode ended at step t - 1).
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
        let h = Tensor::stack(&hs, 0);
        Unrolled {
            q: self.head.forward(&h),
            h,
            c: Tensor::stack(&cs, 0),
        }
    }
}

/// A small network for tests: 3 inputs, an 8-unit encoder and head layer, `state_size` LSTM
/// units, 2 actions.
#[cfg(test)]
pub(crate) fn tiny(vs: &nn::VarStore, state_size: u32) -> RecurrentQ {
    let config = ModelConfig {
        obs_features: vec![8],
        hidden_sizes: vec![8],
        lstm_size: state_size,
        ..ModelConfig::default()
    };
    RecurrentQ::new(&(vs.root() / "q"), &config, 3, 2)
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
        let mut state = init;
        for t in 0..5 {
            let (q, next) = net.step(&obs.get(t), &state);
            assert!(out.q.get(t).allclose(&q, 1e-5, 1e-5, false));
            state = next;
        }
        assert!(out.c.get(4).allclose(&state.c, 1e-5, 1e-5, false));
    }
}
