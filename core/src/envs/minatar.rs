//! MinAtar (Young & Tian 2019): miniature Atari games on a 10x10 grid, natively. Each game is
//! a handful of integer rules, so a step costs well under a microsecond here, where the
//! `minatar` package pays numpy's overhead on every one.
//!
//! The observation is the game's object channels as a `[C, 10, 10]` box of 0/1 values
//! (channel-major, the layout the convolutional encoder reads; `minatar` returns `[10, 10, C]`).
//! Actions are the game's minimal action set, as `MinAtar/<Game>-v1` in the `minatar` package:
//! Breakout no-op/left/right, SpaceInvaders no-op/left/right/fire, Freeway no-op/up/down,
//! Asterix no-op/left/up/right/down, Seaquest all six. `MinAtar/<Game>-v0`, as in the package,
//! takes all six inputs in every game ([`FULL_ACTIONS`]; those a game has no use for do
//! nothing), the action set of the MinAtar paper's own DQN. Sticky actions are on, as in the paper:
//! with probability 0.1 a step repeats the previous action instead of the chosen one. Freeway
//! ends itself after 2,500 steps; for the others [`super::make`] cuts episodes at 10,000 steps.
//!
//! `core/tests/minatar_fixture.rs` replays trajectories recorded from `minatar` 1.0.15
//! (sticky actions off) and checks every observation, reward and termination; for the games
//! that draw random numbers as they run (Freeway, Asterix, Seaquest) it feeds them the
//! package's own draws through [`Draws`].

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod asterix;
mod freeway;
mod seaquest;

pub use asterix::Asterix;
pub use freeway::Freeway;
pub use seaquest::Seaquest;

use super::{step_via_into, Env, EnvError, Step};
use fleetrl_proto::space::{Action, Space};

/// Rows and columns of the grid.
const GRID: usize = 10;
/// The paper's probability that a step repeats the previous action.
pub const STICKY_ACTION_PROB: f64 = 0.1;

/// The six inputs of the MinAtar games; each game uses a subset (its minimal action set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// Do nothing.
    Noop,
    /// Move left.
    Left,
    /// Move right.
    Right,
    /// Fire.
    Fire,
    /// Move up.
    Up,
    /// Move down.
    Down,
}

/// The six inputs in the `minatar` package's order (`n l u r d f`): the action set of
/// `MinAtar/<Game>-v0` and of the package's `Environment`.
pub const FULL_ACTIONS: &[Input] = &[
    Input::Noop,
    Input::Left,
    Input::Up,
    Input::Right,
    Input::Down,
    Input::Fire,
];

/// The random numbers a game draws, in the terms of the numpy calls the `minatar` package
/// makes, so that a test can feed a game the package's own draws in the package's order.
pub trait Draws {
    /// An integer in `low..high` (numpy's `randint(low, high)`).
    fn int(&mut self, low: i64, high: i64) -> i64;
    /// A float in `[0, 1)` (numpy's `rand()`).
    fn unit(&mut self) -> f64;
}

impl Draws for SmallRng {
    fn int(&mut self, low: i64, high: i64) -> i64 {
        self.random_range(low..high)
    }

    fn unit(&mut self) -> f64 {
        self.random()
    }
}

/// One MinAtar game's rules.
pub trait Game: Send + Clone + std::fmt::Debug {
    /// Object channels of the observation.
    const CHANNELS: usize;
    /// The minimal action set: action `i` is `ACTIONS[i]`.
    const ACTIONS: &'static [Input];
    /// The state an episode starts in (random parts drawn from `rng`).
    fn start<R: Draws>(rng: &mut R) -> Self;
    /// Applies one input (random parts drawn from `rng`): the reward and whether the game
    /// ended.
    fn act<R: Draws>(&mut self, input: Input, rng: &mut R) -> (f32, bool);
    /// Writes the channels into `obs` (`[C, 10, 10]`, zeroed by the caller).
    fn render(&self, obs: &mut [f32]);
}

