//! [`AtariPreprocessing`]: the standard Atari pipeline (Machado et al. 2018; gymnasium's
//! `AtariPreprocessing`, SB3's `AtariWrapper`) over an ALE env made with `frameskip = 1`:
//! no-op reset (1..=30 NOOPs), FIRE on reset for games that need it, frame skip 4 with a
//! max-pool over the last two frames, 84x84 grayscale (area interpolation), and episodic life
//! (a lost life ends the episode for learning while [`Env::game_over`] stays false, so the
//! reported episode is the whole game). Reward clipping is [`RewardTransform`](super::RewardTransform).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Side of the square output frame.
pub const ATARI_SIZE: usize = 84;
const FRAME_SKIP: usize = 4;
const NOOP_MAX: u32 = 30;
const NOOP: Action = Action::Discrete(0);

/// Atari preprocessing over an env whose observations are `[H, W, 3]` RGB or `[H, W]` gray.
pub struct AtariPreprocessing<E> {
    env: E,
    fire_reset: bool,
    width: usize,
    channels: usize,
    rng: SmallRng,
    /// The last two gray frames of a skip, `[2, H * W]`.
    gray: [Vec<f32>; 2],
    rows: Vec<Vec<(usize, f32)>>,
    cols: Vec<Vec<(usize, f32)>>,
    lives: u32,
    game_over: bool,
}

impl<E: Env> AtariPreprocessing<E> {
    /// Wraps `env`; `fire_reset` presses FIRE (action 1, then 2) after each reset, for games
    /// whose action 1 is FIRE. Fails unless observations are `[H, W, 3]` or `[H, W]` boxes.
    pub fn new(env: E, fire_reset: bool) -> Result<Self, EnvError> {
        let shape = match env.observation_space() {
            Space::Box { shape, .. } if shape.len() == 2 || shape.len() == 3 => shape,
            other => {
                return Err(EnvError::VecMismatch(format!(
                "Atari preprocessing needs [H, W, 3] or [H, W] image observations, got {other:?}"
            )))
            }
        };
        let (height, width) = (shape[0] as usize, shape[1] as usize);
        let channels = shape.get(2).copied().unwrap_or(1) as usize;
        Ok(AtariPreprocessing {
            env,
            fire_reset,
            width,
            channels,
            rng: SmallRng::seed_from_u64(0),
            gray: [vec![0.0; height * width], vec![0.0; height * width]],
            rows: area_weights(height, ATARI_SIZE),
            cols: area_weights(width, ATARI_SIZE),
            lives: 0,
            game_over: true,
        })
    }

    /// Writes the grayscale of `obs` (ITU-R 601 luma, as OpenCV) into `gray[slot]`.
    fn write_gray(&mut self, obs: &[f32], slot: usize) {
        let out = &mut self.gray[slot];
        if self.channels == 1 {
            out.copy_from_slice(obs);
            return;
        }
        for (g, px) in out.iter_mut().zip(obs.chunks_exact(self.channels)) {
            *g = (0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2]).round();
        }
    }

    /// Max-pools the two gray frames and resizes to 84x84 with area interpolation.
    fn frame(&self) -> Vec<f32> {
        let pooled: Vec<f32> = self.gray[0]
            .iter()
            .zip(&self.gray[1])
            .map(|(a, b)| a.max(*b))
            .collect();
        // Rows first: [H, W] -> [84, W], then columns: -> [84, 84].
        let mut tall = vec![0.0f32; ATARI_SIZE * self.width];
        for (oy, weights) in self.rows.iter().enumerate() {
            let out = &mut tall[oy * self.width..(oy + 1) * self.width];
            for &(y, w) in weights {
                let src = &pooled[y * self.width..(y + 1) * self.width];
                out.iter_mut().zip(src).for_each(|(o, s)| *o += w * s);
            }
        }
        let mut out = vec![0.0f32; ATARI_SIZE * ATARI_SIZE];
        for oy in 0..ATARI_SIZE {
            let row = &tall[oy * self.width..(oy + 1) * self.width];
            for (ox, weights) in self.cols.iter().enumerate() {
                let v: f32 = weights.iter().map(|&(x, w)| w * row[x]).sum();
                out[oy * ATARI_SIZE + ox] = v.round().clamp(0.0, 255.0);
            }
        }
        out
    }

    /// Steps the inner env once, recording lives and whether the game ended.
    fn raw_step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let step = self.env.step(action)?;
        self.game_over = step.terminated || step.truncated;
        Ok(step)
    }

    /// A full reset: inner reset, then 1..=30 no-ops (resetting again if the game ends).
    fn full_reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        let mut obs = self.env.reset(seed);
        let noops = self.rng.random_range(1..=NOOP_MAX);
        for _ in 0..noops {
            let step = self.raw_step(&NOOP).expect("NOOP is a valid Atari action");
            obs = if self.game_over {
                self.env.reset(None)
            } else {
                step.obs
            };
        }
        obs
    }
}

