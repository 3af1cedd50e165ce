//! Adam (Kingma & Ba, 2015, arXiv:1412.6980) over one flat parameter buffer, with global
//! gradient-norm clipping.
//!
//! At construction every parameter of the var store is re-pointed (`set_data`) into one
//! contiguous buffer, and so is every gradient: autograd accumulates into an existing `.grad`
//! in place, so backward passes write straight into one flat gradient buffer. Zeroing the
//! gradients is then one op and an update a dozen, whatever the number of layers. That matters
//! for the small networks RL uses, where per-op dispatch, not arithmetic, is the cost.

use std::sync::Arc;

use super::Stepping;
use crate::checkpoint::state::{counter, find, StateError, StatePart};
use crate::collective::Group;
use tch::{nn::VarStore, Kind, Tensor};

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;

/// The update rule the flat optimiser applies (`algo.optimizer`): Adam by default, RMSprop
/// (rlpyt's A2C choice) or SGD, each as PyTorch defines it.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// Adam with betas (0.9, 0.999) and bias correction.
    #[default]
    Adam,
    /// RMSprop: `v = alpha v + (1 - alpha) g^2`, `p -= lr g / (sqrt(v) + eps)`; with momentum
    /// `b = momentum b + g / (sqrt(v) + eps)`, `p -= lr b`; centred, `v - m^2` for `v` with
    /// `m = alpha m + (1 - alpha) g`.
    Rmsprop,
    /// SGD with momentum: `b = momentum b + g`, `p -= lr b`.
    Sgd,
}

impl Rule {
    fn name(self) -> &'static str {
        match self {
            Rule::Adam => "adam",
            Rule::Rmsprop => "rmsprop",
            Rule::Sgd => "sgd",
        }
    }
}

/// The trainable variables of a var store re-pointed into one contiguous buffer, and their
/// gradients into another with the same layout (variables sorted by name).
#[derive(Debug)]
pub struct Flat {
    /// The variables, in buffer order.
    pub params: Vec<Tensor>,
    /// Their names and sizes, in buffer order.
    pub layout: Vec<(String, i64)>,
    /// Every parameter back to back.
    pub flat: Tensor,
    /// Every gradient back to back.
    pub flat_grad: Tensor,
}

impl Flat {
    /// Flattens the trainable variables of `vs` whose path starts with `prefix`.
    ///
    /// Panics if there is none (a bug in the caller's model, not input).
    pub fn over(vs: &VarStore, prefix: &str) -> Flat {
        Flat::over_parts(vs, &[prefix])
    }

    /// Flattens the trainable variables of `vs` whose path starts with any of `prefixes`.
    ///
    /// Panics if there is none (a bug in the caller's model, not input).
    pub fn over_parts(vs: &VarStore, prefixes: &[&str]) -> Flat {
        let mut named: Vec<(String, Tensor)> = vs
            .variables()
            .into_iter()
            .filter(|(n, t)| prefixes.iter().any(|p| n.starts_with(p)) && t.requires_grad())
            .collect();
        assert!(
            !named.is_empty(),
            "no variable under {prefixes:?} to optimise"
        );
        named.sort_by(|a, b| a.0.cmp(&b.0));
        let layout = named
            .iter()
            .map(|(n, t)| (n.clone(), t.numel() as i64))
            .collect();
        let params: Vec<Tensor> = named.into_iter().map(|(_, t)| t).collect();
        let flat = {
            let _guard = tch::no_grad_guard();
            let views: Vec<Tensor> = params.iter().map(|p| p.detach().reshape([-1])).collect();
            Tensor::cat(&views, 0)
        };
        let flat_grad = flat.zeros_like();
        // Give every parameter a defined gradient (a backward pass of 0 * sum), then point
        // parameter and gradient at their slices of the flat buffers.
        let touch: Vec<Tensor> = params.iter().map(|p| p.sum(Kind::Float)).collect();
        (Tensor::stack(&touch, 0).sum(Kind::Float) * 0.0).backward();
        let mut offset = 0;
        for p in &params {
            let numel = p.numel() as i64;
            let shape = p.size();
            p.shallow_clone()
                .set_data(&flat.narrow(0, offset, numel).view(shape.as_slice()));
            p.grad()
                .set_data(&flat_grad.narrow(0, offset, numel).view(shape.as_slice()));
            offset += numel;
        }
        Flat {
            params,
            layout,
            flat,
            flat_grad,
        }
    }
}