/// A MinAtar game as an [`Env`]: sticky actions, observation rendering, action checks.
#[derive(Debug, Clone)]
pub struct MinAtar<G: Game> {
    game: G,
    /// Action `i` is `actions[i]`: [`Game::ACTIONS`] or [`FULL_ACTIONS`].
    actions: &'static [Input],
    rng: SmallRng,
    sticky: f64,
    last: Input,
    ended: bool,
}

impl<G: Game> MinAtar<G> {
    /// The game with the paper's sticky actions; call [`Env::reset`] before stepping.
    pub fn new() -> MinAtar<G> {
        MinAtar::with_sticky(STICKY_ACTION_PROB)
    }

    /// The game with sticky-action probability `sticky` (0 turns them off).
    pub fn with_sticky(sticky: f64) -> MinAtar<G> {
        let mut rng = SmallRng::seed_from_u64(0);
        MinAtar {
            game: G::start(&mut rng),
            actions: G::ACTIONS,
            rng,
            sticky,
            last: Input::Noop,
            ended: false,
        }
    }

    /// The same game taking all six inputs ([`FULL_ACTIONS`]), as `MinAtar/<Game>-v0`.
    pub fn full_actions(mut self) -> MinAtar<G> {
        self.actions = FULL_ACTIONS;
        self
    }

    /// The game's state, to read or set (tests set recorded start states).
    pub fn game_mut(&mut self) -> &mut G {
        &mut self.game
    }

    /// The game's state.
    pub fn game(&self) -> &G {
        &self.game
    }
}

impl<G: Game> Default for MinAtar<G> {
    fn default() -> Self {
        MinAtar::new()
    }
}

impl<G: Game> Env for MinAtar<G> {
    fn observation_space(&self) -> Space {
        let n = G::CHANNELS * GRID * GRID;
        Space::Box {
            shape: vec![G::CHANNELS as i64, GRID as i64, GRID as i64],
            low: vec![0.0; n],
            high: vec![1.0; n],
        }
    }

    fn action_space(&self) -> Space {
        Space::Discrete {
            n: self.actions.len() as i64,
        }
    }

    /// Channels are 0/1 grids.
    fn byte_observations(&self) -> bool {
        true
    }

    /// `Some(seed)` reseeds the generator that draws the start and the sticky actions.
    fn reset(&mut self, seed: Option<u64>) -> Vec<f32> {
        if let Some(seed) = seed {
            self.rng = SmallRng::seed_from_u64(seed);
        }
        self.game = G::start(&mut self.rng);
        self.last = Input::Noop;
        self.ended = false;
        let mut obs = vec![0.0; G::CHANNELS * GRID * GRID];
        self.game.render(&mut obs);
        obs
    }

    fn step(&mut self, action: &Action) -> Result<Step, EnvError> {
        step_via_into(self, action)
    }

    fn step_into(&mut self, action: &Action, obs: &mut [f32]) -> Result<Step, EnvError> {
        let chosen = match action {
            Action::Discrete(a) if (0..self.actions.len() as i64).contains(a) => {
                self.actions[*a as usize]
            }
            other => {
                return Err(EnvError::InvalidAction {
                    action: other.clone(),
                    space: self.action_space(),
                })
            }
        };
        let input = if self.sticky > 0.0 && self.rng.random::<f64>() < self.sticky {
            self.last
        } else {
            chosen
        };
        self.last = input;
        // Past the end the game stands still (the package returns no reward there too).
        let (reward, terminated) = if self.ended {
            (0.0, true)
        } else {
            self.game.act(input, &mut self.rng)
        };
        self.ended = terminated;
        obs.fill(0.0);
        self.game.render(obs);
        Ok(Step {
            obs: Vec::new(),
            reward,
            terminated,
            truncated: false,
        })
    }
}

/// Sets cell `(row, col)` of channel `c`.
fn put(obs: &mut [f32], c: usize, row: usize, col: usize) {
    obs[(c * GRID + row) * GRID + col] = 1.0;
}

/// A 10x10 grid of flags.
type Grid = [[bool; GRID]; GRID];

fn render_grid(obs: &mut [f32], c: usize, grid: &Grid) {
    for (row, cells) in grid.iter().enumerate() {
        for (col, &on) in cells.iter().enumerate() {
            if on {
                put(obs, c, row, col);
            }
        }
    }
}

