//! Actor-side exploration for off-policy learning: uniformly random warm-up steps,
//! epsilon-greedy for discrete actions, Gaussian or Ornstein-Uhlenbeck noise for continuous
//! ones (scaled to the action box's half-width), and clipping into the box. Evaluation with
//! `eval.deterministic = false` plays DQN, TD3 and DDPG with the same noise ([`evaluated`]).

use std::cell::RefCell;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tch::Tensor;

use crate::algos::registry::spec;
use crate::config::{Exploration, NoiseKind, RunConfig};
use crate::items::rollout::Actions;
use crate::models::{Policy, PolicyKind, PolicyStep, RnnState};
use fleetrl_proto::space::{Action, Space};

/// Explores around a policy's actions for M envs.
#[derive(Debug)]
pub struct Explorer {
    config: Exploration,
    space: Space,
    rng: SmallRng,
    /// Ornstein-Uhlenbeck state per env and action dimension.
    ou: Vec<Vec<f64>>,
    /// This explorer's own env steps.
    steps: u64,
    /// Explorers (actor processes) that share the schedule: `random_steps` and
    /// `epsilon_decay_steps` count the run's env steps, estimated as own steps times this.
    sharers: u64,
}

impl Explorer {
    /// An explorer for `m` envs acting in `space`, seeded.
    pub fn new(config: &Exploration, space: &Space, m: usize, seed: u64) -> Explorer {
        Explorer {
            config: config.clone(),
            space: space.clone(),
            rng: SmallRng::seed_from_u64(seed),
            ou: vec![vec![0.0; space.flat_dim()]; m],
            steps: 0,
            sharers: 1,
        }
    }

    /// Counts the schedule in the run's env steps, for `actors` actor processes stepping at
    /// about the same rate (as `fleetrl train`'s local actors do), so that a preset's warm-up
    /// and epsilon decay mean the same thing whatever the actor count. Knowing the exact
    /// global count would take a round trip to the learner for every decision; the estimate
    /// is off only while actors join or leave.
    pub fn shared_by(mut self, actors: u32) -> Explorer {
        self.sharers = u64::from(actors.max(1));
        self
    }

    /// The run's env steps so far, as this explorer estimates them.
    fn run_steps(&self) -> u64 {
        self.steps * self.sharers
    }

    /// Whether the policy's output is needed for the next step (false in the random warm-up).
    pub fn needs_policy(&self) -> bool {
        self.run_steps() >= self.config.random_steps
    }

    /// The current epsilon (discrete actions).
    pub fn epsilon(&self) -> f64 {
        self.config.epsilon(self.run_steps())
    }

    /// Env actions for the next step from the policy's discrete choices or `[M * A]` continuous
    /// values (ignored during the warm-up); counts the M steps.
    pub fn actions(&mut self, discrete: &[i64], continuous: &[f32], m: usize) -> Vec<Action> {
        let random = !self.needs_policy();
        let actions = match self.space.clone() {
            Space::Discrete { n } => (0..m)
                .map(|i| {
                    let explore = random
                        || (!self.config.deterministic
                            && self.rng.random::<f64>() < self.epsilon());
                    if explore {
                        Action::Discrete(self.rng.random_range(0..n))
                    } else {
                        Action::Discrete(discrete[i])
                    }
                })
                .collect(),
            Space::Box { low, high, .. } => {
                let dim = low.len();
                (0..m)
                    .map(|i| {
                        let row: Vec<f32> = (0..dim)
                            .map(|j| {
                                let (lo, hi) = (low[j], high[j]);
                                let v = if random {
                                    self.rng.random_range(lo..=hi)
                                } else {
                                    let half = (hi - lo) as f64 / 2.0;
                                    continuous[i * dim + j] + (self.noise(i, j) * half) as f32
                                };
                                v.clamp(lo, hi)
                            })
                            .collect();
                        Action::Continuous(row)
                    })
                    .collect()
            }
        };
        self.steps += m as u64;
        actions
    }

    /// Restarts env `i`'s noise process (at an episode start).
    pub fn reset(&mut self, i: usize) {
        self.ou[i].iter_mut().for_each(|x| *x = 0.0);
    }

