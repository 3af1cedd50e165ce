//! One copy of the networks per device, for a data-parallel update that is exactly the
//! single-device one.
//!
//! The first device holds the master parameters and the optimiser. Every other device holds a
//! replica whose trainable parameters and gradients live in one flat buffer each, laid out as
//! the optimiser's (see [`Flat`]). A step then is: [`Replicas::broadcast`] the master
//! parameters (one copy per replica), run forward and backward of shard k of the minibatch on
//! device k with its loss weighted by the shard's share of the rows, [`Replicas::reduce`]
//! the replicas' gradients onto the master's (one add per replica), and take one optimiser
//! step. Weighted shard losses sum to the full minibatch's loss, so the gradients, and
//! therefore the step, equal one device's up to float rounding.

use tch::{nn::VarStore, Device, Tensor};

use crate::optim::Flat;

/// A replica on one device: the model, its flat parameter and gradient buffers, and its
/// untrained variables (running statistics) paired with the master's.
#[derive(Debug)]
struct Replica<M> {
    device: Device,
    model: M,
    flat: Tensor,
    flat_grad: Tensor,
    /// (replica, master) pairs of variables without gradients.
    buffers: Vec<(Tensor, Tensor)>,
}

/// Copies of a model on devices `1..`, tied to the master on device 0.
#[derive(Debug)]
pub struct Replicas<M> {
    master_device: Device,
    replicas: Vec<Replica<M>>,
}