fn count(grid: &Grid) -> usize {
    grid.iter().flatten().filter(|&&on| on).count()
}

/// Breakout: a paddle on the bottom row bounces a ball that moves along diagonals into three
/// rows of bricks (+1 per brick; a new wall when all are gone); the episode ends when the ball
/// passes the paddle. Channels: paddle, ball, trail (the ball's previous cell), brick.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakout {
    paddle: usize,
    ball: (i32, i32),
    last: (i32, i32),
    /// 0: up-left, 1: up-right, 2: down-right, 3: down-left.
    dir: usize,
    bricks: Grid,
    /// The ball hit a brick on the previous step (it then passes through the next one).
    strike: bool,
}

/// Direction after a vertical bounce, a horizontal bounce, and a paddle-edge bounce.
const FLIP_Y: [usize; 4] = [3, 2, 1, 0];
const FLIP_X: [usize; 4] = [1, 0, 3, 2];
const FLIP_XY: [usize; 4] = [2, 3, 0, 1];

impl Breakout {
    fn wall() -> Grid {
        let mut bricks = [[false; GRID]; GRID];
        for row in &mut bricks[1..4] {
            *row = [true; GRID];
        }
        bricks
    }

    /// The start with the ball at the left (`right = false`, heading down-right) or the right
    /// edge (heading down-left) of row 3.
    pub fn start_at(right: bool) -> Breakout {
        let (x, dir) = if right { (9, 3) } else { (0, 2) };
        Breakout {
            paddle: 4,
            ball: (x, 3),
            last: (x, 3),
            dir,
            bricks: Breakout::wall(),
            strike: false,
        }
    }

    /// Paddle column, ball column, ball row, direction: what the fixture compares at the end.
    pub fn state(&self) -> [f64; 4] {
        [
            self.paddle as f64,
            f64::from(self.ball.0),
            f64::from(self.ball.1),
            self.dir as f64,
        ]
    }
}

impl Game for Breakout {
    const CHANNELS: usize = 4;
    const ACTIONS: &'static [Input] = &[Input::Noop, Input::Left, Input::Right];

    fn start<R: Draws>(rng: &mut R) -> Breakout {
        Breakout::start_at(rng.int(0, 2) == 1)
    }

    fn act<R: Draws>(&mut self, input: Input, _rng: &mut R) -> (f32, bool) {
        match input {
            Input::Left => self.paddle = self.paddle.saturating_sub(1),
            Input::Right => self.paddle = (self.paddle + 1).min(GRID - 1),
            _ => {}
        }
        self.last = self.ball;
        let (dx, dy) = [(-1, -1), (1, -1), (1, 1), (-1, 1)][self.dir];
        let (mut x, mut y) = (self.ball.0 + dx, self.ball.1 + dy);
        let mut reward = 0.0;
        let mut terminated = false;
        let mut struck = false;
        if !(0..GRID as i32).contains(&x) {
            x = x.clamp(0, GRID as i32 - 1);
            self.dir = FLIP_X[self.dir];
        }
        if y < 0 {
            y = 0;
            self.dir = FLIP_Y[self.dir];
        } else if self.bricks[y as usize][x as usize] {
            struck = true;
            if !self.strike {
                reward = 1.0;
                self.strike = true;
                self.bricks[y as usize][x as usize] = false;
                y = self.last.1;
                self.dir = FLIP_Y[self.dir];
            }
        } else if y == GRID as i32 - 1 {
            if count(&self.bricks) == 0 {
                self.bricks = Breakout::wall();
            }
            if self.ball.0 == self.paddle as i32 {
                self.dir = FLIP_Y[self.dir];
                y = self.last.1;
            } else if x == self.paddle as i32 {
                self.dir = FLIP_XY[self.dir];
                y = self.last.1;
            } else {
                terminated = true;
            }
        }
        if !struck {
            self.strike = false;
        }
        self.ball = (x, y);
        (reward, terminated)
    }

