//! The recurrent core: an LSTM (Hochreiter & Schmidhuber 1997) or a GRU (Cho et al. 2014,
//! `model.recurrent_cell = "gru"`), written as two linear maps, so it can be shallow-cloned onto
//! other threads and unrolled with per-step state resets at episode ends. Paths: `<path>.ih`
//! (input to gates) and `<path>.hh` (hidden to gates), gates in PyTorch's order: input, forget,
//! cell, output for `nn.LSTM`; reset, update, new for `nn.GRU` (whose state has no cell: `c`
//! stays zero).

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::config::RecurrentCell;

/// Recurrent state `(h, c)`, each `[N, H]`.
#[derive(Debug)]
pub struct RnnState {
    /// Hidden state.
    pub h: Tensor,
    /// Cell state.
    pub c: Tensor,
}

impl RnnState {
    /// Zeros for `n` rows of width `size`.
    pub fn zeros(n: i64, size: i64, device: tch::Device) -> RnnState {
        RnnState {
            h: Tensor::zeros([n, size], (Kind::Float, device)),
            c: Tensor::zeros([n, size], (Kind::Float, device)),
        }
    }

    /// Another handle on the same tensors.
    pub fn shallow_clone(&self) -> RnnState {
        RnnState {
            h: self.h.shallow_clone(),
            c: self.c.shallow_clone(),
        }
    }

    /// Rows `index` (i64 `[K]`).
    pub fn select(&self, index: &Tensor) -> RnnState {
        RnnState {
            h: self.h.index_select(0, index),
            c: self.c.index_select(0, index),
        }
    }

    /// The state with rows multiplied by `keep` (`[N]`, 1 keeps, 0 resets to zero).
    pub fn masked(&self, keep: &Tensor) -> RnnState {
        let keep = keep.to_kind(Kind::Float).unsqueeze(1);
        RnnState {
            h: &self.h * &keep,
            c: &self.c * &keep,
        }
    }
}

/// A single-layer LSTM or GRU.
#[derive(Debug)]
pub struct LstmCore {
    ih: nn::Linear,
    hh: nn::Linear,
    size: i64,
    cell: RecurrentCell,
}

impl LstmCore {
    /// An LSTM from `in_dim` inputs to `size` hidden units under `path`.
    pub fn new(path: &nn::Path, in_dim: i64, size: i64) -> LstmCore {
        LstmCore::with_cell(path, in_dim, size, RecurrentCell::Lstm)
    }

    /// A `cell` core from `in_dim` inputs to `size` hidden units under `path`.
    pub fn with_cell(path: &nn::Path, in_dim: i64, size: i64, cell: RecurrentCell) -> LstmCore {
        let gates = match cell {
            RecurrentCell::Lstm => 4 * size,
            RecurrentCell::Gru => 3 * size,
        };
        let ih = nn::linear(path / "ih", in_dim, gates, Default::default());
        let hh = nn::linear(path / "hh", size, gates, Default::default());
        LstmCore { ih, hh, size, cell }
    }

    /// Hidden units H.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// One step: input `[N, D]`, state `[N, H]` -> the next state (whose `h` is the output).
    pub fn step(&self, x: &Tensor, state: &RnnState) -> RnnState {
        self.step_projected(&self.ih.forward(x), state)
    }

    /// [`LstmCore::step`] from the input already projected to the gates (`ih(x)`).
    fn step_projected(&self, projected: &Tensor, state: &RnnState) -> RnnState {
        match self.cell {
            RecurrentCell::Lstm => self.lstm_step(projected, state),
            RecurrentCell::Gru => self.gru_step(projected, state),
        }
    }

    /// `r = s(x_r + h_r)`, `z = s(x_z + h_z)`, `n = tanh(x_n + r h_n)`, `h' = (1 - z) n + z h`,
    /// with `x_*` the projected input's and `h_*` the hidden state's share of each gate.
    fn gru_step(&self, projected: &Tensor, state: &RnnState) -> RnnState {
        let size = self.size;
        let hidden = self.hh.forward(&state.h);
        let rz = (projected.narrow(-1, 0, 2 * size) + hidden.narrow(-1, 0, 2 * size)).sigmoid();
        let (r, z) = (rz.narrow(-1, 0, size), rz.narrow(-1, size, size));
        let n =
            (projected.narrow(-1, 2 * size, size) + r * hidden.narrow(-1, 2 * size, size)).tanh();
        let h = &n + z * (&state.h - &n);
        RnnState {
            h,
            c: state.c.shallow_clone(),
        }
    }