/// `sqrt(v)` of a second moment `v >= 0`, in a new tensor. Zeros (weights that never had a
/// gradient) are raised to the smallest normal float first: this CPU's vectorised `sqrt` is
/// ~10x slower on a buffer with many exact zeros (67k floats, 40% zeros: 125 us against 12),
/// and what the floor adds, `sqrt(1.2e-38) / sqrt(bias2) <= 3.5e-18` even at Adam's first
/// step, is lost against `eps` in f32 for any `eps >= 1e-10`: the step is the same.
fn root(v: &Tensor) -> Tensor {
    let mut r = v.clamp_min(f64::from(f32::MIN_POSITIVE));
    let _ = r.sqrt_();
    r
}

/// Adam with its moments in flat tensors.
#[derive(Debug)]
pub struct Adam {
    /// Prefix of the state names in checkpoints ("adam", or "adam.<prefix>" for a subset).
    name: String,
    flat: Tensor,
    flat_grad: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    steps: u64,
    /// The step count as a 0-dim f64 tensor on the parameters' device, when the bias
    /// correction is computed there (see [`Adam::count_on_device`]).
    device_steps: Option<Tensor>,
    eps: f64,
    /// L2 penalty added to the gradient (PyTorch's `weight_decay`); 0 by default.
    weight_decay: f64,
    /// The update rule and its coefficients (Adam unless [`Adam::with_rule`] says otherwise).
    stepping: Stepping,
    /// Centred RMSprop's running mean of the gradient (`None` otherwise).
    grad_avg: Option<Tensor>,
    /// The variables' names and sizes, in buffer order.
    layout: Vec<(String, i64)>,
    /// Per-element learning-rate factors (`None`: 1 everywhere).
    lr_scale: Option<Tensor>,
    /// Learner processes whose gradients every step sums ([`Adam::join`]).
    group: Option<Arc<Group>>,
}

impl Adam {
    /// Takes over the trainable variables of `vs` (sorted by name, so the layout is stable).
    pub fn new(vs: &VarStore, eps: f64) -> Adam {
        Adam::over(vs, eps, "")
    }

    /// Takes over the variables of `vs` whose path starts with `prefix` (e.g. `"vf."`), so
    /// two optimisers can train disjoint parts of one network. Its checkpoint state is named
    /// `adam.<prefix>...`; with an empty prefix, every variable and plain `adam....` names.
    pub fn over(vs: &VarStore, eps: f64, prefix: &str) -> Adam {
        Adam::over_parts(vs, eps, &[prefix])
    }

    /// [`Adam::over`] the variables under any of `prefixes` (e.g. a policy head and the
    /// encoder in front of it); its checkpoint state is named after the first.
    pub fn over_parts(vs: &VarStore, eps: f64, prefixes: &[&str]) -> Adam {
        let prefix = prefixes.first().copied().unwrap_or("");
        let Flat {
            flat,
            flat_grad,
            layout,
            ..
        } = Flat::over_parts(vs, prefixes);
        let exp_avg = flat.zeros_like();
        let exp_avg_sq = flat.zeros_like();
        let name = if prefix.is_empty() {
            "adam".to_string()
        } else {
            format!("adam.{}", prefix.trim_end_matches('.'))
        };
        Adam {
            name,
            flat,
            flat_grad,
            exp_avg,
            exp_avg_sq,
            steps: 0,
            device_steps: None,
            eps,
            weight_decay: 0.0,
            stepping: Stepping::ADAM,
            grad_avg: None,
            layout,
            lr_scale: None,
            group: None,
        }
    }