    /// A N(0, 1) draw (Box-Muller).
    fn standard_normal(&mut self) -> f64 {
        let u1: f64 = self.rng.random::<f64>().max(1e-12);
        let u2: f64 = self.rng.random();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    fn noise(&mut self, i: usize, j: usize) -> f64 {
        if self.config.deterministic {
            return 0.0;
        }
        let std = self.config.noise_std;
        let z = self.standard_normal();
        match self.config.noise {
            NoiseKind::None => 0.0,
            NoiseKind::Gaussian => std * z,
            NoiseKind::OrnsteinUhlenbeck => {
                // dt = 1: x += theta (0 - x) + sigma N(0, 1).
                let x = &mut self.ou[i][j];
                *x += -self.config.ou_theta * *x + std * z;
                *x
            }
        }
    }
}

/// The policy evaluation plays for `config` (`episodes` envs at once, seeded): `policy`
/// itself, or, with `eval.deterministic = false` for an algorithm whose policy is greedy (DQN's
/// Q-values, TD3 and DDPG's deterministic actions), `policy` with its exploration noise as
/// garage evaluates them when `deterministic_eval` is off. The noise is the schedule's end:
/// epsilon-greedy at `algo.explore.epsilon_end` (so a checkpoint scores the same whenever it
/// is evaluated), Gaussian noise of `algo.explore.noise_std` (Ornstein-Uhlenbeck noise is
/// played as Gaussian noise of the same scale), no random warm-up. The stochastic policies
/// (PPO, SAC, ...) sample their own actions instead.
pub fn evaluated(
    policy: Box<dyn Policy>,
    config: &RunConfig,
    space: &Space,
    episodes: usize,
    seed: u64,
) -> Box<dyn Policy> {
    let registered = spec(config);
    let greedy = matches!(
        registered.shape,
        Some((PolicyKind::QValues | PolicyKind::Deterministic, _))
    );
    match registered.acting {
        Some(acting) if greedy && !config.eval.deterministic && !acting.explore.deterministic => {
            let explore = Exploration {
                random_steps: 0,
                epsilon_start: acting.explore.epsilon_end,
                noise: match acting.explore.noise {
                    NoiseKind::OrnsteinUhlenbeck => NoiseKind::Gaussian,
                    other => other,
                },
                ..acting.explore
            };
            let explorer = Explorer::new(&explore, space, episodes.max(1), seed);
            Box::new(Exploring {
                policy,
                explorer: RefCell::new(explorer),
            })
        }
        _ => policy,
    }
}

/// A greedy policy played with an [`Explorer`]'s noise on its actions.
struct Exploring {
    policy: Box<dyn Policy>,
    explorer: RefCell<Explorer>,
}

impl Exploring {
    /// `step` with the explorer's actions in place of the policy's.
    fn explore(&self, step: PolicyStep) -> PolicyStep {
        let rows = step.action.size()[0] as usize;
        let actions = Actions::from_tensor(&step.action).expect("policy actions are a tensor");
        let mut explorer = self.explorer.borrow_mut();
        let explored = match &actions {
            Actions::Discrete(a) => Actions::Discrete(
                (explorer.actions(a, &[], rows).into_iter())
                    .map(|a| match a {
                        Action::Discrete(i) => i,
                        Action::Continuous(_) => unreachable!("a discrete space's action"),
                    })
                    .collect(),
            ),
            Actions::Continuous { dim, values } => Actions::Continuous {
                dim: *dim,
                values: (explorer.actions(&[], values, rows).into_iter())
                    .flat_map(|a| match a {
                        Action::Continuous(row) => row,
                        Action::Discrete(_) => unreachable!("a box's action"),
                    })
                    .collect(),
            },
        };
        PolicyStep {
            action: explored.to_tensor(step.action.device()),
            ..step
        }
    }
}

impl Policy for Exploring {
    fn act(&self, obs: &Tensor, _deterministic: bool) -> PolicyStep {
        self.explore(self.policy.act(obs, true))
    }

    fn value(&self, obs: &Tensor) -> Tensor {
        self.policy.value(obs)
    }

    fn state_size(&self) -> i64 {
        self.policy.state_size()
    }

    fn act_recurrent(
        &self,
        obs: &Tensor,
        state: &RnnState,
        _deterministic: bool,
    ) -> (PolicyStep, RnnState) {
        let (step, next) = self.policy.act_recurrent(obs, state, true);
        (self.explore(step), next)
    }

