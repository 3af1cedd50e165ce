//! Seaquest: a submarine shoots enemy fish and enemy submarines (+1 each) that cross the
//! screen on rows 1 to 8, while enemy submarines shoot back. It picks up divers (up to 6) and
//! must surface before its oxygen (200 steps) runs out: surfacing with 6 divers pays
//! `10 x oxygen left / 200` and tightens the difficulty; surfacing with none, running out of
//! oxygen, or touching an enemy or an enemy bullet ends the game. Channels: sub front, sub back,
//! friendly bullet, trail (the cell behind each enemy and diver), enemy bullet, enemy fish,
//! enemy sub, oxygen gauge, diver gauge, diver.
//!
//! The package keeps its objects in Python lists that it walks backwards while removing from
//! them by value (`list.remove(x)` drops the first element equal to `x`, not necessarily `x`).
//! The walks below keep those semantics exactly, so two objects that happen to be equal behave
//! as they do there; the fixture test checks every step against the package.

use super::{Draws, Game, Input, FULL_ACTIONS, GRID};

/// Steps of oxygen a full tank holds.
const MAX_OXYGEN: i32 = 200;
/// Steps between enemy entries at the start.
const START_SPAWN_INTERVAL: i32 = 20;
/// Steps between diver entries.
const DIVER_SPAWN_INTERVAL: i32 = 30;
/// Steps between enemy moves at the start.
const START_MOVE_INTERVAL: i32 = 5;
/// Steps between the sub's shots.
const SHOT_COOLDOWN: i32 = 5;
/// Steps between an enemy sub's shots.
const ENEMY_SHOT_INTERVAL: i32 = 10;
/// Steps between diver moves.
const DIVER_MOVE_INTERVAL: i32 = 5;
/// Divers the sub can carry.
const MAX_DIVERS: i32 = 6;

/// A bullet: it moves one cell a step.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bullet {
    col: i32,
    row: i32,
    right: bool,
}

/// An enemy fish or a diver: it moves one cell every `timer` reload.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Swimmer {
    col: i32,
    row: i32,
    right: bool,
    timer: i32,
}

/// An enemy submarine: a swimmer that also shoots.
#[derive(Debug, Clone, Copy, PartialEq)]
struct EnemySub {
    col: i32,
    row: i32,
    right: bool,
    timer: i32,
    shot_timer: i32,
}

fn step_of(right: bool) -> i32 {
    if right {
        1
    } else {
        -1
    }
}

fn off_grid(col: i32) -> bool {
    !(0..GRID as i32).contains(&col)
}

/// Python's `list.remove(value)`: drops the first element equal to `value`, and says where it
/// was.
fn remove_first<T: PartialEq>(list: &mut Vec<T>, value: &T) -> Option<usize> {
    let at = list.iter().position(|x| x == value)?;
    list.remove(at);
    Some(at)
}

/// [`remove_first`] for the element the walk is visiting at `visiting`: where that element is
/// afterwards (`None`: it was the one removed; one lower: an equal one before it was).
fn remove_visited<T: PartialEq + Copy>(
    list: &mut Vec<T>,
    visiting: Option<usize>,
) -> Option<usize> {
    let at = visiting?;
    let value = list[at];
    match remove_first(list, &value) {
        Some(removed) if removed < at => Some(at - 1),
        _ => None,
    }
}

/// Python's `for x in reversed(list)` over a list the body shrinks: the next index to visit,
/// counting down from `*next`, or `None` once it passes the start or the list's end.
fn next_back(next: &mut usize, len: usize) -> Option<usize> {
    if *next == 0 {
        return None;
    }
    *next -= 1;
    (*next < len).then_some(*next)
}

/// Seaquest's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Seaquest {
    col: i32,
    row: i32,
    facing_right: bool,
    oxygen: i32,
    /// Divers on board (the package lets this reach -1 after a surfacing with 6; kept).
    divers_held: i32,
    shots: Vec<Bullet>,
    enemy_shots: Vec<Bullet>,
    fish: Vec<Swimmer>,
    subs: Vec<EnemySub>,
    divers: Vec<Swimmer>,
    spawn_interval: i32,
    spawn_timer: i32,
    diver_timer: i32,
    move_interval: i32,
    ramp_index: i32,
    cooldown: i32,
    surfaced: bool,
}

impl Seaquest {
    fn at_sub(&self, col: i32, row: i32) -> bool {
        (col, row) == (self.col, self.row)
    }