    /// Sums the gradients over `group` before every step (weighted by each rank's share of
    /// the rows, see [`Group::reduce_gradients`]), after any in-process replicas have reduced
    /// onto this optimiser's buffer: every rank then takes the same step. A failed
    /// collective is latched in the group ([`Group::failure`]), which the caller checks.
    pub fn join(&mut self, group: &Arc<Group>) {
        self.group = Some(group.clone());
    }

    /// The group's sum of the gradients, when in one.
    fn reduce_over_group(&self) {
        if let Some(group) = &self.group {
            // A failure is latched in the group and ends the run there.
            let _ = group.reduce_gradients(&self.flat_grad);
        }
    }

    /// Steps the variables whose name starts with `prefix` at `factor` times the learning
    /// rate given to [`Adam::step`]: separate learning rates (e.g. the value function's)
    /// within one optimiser, each parameter keeping its own moments as before.
    pub fn with_lr_factor(mut self, prefix: &str, factor: f64) -> Adam {
        let mut scale = Vec::with_capacity(self.flat.numel());
        for (name, n) in &self.layout {
            let f = if name.starts_with(prefix) {
                factor
            } else {
                1.0
            };
            scale.extend(std::iter::repeat_n(f as f32, *n as usize));
        }
        let scale = Tensor::from_slice(&scale).to_device(self.flat.device());
        self.lr_scale = Some(match self.lr_scale.take() {
            Some(old) => old * scale,
            None => scale,
        });
        self
    }

    /// `update`, scaled per element where learning-rate factors are set.
    fn scaled(&self, update: Tensor) -> Tensor {
        match &self.lr_scale {
            Some(scale) => update * scale,
            None => update,
        }
    }

    /// Steps by `stepping.rule` instead of Adam, with its coefficients; the checkpoint state
    /// is named after the rule (`rmsprop....`).
    pub fn with_rule(mut self, stepping: Stepping) -> Adam {
        self.name = self.name.replacen("adam", stepping.rule.name(), 1);
        self.stepping = stepping;
        self.grad_avg =
            (stepping.rule == Rule::Rmsprop && stepping.centered).then(|| self.flat.zeros_like());
        self
    }

    /// Adds `weight_decay x parameter` to every gradient before each step (after clipping),
    /// as PyTorch's Adam `weight_decay` does: an L2 penalty, not AdamW's decoupled decay.
    pub fn with_weight_decay(mut self, weight_decay: f64) -> Adam {
        self.weight_decay = weight_decay;
        self
    }

    /// Counts steps in a tensor on the parameters' device and computes Adam's bias correction
    /// from it there, so a step captured in a CUDA graph (`super::UpdateGraph`) corrects for
    /// the step count of each replay, not the one it was captured at. The steps are the same
    /// up to float rounding (the correction is `1 - beta^t` either way).
    pub fn count_on_device(&mut self) {
        let steps = Tensor::from(self.steps as f64).to_device(self.flat.device());
        self.device_steps = Some(steps);
    }

    /// Clears the gradients of every parameter.
    pub fn zero_grad(&mut self) {
        let _ = self.flat_grad.zero_();
    }

    /// Clips the global gradient norm to `max_grad_norm` (0 disables), then takes one step with
    /// learning rate `lr`. Returns the norm before clipping as a 0-dim tensor on the
    /// parameters' device. Clipping scales on the device (PyTorch's `clip_grad_norm_`: by
    /// `min(1, max / (norm + 1e-6))`), so nothing waits for the norm here: on a GPU a host read
    /// stalls the stream until every queued kernel has run. Read it where it is reported.
    pub fn clipped_step(&mut self, lr: f64, max_grad_norm: f64) -> Tensor {
        self.reduce_over_group();
        let norm = {
            let _guard = tch::no_grad_guard();
            let norm = self.flat_grad.norm();
            if max_grad_norm > 0.0 {
                let scale = ((&norm + 1e-6).reciprocal() * max_grad_norm).clamp_max(1.0);
                let _ = self.flat_grad.g_mul_(&scale);
            }
            norm
        };
        self.apply(lr);
        norm
    }

