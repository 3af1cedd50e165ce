//! The Atari models: the Nature DQN convolutional encoder (Mnih et al. 2015) with policy and
//! value heads, optionally with an LSTM core between them (rlpyt's `AtariFfModel` and
//! `AtariLstmModel`). Frames stay `u8` until [`AtariModel::forward`] scales them to `[0, 1]`,
//! so rollouts and batches carry a quarter of the bytes. Inputs may have leading dimensions
//! `[T, B]`, `[B]` or none; outputs keep them.

use tch::nn::{self, Module};
use tch::{Kind, Tensor};

use super::{ConvEncoder, ConvInit, ConvSpec, LstmCore, RnnState};

/// Channels, height and width of a stacked frame (4 x 84 x 84 by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameShape {
    /// Stacked frames.
    pub channels: i64,
    /// Rows.
    pub height: i64,
    /// Columns.
    pub width: i64,
}

impl Default for FrameShape {
    fn default() -> Self {
        FrameShape {
            channels: 4,
            height: 84,
            width: 84,
        }
    }
}

/// What [`AtariModel::forward`] returns, with the input's leading dimensions.
#[derive(Debug)]
pub struct AtariOutput {
    /// Action logits `[.., A]`.
    pub logits: Tensor,
    /// Values `[..]`.
    pub value: Tensor,
    /// The recurrent state after the last step (`[B, H]`), for an LSTM model.
    pub state: Option<RnnState>,
}

/// Conv encoder, optional LSTM, and linear policy and value heads.
#[derive(Debug)]
pub struct AtariModel {
    frame: FrameShape,
    encoder: ConvEncoder,
    core: Option<LstmCore>,
    pi: nn::Linear,
    vf: nn::Linear,
}

impl AtariModel {
    /// A model for `actions` discrete actions: encoder to `hidden` (512 in the paper), then an
    /// LSTM of `lstm_size` units when that is not 0.
    pub fn new(
        path: &nn::Path,
        frame: FrameShape,
        hidden: i64,
        lstm_size: i64,
        actions: i64,
    ) -> AtariModel {
        let encoder = ConvEncoder::new(
            &(path / "encoder"),
            frame,
            255.0,
            &ConvSpec::nature(hidden),
            ConvInit::KaimingRelu,
        )
        .expect("the Nature encoder fits Atari frames");
        let core = (lstm_size > 0).then(|| LstmCore::new(&(path / "core"), hidden, lstm_size));
        let width = if lstm_size > 0 { lstm_size } else { hidden };
        AtariModel {
            frame,
            encoder,
            core,
            pi: nn::linear(path / "pi", width, actions, Default::default()),
            vf: nn::linear(path / "vf", width, 1, Default::default()),
        }
    }

    fn encoder_input(&self) -> i64 {
        self.frame.channels * self.frame.height * self.frame.width
    }

    /// Scores `u8` frames `[T, B, C, H, W]`, `[B, C, H, W]` or `[C, H, W]`. An LSTM model
    /// unrolls over T (T = 1 without a time dimension) from `state` (zeros when `None`),
    /// resetting before step t where `reset[t]` (`[T, B]`) is 1.
    pub fn forward(
        &self,
        frames: &Tensor,
        state: Option<&RnnState>,
        reset: Option<&Tensor>,
    ) -> AtariOutput {
        debug_assert_eq!(frames.kind(), Kind::Uint8, "frames stay u8 until the model");
        let size = frames.size();
        let lead = &size[..size.len() - 3];
        let features = self
            .encoder
            .forward(&frames.reshape([-1, self.encoder_input()]));
        let (features, next) = match &self.core {
            None => (features, None),
            Some(core) => {
                let (t, b) = match lead {
                    [t, b] => (*t, *b),
                    [b] => (1, *b),
                    _ => (1, 1),
                };
                let init = match state {
                    Some(s) => s.shallow_clone(),
                    None => RnnState::zeros(b, core.size(), frames.device()),
                };
                let no_reset = Tensor::zeros([t, b], (Kind::Float, frames.device()));
                let reset = reset.map_or(no_reset, Tensor::shallow_clone);
                let (out, last) = core.unroll_with_state(&features.view([t, b, -1]), &init, &reset);
                (out.view([t * b, core.size()]), Some(last))
            }
        };
        let mut out_shape = lead.to_vec();
        let logits = self.pi.forward(&features);
        out_shape.push(logits.size()[1]);
        let value = self.vf.forward(&features).view(lead);
        AtariOutput {
            logits: logits.view(out_shape.as_slice()),
            value,
            state: next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    fn frames(shape: &[i64]) -> Tensor {
        Tensor::randint(256, shape, (Kind::Uint8, Device::Cpu))
    }

    #[test]
    fn feed_forward_model_keeps_leading_dimensions() {
        let vs = nn::VarStore::new(Device::Cpu);
        let m = AtariModel::new(&vs.root(), FrameShape::default(), 512, 0, 6);
        for lead in [vec![5, 3], vec![3], vec![]] {
            let mut shape = lead.clone();
            shape.extend([4, 84, 84]);
            let out = m.forward(&frames(&shape), None, None);
            let mut logits = lead.clone();
            logits.push(6);
            assert_eq!(out.logits.size(), logits, "logits for leading {lead:?}");
            assert_eq!(out.value.size(), lead, "values for leading {lead:?}");
            assert!(out.state.is_none());
        }
    }

    /// The conv-LSTM unrolls over T and hands back the state after the last step; unrolling
    /// in two halves from that state gives the same outputs as one unroll.
    #[test]
    fn conv_lstm_unrolls_and_carries_its_state() {
        let vs = nn::VarStore::new(Device::Cpu);
        let m = AtariModel::new(&vs.root(), FrameShape::default(), 256, 128, 4);
        let x = frames(&[4, 2, 4, 84, 84]);
        let whole = m.forward(&x, None, None);
        assert_eq!(whole.logits.size(), vec![4, 2, 4]);
        assert_eq!(whole.value.size(), vec![4, 2]);
        let state = whole.state.expect("an LSTM model returns its state");
        assert_eq!(state.h.size(), vec![2, 128]);
        let first = m.forward(&x.narrow(0, 0, 2), None, None);
        let second = m.forward(&x.narrow(0, 2, 2), first.state.as_ref(), None);
        assert!(second
            .logits
            .allclose(&whole.logits.narrow(0, 2, 2), 1e-5, 1e-5, false));
        // One step of [B] frames.
        let step = m.forward(&frames(&[2, 4, 84, 84]), Some(&state), None);
        assert_eq!(step.logits.size(), vec![2, 4]);
    }
}
