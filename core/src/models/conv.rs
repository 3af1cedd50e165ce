//! The convolutional encoder every model puts in front of image observations (`[C, H, W]`
//! boxes): convolutions with ReLU, optional max-pooling, then fully connected ReLU layers,
//! shaped by the model keys `channels`, `kernel_sizes`, `strides`, `paddings`, `use_maxpool`
//! and `fc_sizes` (rlpyt's `Conv2dHeadModel`). The default is the Nature DQN encoder (Mnih et
//! al. 2015): 32x8x8/4, 64x4x4/2, 64x3x3/1, then 512 units.

use tch::nn::{self, Module};
use tch::Tensor;

use super::config::ModelConfig;
use super::{FrameShape, ModelError};
use fleetrl_proto::space::Space;

/// How an encoder's weights start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConvInit {
    /// tch's default: weights Kaiming uniform for ReLU (bound `sqrt(6 / fan_in)`), convolution
    /// biases 0. The scale of CleanRL's and SB3's orthogonal `sqrt(2)` init of their
    /// actor-critics' encoders; the actor-critics keep it.
    KaimingRelu,
    /// PyTorch's `nn.Conv2d` and `nn.Linear` default: weights and biases uniform in
    /// `+-1/sqrt(fan_in)`, what SB3's DQN and the MinAtar paper's DQN start from. The off-policy
    /// models use it, as their heads do (`mlp::torch_default`). With tch's default instead, the
    /// MinAtar DQN started `sqrt(6)` times wider in both layers.
    Torch,
}

impl ConvInit {
    /// A convolution's init, with the weights' fan-in (`in_channels * k * k`).
    fn conv(self, fan_in: i64) -> nn::ConvConfig {
        match self {
            ConvInit::KaimingRelu => nn::ConvConfig::default(),
            ConvInit::Torch => {
                let bound = 1.0 / (fan_in as f64).sqrt();
                nn::ConvConfig {
                    ws_init: super::mlp::torch_default().ws_init,
                    bs_init: nn::Init::Uniform {
                        lo: -bound,
                        up: bound,
                    },
                    ..Default::default()
                }
            }
        }
    }

    /// A fully connected layer's init.
    fn linear(self) -> nn::LinearConfig {
        match self {
            ConvInit::KaimingRelu => nn::LinearConfig::default(),
            ConvInit::Torch => super::mlp::torch_default(),
        }
    }
}

/// The layers of a convolutional encoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvSpec {
    /// Output channels of each convolution.
    pub channels: Vec<i64>,
    /// Square kernel size of each convolution.
    pub kernel_sizes: Vec<i64>,
    /// Stride of each convolution (with `use_maxpool`: of the pooling after it instead).
    pub strides: Vec<i64>,
    /// Zero padding of each convolution.
    pub paddings: Vec<i64>,
    /// Convolve with stride 1 and max-pool by the stride instead (rlpyt's `use_maxpool`).
    pub use_maxpool: bool,
    /// Widths of the fully connected layers after the convolutions (empty: the flattened
    /// convolution output is the feature vector).
    pub fc_sizes: Vec<i64>,
}

impl ConvSpec {
    /// The Nature DQN encoder with `hidden` units after the convolutions.
    pub fn nature(hidden: i64) -> ConvSpec {
        ConvSpec {
            channels: vec![32, 64, 64],
            kernel_sizes: vec![8, 4, 3],
            strides: vec![4, 2, 1],
            paddings: vec![0, 0, 0],
            use_maxpool: false,
            fc_sizes: vec![hidden],
        }
    }

    /// The encoder the model keys describe: the Nature encoder when `model.channels` is
    /// empty; missing strides are 1 and missing paddings 0.
    pub fn from_config(config: &ModelConfig) -> ConvSpec {
        let fc_sizes = config.fc_sizes.clone().unwrap_or_else(|| vec![512]);
        if config.channels.is_empty() {
            return ConvSpec {
                use_maxpool: config.use_maxpool,
                fc_sizes,
                ..ConvSpec::nature(0)
            };
        }
        let n = config.channels.len();
        let or = |v: &Vec<i64>, fill: i64| {
            if v.is_empty() {
                vec![fill; n]
            } else {
                v.clone()
            }
        };
        ConvSpec {
            channels: config.channels.clone(),
            kernel_sizes: config.kernel_sizes.clone(),
            strides: or(&config.strides, 1),
            paddings: or(&config.paddings, 0),
            use_maxpool: config.use_maxpool,
            fc_sizes,
        }
    }