    /// A fish or an enemy sub on a random row, entering from a random side; nothing when an
    /// enemy already on that row goes the other way.
    fn spawn_enemy<R: Draws>(&mut self, rng: &mut R) {
        let right = rng.unit() < 0.5;
        let is_sub = rng.unit() < 1.0 / 3.0;
        let col = if right { 0 } else { GRID as i32 - 1 };
        let row = rng.int(1, 9) as i32;
        let crossing = self.subs.iter().any(|s| s.row == row && s.right != right)
            || self.fish.iter().any(|f| f.row == row && f.right != right);
        if crossing {
            return;
        }
        let timer = self.move_interval;
        if is_sub {
            self.subs.push(EnemySub {
                col,
                row,
                right,
                timer,
                shot_timer: ENEMY_SHOT_INTERVAL,
            });
        } else {
            self.fish.push(Swimmer {
                col,
                row,
                right,
                timer,
            });
        }
    }

    fn spawn_diver<R: Draws>(&mut self, rng: &mut R) {
        let right = rng.unit() < 0.5;
        let row = rng.int(1, 9) as i32;
        self.divers.push(Swimmer {
            col: if right { 0 } else { GRID as i32 - 1 },
            row,
            right,
            timer: DIVER_MOVE_INTERVAL,
        });
    }

    /// The sub's bullets move; one that reaches a fish (first) or an enemy sub kills it.
    fn move_shots(&mut self) -> f32 {
        let mut reward = 0.0;
        let mut next = self.shots.len();
        while let Some(i) = next_back(&mut next, self.shots.len()) {
            self.shots[i].col += step_of(self.shots[i].right);
            let shot = self.shots[i];
            if off_grid(shot.col) {
                remove_first(&mut self.shots, &shot);
            } else if let Some(k) = self
                .fish
                .iter()
                .position(|f| (f.col, f.row) == (shot.col, shot.row))
            {
                self.fish.remove(k);
                remove_first(&mut self.shots, &shot);
                reward += 1.0;
            } else if let Some(k) = self
                .subs
                .iter()
                .position(|s| (s.col, s.row) == (shot.col, shot.row))
            {
                self.subs.remove(k);
                remove_first(&mut self.shots, &shot);
                reward += 1.0;
            }
        }
        reward
    }

    /// Divers move every 5 steps; one the sub touches boards if there is room.
    fn move_divers(&mut self) {
        let mut next = self.divers.len();
        while let Some(i) = next_back(&mut next, self.divers.len()) {
            let diver = self.divers[i];
            if self.at_sub(diver.col, diver.row) && self.divers_held < MAX_DIVERS {
                remove_first(&mut self.divers, &diver);
                self.divers_held += 1;
            } else if diver.timer == 0 {
                let diver = &mut self.divers[i];
                diver.timer = DIVER_MOVE_INTERVAL;
                diver.col += step_of(diver.right);
                let diver = *diver;
                if off_grid(diver.col) {
                    remove_first(&mut self.divers, &diver);
                } else if self.at_sub(diver.col, diver.row) && self.divers_held < MAX_DIVERS {
                    remove_first(&mut self.divers, &diver);
                    self.divers_held += 1;
                }
            } else {
                self.divers[i].timer -= 1;
            }
        }
    }

    /// A shot that sits where a fish or enemy sub has just moved: the index of the first one.
    fn shot_at(&self, col: i32, row: i32) -> Option<usize> {
        self.shots.iter().position(|b| (b.col, b.row) == (col, row))
    }

    /// Enemy subs move and shoot; one that moves onto a bullet of the sub's dies. A sub removed
    /// this step still fires if its timer is due, as in the package (that bullet is off the
    /// grid or dies with it in the bullets' move).
    fn move_subs(&mut self, terminated: &mut bool) -> f32 {
        let mut reward = 0.0;
        let mut next = self.subs.len();
        while let Some(i) = next_back(&mut next, self.subs.len()) {
            // Where the visited sub is in the list (`None` once removed), and its value.
            let mut at = Some(i);
            let mut sub = self.subs[i];
            if self.at_sub(sub.col, sub.row) {
                *terminated = true;
            }
            if sub.timer == 0 {
                sub.timer = self.move_interval;
                sub.col += step_of(sub.right);
                self.subs[i] = sub;
                if off_grid(sub.col) {
                    at = remove_visited(&mut self.subs, at);
                } else if self.at_sub(sub.col, sub.row) {
                    *terminated = true;
                } else if let Some(k) = self.shot_at(sub.col, sub.row) {
                    at = remove_visited(&mut self.subs, at);
                    self.shots.remove(k);
                    reward += 1.0;
                }
            } else {
                sub.timer -= 1;
            }
            if sub.shot_timer == 0 {
                sub.shot_timer = ENEMY_SHOT_INTERVAL;
                self.enemy_shots.push(Bullet {
                    col: sub.col,
                    row: sub.row,
                    right: sub.right,
                });
            } else {
                sub.shot_timer -= 1;
            }
            if let Some(at) = at {
                self.subs[at] = sub;
            }
        }
        reward
    }

