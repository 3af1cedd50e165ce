//! Asterix: the player moves in all four directions over rows 1 to 8 while enemies and gold
//! enter from either side, one per row, and cross the screen (+1 for touching gold; touching
//! an enemy ends the game). An entity enters every 10 steps and all of them move one cell every
//! 5 steps at first; both intervals shrink every 100 steps. Channels: player, enemy, trail
//! (the cell behind each entity, so its side gives the direction), gold.

use super::{put, Draws, Game, Input, GRID};

/// Steps between two tightenings of the difficulty ramp.
const RAMP_INTERVAL: i32 = 100;
/// Steps between entries at the start.
const START_SPAWN_INTERVAL: i32 = 10;
/// Steps between entity moves at the start.
const START_MOVE_INTERVAL: i32 = 5;
/// Rows entities can use (1 to 8), one entity each.
const SLOTS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Entity {
    col: i32,
    /// Moving right (it entered on the left).
    right: bool,
    gold: bool,
}

/// Asterix's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Asterix {
    col: usize,
    row: usize,
    /// The entity on row `slot + 1`, if any.
    entities: [Option<Entity>; SLOTS],
    spawn_interval: i32,
    spawn_timer: i32,
    move_interval: i32,
    move_timer: i32,
    ramp_timer: i32,
    ramp_index: i32,
}

impl Asterix {
    /// A new entity on a free row, if there is one. Its side and kind are drawn first, as the
    /// package does, even when every row is taken.
    fn spawn<R: Draws>(&mut self, rng: &mut R) {
        let right = rng.unit() < 0.5;
        let gold = rng.unit() < 1.0 / 3.0;
        let free = self.entities.iter().filter(|e| e.is_none()).count();
        if free == 0 {
            return;
        }
        let pick = rng.int(0, free as i64) as usize;
        if let Some(slot) = self.entities.iter_mut().filter(|e| e.is_none()).nth(pick) {
            *slot = Some(Entity {
                col: if right { 0 } else { GRID as i32 - 1 },
                right,
                gold,
            });
        }
    }

    /// Resolves the player touching the entity in `slot`: gold is collected, an enemy ends the
    /// game. Returns the reward.
    fn touch(&mut self, slot: usize, terminated: &mut bool) -> f32 {
        let Some(entity) = self.entities[slot] else {
            return 0.0;
        };
        if entity.col != self.col as i32 || slot + 1 != self.row {
            return 0.0;
        }
        if entity.gold {
            self.entities[slot] = None;
            1.0
        } else {
            *terminated = true;
            0.0
        }
    }

    /// Player column and row, entry and move intervals, ramp timer and index: what the
    /// fixture compares at the end.
    pub fn state(&self) -> [f64; 6] {
        [
            self.col as f64,
            self.row as f64,
            f64::from(self.spawn_interval),
            f64::from(self.move_interval),
            f64::from(self.ramp_timer),
            f64::from(self.ramp_index),
        ]
    }
}

impl Game for Asterix {
    const CHANNELS: usize = 4;
    const ACTIONS: &'static [Input] = &[
        Input::Noop,
        Input::Left,
        Input::Up,
        Input::Right,
        Input::Down,
    ];

    fn start<R: Draws>(_rng: &mut R) -> Asterix {
        Asterix {
            col: 5,
            row: 5,
            entities: [None; SLOTS],
            spawn_interval: START_SPAWN_INTERVAL,
            spawn_timer: START_SPAWN_INTERVAL,
            move_interval: START_MOVE_INTERVAL,
            move_timer: START_MOVE_INTERVAL,
            ramp_timer: RAMP_INTERVAL,
            ramp_index: 0,
        }
    }

    fn act<R: Draws>(&mut self, input: Input, rng: &mut R) -> (f32, bool) {
        if self.spawn_timer == 0 {
            self.spawn(rng);
            self.spawn_timer = self.spawn_interval;
        }
        match input {
            Input::Left => self.col = self.col.saturating_sub(1),
            Input::Right => self.col = (self.col + 1).min(GRID - 1),
            Input::Up => self.row = (self.row - 1).max(1),
            Input::Down => self.row = (self.row + 1).min(SLOTS),
            _ => {}
        }
        // As in the package, the step runs to its end after an enemy is touched (gold touched
        // later in the same step still pays).
        let mut reward = 0.0;
        let mut terminated = false;
        for slot in 0..SLOTS {
            reward += self.touch(slot, &mut terminated);
        }
        if self.move_timer == 0 {
            self.move_timer = self.move_interval;
            for slot in 0..SLOTS {
                if let Some(entity) = &mut self.entities[slot] {
                    entity.col += if entity.right { 1 } else { -1 };
                    if !(0..GRID as i32).contains(&entity.col) {
                        self.entities[slot] = None;
                    }
                }
                reward += self.touch(slot, &mut terminated);
            }
        }
        self.spawn_timer -= 1;
        self.move_timer -= 1;
        if self.spawn_interval > 1 || self.move_interval > 1 {
            if self.ramp_timer >= 0 {
                self.ramp_timer -= 1;
            } else {
                if self.move_interval > 1 && self.ramp_index % 2 == 1 {
                    self.move_interval -= 1;
                }
                if self.spawn_interval > 1 {
                    self.spawn_interval -= 1;
                }
                self.ramp_index += 1;
                self.ramp_timer = RAMP_INTERVAL;
            }
        }
        (reward, terminated)
    }

    fn render(&self, obs: &mut [f32]) {
        put(obs, 0, self.row, self.col);
        for (slot, entity) in self.entities.iter().enumerate() {
            let Some(entity) = entity else { continue };
            let row = slot + 1;
            put(
                obs,
                if entity.gold { 3 } else { 1 },
                row,
                entity.col as usize,
            );
            let behind = if entity.right {
                entity.col - 1
            } else {
                entity.col + 1
            };
            if (0..GRID as i32).contains(&behind) {
                put(obs, 2, row, behind as usize);
            }
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
        check_env_contract(&mut MinAtar::<Asterix>::new());
    }

    /// Gold on the player's row, one cell away and about to move: stepping into it pays 1
    /// and removes it; an enemy in the same place ends the game instead.
    #[test]
    fn gold_pays_and_an_enemy_ends_the_game() {
        for (gold, reward, ended) in [(true, 1.0, false), (false, 0.0, true)] {
            let mut env = MinAtar::<Asterix>::with_sticky(0.0);
            env.reset(Some(0));
            let game = env.game_mut();
            game.entities[4] = Some(Entity {
                col: 7,
                right: false,
                gold,
            });
            // Player at (row 5, col 5) steps right to col 6, where the entity then arrives.
            game.move_timer = 0;
            let step = env.step(&Action::Discrete(3)).unwrap();
            assert_eq!(
                (step.reward, step.terminated),
                (reward, ended),
                "gold {gold}"
            );
            assert_eq!(env.game().entities[4].is_none(), gold);
        }
    }

    /// Entities enter every 10 steps at first and the ramp shortens that interval every 101
    /// steps.
    #[test]
    fn the_ramp_shortens_the_entry_interval() {
        let mut env = MinAtar::<Asterix>::with_sticky(0.0);
        env.reset(Some(5));
        for _ in 0..102 {
            // Clear the road before every step: nothing can touch the player.
            env.game_mut().entities = [None; SLOTS];
            env.step(&Action::Discrete(0)).unwrap();
        }
        assert_eq!(env.game().spawn_interval, START_SPAWN_INTERVAL - 1);
        assert_eq!(env.game().ramp_index, 1);
    }
}