    /// Height and width after each layer, or an error naming the key whose layer shrinks the
    /// frame to nothing.
    fn sizes(&self, frame: FrameShape) -> Result<Vec<(i64, i64)>, ModelError> {
        let (mut h, mut w) = (frame.height, frame.width);
        let mut out = Vec::new();
        for i in 0..self.channels.len() {
            let (k, s, p) = (self.kernel_sizes[i], self.strides[i], self.paddings[i]);
            let conv_stride = if self.use_maxpool { 1 } else { s };
            let conv = |x: i64| (x + 2 * p - k) / conv_stride + 1;
            let (mut nh, mut nw) = (conv(h), conv(w));
            if self.use_maxpool && s > 1 {
                (nh, nw) = (nh / s, nw / s);
            }
            if nh < 1 || nw < 1 {
                return Err(ModelError::Config {
                    key: "model.kernel_sizes",
                    message: format!(
                        "convolution {i} (kernel {k}, stride {s}, padding {p}) leaves nothing of \
                         a {h}x{w} input (observations are {}x{}x{}); use smaller kernels or \
                         strides, as MinAtar's [3] / [1] for 10x10 frames",
                        frame.channels, frame.height, frame.width
                    ),
                });
            }
            (h, w) = (nh, nw);
            out.push((h, w));
        }
        Ok(out)
    }
}

/// Checks the convolution keys against the observation space: they apply to image
/// observations only. Returns the frame shape of an image space.
pub fn image_frame(
    config: &ModelConfig,
    obs_space: &Space,
) -> Result<Option<FrameShape>, ModelError> {
    let frame = match obs_space {
        Space::Box { shape, .. } if shape.len() == 3 => Some(FrameShape {
            channels: shape[0],
            height: shape[1],
            width: shape[2],
        }),
        _ => None,
    };
    if frame.is_none() {
        let set = [
            ("model.channels", !config.channels.is_empty()),
            ("model.kernel_sizes", !config.kernel_sizes.is_empty()),
            ("model.strides", !config.strides.is_empty()),
            ("model.paddings", !config.paddings.is_empty()),
            ("model.use_maxpool", config.use_maxpool),
            ("model.fc_sizes", config.fc_sizes.is_some()),
        ];
        if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
            return Err(ModelError::Config {
                key,
                message: format!(
                    "shapes the convolutional encoder, which only image observations ([C, H, W] \
                     boxes) have; this env's observations are {}",
                    match obs_space {
                        Space::Box { shape, .. } => format!("a box of shape {shape:?}"),
                        Space::Discrete { n } => format!("discrete ({n} values)"),
                    }
                ),
            });
        }
    }
    Ok(frame)
}

/// Convolutions, then fully connected layers, ReLU after each.
#[derive(Debug)]
pub(crate) struct ConvEncoder {
    frame: FrameShape,
    /// Observations are divided by this first (255 for pixel frames, 1 for 0/1 grids).
    scale: f64,
    /// Each convolution's weights `[out, in, k, k]`, bias, stride, padding and pooling.
    convs: Vec<ConvLayer>,
    fcs: Vec<nn::Linear>,
    width: i64,
}

#[derive(Debug)]
struct ConvLayer {
    ws: Tensor,
    bs: Option<Tensor>,
    stride: i64,
    padding: i64,
    /// Max-pool kernel and stride after the ReLU (1: none).
    pool: i64,
}

impl ConvEncoder {
    /// The encoder for `frame`, whose values it divides by `scale` first (see
    /// [`value_scale`]), its weights drawn as `init` says.
    pub(crate) fn new(
        path: &nn::Path,
        frame: FrameShape,
        scale: f64,
        spec: &ConvSpec,
        init: ConvInit,
    ) -> Result<ConvEncoder, ModelError> {
        let sizes = spec.sizes(frame)?;
        let mut convs = Vec::new();
        let mut channels = frame.channels;
        for i in 0..spec.channels.len() {
            let (out, k, s) = (spec.channels[i], spec.kernel_sizes[i], spec.strides[i]);
            let stride = if spec.use_maxpool { 1 } else { s };
            let config = nn::ConvConfig {
                stride,
                padding: spec.paddings[i],
                ..init.conv(channels * k * k)
            };
            let conv = nn::conv2d(path / format!("conv{i}"), channels, out, k, config);
            convs.push(ConvLayer {
                ws: conv.ws,
                bs: conv.bs,
                stride,
                padding: spec.paddings[i],
                pool: if spec.use_maxpool { s } else { 1 },
            });
            channels = out;
        }
        let (h, w) = sizes.last().copied().unwrap_or((frame.height, frame.width));
        let mut width = channels * h * w;
        let mut fcs = Vec::new();
        for (i, &units) in spec.fc_sizes.iter().enumerate() {
            fcs.push(nn::linear(
                path / format!("fc{i}"),
                width,
                units,
                init.linear(),
            ));
            width = units;
        }
        Ok(ConvEncoder {
            frame,
            scale,
            convs,
            fcs,
            width,
        })
    }