    fn move_enemy_shots(&mut self, terminated: &mut bool) {
        let mut next = self.enemy_shots.len();
        while let Some(i) = next_back(&mut next, self.enemy_shots.len()) {
            if self.at_sub(self.enemy_shots[i].col, self.enemy_shots[i].row) {
                *terminated = true;
            }
            self.enemy_shots[i].col += step_of(self.enemy_shots[i].right);
            let shot = self.enemy_shots[i];
            if off_grid(shot.col) {
                remove_first(&mut self.enemy_shots, &shot);
            } else if self.at_sub(shot.col, shot.row) {
                *terminated = true;
            }
        }
    }

    fn move_fish(&mut self, terminated: &mut bool) -> f32 {
        let mut reward = 0.0;
        let mut next = self.fish.len();
        while let Some(i) = next_back(&mut next, self.fish.len()) {
            let fish = self.fish[i];
            if self.at_sub(fish.col, fish.row) {
                *terminated = true;
            }
            if fish.timer == 0 {
                let fish = &mut self.fish[i];
                fish.timer = self.move_interval;
                fish.col += step_of(fish.right);
                let fish = *fish;
                if off_grid(fish.col) {
                    remove_first(&mut self.fish, &fish);
                } else if self.at_sub(fish.col, fish.row) {
                    *terminated = true;
                } else if let Some(k) = self.shot_at(fish.col, fish.row) {
                    remove_first(&mut self.fish, &fish);
                    self.shots.remove(k);
                    reward += 1.0;
                }
            } else {
                self.fish[i].timer -= 1;
            }
        }
        reward
    }

    /// Reaching the surface: with 6 divers it pays for the oxygen left; either way the tank
    /// refills, one diver leaves, and the difficulty ramps.
    fn surface(&mut self) -> f32 {
        self.surfaced = true;
        let reward = if self.divers_held == MAX_DIVERS {
            self.divers_held = 0;
            (self.oxygen * 10).div_euclid(MAX_OXYGEN) as f32
        } else {
            0.0
        };
        self.oxygen = MAX_OXYGEN;
        self.divers_held -= 1;
        if self.spawn_interval > 1 || self.move_interval > 2 {
            if self.move_interval > 2 && self.ramp_index % 2 == 1 {
                self.move_interval -= 1;
            }
            if self.spawn_interval > 1 {
                self.spawn_interval -= 1;
            }
            self.ramp_index += 1;
        }
        reward
    }

    /// Sub column and row, oxygen, divers held, enemy entry and move intervals, ramp index,
    /// then how many shots, enemy shots, fish, enemy subs and divers there are: what the
    /// fixture compares at the end.
    pub fn state(&self) -> Vec<f64> {
        let counts = [
            self.shots.len(),
            self.enemy_shots.len(),
            self.fish.len(),
            self.subs.len(),
            self.divers.len(),
        ];
        [
            self.col,
            self.row,
            self.oxygen,
            self.divers_held,
            self.spawn_interval,
            self.move_interval,
            self.ramp_index,
        ]
        .map(f64::from)
        .into_iter()
        .chain(counts.map(|n| n as f64))
        .collect()
    }
}

/// Sets cell `(row, col)` of channel `c` when it is on the grid.
fn mark(obs: &mut [f32], c: usize, row: i32, col: i32) {
    if !off_grid(row) && !off_grid(col) {
        super::put(obs, c, row as usize, col as usize);
    }
}

/// Marks a mover and the trail cell behind it.
fn mark_with_trail(obs: &mut [f32], c: usize, row: i32, col: i32, right: bool) {
    mark(obs, c, row, col);
    mark(obs, 3, row, col - step_of(right));
}

impl Game for Seaquest {
    const CHANNELS: usize = 10;
    /// All six: Seaquest's minimal set is the full one.
    const ACTIONS: &'static [Input] = FULL_ACTIONS;

    fn start<R: Draws>(_rng: &mut R) -> Seaquest {
        Seaquest {
            col: 5,
            row: 0,
            facing_right: false,
            oxygen: MAX_OXYGEN,
            divers_held: 0,
            shots: Vec::with_capacity(8),
            enemy_shots: Vec::with_capacity(16),
            fish: Vec::with_capacity(16),
            subs: Vec::with_capacity(16),
            divers: Vec::with_capacity(16),
            spawn_interval: START_SPAWN_INTERVAL,
            spawn_timer: START_SPAWN_INTERVAL,
            diver_timer: DIVER_SPAWN_INTERVAL,
            move_interval: START_MOVE_INTERVAL,
            ramp_index: 0,
            cooldown: 0,
            surfaced: true,
        }
    }

