//! A multi-layer perceptron with named layers (`l0`, `l1`, ..., `out`).

use tch::nn::{self, Module};

use super::config::Activation;

/// Linear layers with an activation between them and none after the last.
#[derive(Debug)]
pub struct Mlp {
    hidden: Vec<nn::Linear>,
    out: nn::Linear,
    activation: Activation,
}

impl Mlp {
    /// Builds `in_dim -> hidden_sizes... -> out_dim` under `path`. With `orthogonal`, hidden
    /// weights get orthogonal init with gain sqrt(2) and the output layer `out_gain`
    /// (the PPO implementation-details recipe); biases start at zero. Without, every layer
    /// starts as PyTorch's `nn.Linear` does ([`torch_default`]), which is what SB3, garage and
    /// CleanRL's off-policy networks start from.
    pub fn new(
        path: &nn::Path,
        in_dim: i64,
        hidden_sizes: &[i64],
        out_dim: i64,
        activation: Activation,
        orthogonal: Option<f64>,
    ) -> Mlp {
        let config = |gain: f64| match orthogonal {
            Some(_) => nn::LinearConfig {
                ws_init: nn::Init::Orthogonal { gain },
                bs_init: Some(nn::Init::Const(0.0)),
                bias: true,
            },
            None => torch_default(),
        };
        let mut hidden = Vec::with_capacity(hidden_sizes.len());
        let mut width = in_dim;
        for (i, &size) in hidden_sizes.iter().enumerate() {
            let layer = nn::linear(path / format!("l{i}"), width, size, config(2f64.sqrt()));
            hidden.push(layer);
            width = size;
        }
        let out = nn::linear(
            path / "out",
            width,
            out_dim,
            config(orthogonal.unwrap_or(1.0)),
        );
        Mlp {
            hidden,
            out,
            activation,
        }
    }
}

/// PyTorch's `nn.Linear` initialisation: weights and biases uniform in `+-1/sqrt(fan_in)`
/// (Kaiming uniform with a = sqrt(5)). tch's `LinearConfig::default()` draws weights
/// `sqrt(6)` times wider (Kaiming uniform for ReLU), which leaves a tanh policy head of
/// 400x300 saturated on MuJoCo observations: measured, `hopper-td3` stuck at a return of 38.3
/// (every action at +1) from 20k to 40k env steps.
pub(super) fn torch_default() -> nn::LinearConfig {
    nn::LinearConfig {
        ws_init: nn::Init::Kaiming {
            dist: nn::init::NormalOrUniform::Uniform,
            fan: nn::init::FanInOut::FanIn,
            non_linearity: nn::init::NonLinearity::ExplicitGain(1.0 / 3f64.sqrt()),
        },
        bs_init: None,
        bias: true,
    }
}

impl Mlp {
    /// Another handle on the same parameters (no copy): updates to one are seen by the other,
    /// and gradients accumulate in the same place. Lets a second thread run this network.
    pub fn shallow_clone(&self) -> Mlp {
        let clone = |l: &nn::Linear| nn::Linear {
            ws: l.ws.shallow_clone(),
            bs: l.bs.as_ref().map(|b| b.shallow_clone()),
        };
        Mlp {
            hidden: self.hidden.iter().map(clone).collect(),
            out: clone(&self.out),
            activation: self.activation,
        }
    }
}

impl Mlp {
    /// The parameters in [`Mlp::forward_with`]'s order: each hidden layer's weight and bias,
    /// then the output layer's.
    pub fn params(&self) -> Vec<tch::Tensor> {
        let mut out = Vec::with_capacity(2 * self.hidden.len() + 2);
        for l in self.hidden.iter().chain(std::iter::once(&self.out)) {
            out.push(l.ws.shallow_clone());
            if let Some(b) = &l.bs {
                out.push(b.shallow_clone());
            }
        }
        out
    }

    /// The forward pass with `params` (shaped as [`Mlp::params`]) in place of the layers' own
    /// weights: the functional form MAML differentiates through an inner update with.
    pub fn forward_with(&self, xs: &tch::Tensor, params: &[tch::Tensor]) -> tch::Tensor {
        let mut rest = params;
        let mut linear = |l: &nn::Linear, x: &tch::Tensor| {
            let (w, tail) = rest.split_first().expect("one weight per layer");
            let (b, tail) = match &l.bs {
                Some(_) => {
                    let (b, tail) = tail.split_first().expect("one bias per layer");
                    (Some(b), tail)
                }
                None => (None, tail),
            };
            rest = tail;
            x.linear(w, b)
        };
        let mut h = xs.shallow_clone();
        for layer in &self.hidden {
            h = self.activation.apply(&linear(layer, &h));
        }
        linear(&self.out, &h)
    }
}

impl Module for Mlp {
    fn forward(&self, xs: &tch::Tensor) -> tch::Tensor {
        let mut h = xs.shallow_clone();
        for layer in &self.hidden {
            h = self.activation.apply(&layer.forward(&h));
        }
        self.out.forward(&h)
    }
}

#[cfg(test)]
mod init_tests {
    use super::*;

    /// Without orthogonal init, weights lie in PyTorch's `+-1/sqrt(fan_in)` and fill it.
    #[test]
    fn default_init_is_pytorchs() {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let mlp = Mlp::new(&vs.root(), 300, &[400], 3, Activation::Relu, None);
        for (w, fan_in) in [(&mlp.hidden[0].ws, 300.0), (&mlp.out.ws, 400.0)] {
            let bound = 1.0 / f64::sqrt(fan_in);
            let largest = w.abs().max().double_value(&[]);
            assert!(
                largest <= bound && largest > 0.95 * bound,
                "{largest} vs {bound}"
            );
        }
    }
}