    /// Takes one step with learning rate `lr`, without clipping; it reads nothing back from the
    /// device.
    pub fn step(&mut self, lr: f64) {
        self.reduce_over_group();
        self.apply(lr);
    }

    /// The step's update rule on the (reduced) gradients.
    fn apply(&mut self, lr: f64) {
        let _guard = tch::no_grad_guard();
        if self.weight_decay > 0.0 {
            let _ = self.flat_grad.g_add_(&(&self.flat * self.weight_decay));
        }
        let grad = &self.flat_grad;
        self.steps += 1;
        if let Some(steps) = &self.device_steps {
            let _ = steps.shallow_clone().g_add_scalar_(1.0);
        }
        match self.stepping.rule {
            Rule::Adam => {}
            Rule::Rmsprop => {
                // exp_avg_sq is the square average, exp_avg the momentum buffer (zero at the
                // start, as PyTorch's), grad_avg the centred variant's mean gradient.
                let Stepping {
                    alpha, momentum, ..
                } = self.stepping;
                let _ = self.exp_avg_sq.g_mul_scalar_(alpha);
                let _ = self.exp_avg_sq.addcmul_(grad, &(grad * (1.0 - alpha)));
                let denom = match &mut self.grad_avg {
                    Some(mean) => {
                        let _ = mean.lerp_(grad, 1.0 - alpha);
                        root(&(&self.exp_avg_sq - mean.square()))
                    }
                    None => root(&self.exp_avg_sq),
                }
                .g_add_scalar_(self.eps);
                if momentum > 0.0 {
                    let _ = self.exp_avg.g_mul_scalar_(momentum);
                    let _ = self.exp_avg.addcdiv_(grad, &denom);
                    let _ = self.flat.g_add_(&self.scaled(&self.exp_avg * -lr));
                } else {
                    let _ = self.flat.addcdiv_(&self.scaled(grad * -lr), &denom);
                }
                return;
            }
            Rule::Sgd => {
                // exp_avg is the momentum buffer. PyTorch starts it at the first gradient; it
                // starts at zero here, so `momentum x 0 + g` is that gradient too.
                let _ = self.exp_avg.g_mul_scalar_(self.stepping.momentum);
                let _ = self.exp_avg.g_add_(grad);
                let _ = self.flat.g_add_(&self.scaled(&self.exp_avg * -lr));
                return;
            }
        }
        let _ = self.exp_avg.lerp_(grad, 1.0 - BETA1);
        let _ = self.exp_avg_sq.g_mul_scalar_(BETA2);
        let _ = self.exp_avg_sq.addcmul_(grad, &(grad * (1.0 - BETA2)));
        let mut denom = root(&self.exp_avg_sq);
        let update = match &self.device_steps {
            None => {
                let t = self.steps as i32;
                let bias1 = 1.0 - BETA1.powi(t);
                let bias2 = 1.0 - BETA2.powi(t);
                let _ = denom.g_div_scalar_(bias2.sqrt()).g_add_scalar_(self.eps);
                &self.exp_avg * (-lr / bias1)
            }
            Some(t) => {
                // 1 - beta^t = -expm1(t ln beta), without the rounding of 1 - (small number).
                let bias1 = (t * BETA1.ln()).expm1().neg();
                let bias2 = (t * BETA2.ln()).expm1().neg();
                let _ = denom.g_mul_(&bias2.rsqrt()).g_add_scalar_(self.eps);
                &self.exp_avg * (bias1.reciprocal() * -lr)
            }
        };
        let _ = self.flat.addcdiv_(&self.scaled(update), &denom);
    }

    /// Steps taken so far (read from the device when counted there).
    pub fn steps(&self) -> u64 {
        match &self.device_steps {
            Some(t) => t.double_value(&[]) as u64,
            None => self.steps,
        }
    }

    /// Every parameter it optimises, back to back (what replicas copy from).
    pub fn flat_params(&self) -> &Tensor {
        &self.flat
    }

    /// Their gradients, in the same layout (what replicas reduce into).
    pub fn flat_grads(&self) -> &Tensor {
        &self.flat_grad
    }
}