    fn act<R: Draws>(&mut self, input: Input, rng: &mut R) -> (f32, bool) {
        if self.spawn_timer == 0 {
            self.spawn_enemy(rng);
            self.spawn_timer = self.spawn_interval;
        }
        if self.diver_timer == 0 {
            self.spawn_diver(rng);
            self.diver_timer = DIVER_SPAWN_INTERVAL;
        }
        match input {
            Input::Fire if self.cooldown == 0 => {
                self.shots.push(Bullet {
                    col: self.col,
                    row: self.row,
                    right: self.facing_right,
                });
                self.cooldown = SHOT_COOLDOWN;
            }
            Input::Left => {
                self.col = (self.col - 1).max(0);
                self.facing_right = false;
            }
            Input::Right => {
                self.col = (self.col + 1).min(GRID as i32 - 1);
                self.facing_right = true;
            }
            Input::Up => self.row = (self.row - 1).max(0),
            Input::Down => self.row = (self.row + 1).min(GRID as i32 - 2),
            _ => {}
        }
        let mut terminated = false;
        let mut reward = self.move_shots();
        self.move_divers();
        reward += self.move_subs(&mut terminated);
        self.move_enemy_shots(&mut terminated);
        reward += self.move_fish(&mut terminated);
        self.spawn_timer = (self.spawn_timer - 1).max(0);
        self.diver_timer = (self.diver_timer - 1).max(0);
        self.cooldown = (self.cooldown - 1).max(0);
        if self.oxygen <= 0 {
            terminated = true;
        }
        if self.row > 0 {
            self.oxygen -= 1;
            self.surfaced = false;
        } else if !self.surfaced {
            if self.divers_held == 0 {
                terminated = true;
            } else {
                reward += self.surface();
            }
        }
        (reward, terminated)
    }

    fn render(&self, obs: &mut [f32]) {
        mark(obs, 0, self.row, self.col);
        let back = self.col - step_of(self.facing_right);
        // numpy wraps a -1 column to the last one (the package never draws there).
        mark(obs, 1, self.row, back.rem_euclid(GRID as i32));
        let bottom = GRID as i32 - 1;
        for col in 0..self.oxygen.max(0) * 10 / MAX_OXYGEN {
            mark(obs, 7, bottom, col);
        }
        for col in (bottom - self.divers_held).max(0)..bottom {
            mark(obs, 8, bottom, col);
        }
        for shot in &self.shots {
            mark(obs, 2, shot.row, shot.col);
        }
        for shot in &self.enemy_shots {
            mark(obs, 4, shot.row, shot.col);
        }
        for fish in &self.fish {
            mark_with_trail(obs, 5, fish.row, fish.col, fish.right);
        }
        for sub in &self.subs {
            mark_with_trail(obs, 6, sub.row, sub.col, sub.right);
        }
        for diver in &self.divers {
            mark_with_trail(obs, 9, diver.row, diver.col, diver.right);
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
        check_env_contract(&mut MinAtar::<Seaquest>::new());
    }

    /// A shot fired at a fish two cells ahead kills it on the second step.
    #[test]
    fn a_shot_kills_the_fish_ahead() {
        let mut env = MinAtar::<Seaquest>::with_sticky(0.0);
        env.reset(Some(0));
        let game = env.game_mut();
        game.row = 3;
        game.fish.push(Swimmer {
            col: 3,
            row: 3,
            right: true,
            timer: 100,
        });
        let fired = env.step(&Action::Discrete(5)).unwrap();
        let next = env.step(&Action::Discrete(0)).unwrap();
        assert_eq!((fired.reward, next.reward), (0.0, 1.0));
        assert!(env.game().fish.is_empty() && env.game().shots.is_empty());
    }

    /// Diving and coming back up without a diver ends the game; with 6 divers it pays for the
    /// oxygen left and ramps the difficulty.
    #[test]
    fn surfacing_ends_the_game_without_divers_and_pays_with_six() {
        for (held, reward, ended) in [(0, 0.0, true), (6, 9.0, false)] {
            let mut env = MinAtar::<Seaquest>::with_sticky(0.0);
            env.reset(Some(0));
            env.step(&Action::Discrete(4)).unwrap();
            env.game_mut().divers_held = held;
            let step = env.step(&Action::Discrete(2)).unwrap();
            // 200 - 1 (the dive) = 199 oxygen left: 10 * 199 / 200 = 9.
            assert_eq!(
                (step.reward, step.terminated),
                (reward, ended),
                "{held} divers"
            );
            if !ended {
                assert_eq!(env.game().oxygen, MAX_OXYGEN);
                assert_eq!(env.game().ramp_index, 1);
            }
        }
    }
}
