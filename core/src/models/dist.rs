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
}

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
        }
    }

    /// Entropy, `[N]`.
    pub fn entropy(&self) -> Tensor {
        match self {
            Dist::Categorical { log_probs } => {
                -(log_probs.exp() * log_probs).sum_dim_intlist(-1, false, Kind::Float)
            }
        }
    }

    /// KL(self || other), `[N]`.
    pub fn kl(&self, other: &Dist) -> Tensor {
        match (self, other) {
            (Dist::Categorical { log_probs: p }, Dist::Categorical { log_probs: q }) => {
                (p.exp() * (p - q)).sum_dim_intlist(-1, false, Kind::Float)
            }
        }
    }

    /// A sampled action per row.
    pub fn sample(&self) -> Tensor {
        match self {
            Dist::Categorical { log_probs } => log_probs.exp().multinomial(1, true).squeeze_dim(1),
        }
    }

    /// The most likely action per row.
    pub fn mode(&self) -> Tensor {
        match self {
            Dist::Categorical { log_probs } => log_probs.argmax(-1, false),
        }
    }

    /// The same distribution cut from the graph (the "old" policy of a trust region).
    pub fn detach(&self) -> Dist {
        match self {
            Dist::Categorical { log_probs } => Dist::Categorical {
                log_probs: log_probs.detach(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