impl StatePart for Adam {
    /// The optimiser state as named tensors, for a checkpoint.
    fn save(&self) -> Vec<(String, Tensor)> {
        let n = &self.name;
        let mut state = vec![
            (format!("{n}.exp_avg"), self.exp_avg.shallow_clone()),
            (format!("{n}.exp_avg_sq"), self.exp_avg_sq.shallow_clone()),
            (format!("{n}.steps"), Tensor::from(self.steps() as i64)),
        ];
        if let Some(mean) = &self.grad_avg {
            state.push((format!("{n}.grad_avg"), mean.shallow_clone()));
        }
        state
    }

    /// Restores a state written by [`StatePart::save`] for the same network.
    fn restore(&mut self, state: &[(String, Tensor)]) -> Result<(), StateError> {
        let _guard = tch::no_grad_guard();
        let n = self.name.clone();
        let mut parts = vec![
            (format!("{n}.exp_avg"), &mut self.exp_avg),
            (format!("{n}.exp_avg_sq"), &mut self.exp_avg_sq),
        ];
        if let Some(mean) = &mut self.grad_avg {
            parts.push((format!("{n}.grad_avg"), mean));
        }
        for (name, dst) in parts {
            let src = find(state, &name)?;
            if src.size() != dst.size() {
                return Err(StateError::Shape {
                    name,
                    found: src.size(),
                    expected: dst.size(),
                });
            }
            dst.copy_(&src.to_kind(Kind::Float));
        }
        self.steps = counter(state, &format!("{n}.steps"))?;
        if let Some(steps) = &self.device_steps {
            let _ = steps.shallow_clone().fill_(self.steps as f64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{nn, Device};

    /// A learning-rate factor scales its variables' SGD steps only: 0 freezes them, 2 doubles.
    #[test]
    fn lr_factors_scale_their_variables_only() {
        let vs = nn::VarStore::new(Device::Cpu);
        let a = vs.root().var("a", &[1], nn::Init::Const(1.0));
        let b = vs.root().var("b", &[1], nn::Init::Const(1.0));
        let c = vs.root().var("c", &[1], nn::Init::Const(1.0));
        let mut optim = Adam::new(&vs, 1e-8)
            .with_rule(Stepping::sgd(0.0))
            .with_lr_factor("b", 0.0)
            .with_lr_factor("c", 2.0);
        optim.zero_grad();
        (&a + &b + &c).sum(Kind::Float).backward();
        optim.step(0.1);
        let v = |t: &Tensor| t.double_value(&[0]);
        assert!((v(&a) - 0.9).abs() < 1e-6 && (v(&b) - 1.0).abs() < 1e-9);
        assert!((v(&c) - 0.8).abs() < 1e-6, "{}", v(&c));
    }

    /// Counting steps on the device (what a CUDA graph of an update needs) steps as counting
    /// on the host does, up to float rounding, and its count is what a checkpoint saves and
    /// restores.
    #[test]
    fn counting_steps_on_the_device_steps_as_counting_on_the_host() {
        let make = |on_device: bool| {
            let vs = nn::VarStore::new(Device::Cpu);
            let w = vs.root().var("w", &[3], nn::Init::Const(0.5));
            let mut optim = Adam::new(&vs, 1e-8);
            if on_device {
                optim.count_on_device();
            }
            (vs, w, optim)
        };
        let (_host_vs, host_w, mut host) = make(false);
        let (_device_vs, device_w, mut device) = make(true);
        for step in 0..200 {
            let g = Tensor::from_slice(&[1.0f32, -0.5, 0.1]) * (1.0 + f64::from(step % 7));
            for (w, optim) in [(&host_w, &mut host), (&device_w, &mut device)] {
                optim.zero_grad();
                (w * &g).sum(Kind::Float).backward();
                let _ = optim.clipped_step(1e-2, 0.0);
            }
        }
        let (h, d) = (
            Vec::<f32>::try_from(&host_w.detach()).unwrap(),
            Vec::<f32>::try_from(&device_w.detach()).unwrap(),
        );
        for (h, d) in h.iter().zip(&d) {
            assert!((h - d).abs() < 1e-5, "host {h} device {d}");
        }
        assert!((h[0] - 0.5).abs() > 0.5, "the weights moved: {h:?}");
        assert_eq!(device.steps(), 200);
        let (_vs, _w, mut restored) = make(true);
        restored.restore(&device.save()).unwrap();
        assert_eq!(restored.steps(), 200);
    }

    /// RMSprop and SGD with momentum: two steps each against PyTorch's formulas by hand.
    #[test]
    fn rmsprop_and_sgd_steps_by_hand() {
        for (rule, coeff) in [(Rule::Rmsprop, 0.9), (Rule::Sgd, 0.5)] {
            let vs = nn::VarStore::new(Device::Cpu);
            let w = vs.root().var("w", &[2], nn::Init::Const(1.0));
            let stepping = match rule {
                Rule::Rmsprop => Stepping::rmsprop(coeff),
                _ => Stepping::sgd(coeff),
            };
            let mut optim = Adam::new(&vs, 1e-8).with_rule(stepping);
            let (lr, grads) = (0.1, [[2.0f64, -1.0], [0.5, 0.5]]);
            let (mut p, mut v, mut b) = ([1.0f64; 2], [0.0f64; 2], [0.0f64; 2]);
            for (step, g) in grads.iter().enumerate() {
                optim.zero_grad();
                let g_t = Tensor::from_slice(&[g[0] as f32, g[1] as f32]);
                (&w * &g_t).sum(Kind::Float).backward();
                optim.step(lr);
                for i in 0..2 {
                    match rule {
                        Rule::Rmsprop => {
                            v[i] = coeff * v[i] + (1.0 - coeff) * g[i] * g[i];
                            p[i] -= lr * g[i] / (v[i].sqrt() + 1e-8);
                        }
                        _ => {
                            b[i] = if step == 0 { g[i] } else { coeff * b[i] + g[i] };
                            p[i] -= lr * b[i];
                        }
                    }
                }
                let got = Vec::<f32>::try_from(&w.detach()).unwrap();
                for i in 0..2 {
                    assert!(
                        (f64::from(got[i]) - p[i]).abs() < 1e-5,
                        "{rule:?} {got:?} {p:?}"
                    );
                }
            }
            assert!(
                optim.save()[0].0.starts_with(rule.name()),
                "{:?}",
                optim.save()[0].0
            );
        }
    }

    /// RMSprop, plain, with momentum, centred and both, steps as libtorch's own `RMSprop` (the
    /// C++ twin of `torch.optim.RMSprop`) does from the same weights and gradients, over
    /// enough steps for the moments to matter.
    #[test]
    fn rmsprop_steps_as_libtorchs_rmsprop() {
        use tch::nn::OptimizerConfig;
        let (lr, alpha, eps) = (2.5e-3, 0.95, 0.01);
        for (momentum, centered) in [(0.0, false), (0.95, false), (0.0, true), (0.95, true)] {
            let start = Tensor::from_slice(&[1.0f32, -2.0, 0.5, 3.0]);
            let ours_vs = nn::VarStore::new(Device::Cpu);
            let ours_w = ours_vs.root().var_copy("w", &start);
            let stepping = Stepping {
                momentum,
                centered,
                ..Stepping::rmsprop(alpha)
            };
            let mut ours = Adam::new(&ours_vs, eps).with_rule(stepping);
            let theirs_vs = nn::VarStore::new(Device::Cpu);
            let theirs_w = theirs_vs.root().var_copy("w", &start);
            let mut theirs = nn::RmsProp {
                alpha,
                eps,
                wd: 0.0,
                momentum,
                centered,
            }
            .build(&theirs_vs, lr)
            .unwrap();
            for step in 0..50 {
                // A quadratic pull towards a target that moves, so gradients change sign.
                let target = Tensor::from_slice(&[0.3f32, 0.1, -0.7, 2.0]) * (step % 5) as f64;
                let loss = |w: &Tensor| (w - &target).square().sum(Kind::Float);
                ours.zero_grad();
                loss(&ours_w).backward();
                ours.step(lr);
                theirs.zero_grad();
                loss(&theirs_w).backward();
                theirs.step();
            }
            let ours = Vec::<f32>::try_from(&ours_w.detach()).unwrap();
            let theirs = Vec::<f32>::try_from(&theirs_w.detach()).unwrap();
            for (a, b) in ours.iter().zip(&theirs) {
                assert!(
                    (a - b).abs() < 1e-5,
                    "momentum {momentum} centered {centered}: {ours:?} against {theirs:?}"
                );
            }
            let moved = (ours[0] - 1.0).abs();
            assert!(moved > 0.05, "the weights moved: {ours:?}");
        }
    }

    /// Centred RMSprop's mean gradient is part of the checkpoint: a restored optimiser takes
    /// the next step the original takes.
    #[test]
    fn centred_rmsprop_state_round_trips() {
        let stepping = Stepping {
            momentum: 0.9,
            centered: true,
            ..Stepping::rmsprop(0.95)
        };
        let make = || {
            let vs = nn::VarStore::new(Device::Cpu);
            let w = vs.root().var_copy("w", &Tensor::from_slice(&[1.0f32, 2.0]));
            let optim = Adam::new(&vs, 0.01).with_rule(stepping);
            (vs, w, optim)
        };
        let step = |w: &Tensor, optim: &mut Adam, g: [f32; 2]| {
            optim.zero_grad();
            (w * Tensor::from_slice(&g)).sum(Kind::Float).backward();
            optim.step(0.1);
        };
        let (_vs, w, mut first) = make();
        step(&w, &mut first, [3.0, -1.0]);
        step(&w, &mut first, [1.0, 2.0]);
        let state = first.save();
        assert!(state.iter().any(|(n, _)| n == "rmsprop.grad_avg"), "saved");
        let (_vs2, mut w2, mut second) = make();
        tch::no_grad(|| w2.copy_(&w));
        second.restore(&state).unwrap();
        step(&w, &mut first, [0.5, 0.5]);
        step(&w2, &mut second, [0.5, 0.5]);
        assert!(w.allclose(&w2, 1e-7, 1e-7, false), "{w:?} {w2:?}");
    }

    /// One step of our Adam equals the textbook update computed by hand.
    #[test]
    fn first_step_moves_each_weight_by_lr_against_the_gradient_sign() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs
            .root()
            .var_copy("w", &Tensor::from_slice(&[1.0f32, -2.0, 3.0]));
        let mut adam = Adam::new(&vs, 1e-8);
        let loss = (&w * Tensor::from_slice(&[2.0f32, -0.5, 0.0])).sum(Kind::Float);
        loss.backward();
        adam.step(0.1);
        // m_hat = g, v_hat = g^2, so the step is lr * g / (|g| + eps): sign(g) * 0.1; 0 for g = 0.
        let got = Vec::<f32>::try_from(&w).unwrap();
        let want = [0.9f32, -1.9, 3.0];
        for (g, e) in got.iter().zip(want) {
            assert!((g - e).abs() < 1e-5, "{got:?} vs {want:?}");
        }
    }

    /// Backward passes land in the flat gradient buffer, accumulate there, and zero_grad clears it.
    #[test]
    fn gradients_accumulate_in_the_flat_buffer() {
        let vs = nn::VarStore::new(Device::Cpu);
        let a = vs.root().var_copy("a", &Tensor::from_slice(&[1.0f32, 2.0]));
        let b = vs.root().var_copy("b", &Tensor::from_slice(&[3.0f32]));
        let mut adam = Adam::new(&vs, 1e-8);
        let flat = |adam: &Adam| Vec::<f32>::try_from(&adam.flat_grad).unwrap();
        assert_eq!(flat(&adam), vec![0.0, 0.0, 0.0]);
        // b broadcasts over a's two elements, so its gradient is 5 + 5.
        (&a * 2.0 + &b * 5.0).sum(Kind::Float).backward();
        assert_eq!(flat(&adam), vec![2.0, 2.0, 10.0]);
        (&a * 1.0).sum(Kind::Float).backward();
        assert_eq!(flat(&adam), vec![3.0, 3.0, 10.0]);
        assert_eq!(Vec::<f32>::try_from(&a.grad()).unwrap(), vec![3.0, 3.0]);
        adam.zero_grad();
        assert_eq!(flat(&adam), vec![0.0, 0.0, 0.0]);
        assert_eq!(Vec::<f32>::try_from(&b.grad()).unwrap(), vec![0.0]);
    }

    /// Weight decay adds `wd x w` to the gradient: with no loss gradient at all, the first
    /// step still moves each weight by lr towards 0 (Adam's first step is lr x sign(g)), and
    /// the first moment is (1 - beta1) x wd x w.
    #[test]
    fn weight_decay_adds_an_l2_gradient() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs
            .root()
            .var_copy("w", &Tensor::from_slice(&[2.0f32, -4.0]));
        let mut adam = Adam::new(&vs, 1e-8).with_weight_decay(0.5);
        adam.zero_grad();
        adam.step(0.1);
        let m = Vec::<f32>::try_from(&adam.exp_avg).unwrap();
        assert!(
            (m[0] - 0.1).abs() < 1e-6 && (m[1] + 0.2).abs() < 1e-6,
            "{m:?}"
        );
        let after = Vec::<f32>::try_from(&w.detach()).unwrap();
        assert!(
            (after[0] - 1.9).abs() < 1e-5 && (after[1] + 3.9).abs() < 1e-5,
            "{after:?}"
        );
    }

    #[test]
    fn a_gradient_within_the_max_norm_is_left_as_it_is() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var_copy("w", &Tensor::from_slice(&[0.0f32, 0.0]));
        let mut adam = Adam::new(&vs, 1e-8);
        (&w * Tensor::from_slice(&[0.3f32, 0.4]))
            .sum(Kind::Float)
            .backward();
        let norm = adam.clipped_step(0.1, 1.0).double_value(&[]);
        assert!((norm - 0.5).abs() < 1e-6, "{norm}");
        let m = Vec::<f32>::try_from(&adam.exp_avg).unwrap();
        // m = (1 - beta1) * grad, the gradient unscaled
        assert!(
            (m[0] - 0.03).abs() < 1e-7 && (m[1] - 0.04).abs() < 1e-7,
            "{m:?}"
        );
    }

