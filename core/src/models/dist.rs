//! Action distributions: what a policy head outputs, and the few things algorithms ask of it
//! (log-likelihood, entropy, KL, sampling). Leading dimensions are `[N]`.

use tch::{Kind, Tensor};

/// A batch of action distributions, one per row.
#[derive(Debug)]
pub enum Dist {
    /// Categorical over `A` actions: log-probabilities `[N, A]`; actions are i64 `[N]`.
    Categorical {
        /// log pi(.|s), `[N, A]`.
        log_probs: Tensor,
    },
    /// Diagonal Gaussian over `A` dimensions; actions are f32 `[N, A]`.
    Gaussian {
        /// Means `[N, A]`.
        mean: Tensor,
        /// Log standard deviations, `[N, A]` or `[A]` (broadcast over rows).
        log_std: Tensor,
    },
}

/// ln(2 pi) / 2.
const HALF_LN_2PI: f64 = 0.918_938_533_204_672_7;

impl Dist {
    /// Categorical from unnormalised logits `[N, A]`.
    pub fn categorical(logits: &Tensor) -> Dist {
        Dist::Categorical {
            log_probs: logits.log_softmax(-1, Kind::Float),
        }
    }

    /// log pi(a|s) of `action`, `[N]`.
    pub fn log_prob(&self, action: &Tensor) -> Tensor {
        match self {
            Dist::Categorical { log_probs } => log_probs
                .gather(1, &action.unsqueeze(1), false)
                .squeeze_dim(1),
            Dist::Gaussian { mean, log_std } => {
                let z = (action - mean) / log_std.exp();
                (z.square() * -0.5 - log_std - HALF_LN_2PI).sum_dim_intlist(-1, false, None::<Kind>)
            }
        }
    }

    /// Entropy, `[N]`.
    pub fn entropy(&self) -> Tensor {
        match self {
            Dist::Categorical { log_probs } => {
                -(log_probs.exp() * log_probs).sum_dim_intlist(-1, false, None::<Kind>)
            }
            Dist::Gaussian { mean, log_std } => (log_std.expand_as(mean) + 0.5 + HALF_LN_2PI)
                .sum_dim_intlist(-1, false, None::<Kind>),
        }
    }

    /// KL(self || other), `[N]`.
    pub fn kl(&self, other: &Dist) -> Tensor {
        match (self, other) {
            (Dist::Categorical { log_probs: p }, Dist::Categorical { log_probs: q }) => {
                (p.exp() * (p - q)).sum_dim_intlist(-1, false, None::<Kind>)
            }
            (
                Dist::Gaussian {
                    mean: m1,
                    log_std: s1,
                },
                Dist::Gaussian {
                    mean: m2,
                    log_std: s2,
                },
            ) => {
                let var_ratio = ((s1 - s2) * 2.0).exp();
                let t = (m1 - m2).square() / (s2 * 2.0).exp();
                ((var_ratio + t) * 0.5 - 0.5 + s2 - s1).sum_dim_intlist(-1, false, None::<Kind>)
            }
            _ => panic!("KL between a categorical and a Gaussian is undefined"),
        }
    }

    /// A sampled action per row.
    pub fn sample(&self) -> Tensor {
        match self {
            Dist::Categorical { log_probs } => log_probs
                .exp()
                .f_multinomial(1, true)
                .unwrap_or_else(|e| {
                    // libtorch's message runs on into a C++ backtrace: its first line says it.
                    let e = e.to_string();
                    panic!(
                        "sampling an action: {} (weights so large that the policy's \
                         probabilities overflow?)",
                        e.lines().next().unwrap_or_default()
                    )
                })
                .squeeze_dim(1),
            Dist::Gaussian { mean, log_std } => mean + log_std.exp() * mean.randn_like(),
        }
    }

    /// The most likely action per row.
    pub fn mode(&self) -> Tensor {
        match self {
            Dist::Categorical { log_probs } => log_probs.argmax(-1, false),
            Dist::Gaussian { mean, .. } => mean.shallow_clone(),
        }
    }

    /// The action to take per row: the mode when `deterministic`, else a sample.
    pub fn pick(&self, deterministic: bool) -> Tensor {
        if deterministic {
            self.mode()
        } else {
            self.sample()
        }
    }

    /// The same distribution cut from the graph (the "old" policy of a trust region).
    pub fn detach(&self) -> Dist {
        match self {
            Dist::Categorical { log_probs } => Dist::Categorical {
                log_probs: log_probs.detach(),
            },
            Dist::Gaussian { mean, log_std } => Dist::Gaussian {
                mean: mean.detach(),
                log_std: log_std.detach(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panic names the cause in one line, not libtorch's C++ backtrace.
    #[test]
    #[should_panic(
        expected = "sampling an action: Internal torch error: probability tensor contains \
                               either `inf`, `nan` or element < 0 (weights so large"
    )]
    fn sampling_from_nan_probabilities_says_so_in_one_line() {
        let log_probs = Tensor::from_slice(&[f32::NAN, 0.0]).view([1, 2]);
        let _ = Dist::Categorical { log_probs }.sample();
    }

    /// N(0, 1) at 0 has density 1/sqrt(2 pi); KL(N(0,1) || N(1, e^2)) by the closed form
    /// ln(e) + (1 + 1) / (2 e^2) - 1/2.
    #[test]
    fn gaussian_log_prob_entropy_and_kl_by_hand() {
        let d = Dist::Gaussian {
            mean: Tensor::zeros([1, 1], (Kind::Float, tch::Device::Cpu)),
            log_std: Tensor::zeros([1], (Kind::Float, tch::Device::Cpu)),
        };
        let lp = d.log_prob(&Tensor::zeros([1, 1], (Kind::Float, tch::Device::Cpu)));
        assert!((lp.double_value(&[0]) + HALF_LN_2PI).abs() < 1e-6);
        assert!((d.entropy().double_value(&[0]) - (0.5 + HALF_LN_2PI)).abs() < 1e-6);
        let e = Dist::Gaussian {
            mean: Tensor::ones([1, 1], (Kind::Float, tch::Device::Cpu)),
            log_std: Tensor::ones([1], (Kind::Float, tch::Device::Cpu)),
        };
        let want = 1.0 + 2.0 / (2.0 * 1f64.exp().powi(2)) - 0.5;
        assert!((d.kl(&e).double_value(&[0]) - want).abs() < 1e-5);
        assert_eq!(d.sample().size(), vec![1, 1]);
    }

    #[test]
    fn categorical_kl_is_zero_to_itself_and_positive_otherwise() {
        let a = Dist::categorical(&Tensor::from_slice(&[0.0f32, 1.0, 2.0]).view([1, 3]));
        let b = Dist::categorical(&Tensor::from_slice(&[2.0f32, 1.0, 0.0]).view([1, 3]));
        assert!(a.kl(&a).double_value(&[0]).abs() < 1e-7);
        assert!(a.kl(&b).double_value(&[0]) > 0.1);
        // Uniform over 3 has entropy ln 3.
        let u = Dist::categorical(&Tensor::zeros([1, 3], (Kind::Float, tch::Device::Cpu)));
        assert!((u.entropy().double_value(&[0]) - 3f64.ln()).abs() < 1e-6);
    }
}