    fn render(&self, obs: &mut [f32]) {
        put(obs, 0, GRID - 1, self.paddle);
        put(obs, 1, self.ball.1 as usize, self.ball.0 as usize);
        put(obs, 2, self.last.1 as usize, self.last.0 as usize);
        render_grid(obs, 3, &self.bricks);
    }
}

/// SpaceInvaders: a cannon on the bottom row shoots at a block of aliens that sweeps sideways,
/// steps down at each edge, and shoots back from the alien nearest the cannon (+1 per alien;
/// faster waves as they are cleared). The episode ends when an alien or a bullet reaches the
/// cannon. Channels: cannon, alien, alien moving left, alien moving right, friendly bullet,
/// enemy bullet.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaceInvaders {
    cannon: usize,
    aliens: Grid,
    friendly: Grid,
    enemy: Grid,
    /// -1 left, +1 right.
    alien_dir: i32,
    move_interval: usize,
    move_timer: usize,
    shot_timer: usize,
    cooldown: usize,
    ramp: usize,
}

/// Steps between the cannon's shots.
const SHOT_COOLDOWN: usize = 5;
/// Steps between alien moves at the start (it falls by one per wave cleared, down to 6).
const ALIEN_MOVE_INTERVAL: usize = 12;
/// Steps between alien shots.
const ALIEN_SHOT_INTERVAL: usize = 10;

impl SpaceInvaders {
    fn wave() -> Grid {
        let mut aliens = [[false; GRID]; GRID];
        for row in &mut aliens[0..4] {
            row[2..8].fill(true);
        }
        aliens
    }

    /// The start of every episode (the game has no randomness of its own).
    pub fn initial() -> SpaceInvaders {
        SpaceInvaders {
            cannon: 5,
            aliens: SpaceInvaders::wave(),
            friendly: [[false; GRID]; GRID],
            enemy: [[false; GRID]; GRID],
            alien_dir: -1,
            move_interval: ALIEN_MOVE_INTERVAL,
            move_timer: ALIEN_MOVE_INTERVAL,
            shot_timer: ALIEN_SHOT_INTERVAL,
            cooldown: 0,
            ramp: 0,
        }
    }

    /// Cannon column, alien direction, move interval, waves cleared (ramp), cannon cooldown.
    pub fn state(&self) -> [f64; 5] {
        [
            self.cannon as f64,
            f64::from(self.alien_dir),
            self.move_interval as f64,
            self.ramp as f64,
            self.cooldown as f64,
        ]
    }

    /// The lowest alien in the column nearest the cannon (ties: the column to the left). Walks
    /// outwards from the cannon, allocating nothing (it runs inside the env step).
    fn nearest_alien(&self) -> Option<(usize, usize)> {
        let lowest = |c: usize| {
            (0..GRID)
                .rev()
                .find(|&row| self.aliens[row][c])
                .map(|row| (row, c))
        };
        (0..GRID).find_map(|d| {
            let left = self.cannon.checked_sub(d).and_then(lowest);
            let right = (self.cannon + d < GRID)
                .then(|| lowest(self.cannon + d))
                .flatten();
            left.or(right)
        })
    }
}

/// Moves every row of `grid` down by one (`down = true`) or up, wrapping as `np.roll` does.
fn roll_rows(grid: &mut Grid, down: bool) {
    if down {
        grid.rotate_right(1);
    } else {
        grid.rotate_left(1);
    }
}

impl Game for SpaceInvaders {
    const CHANNELS: usize = 6;
    const ACTIONS: &'static [Input] = &[Input::Noop, Input::Left, Input::Right, Input::Fire];

    fn start<R: Draws>(_rng: &mut R) -> SpaceInvaders {
        SpaceInvaders::initial()
    }