    #[test]
    fn clipping_scales_the_gradient_to_the_max_norm() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var_copy("w", &Tensor::from_slice(&[0.0f32, 0.0]));
        let mut adam = Adam::new(&vs, 1e-8);
        (&w * Tensor::from_slice(&[3.0f32, 4.0]))
            .sum(Kind::Float)
            .backward();
        let norm = adam.clipped_step(0.1, 1.0).double_value(&[]);
        assert!((norm - 5.0).abs() < 1e-5);
        let m = Vec::<f32>::try_from(&adam.exp_avg).unwrap();
        // m = (1 - beta1) * clipped grad = 0.1 * [0.6, 0.8]
        assert!(
            (m[0] - 0.06).abs() < 1e-5 && (m[1] - 0.08).abs() < 1e-5,
            "{m:?}"
        );
    }

    #[test]
    fn state_round_trips() {
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().var_copy("w", &Tensor::from_slice(&[1.0f32, 2.0]));
        let mut adam = Adam::new(&vs, 1e-8);
        (&w * 3.0).sum(Kind::Float).backward();
        adam.step(0.01);
        let vs2 = nn::VarStore::new(Device::Cpu);
        let _w2 = vs2
            .root()
            .var_copy("w", &Tensor::from_slice(&[1.0f32, 2.0]));
        let mut other = Adam::new(&vs2, 1e-8);
        other.restore(&adam.save()).unwrap();
        assert_eq!(other.steps(), 1);
        assert!(other
            .exp_avg_sq
            .allclose(&adam.exp_avg_sq, 1e-7, 1e-7, false));
    }
}