    /// Width of the feature vector.
    pub(crate) fn width(&self) -> i64 {
        self.width
    }

    /// Another handle on the same parameters (see `Heads::shallow_clone`).
    pub(crate) fn shallow_clone(&self) -> ConvEncoder {
        ConvEncoder {
            frame: self.frame,
            scale: self.scale,
            convs: self
                .convs
                .iter()
                .map(|c| ConvLayer {
                    ws: c.ws.shallow_clone(),
                    bs: c.bs.as_ref().map(Tensor::shallow_clone),
                    stride: c.stride,
                    padding: c.padding,
                    pool: c.pool,
                })
                .collect(),
            fcs: self
                .fcs
                .iter()
                .map(|fc| nn::Linear {
                    ws: fc.ws.shallow_clone(),
                    bs: fc.bs.as_ref().map(Tensor::shallow_clone),
                })
                .collect(),
            width: self.width,
        }
    }

    /// Observations `[N, C*H*W]` (or `[N, C, H, W]`, any float or integer kind) ->
    /// features `[N, width]`.
    pub(crate) fn forward(&self, obs: &Tensor) -> Tensor {
        let f = self.frame;
        let frames = obs
            .to_kind(tch::Kind::Float)
            .view([-1, f.channels, f.height, f.width]);
        // Not in place: a float input is the caller's own tensor (to_kind does not copy it).
        let mut h = if self.scale != 1.0 {
            frames.divide_scalar(self.scale)
        } else {
            frames
        };
        for c in &self.convs {
            h = h
                .conv2d(
                    &c.ws,
                    c.bs.as_ref(),
                    [c.stride, c.stride],
                    [c.padding, c.padding],
                    [1, 1],
                    1,
                )
                .relu();
            if c.pool > 1 {
                h = h.max_pool2d([c.pool, c.pool], [c.pool, c.pool], [0, 0], [1, 1], false);
            }
        }
        let mut x = h.flatten(1, -1);
        for fc in &self.fcs {
            x = fc.forward(&x).relu();
        }
        x
    }
}

