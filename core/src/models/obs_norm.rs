//! Running observation normalisation (SB3's `VecNormalize`, rlpyt's `RunningMeanStdModel`):
//! `clip((obs - mean) / sqrt(max(var, var_clip)), -clip, clip)`, with mean and variance merged from
//! every batch the learner trains on (Chan et al.'s parallel variance update).
//!
//! The statistics are non-trainable variables of the model's `VarStore`
//! (`obs_norm.mean`, `obs_norm.var`, `obs_norm.count`), so they travel with the weights to
//! the actors and into checkpoints like any parameter.

use tch::nn;
use tch::{Kind, Tensor};

/// The running statistics and the clip.
#[derive(Debug)]
pub struct ObsNorm {
    mean: Tensor,
    var: Tensor,
    count: Tensor,
    clip: f64,
    var_clip: f64,
    /// The most samples the statistics count (older ones fade as new ones arrive); `None`:
    /// every sample counts forever.
    window: Option<f64>,
}

impl ObsNorm {
    /// Statistics for `dim` observation components under `path`: mean 0, variance 1, and a
    /// tiny prior count (1e-4, as SB3) so the first batch dominates; normalised values are
    /// clipped to `+-clip` and the variance is taken as at least `var_clip`.
    pub fn new(path: &nn::Path, dim: i64, clip: f64, var_clip: f64) -> ObsNorm {
        let mean = path.zeros_no_train("mean", &[dim]);
        let var = path.ones_no_train("var", &[dim]);
        let mut count = path.zeros_no_train("count", &[1]);
        let _guard = tch::no_grad_guard();
        let _ = count.fill_(1e-4);
        ObsNorm {
            mean,
            var,
            count,
            clip,
            var_clip,
            window: None,
        }
    }

    /// Statistics that weigh at most `window` past samples against each new batch, so they
    /// follow a drifting scale (the intrinsic-reward normaliser's).
    pub fn windowed(mut self, window: f64) -> ObsNorm {
        self.window = Some(window);
        self
    }

    /// Normalised and clipped observations `[N, D]`.
    pub fn apply(&self, obs: &Tensor) -> Tensor {
        ((obs - &self.mean) / self.var.clamp_min(self.var_clip).sqrt()).clamp(-self.clip, self.clip)
    }

    /// Merges the mean and variance of `obs` `[N, D]` into the running statistics.
    pub fn update(&self, obs: &Tensor) {
        let _guard = tch::no_grad_guard();
        let obs = obs.to_kind(Kind::Float).to_device(self.mean.device());
        let n = obs.size()[0] as f64;
        if n == 0.0 {
            return;
        }
        let batch_mean = obs.mean_dim(0, false, Kind::Float);
        let batch_var = obs.var_dim(0, false, false);
        let count = self.count.double_value(&[0]);
        let count = self.window.map_or(count, |w| count.min(w));
        let total = count + n;
        let delta = &batch_mean - &self.mean;
        let mean = &self.mean + &delta * (n / total);
        let m2 = &self.var * count + batch_var * n + delta.square() * (count * n / total);
        self.mean.shallow_clone().copy_(&mean);
        self.var.shallow_clone().copy_(&(m2 / total));
        let _ = self.count.shallow_clone().fill_(total);
    }

    /// Another handle on the same statistics.
    pub fn shallow_clone(&self) -> ObsNorm {
        ObsNorm {
            mean: self.mean.shallow_clone(),
            var: self.var.shallow_clone(),
            count: self.count.shallow_clone(),
            clip: self.clip,
            var_clip: self.var_clip,
            window: self.window,
        }
    }

    /// The running mean and variance (for tests and diagnostics).
    pub fn stats(&self) -> (Tensor, Tensor) {
        (self.mean.shallow_clone(), self.var.shallow_clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A constant component (variance 0) is divided by the square root of `var_clip`, not by
    /// zero.
    #[test]
    fn variance_is_clipped_from_below() {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let norm = ObsNorm::new(&(vs.root() / "obs_norm"), 1, 1e6, 0.01);
        norm.update(&Tensor::from_slice(&[2.0f32; 8]).view([8, 1]));
        let out = norm.apply(&Tensor::from_slice(&[3.0f32]).view([1, 1]));
        // mean ~2 (the prior count is 1e-4), variance ~0: (3 - 2) / sqrt(0.01) = 10.
        assert!((out.double_value(&[0, 0]) - 10.0).abs() < 0.01, "{out:?}");
    }
    use tch::Device;

    /// Merging batches gives the mean and (population) variance of all the data at once.
    #[test]
    fn merged_statistics_match_the_whole_data() {
        let vs = nn::VarStore::new(Device::Cpu);
        let norm = ObsNorm::new(&(vs.root() / "obs_norm"), 2, 5.0, 1e-8);
        let data = Tensor::randn([300, 2], (Kind::Float, Device::Cpu)) * 3.0 + 7.0;
        for i in 0..3 {
            norm.update(&data.narrow(0, i * 100, 100));
        }
        let (mean, var) = norm.stats();
        let want_mean = data.mean_dim(0, false, Kind::Float);
        let want_var = data.var_dim(0, false, false);
        assert!(mean.allclose(&want_mean, 1e-3, 1e-3, false));
        assert!(var.allclose(&want_var, 1e-3, 1e-2, false));
        let z = norm.apply(&data);
        assert!(z.mean(Kind::Float).double_value(&[]).abs() < 1e-3);
        // Clipping: a far outlier maps to the clip.
        let far = norm.apply(&Tensor::from_slice(&[1000.0f32, -1000.0]).view([1, 2]));
        assert_eq!(
            Vec::<f32>::try_from(&far.view([-1])).unwrap(),
            vec![5.0, -5.0]
        );
    }
}