    fn act<R: Draws>(&mut self, input: Input, _rng: &mut R) -> (f32, bool) {
        let bottom = GRID - 1;
        match input {
            Input::Fire if self.cooldown == 0 => {
                self.friendly[bottom][self.cannon] = true;
                self.cooldown = SHOT_COOLDOWN;
            }
            Input::Left => self.cannon = self.cannon.saturating_sub(1),
            Input::Right => self.cannon = (self.cannon + 1).min(bottom),
            _ => {}
        }
        let mut terminated = false;
        // Friendly bullets rise one row (those on the top row leave), enemy ones fall.
        roll_rows(&mut self.friendly, false);
        self.friendly[bottom] = [false; GRID];
        roll_rows(&mut self.enemy, true);
        self.enemy[0] = [false; GRID];
        terminated |= self.enemy[bottom][self.cannon];
        terminated |= self.aliens[bottom][self.cannon];
        if self.move_timer == 0 {
            self.move_timer = count(&self.aliens).min(self.move_interval);
            let at_left = self.aliens.iter().any(|row| row[0]);
            let at_right = self.aliens.iter().any(|row| row[bottom]);
            if (at_left && self.alien_dir < 0) || (at_right && self.alien_dir > 0) {
                self.alien_dir = -self.alien_dir;
                terminated |= self.aliens[bottom].iter().any(|&a| a);
                roll_rows(&mut self.aliens, true);
            } else {
                for row in &mut self.aliens {
                    if self.alien_dir > 0 {
                        row.rotate_right(1);
                    } else {
                        row.rotate_left(1);
                    }
                }
            }
            terminated |= self.aliens[bottom][self.cannon];
        }
        if self.shot_timer == 0 {
            self.shot_timer = ALIEN_SHOT_INTERVAL;
            if let Some((row, col)) = self.nearest_alien() {
                self.enemy[row][col] = true;
            }
        }
        let mut reward = 0.0;
        for (aliens, bullets) in self.aliens.iter_mut().zip(&mut self.friendly) {
            for (alien, bullet) in aliens.iter_mut().zip(bullets.iter_mut()) {
                if *alien && *bullet {
                    reward += 1.0;
                    *alien = false;
                    *bullet = false;
                }
            }
        }
        self.cooldown = self.cooldown.saturating_sub(1);
        // The timers reach 0 on the step before the one that acts on them, so they never wrap.
        self.move_timer -= 1;
        self.shot_timer -= 1;
        if count(&self.aliens) == 0 {
            if self.move_interval > 6 {
                self.move_interval -= 1;
                self.ramp += 1;
            }
            self.aliens = SpaceInvaders::wave();
        }
        (reward, terminated)
    }