/// What observations are divided by: the box's largest finite upper bound above 1 (255 for
/// pixels), else 1.
pub(crate) fn value_scale(obs_space: &Space) -> f64 {
    match obs_space {
        Space::Box { high, .. } => {
            let top = high
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .fold(1.0f32, f32::max);
            f64::from(top)
        }
        Space::Discrete { .. } => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn image(c: i64, h: i64, w: i64, high: f32) -> Space {
        let n = (c * h * w) as usize;
        Space::Box {
            shape: vec![c, h, w],
            low: vec![0.0; n],
            high: vec![high; n],
        }
    }

    fn frame(c: i64, h: i64, w: i64) -> FrameShape {
        FrameShape {
            channels: c,
            height: h,
            width: w,
        }
    }

    /// The Nature encoder on 84x84 frames flattens 64x7x7 into its 512 units.
    #[test]
    fn nature_encoder_shapes() {
        let vs = nn::VarStore::new(Device::Cpu);
        let space = image(4, 84, 84, 255.0);
        assert_eq!(value_scale(&space), 255.0);
        let enc = ConvEncoder::new(
            &vs.root(),
            frame(4, 84, 84),
            value_scale(&space),
            &ConvSpec::nature(512),
            ConvInit::KaimingRelu,
        )
        .unwrap();
        assert_eq!(enc.width(), 512);
        let fc0 = vs.variables()["fc0.weight"].size();
        assert_eq!(fc0, vec![512, 64 * 7 * 7]);
        let x = Tensor::randint(256, [3, 4 * 84 * 84], (Kind::Uint8, Device::Cpu));
        assert_eq!(enc.forward(&x).size(), vec![3, 512]);
        // A float input is left as it was (scaling in place would rescale the caller's batch
        // on every pass and break autograd).
        let floats = x.to_kind(Kind::Float);
        let before = floats.copy();
        let _ = enc.forward(&floats);
        assert!(floats.equal(&before));
    }

    /// The MinAtar paper's encoder: 16 3x3 filters, stride 1, then 128 units.
    fn minatar_spec() -> ConvSpec {
        ConvSpec {
            channels: vec![16],
            kernel_sizes: vec![3],
            strides: vec![1],
            paddings: vec![0],
            use_maxpool: false,
            fc_sizes: vec![128],
        }
    }

    /// MinAtar's network: 16 3x3 filters, stride 1, on 10x10 grids, then 128 units; values in
    /// [0, 1] are not rescaled.
    #[test]
    fn minatar_encoder_with_padding_and_maxpool() {
        let spec = minatar_spec();
        let vs = nn::VarStore::new(Device::Cpu);
        let space = image(4, 10, 10, 1.0);
        let enc = ConvEncoder::new(
            &vs.root(),
            frame(4, 10, 10),
            value_scale(&space),
            &spec,
            ConvInit::Torch,
        )
        .unwrap();
        assert_eq!(vs.variables()["fc0.weight"].size(), vec![128, 16 * 8 * 8]);
        assert_eq!(enc.scale, 1.0);
        assert_eq!(
            enc.forward(&Tensor::ones([2, 400], (Kind::Float, Device::Cpu)))
                .size(),
            vec![2, 128]
        );
        // Padding 1 keeps 10x10; max-pooling by stride 2 halves it.
        let pooled = ConvSpec {
            paddings: vec![1],
            strides: vec![2],
            use_maxpool: true,
            fc_sizes: vec![],
            ..spec
        };
        let vs = nn::VarStore::new(Device::Cpu);
        let enc = ConvEncoder::new(
            &vs.root(),
            frame(4, 10, 10),
            value_scale(&space),
            &pooled,
            ConvInit::Torch,
        )
        .unwrap();
        assert_eq!(enc.width(), 16 * 5 * 5);
    }

    /// `ConvInit::Torch` draws every weight and bias of the MinAtar encoder in PyTorch's
    /// `+-1/sqrt(fan_in)` and fills the range; `KaimingRelu` draws weights `sqrt(6)` times
    /// wider, with the convolution's biases at 0. "Fills" is the largest of n uniform draws
    /// above `1e-6^(1/n)` of the bound, missed once in a million: a fixed 0.9 failed the 16
    /// biases of conv0 one run in five (0.9^16).
    #[test]
    fn encoder_inits_draw_pytorchs_and_tchs_ranges() {
        let space = image(4, 10, 10, 1.0);
        let cases: [(ConvInit, f64, &[&str]); 2] = [
            (ConvInit::Torch, 1.0, &["weight", "bias"]),
            (ConvInit::KaimingRelu, 6f64.sqrt(), &["weight"]),
        ];
        for (init, width, parts) in cases {
            let vs = nn::VarStore::new(Device::Cpu);
            let root = vs.root();
            ConvEncoder::new(
                &root,
                frame(4, 10, 10),
                value_scale(&space),
                &minatar_spec(),
                init,
            )
            .unwrap();
            let largest = |name: &str| vs.variables()[name].abs().max().double_value(&[]);
            let numel = |name: &str| vs.variables()[name].numel() as f64;
            for (layer, fan_in) in [("conv0", 4.0 * 9.0), ("fc0", 16.0 * 8.0 * 8.0)] {
                let bound = width / f64::sqrt(fan_in);
                for part in parts {
                    let name = format!("{layer}.{part}");
                    let m = largest(&name);
                    let fills = 1e-6f64.powf(1.0 / numel(&name));
                    let ok = m <= bound && m > fills * bound;
                    assert!(ok, "{init:?} {layer}.{part}: {m} vs {bound}");
                }
            }
            if init == ConvInit::KaimingRelu {
                assert_eq!(largest("conv0.bias"), 0.0);
            }
        }
    }

    /// The Nature encoder cannot read 10x10 frames: the error names the key and the shapes.
    #[test]
    fn a_kernel_larger_than_the_frame_is_refused_by_name() {
        let vs = nn::VarStore::new(Device::Cpu);
        let err = ConvEncoder::new(
            &vs.root(),
            frame(4, 10, 10),
            1.0,
            &ConvSpec::nature(512),
            ConvInit::Torch,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("model.kernel_sizes") && err.contains("10x10"),
            "{err}"
        );
    }

    #[test]
    fn convolution_keys_on_a_flat_observation_are_refused_by_name() {
        let flat = Space::Box {
            shape: vec![4],
            low: vec![-1.0; 4],
            high: vec![1.0; 4],
        };
        let config = ModelConfig {
            use_maxpool: true,
            ..ModelConfig::default()
        };
        let err = image_frame(&config, &flat).unwrap_err().to_string();
        assert!(
            err.contains("model.use_maxpool") && err.contains("[4]"),
            "{err}"
        );
        assert!(image_frame(&ModelConfig::default(), &flat)
            .unwrap()
            .is_none());
    }
}