/// For each of `out` cells over `n` source cells: the source cells it overlaps and the share
/// of the cell each covers (OpenCV's INTER_AREA for shrinking).
fn area_weights(n: usize, out: usize) -> Vec<Vec<(usize, f32)>> {
    let scale = n as f64 / out as f64;
    (0..out)
        .map(|o| {
            let (start, end) = (o as f64 * scale, (o + 1) as f64 * scale);
            (start.floor() as usize..(end.ceil() as usize).min(n))
                .map(|i| {
                    let overlap = end.min(i as f64 + 1.0) - start.max(i as f64);
                    (i, (overlap / scale) as f32)
                })
                .filter(|&(_, w)| w > 0.0)
                .collect()
        })
        .collect()
}

impl<E: Env> Env for AtariPreprocessing<E> {
    fn observation_space(&self) -> Space {
        Space::Box {
            shape: vec![ATARI_SIZE as i64, ATARI_SIZE as i64],
            low: vec![0.0; ATARI_SIZE * ATARI_SIZE],
            high: vec![255.0; ATARI_SIZE * ATARI_SIZE],
        }
    }

    fn action_space(&self) -> Space {
        self.env.action_space()
    }

    /// After a lost life (episode over for learning, game not over) this continues the game
    /// with one NOOP instead of resetting it, unless a seed is given.
    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        let mut obs = if self.game_over || seed.is_some() {
            self.full_reset(seed)
        } else {
            let step = self.raw_step(&NOOP).expect("NOOP is a valid Atari action");
            step.obs
        };
        if self.fire_reset {
            for action in [1, 2] {
                let step = self
                    .raw_step(&Action::Discrete(action))
                    .expect("FIRE games have actions 1 and 2");
                obs = if self.game_over {
                    self.full_reset(None)
                } else {
                    step.obs
                };
            }
        }
        self.game_over = false;
        self.lives = self.env.lives().unwrap_or(0);
        self.write_gray(&obs, 0);
        self.write_gray(&obs, 1);
        self.frame()
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        let mut reward = 0.0;
        let mut last = None;
        for k in 0..FRAME_SKIP {
            let step = self.raw_step(action)?;
            reward += step.reward;
            if k + 2 >= FRAME_SKIP {
                self.write_gray(&step.obs, k + 2 - FRAME_SKIP);
            }
            let done = step.terminated || step.truncated;
            last = Some(step);
            if done {
                break;
            }
        }
        let last = last.expect("FRAME_SKIP > 0");
        if last.terminated || last.truncated {
            // Ended before the pool's second frame: pool the last frame with itself.
            let obs = last.obs;
            self.write_gray(&obs, 0);
            self.write_gray(&obs, 1);
        }
        let lives = self.env.lives().unwrap_or(0);
        let life_lost = lives < self.lives && lives > 0;
        self.lives = lives;
        Ok(Step {
            obs: self.frame(),
            reward,
            terminated: last.terminated || life_lost,
            truncated: last.truncated,
        })
    }

    fn score_reward(&self) -> Option<f32> {
        None
    }

    fn game_over(&self) -> bool {
        self.game_over
    }

    fn lives(&self) -> Option<u32> {
        self.env.lives()
    }

    /// Gray levels are rounded to whole numbers in 0..=255.
    fn byte_observations(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::{check_env_contract, VecEnv};

    /// A 210x160 RGB "game" whose every pixel is `(t, t, t)` (t = frames since reset, capped at
    /// 255), reward 1 per frame, 3 lives lost every 20 frames, over after 60 frames.
    struct Screen {
        t: u32,
        resets: u32,
        actions: Vec<i64>,
    }

    impl Screen {
        fn obs(&self) -> Vec<f32> {
            vec![self.t.min(255) as f32; 210 * 160 * 3]
        }
    }

    impl Env for Screen {
        fn observation_space(&self) -> Space {
            Space::Box {
                shape: vec![210, 160, 3],
                low: vec![0.0; 210 * 160 * 3],
                high: vec![255.0; 210 * 160 * 3],
            }
        }
        fn action_space(&self) -> Space {
            Space::Discrete { n: 4 }
        }
        fn reset(&mut self, _seed: Option<u64>) -> Vec<f32> {
            self.t = 0;
            self.resets += 1;
            self.obs()
        }
        fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
            let Action::Discrete(a) = action else {
                return Err(EnvError::InvalidAction {
                    action: action.clone(),
                    space: self.action_space(),
                });
            };
            if !(0..4).contains(a) {
                return Err(EnvError::InvalidAction {
                    action: action.clone(),
                    space: self.action_space(),
                });
            }
            self.actions.push(*a);
            self.t += 1;
            Ok(Step {
                obs: self.obs(),
                reward: 1.0,
                terminated: self.t >= 60,
                truncated: false,
            })
        }
        fn lives(&self) -> Option<u32> {
            Some(3 - (self.t / 20).min(3))
        }
    }

    fn screen() -> Screen {
        Screen {
            t: 0,
            resets: 0,
            actions: Vec::new(),
        }
    }

    #[test]
    fn keeps_the_contract() {
        check_env_contract(&mut AtariPreprocessing::new(screen(), true).unwrap());
    }

    #[test]
    fn noop_reset_fire_skip_pool_and_resize() {
        let mut env = AtariPreprocessing::new(screen(), true).unwrap();
        let first = env.reset(Some(3));
        let noops = env.env.actions.len() - 2;
        assert!((1..=30).contains(&noops), "{noops} no-ops");
        assert!(env.env.actions[..noops].iter().all(|&a| a == 0));
        assert_eq!(env.env.actions[noops..], [1, 2], "FIRE reset");
        assert_eq!(first.len(), 84 * 84);
        let t0 = env.env.t as f32;
        assert!(
            first.iter().all(|&v| v == t0),
            "uniform frame stays uniform"
        );
        let step = env.step(&Action::Discrete(3)).unwrap();
        assert_eq!(step.reward, 4.0, "rewards summed over 4 frames");
        assert_eq!(env.env.t as f32, t0 + 4.0);
        // Max over the last two frames (t0 + 3, t0 + 4) is the brighter one.
        assert!(step.obs.iter().all(|&v| v == t0 + 4.0));
    }

    #[test]
    fn episodic_life_ends_learning_episodes_but_reports_whole_games() {
        let envs: Vec<Box<dyn Env>> =
            vec![Box::new(AtariPreprocessing::new(screen(), false).unwrap())];
        let mut venv = VecEnv::new(envs).unwrap();
        venv.reset(0);
        let mut terminations = 0;
        while venv.drain_episodes().is_empty() || terminations == 0 {
            let step = venv.step_discrete(&[1]).unwrap();
            terminations += usize::from(step.terminated[0]);
            assert!(terminations <= 3, "a game has three lives");
        }
        assert_eq!(terminations, 3, "two lost lives and the game over");
    }

    #[test]
    fn area_weights_cover_each_output_cell_once() {
        for (n, out) in [(210, 84), (160, 84), (84, 84)] {
            for weights in area_weights(n, out) {
                let total: f32 = weights.iter().map(|w| w.1).sum();
                assert!((total - 1.0).abs() < 1e-5, "{n}->{out}: {weights:?}");
            }
        }
    }
}