    fn value_recurrent(&self, obs: &Tensor, state: &RnnState) -> Tensor {
        self.policy.value_recurrent(obs, state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Always picks action 0 (discrete) or 0.5 (continuous), whatever it is asked.
    struct Constant;

    impl Policy for Constant {
        fn act(&self, obs: &Tensor, _deterministic: bool) -> PolicyStep {
            let n = obs.size()[0];
            let zeros = Tensor::zeros([n], (tch::Kind::Float, tch::Device::Cpu));
            let action = match obs.size()[1] {
                1 => Tensor::zeros([n], (tch::Kind::Int64, tch::Device::Cpu)),
                _ => zeros.ones_like().view([n, 1]) * 0.5,
            };
            PolicyStep {
                action,
                log_prob: zeros.shallow_clone(),
                value: zeros,
            }
        }

        fn value(&self, obs: &Tensor) -> Tensor {
            Tensor::zeros([obs.size()[0]], (tch::Kind::Float, tch::Device::Cpu))
        }
    }

    /// The actions `evaluated` plays for 400 rows under `preset` with `eval.deterministic`.
    fn evaluated_actions(preset: &str, deterministic: bool, space: &Space, obs: i64) -> Actions {
        let path = format!("{}/../configs/{preset}.toml", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let mut config = RunConfig::from_toml(&text, preset).unwrap();
        config.eval.deterministic = deterministic;
        let policy = evaluated(Box::new(Constant), &config, space, 400, 7);
        let obs = Tensor::zeros([400, obs], (tch::Kind::Float, tch::Device::Cpu));
        Actions::from_tensor(&policy.act(&obs, deterministic).action).unwrap()
    }

    /// `eval.deterministic = false` plays DQN epsilon-greedy at its `epsilon_end` and TD3 and
    /// DDPG with their Gaussian noise inside the box; `true` plays them greedily, and SAC's
    /// policy is left to sample its own actions.
    #[test]
    fn stochastic_evaluation_adds_the_exploration_noise() {
        let discrete = Space::Discrete { n: 2 };
        let Actions::Discrete(a) = evaluated_actions("cartpole-dqn", false, &discrete, 1) else {
            panic!("discrete actions")
        };
        // epsilon_end 0.04 of random actions, half of them the other action: ~8 of 400.
        let other = a.iter().filter(|&&a| a == 1).count();
        assert!((2..=30).contains(&other), "{other} of 400 explored");
        let greedy = evaluated_actions("cartpole-dqn", true, &discrete, 1);
        assert_eq!(greedy, Actions::Discrete(vec![0; 400]));
        let pendulum = Space::Box {
            shape: vec![1],
            low: vec![-2.0],
            high: vec![2.0],
        };
        for preset in ["pendulum-td3", "pendulum-ddpg"] {
            let Actions::Continuous { values, .. } = evaluated_actions(preset, false, &pendulum, 3)
            else {
                panic!("continuous actions")
            };
            let moved = values.iter().filter(|&&v| v != 0.5).count();
            assert!(moved > 390, "{preset}: {moved} of 400 noisy");
            assert!(values.iter().all(|v| (-2.0..=2.0).contains(v)), "{preset}");
            let greedy = evaluated_actions(preset, true, &pendulum, 3);
            assert!(
                matches!(greedy, Actions::Continuous { values, .. } if values == vec![0.5; 400])
            );
        }
        let sac = evaluated_actions("pendulum-sac", false, &pendulum, 3);
        assert!(matches!(sac, Actions::Continuous { values, .. } if values == vec![0.5; 400]));
    }

    fn box1() -> Space {
        Space::Box {
            shape: vec![1],
            low: vec![-2.0],
            high: vec![2.0],
        }
    }

    #[test]
    fn epsilon_decays_linearly_to_its_floor() {
        let config = Exploration {
            epsilon_start: 1.0,
            epsilon_end: 0.1,
            epsilon_decay_steps: 100,
            ..Exploration::default()
        };
        assert_eq!(config.epsilon(0), 1.0);
        assert!((config.epsilon(50) - 0.55).abs() < 1e-12);
        assert_eq!(config.epsilon(1000), 0.1);
    }

    #[test]
    fn greedy_after_decay_and_random_during_warm_up() {
        let config = Exploration {
            random_steps: 10,
            epsilon_start: 0.0,
            epsilon_end: 0.0,
            ..Exploration::default()
        };
        let mut e = Explorer::new(&config, &Space::Discrete { n: 4 }, 2, 1);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..5 {
            for a in e.actions(&[3, 3], &[], 2) {
                if let Action::Discrete(i) = a {
                    seen.insert(i);
                }
            }
        }
        assert!(seen.len() > 1, "warm-up actions are random");
        assert!(e.needs_policy());
        assert_eq!(
            e.actions(&[3, 1], &[], 2),
            vec![Action::Discrete(3), Action::Discrete(1)]
        );
    }

    #[test]
    fn a_shared_schedule_counts_every_actors_steps() {
        let config = Exploration {
            random_steps: 8,
            epsilon_start: 1.0,
            epsilon_end: 0.0,
            epsilon_decay_steps: 100,
            ..Exploration::default()
        };
        let mut e = Explorer::new(&config, &Space::Discrete { n: 2 }, 1, 1).shared_by(4);
        e.actions(&[0], &[], 1);
        assert!(!e.needs_policy(), "4 run steps of 8 random ones");
        e.actions(&[0], &[], 1);
        assert!(e.needs_policy());
        for _ in 0..23 {
            e.actions(&[0], &[], 1);
        }
        assert_eq!(
            e.epsilon(),
            0.0,
            "25 own steps x 4 actors = the 100-step decay"
        );
    }

    #[test]
    fn noisy_actions_are_clipped_to_the_box() {
        let config = Exploration {
            noise: NoiseKind::OrnsteinUhlenbeck,
            noise_std: 5.0,
            ..Exploration::default()
        };
        let mut e = Explorer::new(&config, &box1(), 1, 3);
        for _ in 0..50 {
            match &e.actions(&[], &[1.9], 1)[0] {
                Action::Continuous(v) => assert!((-2.0..=2.0).contains(&v[0])),
                other => panic!("{other:?}"),
            }
        }
        let det = Exploration {
            deterministic: true,
            ..config
        };
        let mut e = Explorer::new(&det, &box1(), 1, 3);
        assert_eq!(
            e.actions(&[], &[0.5], 1),
            vec![Action::Continuous(vec![0.5])]
        );
    }
}