    fn render(&self, obs: &mut [f32]) {
        put(obs, 0, GRID - 1, self.cannon);
        render_grid(obs, 1, &self.aliens);
        render_grid(obs, if self.alien_dir < 0 { 2 } else { 3 }, &self.aliens);
        render_grid(obs, 4, &self.friendly);
        render_grid(obs, 5, &self.enemy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::check_env_contract;

    #[test]
    fn keep_the_env_contract() {
        check_env_contract(&mut MinAtar::<Breakout>::new());
        check_env_contract(&mut MinAtar::<SpaceInvaders>::new());
    }

    /// `-v0` takes all six inputs in the package's order; an input the game has no use for
    /// plays as a no-op. Played side by side from one seed (sticky actions on, so the two
    /// draw the same numbers), a full-set game given input `FULL_ACTIONS[a]` and a minimal-set
    /// game given the same input, or no-op where its set lacks it, see the same observations,
    /// rewards and ends, game by game.
    #[test]
    fn the_full_action_set_plays_as_the_minimal_one() {
        fn side_by_side<G: Game>() {
            let ids = |env: &MinAtar<G>| match env.action_space() {
                Space::Discrete { n } => n,
                other => panic!("{other:?}"),
            };
            let mut full = MinAtar::<G>::new().full_actions();
            let mut minimal = MinAtar::<G>::new();
            assert_eq!((ids(&full), ids(&minimal)), (6, G::ACTIONS.len() as i64));
            assert_eq!(full.reset(Some(7)), minimal.reset(Some(7)));
            assert_eq!(G::ACTIONS[0], Input::Noop);
            let mut rng = SmallRng::seed_from_u64(3);
            for t in 0..2_000 {
                let a = rng.random_range(0..6usize);
                let input = FULL_ACTIONS[a];
                let m = G::ACTIONS.iter().position(|&i| i == input).unwrap_or(0);
                let f = full.step(&Action::Discrete(a as i64)).unwrap();
                let s = minimal.step(&Action::Discrete(m as i64)).unwrap();
                assert_eq!(f, s, "step {t}, input {input:?}");
                if f.terminated {
                    assert_eq!(full.reset(None), minimal.reset(None));
                }
            }
            assert!(full.step(&Action::Discrete(6)).is_err());
        }
        side_by_side::<Breakout>();
        side_by_side::<SpaceInvaders>();
        side_by_side::<Freeway>();
        side_by_side::<Asterix>();
        side_by_side::<Seaquest>();
    }

    /// Breakout's first brick: from the left start the ball runs down-right to the paddle's
    /// row, is returned, and breaks a brick on the way up for a reward of 1.
    #[test]
    fn breakout_ball_bounces_off_the_paddle_and_breaks_a_brick() {
        let mut env = MinAtar::<Breakout>::with_sticky(0.0);
        env.reset(Some(0));
        *env.game_mut() = Breakout::start_at(false);
        // The ball reaches row 9 at column 6 after 6 steps: move the paddle from 4 to 6.
        let mut total = 0.0;
        for t in 0..40 {
            let action = if t < 2 { 2 } else { 0 };
            let step = env.step(&Action::Discrete(action)).unwrap();
            assert!(!step.terminated, "ball lost at step {t}");
            total += step.reward;
            if total > 0.0 {
                break;
            }
        }
        assert_eq!(total, 1.0);
        assert!(count(&env.game().bricks) == 29);
    }

    #[test]
    fn breakout_ends_when_the_ball_passes_the_paddle() {
        let mut env = MinAtar::<Breakout>::with_sticky(0.0);
        env.reset(Some(0));
        *env.game_mut() = Breakout::start_at(false);
        // Run the paddle to the far left: the ball comes down at column 6 and is lost.
        let ended = (0..20).any(|_| env.step(&Action::Discrete(1)).unwrap().terminated);
        assert!(ended);
        // Past the end the game stands still.
        let step = env.step(&Action::Discrete(0)).unwrap();
        assert!(step.terminated && step.reward == 0.0);
    }

    #[test]
    fn space_invaders_shot_kills_an_alien_above() {
        let mut env = MinAtar::<SpaceInvaders>::with_sticky(0.0);
        let first = env.reset(Some(0));
        // 24 aliens in rows 0..4, columns 2..8, all moving left at the start.
        let aliens: f32 = first[100..200].iter().sum();
        let left: f32 = first[200..300].iter().sum();
        assert_eq!((aliens, left), (24.0, 24.0));
        let mut total = 0.0;
        for t in 0..12 {
            let action = if t == 0 { 3 } else { 0 };
            total += env.step(&Action::Discrete(action)).unwrap().reward;
        }
        assert_eq!(
            total, 1.0,
            "the cannon's first shot hits the block's bottom row"
        );
    }

    #[test]
    fn sticky_actions_repeat_the_previous_input_at_the_paper_rate() {
        let mut env = MinAtar::<Breakout>::new();
        env.reset(Some(3));
        let (mut repeated, n) = (0, 20_000);
        for t in 0..n {
            // Alternate left and right: a sticky step repeats the other one.
            let before = env.game().paddle;
            let chosen = if t % 2 == 0 { 1 } else { 2 };
            if env.step(&Action::Discrete(chosen)).unwrap().terminated {
                env.reset(None);
                continue;
            }
            let after = env.game().paddle;
            let went_right = after > before || (after == before && before == GRID - 1);
            let went_left = after < before || (after == before && before == 0);
            if (chosen == 2 && went_left && !went_right)
                || (chosen == 1 && went_right && !went_left)
            {
                repeated += 1;
            }
        }
        let rate = f64::from(repeated) / f64::from(n);
        // A sticky step shows when the input it repeats was the other direction: about 0.1 x
        // 0.9 of the steps (less the wall and reset steps that hide it).
        assert!((0.06..0.12).contains(&rate), "visible sticky rate {rate}");
    }
}
