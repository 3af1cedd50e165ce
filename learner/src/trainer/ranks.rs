//! On-policy training across learner processes (`learner.world_size > 1`): every rank takes
//! rollouts from the one queue table as they come, and the ranks decide together, in step,
//! when they have a version's batch between them.
//!
//! Each rank collects for at most [`TICK`], then all of them agree ([`Group::agree`]) on
//! the rollouts and env steps they hold, whether any holds none, and rank 0's batch target
//! (every acting actor's share: the actors report to rank 0) and whether its wait for the
//! rest is over. They update together, each on what it holds, once the union is the batch
//! one learner would have trained on (`Adam::join` weighs each rank's gradient by its rows,
//! so the step is that learner's), and every rank holds at least one rollout. Every rank
//! always has a sample request waiting at the queue, which hands rollouts to the waiting
//! requests in turn, so the ranks' shares come out about even. No rank waits on another for
//! longer than a tick: a stop (the rank's work queue closing) is its [`Group::leave`], which
//! the others see at their next agreement.

use std::time::{Duration, Instant};

use fleetrl_core::collective::{Group, COUNTS};
use tokio::sync::mpsc::{self, error::TryRecvError};

use super::rollouts::Counted;
use super::{Next, Trainer, Work};

/// Longest a rank collects rollouts before the next agreement.
const TICK: Duration = Duration::from_millis(5);

/// The slots of an agreement's counts.
const ROLLOUTS: usize = 0;
const ENV_STEPS: usize = 1;
const EMPTY_RANKS: usize = 2;
const TARGET: usize = 3;
const WAIT_OVER: usize = 4;

/// What the ranks agreed at a tick, summed over them.
#[derive(Debug, PartialEq)]
struct Agreed([f64; COUNTS]);

impl Agreed {
    /// Whether the ranks update now: every rank holds a rollout, and together they hold
    /// rank 0's target, or at least `least` (`batch_rollouts`) once its wait is over.
    fn ready(&self, least: usize) -> bool {
        let total = self.0[ROLLOUTS];
        let target = self.0[TARGET].max(least as f64);
        self.0[EMPTY_RANKS] == 0.0
            && (total >= target || (total >= least as f64 && self.0[WAIT_OVER] > 0.0))
    }
}

/// The counts one rank states at a tick.
fn stated(rollouts: usize, env_steps: u64, leader: Option<(usize, bool)>) -> [f64; COUNTS] {
    let mut counts = [0.0; COUNTS];
    counts[ROLLOUTS] = rollouts as f64;
    counts[ENV_STEPS] = env_steps as f64;
    counts[EMPTY_RANKS] = f64::from(u8::from(rollouts == 0));
    if let Some((target, wait_over)) = leader {
        counts[TARGET] = target as f64;
        counts[WAIT_OVER] = f64::from(u8::from(wait_over));
    }
    counts
}

impl Trainer {
    /// On-policy with other learner ranks: the ranks decide together when to update.
    pub(super) fn ticks(&self) -> bool {
        self.group.is_some() && self.on_policy()
    }

    /// Takes rollouts for a tick, then [`Next::Tick`]; other work at once; `None` once every
    /// sender of `work` is gone.
    pub(super) fn next_tick(&mut self, work: &mut mpsc::Receiver<Work>) -> Option<Next> {
        let until = Instant::now() + TICK;
        loop {
            match work.try_recv() {
                Ok(Work::Sample(sample)) => self.keep(sample.response.batch.unwrap_or_default()),
                Ok(other) => return Some(Next::Work(other)),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if Instant::now() >= until => return Some(Next::Tick),
                Err(TryRecvError::Empty) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
    }

    /// One agreement with the other ranks, and the update when they are ready. True when an
    /// update ran.
    pub(super) fn tick(&mut self, group: &Group) -> bool {
        let least = self.config.learner.batch_rollouts.max(1) as usize;
        let leader = (group.rank() == 0).then(|| {
            let over = self.filling.until.is_some_and(|u| Instant::now() >= u);
            (self.batch_target(), over)
        });
        let steps = self.pending.len() as u64 * self.rollout_env_steps();
        let counts = stated(self.pending.len(), steps, leader);
        let agreed = match group.agree(counts) {
            Ok(sums) => Agreed(sums),
            Err(source) => {
                self.stop_collective(source);
                return false;
            }
        };
        let total = agreed.0[ROLLOUTS] as usize;
        if group.rank() == 0 && total >= least && self.filling.until.is_none() {
            self.filling.wait_for_more(total);
        }
        if !agreed.ready(least) {
            return false;
        }
        let union = Counted {
            env_steps: agreed.0[ENV_STEPS] as u64,
            rollouts: total as u64,
        };
        // Every rank holds a rollout, and rollouts that passed the checks form a batch.
        match self.take_pending() {
            Some(batch) => self.train_rollouts(batch, Some(union)),
            None => false,
        }
    }

    /// Env steps in one rollout: every rollout has the table's shape.
    fn rollout_env_steps(&self) -> u64 {
        let actors = &self.config.actors;
        u64::from(actors.rollout_length) * u64::from(actors.envs_per_actor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agreed(ranks: &[[f64; COUNTS]]) -> Agreed {
        let mut sums = [0.0; COUNTS];
        for counts in ranks {
            for (sum, c) in sums.iter_mut().zip(counts) {
                *sum += c;
            }
        }
        Agreed(sums)
    }

    #[test]
    fn ranks_update_once_they_hold_the_target_between_them_and_each_holds_one() {
        let leader = |n, over| stated(n, 128 * n as u64, Some((4, over)));
        let other = |n| stated(n, 128 * n as u64, None);
        assert!(agreed(&[leader(2, false), other(2)]).ready(2));
        assert!(agreed(&[leader(3, false), other(1)]).ready(2), "uneven");
        assert_eq!(agreed(&[leader(3, false), other(1)]).0[ENV_STEPS], 512.0);
        assert!(
            !agreed(&[leader(4, false), other(0)]).ready(2),
            "rank 1 holds none"
        );
        assert!(
            !agreed(&[leader(2, false), other(1)]).ready(2),
            "short of the target"
        );
        assert!(
            agreed(&[leader(2, true), other(1)]).ready(2),
            "the wait is over"
        );
        assert!(
            !agreed(&[leader(1, true), other(0)]).ready(2),
            "short of batch_rollouts"
        );
    }
}
