//! Freeway: a chicken crosses eight lanes of traffic from the bottom row to the top (+1 per
//! crossing, after which it starts again at the bottom and every car gets a new speed); a car
//! that reaches the chicken sends it back to the bottom. It moves at most once every 3 steps.
//! Each car moves one cell every 1 to 5 steps, left or right, wrapping at the edges. The game
//! ends after 2,500 steps. Channels: chicken, car, then one trail channel per car speed (the
//! trail is the cell behind the car, so its side gives the direction).

use super::{put, Draws, Game, Input, GRID};

/// Steps between two moves of the chicken.
const CHICKEN_COOLDOWN: usize = 3;
/// Steps a game lasts (it ends on the step after the last one).
const TIME_LIMIT: i32 = 2_500;
/// The chicken's column.
const CHICKEN_COL: i32 = 4;
/// Lanes, on rows 1 to 8.
const LANES: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Car {
    col: i32,
    row: usize,
    /// Steps until the car next moves.
    timer: i32,
    /// Steps per move (1 to 5), negative when the car drives left.
    speed: i32,
}

impl Car {
    fn hits(&self, chicken: usize) -> bool {
        self.col == CHICKEN_COL && self.row == chicken
    }
}

/// Freeway's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Freeway {
    /// The chicken's row (9 is the start, 0 the far side).
    chicken: usize,
    cars: [Car; LANES],
    cooldown: usize,
    steps_left: i32,
}

impl Freeway {
    /// New speeds for the eight cars: the magnitudes first, then the directions, as the
    /// package draws them. (numpy's `sign(rand() - 0.5)` is 0 at exactly 0.5, a 2^-53 chance
    /// that would park a car for good; here that car drives right.)
    fn draw_speeds<R: Draws>(rng: &mut R) -> [i32; LANES] {
        let mut speeds = [0; LANES];
        for speed in &mut speeds {
            *speed = rng.int(1, 6) as i32;
        }
        for speed in &mut speeds {
            if rng.unit() < 0.5 {
                *speed = -*speed;
            }
        }
        speeds
    }

    /// Chicken row, then each car's column, timer and signed speed: what the fixture compares
    /// at the end.
    pub fn state(&self) -> Vec<f64> {
        let mut state = vec![self.chicken as f64];
        for car in &self.cars {
            state.extend([car.col, car.timer, car.speed].map(f64::from));
        }
        state
    }
}

impl Game for Freeway {
    const CHANNELS: usize = 7;
    const ACTIONS: &'static [Input] = &[Input::Noop, Input::Up, Input::Down];

    fn start<R: Draws>(rng: &mut R) -> Freeway {
        let speeds = Freeway::draw_speeds(rng);
        Freeway {
            chicken: GRID - 1,
            cars: std::array::from_fn(|lane| Car {
                col: 0,
                row: lane + 1,
                timer: speeds[lane].abs(),
                speed: speeds[lane],
            }),
            cooldown: CHICKEN_COOLDOWN,
            steps_left: TIME_LIMIT,
        }
    }

    fn act<R: Draws>(&mut self, input: Input, rng: &mut R) -> (f32, bool) {
        if self.cooldown == 0 {
            match input {
                Input::Up => {
                    self.cooldown = CHICKEN_COOLDOWN;
                    self.chicken = self.chicken.saturating_sub(1);
                }
                Input::Down => {
                    self.cooldown = CHICKEN_COOLDOWN;
                    self.chicken = (self.chicken + 1).min(GRID - 1);
                }
                _ => {}
            }
        }
        let mut reward = 0.0;
        if self.chicken == 0 {
            reward = 1.0;
            for (car, speed) in self.cars.iter_mut().zip(Freeway::draw_speeds(rng)) {
                car.timer = speed.abs();
                car.speed = speed;
            }
            self.chicken = GRID - 1;
        }
        for car in &mut self.cars {
            if car.hits(self.chicken) {
                self.chicken = GRID - 1;
            }
            if car.timer == 0 {
                car.timer = car.speed.abs();
                let step = if car.speed > 0 { 1 } else { -1 };
                car.col = (car.col + step).rem_euclid(GRID as i32);
                if car.hits(self.chicken) {
                    self.chicken = GRID - 1;
                }
            } else {
                car.timer -= 1;
            }
        }
        self.cooldown = self.cooldown.saturating_sub(1);
        self.steps_left -= 1;
        (reward, self.steps_left < 0)
    }

    fn render(&self, obs: &mut [f32]) {
        put(obs, 0, self.chicken, CHICKEN_COL as usize);
        for car in &self.cars {
            put(obs, 1, car.row, car.col as usize);
            let behind = if car.speed > 0 {
                car.col - 1
            } else {
                car.col + 1
            };
            let behind = behind.rem_euclid(GRID as i32) as usize;
            put(obs, 1 + car.speed.unsigned_abs() as usize, car.row, behind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::minatar::MinAtar;
    use crate::envs::{check_env_contract, Env};
    use fleetrl_proto::space::Action;

    #[test]
    fn keeps_the_env_contract() {
        check_env_contract(&mut MinAtar::<Freeway>::new());
    }

    /// Holding "up" on an empty road crosses in 9 moves, one every 3 steps, and scores 1;
    /// the game ends on its 2,501st step whatever the chicken does.
    #[test]
    fn a_clear_crossing_scores_and_the_clock_ends_the_game() {
        let mut env = MinAtar::<Freeway>::with_sticky(0.0);
        env.reset(Some(1));
        // Park every car on the far column with a long timer: the road is clear for a while.
        for car in &mut env.game_mut().cars {
            car.col = 9;
            car.timer = 1_000;
        }
        let mut first_point = None;
        for t in 1..=TIME_LIMIT + 1 {
            let step = env.step(&Action::Discrete(1)).unwrap();
            if step.reward > 0.0 && first_point.is_none() {
                first_point = Some(t);
            }
            assert_eq!(step.terminated, t == TIME_LIMIT + 1, "step {t}");
        }
        // The first move waits out the start's cooldown of 3 steps, then 8 more moves.
        assert_eq!(first_point, Some(3 + 1 + 8 * 3));
    }

    #[test]
    fn a_car_sends_the_chicken_back_to_the_bottom() {
        let mut env = MinAtar::<Freeway>::with_sticky(0.0);
        env.reset(Some(2));
        let game = env.game_mut();
        game.chicken = 8;
        game.cooldown = 1;
        // The lane-8 car is one cell left of the chicken and moves right this step.
        game.cars[7] = Car {
            col: CHICKEN_COL - 1,
            row: 8,
            timer: 0,
            speed: 1,
        };
        env.step(&Action::Discrete(0)).unwrap();
        assert_eq!(env.game().chicken, GRID - 1);
    }
}