/// Variables that do not train (observation statistics), sorted by name.
fn untrained(vs: &VarStore) -> Vec<(String, Tensor)> {
    let mut named: Vec<(String, Tensor)> = vs
        .variables()
        .into_iter()
        .filter(|(_, t)| !t.requires_grad())
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

impl<M> Replicas<M> {
    /// Replicas of a model whose master copy is in `master` (on `devices[0]`), one on each
    /// of `devices[1..]`, built by `build` and reached through `store`.
    ///
    /// Panics if a replica's variables differ from the master's (`build` must make the same
    /// architecture: a caller bug).
    pub fn new(
        master: &VarStore,
        devices: &[Device],
        mut build: impl FnMut(Device) -> M,
        store: impl Fn(&M) -> &VarStore,
    ) -> Replicas<M> {
        let master_buffers = untrained(master);
        let replicas = devices
            .iter()
            .skip(1)
            .map(|&device| {
                let model = build(device);
                let vs = store(&model);
                let Flat {
                    flat, flat_grad, ..
                } = Flat::over(vs, "");
                let mine = untrained(vs);
                assert_eq!(
                    mine.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                    master_buffers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                    "a replica must have the master's variables"
                );
                let buffers = mine
                    .into_iter()
                    .zip(&master_buffers)
                    .map(|((_, r), (_, m))| (r, m.shallow_clone()))
                    .collect();
                Replica {
                    device,
                    model,
                    flat,
                    flat_grad,
                    buffers,
                }
            })
            .collect();
        Replicas {
            master_device: devices.first().copied().unwrap_or(Device::Cpu),
            replicas,
        }
    }

    /// No replicas: the master alone on `device`.
    pub fn none(device: Device) -> Replicas<M> {
        Replicas {
            master_device: device,
            replicas: Vec::new(),
        }
    }

    /// Devices in shard order: the master's first.
    pub fn devices(&self) -> Vec<Device> {
        std::iter::once(self.master_device)
            .chain(self.replicas.iter().map(|r| r.device))
            .collect()
    }

    /// Copies besides the master.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// True with a single device (nothing to copy or reduce).
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// The replica models, in device order (without the master).
    pub fn models(&self) -> impl Iterator<Item = &M> {
        self.replicas.iter().map(|r| &r.model)
    }

    /// Makes every replica's parameters (from the optimiser's `flat_params`) and running
    /// statistics equal to the master's, and zeroes their gradients.
    pub fn broadcast(&self, flat_params: &Tensor) {
        let _guard = tch::no_grad_guard();
        for r in &self.replicas {
            r.flat.shallow_clone().copy_(flat_params);
            let _ = r.flat_grad.shallow_clone().zero_();
            for (dst, src) in &r.buffers {
                dst.shallow_clone().copy_(src);
            }
        }
    }

    /// Adds every replica's gradients into the master's `flat_grads`.
    pub fn reduce(&self, flat_grads: &Tensor) {
        let _guard = tch::no_grad_guard();
        for r in &self.replicas {
            let grad = r.flat_grad.to_device(self.master_device);
            let _ = flat_grads.shallow_clone().g_add_(&grad);
        }
    }
}

#[cfg(test)]
mod tests {
    use tch::Device;

    use crate::algos::testing::{cartpole_model, tiny_batch};
    use crate::algos::{Metrics, Ppo};
    use crate::config::PpoConfig;
    use crate::items::rollout::RolloutBatch;

    /// The fixture's 8-row batch, varied by `k`.
    fn batch(k: usize) -> RolloutBatch {
        let mut b = tiny_batch();
        for (i, r) in b.reward.iter_mut().enumerate() {
            *r += ((i + k) % 5) as f32 * 0.3;
        }
        if let crate::items::rollout::Observations::F32(obs) = &mut b.obs {
            for (i, o) in obs.iter_mut().enumerate() {
                *o *= 1.0 + ((i * k) % 3) as f32 * 0.2;
            }
        }
        b
    }

    /// One minibatch per epoch: the update draws nothing from libtorch's global RNG, which
    /// tests running in parallel reseed.
    fn config() -> PpoConfig {
        PpoConfig {
            epochs: 4,
            minibatches: 1,
            learning_rate: 1e-2,
            ..PpoConfig::default()
        }
    }

    /// `updates` updates on `devices` CPU replicas (`threads` threads on one device) from
    /// the weights `start`; the parameters after them and the last update's metrics.
    fn train(
        start: &[(String, tch::Tensor)],
        devices: usize,
        threads: usize,
        config: &PpoConfig,
        updates: usize,
    ) -> (Vec<(String, tch::Tensor)>, Metrics) {
        let mut model = cartpole_model(7);
        model.load_named(start).unwrap();
        let mut ppo = Ppo::new(config, model, 2_560).with_threads(threads);
        if devices > 1 {
            // Replicas start from other weights: the update must copy the master's in.
            ppo = ppo.on_devices(&vec![Device::Cpu; devices], |_| cartpole_model(99));
        }
        let mut metrics = Metrics::default();
        for k in 0..updates {
            metrics = ppo.train(&batch(k));
        }
        (ppo.model().named_parameters(), metrics)
    }

    fn max_diff(a: &[(String, tch::Tensor)], b: &[(String, tch::Tensor)]) -> (String, f64) {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|((name, x), (other, y))| {
                assert_eq!(name, other);
                (name.clone(), (x - y).abs().max().double_value(&[]))
            })
            .fold((String::new(), 0.0), |m, d| if d.1 > m.1 { d } else { m })
    }

    #[test]
    fn replicas_on_several_devices_train_exactly_like_one_device() {
        let start = cartpole_model(7).named_parameters();
        // 3 updates x 4 epochs: 12 optimiser steps.
        let (one, _) = train(&start, 1, 1, &config(), 3);
        let moved = max_diff(&one, &start).1;
        assert!(moved > 1e-2, "parameters barely moved ({moved})");
        for devices in [2, 3] {
            let (many, _) = train(&start, devices, 1, &config(), 3);
            // The same shards as `devices` threads over one set of parameters: the same sums
            // in the same order, so equal to float precision.
            let (threads, _) = train(&start, 1, devices, &config(), 3);
            let (name, diff) = max_diff(&many, &threads);
            assert!(
                diff < 1e-6,
                "{devices} devices vs threads: `{name}` differs by {diff}"
            );
            // Against the unsplit batch only the summation order differs; 12 Adam steps
            // amplify that rounding (the same for threads), far below the movement.
            let (name, diff) = max_diff(&many, &one);
            assert!(diff < 1e-4, "{devices} devices: `{name}` differs by {diff}");
        }
    }

    #[test]
    fn one_step_on_replicas_equals_one_device_to_float_precision() {
        let start = cartpole_model(7).named_parameters();
        let single = PpoConfig {
            epochs: 1,
            ..config()
        };
        let (one, m1) = train(&start, 1, 1, &single, 1);
        let (three, m3) = train(&start, 3, 1, &single, 1);
        let (name, diff) = max_diff(&one, &three);
        assert!(diff < 1e-6, "`{name}` differs by {diff}");
        for key in ["policy_loss", "value_loss", "entropy", "grad_norm"] {
            let (a, b) = (m1.get(key).unwrap(), m3.get(key).unwrap());
            assert!((a - b).abs() < 1e-5 * a.abs().max(1.0), "{key}: {a} vs {b}");
        }
    }
}