    fn lstm_step(&self, projected: &Tensor, state: &RnnState) -> RnnState {
        let gates = projected + self.hh.forward(&state.h);
        // One sigmoid over all four gates (the cell gate's share is unused): fewer kernels
        // per step, which is what an unroll of small matrices pays for.
        let squashed = gates.sigmoid().chunk(4, -1);
        let cell = gates.narrow(-1, 2 * self.size, self.size).tanh();
        let (i, f, o) = (&squashed[0], &squashed[1], &squashed[3]);
        let c = (f * &state.c).addcmul(i, &cell);
        let h = o * c.tanh();
        RnnState { h, c }
    }

    /// Unrolls over `x` `[T, B, D]` from `init`, zeroing the state before step t where
    /// `reset[t]` (`[T, B]`, 1 = an episode ended at step t - 1). Returns the outputs
    /// `[T, B, H]`.
    pub fn unroll(&self, x: &Tensor, init: &RnnState, reset: &Tensor) -> Tensor {
        self.unroll_with_state(x, init, reset).0
    }

    /// [`LstmCore::unroll`], also returning the state after the last step.
    pub fn unroll_with_state(
        &self,
        x: &Tensor,
        init: &RnnState,
        reset: &Tensor,
    ) -> (Tensor, RnnState) {
        let steps = x.size()[0];
        // The input's share of the gates for every step in one product; only the recurrent
        // share is left to the loop.
        let projected = self.ih.forward(x);
        let keep: Tensor = 1.0 - reset;
        // Steps where some column resets (read once): the others skip the masking.
        let resets = Vec::<f32>::try_from(reset.sum_dim_intlist(1, false, Kind::Float))
            .unwrap_or_else(|_| vec![1.0; steps as usize]);
        let mut state = init.shallow_clone();
        let mut out = Vec::with_capacity(steps as usize);
        for t in 0..steps {
            if resets[t as usize] > 0.0 {
                state = state.masked(&keep.get(t));
            }
            state = self.step_projected(&projected.get(t), &state);
            out.push(state.h.shallow_clone());
        }
        (Tensor::stack(&out, 0), state)
    }

    /// Another handle on the same parameters.
    pub fn shallow_clone(&self) -> LstmCore {
        let clone = |l: &nn::Linear| nn::Linear {
            ws: l.ws.shallow_clone(),
            bs: l.bs.as_ref().map(|b| b.shallow_clone()),
        };
        LstmCore {
            ih: clone(&self.ih),
            hh: clone(&self.hh),
            size: self.size,
            cell: self.cell,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    /// A GRU step is libtorch's own `gru_cell` on the same weights (PyTorch's `nn.GRUCell`),
    /// and leaves the cell state alone.
    #[test]
    fn gru_step_is_libtorchs_gru_cell() {
        let vs = nn::VarStore::new(Device::Cpu);
        let core = LstmCore::with_cell(&(vs.root() / "core"), 3, 5, RecurrentCell::Gru);
        let x = Tensor::randn([4, 3], (Kind::Float, Device::Cpu));
        let state = RnnState {
            h: Tensor::randn([4, 5], (Kind::Float, Device::Cpu)),
            c: Tensor::zeros([4, 5], (Kind::Float, Device::Cpu)),
        };
        let next = core.step(&x, &state);
        let want = x.gru_cell(
            &state.h,
            &core.ih.ws,
            &core.hh.ws,
            core.ih.bs.as_ref(),
            core.hh.bs.as_ref(),
        );
        assert!(
            next.h.allclose(&want, 1e-6, 1e-6, false),
            "{next:?} vs {want:?}"
        );
        assert_eq!(next.c, state.c);
    }

    /// Unrolling equals stepping by hand, and a reset makes the next output independent of
    /// everything before it.
    #[test]
    fn unroll_matches_steps_and_resets_cut_the_history() {
        let vs = nn::VarStore::new(Device::Cpu);
        let core = LstmCore::new(&(vs.root() / "core"), 3, 5);
        let x = Tensor::randn([4, 2, 3], (Kind::Float, Device::Cpu));
        let init = RnnState::zeros(2, 5, Device::Cpu);
        let no_reset = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
        let out = core.unroll(&x, &init, &no_reset);
        let mut s = init.shallow_clone();
        for t in 0..4 {
            s = core.step(&x.get(t), &s);
        }
        assert!(out.get(3).allclose(&s.h, 1e-6, 1e-6, false));
        // Reset before step 2: outputs from step 2 on equal an unroll that starts at step 2.
        let reset = Tensor::zeros([4, 2], (Kind::Float, Device::Cpu));
        let _ = reset.get(2).fill_(1.0);
        let cut = core.unroll(&x, &init, &reset);
        let fresh = core.unroll(&x.narrow(0, 2, 2), &init, &no_reset.narrow(0, 0, 2));
        assert!(cut.narrow(0, 2, 2).allclose(&fresh, 1e-6, 1e-6, false));
    }
}
