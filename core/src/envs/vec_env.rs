//! [`VecEnv`]: M envs stepped together with same-step auto-reset, as SB3's `VecEnv`
//! (`stable_baselines3/common/vec_env/dummy_vec_env.py`).
//!
//! When env i ends an episode on a step, it is reset at once: `obs` row i already holds the
//! first observation of the next episode and `final_obs[i]` holds the last one of the episode
//! that ended (SB3's `terminal_observation`), which a learner needs to bootstrap truncations.

use super::{make, BatchActions, BatchEnv, Env, EnvError};
use fleetrl_proto::space::{Action, Space};

/// A finished episode's statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Episode {
    /// Undiscounted sum of the episode's rewards.
    pub return_: f64,
    /// Number of steps in the episode.
    pub length: u64,
    /// Whether any of its steps solved the task ([`Env::success`](super::Env::success));
    /// `None` for envs without a success flag.
    pub success: Option<bool>,
}

/// Folds one step's [`Env::success`](super::Env::success) into an episode's `so_far`: the
/// episode succeeds when any step does; it stays `None` while no step reports a flag.
pub fn note_success(so_far: &mut Option<bool>, now: Option<bool>) {
    if let Some(now) = now {
        *so_far = Some(now || *so_far == Some(true));
    }
}

/// The result of stepping every env once. Rows are env indices; all vectors have M entries
/// except `obs`, which is flat `[M * D]` row-major.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VecStep {
    /// Observations after the step; for an env whose episode ended this is already the first
    /// observation of its next episode.
    pub obs: Vec<f32>,
    /// Reward of the step.
    pub reward: Vec<f32>,
    /// Score of the step: the reward before reward wrappers changed it, or what the env
    /// scores apart from its training reward ([`Env::score_reward`]); what episode returns
    /// sum.
    pub score: Vec<f32>,
    /// The env's episode reached a terminal state on this step.
    pub terminated: Vec<bool>,
    /// The env's episode was cut short (time limit) on this step.
    pub truncated: Vec<bool>,
    /// The last observation of an episode that ended on this step, else `None`.
    pub final_obs: Vec<Option<Vec<f32>>>,
}

/// What a [`VecEnv`] steps: one [`Env`] per row, or one [`BatchEnv`] for all rows.
enum Backend {
    Each(Vec<Box<dyn Env>>),
    Batch(Box<dyn BatchEnv>),
}

/// A vector of envs with identical spaces, stepped in lockstep with auto-reset.
///
/// Used from one thread at a time, like [`Env`].
pub struct VecEnv {
    envs: Backend,
    num_envs: usize,
    observation_space: Space,
    action_space: Space,
    obs_dim: usize,
    /// Reused across steps so stepping does not allocate per env row.
    out: VecStep,
    /// Return of each env's running episode.
    returns: Vec<f64>,
    /// Length of each env's running episode.
    lengths: Vec<u64>,
    /// Whether each env's running episode has succeeded yet (`None`: no success flag).
    succeeded: Vec<Option<bool>>,
    /// Finished episodes not yet drained.
    episodes: Vec<Episode>,
    /// Reused per-row actions of [`VecEnv::step_continuous`].
    continuous: Vec<Action>,
    /// The envs' [`Env::byte_observations`] (false for a hosted batch).
    byte_observations: bool,
    /// `mid_batch_reset = false`: finished envs wait for [`VecEnv::reset_held`].
    hold: bool,
    /// Rows whose episode ended while holding: not stepped until [`VecEnv::reset_held`].
    held: Vec<bool>,
}

impl VecEnv {
    /// Vectorises `envs`. Fails when there are none or their spaces differ.
    pub fn new(envs: Vec<Box<dyn Env>>) -> Result<VecEnv, EnvError> {
        let first = envs
            .first()
            .ok_or_else(|| EnvError::VecMismatch("no envs given".to_string()))?;
        let observation_space = first.observation_space();
        let action_space = first.action_space();
        for (i, env) in envs.iter().enumerate() {
            if env.observation_space() != observation_space || env.action_space() != action_space {
                return Err(EnvError::VecMismatch(format!(
                    "env {i} has different spaces from env 0"
                )));
            }
        }
        let m = envs.len();
        let byte_observations = first.byte_observations();
        let mut vec = VecEnv::with_backend(Backend::Each(envs), m, observation_space, action_space);
        vec.byte_observations = byte_observations;
        Ok(vec)
    }

    /// Hosts a [`BatchEnv`], stepped as one unit (e.g. a gymnasium vector env).
    pub fn from_batch(batch: Box<dyn BatchEnv>) -> Result<VecEnv, EnvError> {
        let m = batch.num_envs();
        if m == 0 {
            return Err(EnvError::VecMismatch("no envs given".to_string()));
        }
        let (observation_space, action_space) = (batch.observation_space(), batch.action_space());
        Ok(VecEnv::with_backend(
            Backend::Batch(batch),
            m,
            observation_space,
            action_space,
        ))
    }

    fn with_backend(
        envs: Backend,
        m: usize,
        observation_space: Space,
        action_space: Space,
    ) -> VecEnv {
        let obs_dim = observation_space.flat_dim();
        VecEnv {
            envs,
            num_envs: m,
            observation_space,
            action_space,
            obs_dim,
            out: VecStep {
                obs: vec![0.0; m * obs_dim],
                reward: vec![0.0; m],
                score: vec![0.0; m],
                terminated: vec![false; m],
                truncated: vec![false; m],
                final_obs: vec![None; m],
            },
            returns: vec![0.0; m],
            lengths: vec![0; m],
            succeeded: vec![None; m],
            episodes: Vec::new(),
            continuous: Vec::new(),
            byte_observations: false,
            hold: false,
            held: vec![false; m],
        }
    }

    /// rlpyt's `mid_batch_reset = false` when `hold` is true: an env whose episode ends is not
    /// reset; its row keeps the final observation and sits out later steps (reward 0, no
    /// episode end, `final_obs` none) until [`VecEnv::reset_held`]. Envs hosted as one batch
    /// reset themselves and cannot hold: that is an error.
    pub fn hold_finished(&mut self, hold: bool) -> Result<(), EnvError> {
        if hold && matches!(self.envs, Backend::Batch(_)) {
            return Err(EnvError::VecMismatch(
                "envs hosted as one batch reset themselves; they cannot wait for the end of \
                 a rollout (actors.mid_batch_reset = false needs per-row envs)"
                    .into(),
            ));
        }
        self.hold = hold;
        Ok(())
    }

    /// Which rows sit out steps until [`VecEnv::reset_held`] (all false unless holding).
    pub fn held(&self) -> &[bool] {
        &self.held
    }

    /// Resets the envs that were held since their episode ended and returns every row's
    /// observation when there were any (`None`: nothing changed).
    pub fn reset_held(&mut self) -> Option<&[f32]> {
        if !self.held.contains(&true) {
            return None;
        }
        let Backend::Each(envs) = &mut self.envs else {
            unreachable!("only per-row envs hold");
        };
        for (i, env) in envs.iter_mut().enumerate() {
            if std::mem::take(&mut self.held[i]) {
                let first = env.reset(None);
                copy_row(&mut self.out.obs, self.obs_dim, i, &first);
            }
        }
        Some(&self.out.obs)
    }

    /// Switches every env to `task` (see [`Env::set_task`]); the next reset starts it. An env
    /// family without tasks is refused as [`EnvError::NoTasks`] naming `env_id`.
    pub fn set_task(&mut self, task: &crate::tasks::Task, env_id: &str) -> Result<(), EnvError> {
        self.set_task_on(None, task, env_id)
    }

    /// [`VecEnv::set_task`] for env `i` alone (panics when `i` is out of range): a
    /// task-agnostic off-policy actor switches each env as its episode ends, so every episode
    /// has a task of its own.
    pub fn set_task_of(
        &mut self,
        i: usize,
        task: &crate::tasks::Task,
        env_id: &str,
    ) -> Result<(), EnvError> {
        self.set_task_on(Some(i), task, env_id)
    }

    fn set_task_on(
        &mut self,
        only: Option<usize>,
        task: &crate::tasks::Task,
        env_id: &str,
    ) -> Result<(), EnvError> {
        let set = match (&mut self.envs, only) {
            (Backend::Each(envs), None) => envs.iter_mut().try_for_each(|e| e.set_task(task)),
            (Backend::Each(envs), Some(i)) => envs[i].set_task(task),
            (Backend::Batch(_), _) => Err(EnvError::NoTasks(String::new())),
        };
        set.map_err(|e| e.naming(env_id))
    }

    /// `n` copies of the registered env `id` (see [`make`]).
    pub fn make(id: &str, n: usize) -> Result<VecEnv, EnvError> {
        let envs = (0..n).map(|_| make(id)).collect::<Result<Vec<_>, _>>()?;
        VecEnv::new(envs)
    }

    /// Number of envs, M.
    pub fn num_envs(&self) -> usize {
        self.num_envs
    }

    /// Whether observations are whole numbers in 0..=255 (see [`Env::byte_observations`]).
    pub fn byte_observations(&self) -> bool {
        self.byte_observations
    }

    /// Number of f32 values in one env's observation, D.
    pub fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    /// The space of one env's observation.
    pub fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    /// The space of one env's action.
    pub fn action_space(&self) -> &Space {
        &self.action_space
    }

    /// Resets every env, env i with seed `seed + i`, drops the running episodes' statistics
    /// (finished ones stay until drained) and returns the flat `[M * D]` observations.
    ///
    /// Panics if a hosted batch env fails to reset (an [`Env`]'s reset cannot fail either).
    pub fn reset(&mut self, seed: u64) -> &[f32] {
        match &mut self.envs {
            Backend::Each(envs) => {
                for (i, env) in envs.iter_mut().enumerate() {
                    let obs = env.reset(Some(seed.wrapping_add(i as u64)));
                    copy_row(&mut self.out.obs, self.obs_dim, i, &obs);
                }
            }
            Backend::Batch(batch) => batch
                .reset(seed, &mut self.out.obs)
                .unwrap_or_else(|e| panic!("{e}")),
        }
        self.returns.fill(0.0);
        self.lengths.fill(0);
        self.succeeded.fill(None);
        self.held.fill(false);
        self.out.reward.fill(0.0);
        self.out.score.fill(0.0);
        self.out.terminated.fill(false);
        self.out.truncated.fill(false);
        self.out.final_obs.fill(None);
        &self.out.obs
    }

    /// Steps env i with `actions[i]`, auto-resetting each env whose episode ends.
    ///
    /// All actions are checked against the action space before any env moves, so an
    /// `InvalidAction` or `VecMismatch` (wrong action count) error leaves every env untouched.
    /// An error raised by an env itself after that check may leave earlier envs stepped.
    pub fn step(&mut self, actions: &[Action]) -> Result<&VecStep, EnvError> {
        self.check_count(actions.len())?;
        if let Some(bad) = actions.iter().find(|a| !self.action_space_contains(a)) {
            return Err(self.invalid(bad.clone()));
        }
        if let Backend::Batch(batch) = &mut self.envs {
            let flat: Vec<f32> = actions
                .iter()
                .flat_map(|a| match a {
                    Action::Continuous(v) => v.clone(),
                    Action::Discrete(_) => Vec::new(),
                })
                .collect();
            let raw: Vec<i64> = actions
                .iter()
                .filter_map(|a| match a {
                    Action::Discrete(x) => Some(*x),
                    Action::Continuous(_) => None,
                })
                .collect();
            let batch_actions = match self.action_space {
                Space::Discrete { .. } => BatchActions::Discrete(&raw),
                Space::Box { .. } => BatchActions::Continuous(&flat),
            };
            batch.step(batch_actions, &mut self.out)?;
            self.record_batch();
            return Ok(&self.out);
        }
        for (i, action) in actions.iter().enumerate() {
            self.step_one(i, action)?;
        }
        Ok(&self.out)
    }

    /// [`VecEnv::step`] for a discrete action space, from raw indices (the actor's hot path:
    /// no `Action` vector is built).
    pub fn step_discrete(&mut self, actions: &[i64]) -> Result<&VecStep, EnvError> {
        self.check_count(actions.len())?;
        let n = match self.action_space {
            Space::Discrete { n } => n,
            Space::Box { .. } => {
                let first = actions.first().copied().unwrap_or_default();
                return Err(self.invalid(Action::Discrete(first)));
            }
        };
        if let Some(&bad) = actions.iter().find(|&&a| !(0..n).contains(&a)) {
            return Err(self.invalid(Action::Discrete(bad)));
        }
        if let Backend::Batch(batch) = &mut self.envs {
            batch.step(BatchActions::Discrete(actions), &mut self.out)?;
            self.record_batch();
            return Ok(&self.out);
        }
        for (i, &a) in actions.iter().enumerate() {
            self.step_one(i, &Action::Discrete(a))?;
        }
        Ok(&self.out)
    }

    /// [`VecEnv::step`] for a box action space from the policy's raw `[M * A]` values, each
    /// clipped to the box (the actor's continuous hot path: the per-row actions are reused,
    /// so stepping native envs allocates nothing).
    pub fn step_continuous(&mut self, values: &[f32]) -> Result<&VecStep, EnvError> {
        let (low, high) = match &self.action_space {
            Space::Box { low, high, .. } => (low, high),
            Space::Discrete { .. } => {
                return Err(self.invalid(Action::Continuous(values.to_vec())));
            }
        };
        let dim = low.len();
        if values.len() != dim * self.num_envs {
            return Err(EnvError::VecMismatch(format!(
                "{} action values for {} envs of {dim}",
                values.len(),
                self.num_envs
            )));
        }
        if self.continuous.len() != self.num_envs {
            self.continuous = vec![Action::Continuous(vec![0.0; dim]); self.num_envs];
        }
        for (action, row) in self.continuous.iter_mut().zip(values.chunks(dim)) {
            if let Action::Continuous(out) = action {
                for (k, (o, v)) in out.iter_mut().zip(row).enumerate() {
                    *o = v.clamp(low[k], high[k]);
                }
            }
        }
        if let Backend::Batch(batch) = &mut self.envs {
            let flat: Vec<f32> = self
                .continuous
                .iter()
                .flat_map(|a| match a {
                    Action::Continuous(v) => v.clone(),
                    Action::Discrete(_) => Vec::new(),
                })
                .collect();
            batch.step(BatchActions::Continuous(&flat), &mut self.out)?;
            self.record_batch();
            return Ok(&self.out);
        }
        let actions = std::mem::take(&mut self.continuous);
        let result = (0..self.num_envs).try_for_each(|i| self.step_one(i, &actions[i]));
        self.continuous = actions;
        result?;
        Ok(&self.out)
    }

    /// Steps only the envs with `active[i]`, auto-resetting as [`VecEnv::step`]; the others
    /// keep their observation and report reward 0 and no episode end (`actions[i]` is not
    /// looked at for them). PPO+D's actors use it while some envs replay a demo. Envs hosted
    /// as one batch (a `gym:` vector env) cannot step a subset: that is an error.
    pub fn step_some(&mut self, actions: &[Action], active: &[bool]) -> Result<&VecStep, EnvError> {
        self.check_count(actions.len())?;
        self.check_count(active.len())?;
        if matches!(self.envs, Backend::Batch(_)) {
            return Err(EnvError::VecMismatch(
                "envs hosted as one batch cannot step a subset of rows (PPO+D needs per-row envs)"
                    .into(),
            ));
        }
        let bad = actions
            .iter()
            .zip(active)
            .find(|(a, &on)| on && !self.action_space_contains(a));
        if let Some((bad, _)) = bad {
            return Err(self.invalid(bad.clone()));
        }
        for (i, action) in actions.iter().enumerate() {
            if active[i] {
                self.step_one(i, action)?;
            } else {
                self.idle(i);
            }
        }
        Ok(&self.out)
    }

    /// Takes the episodes that finished since the last call, in the order they finished.
    pub fn drain_episodes(&mut self) -> Vec<Episode> {
        std::mem::take(&mut self.episodes)
    }

    /// Steps env `i`, writes its row of the output, and auto-resets it if its episode ended.
    fn step_one(&mut self, i: usize, action: &Action) -> Result<(), EnvError> {
        let Backend::Each(envs) = &mut self.envs else {
            unreachable!("step_one steps per-row envs");
        };
        if self.held[i] {
            self.idle(i);
            return Ok(());
        }
        let env = &mut envs[i];
        let row = &mut self.out.obs[i * self.obs_dim..(i + 1) * self.obs_dim];
        // Straight into the output row: no allocation unless the episode ends.
        let step = env.step_into(action, row)?;
        let score = env.score_reward().unwrap_or(step.reward);
        let game_over = env.game_over();
        let success = env.success();
        self.out.reward[i] = step.reward;
        self.out.score[i] = score;
        self.out.terminated[i] = step.terminated;
        self.out.truncated[i] = step.truncated;
        if !(step.terminated || step.truncated) {
            self.out.final_obs[i] = None;
        } else {
            self.out.final_obs[i] = Some(row.to_vec());
            if self.hold {
                self.held[i] = true;
            } else {
                let first = env.reset(None);
                row.copy_from_slice(&first);
            }
        }
        self.record(i, score, game_over, success);
        Ok(())
    }

    /// Row `i` sits this step out: its observation stays, reward 0, no episode end.
    fn idle(&mut self, i: usize) {
        self.out.reward[i] = 0.0;
        self.out.score[i] = 0.0;
        self.out.terminated[i] = false;
        self.out.truncated[i] = false;
        self.out.final_obs[i] = None;
    }

    /// Episode statistics of row `i` after a step that earned `score` (the unclipped reward);
    /// an episode is counted when it ends and the game is over (see [`Env::game_over`]).
    fn record(&mut self, i: usize, score: f32, game_over: bool, success: Option<bool>) {
        self.returns[i] += f64::from(score);
        self.lengths[i] += 1;
        note_success(&mut self.succeeded[i], success);
        if (self.out.terminated[i] || self.out.truncated[i]) && game_over {
            self.episodes.push(Episode {
                return_: self.returns[i],
                length: self.lengths[i],
                success: self.succeeded[i].take(),
            });
            self.returns[i] = 0.0;
            self.lengths[i] = 0;
        }
    }

    /// Episode statistics of every row after a batch step.
    fn record_batch(&mut self) {
        let VecStep { reward, score, .. } = &mut self.out;
        score.clone_from(reward);
        for i in 0..self.num_envs {
            self.record(i, self.out.score[i], true, None);
        }
    }

    fn check_count(&self, got: usize) -> Result<(), EnvError> {
        if got == self.num_envs {
            return Ok(());
        }
        Err(EnvError::VecMismatch(format!(
            "{got} actions for {} envs",
            self.num_envs
        )))
    }

    fn action_space_contains(&self, action: &Action) -> bool {
        match (&self.action_space, action) {
            (Space::Discrete { n }, Action::Discrete(a)) => (0..*n).contains(a),
            (Space::Box { .. }, Action::Continuous(v)) => v.len() == self.action_space.flat_dim(),
            _ => false,
        }
    }

    fn invalid(&self, action: Action) -> EnvError {
        EnvError::InvalidAction {
            action,
            space: self.action_space.clone(),
        }
    }
}

/// Writes `row` into row `i` of the flat `[M * dim]` buffer `buf`.
///
/// Panics if an env returned an observation whose length differs from its space's flat
/// dimension, which breaks the [`Env`] contract.
fn copy_row(buf: &mut [f32], dim: usize, i: usize, row: &[f32]) {
    buf[i * dim..(i + 1) * dim].copy_from_slice(row);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envs::{CartPole, TimeLimit};

    fn cartpoles(n: usize, max_steps: u32) -> VecEnv {
        let envs: Vec<Box<dyn Env>> = (0..n)
            .map(|_| Box::new(TimeLimit::new(CartPole::new(), max_steps)) as Box<dyn Env>)
            .collect();
        VecEnv::new(envs).unwrap()
    }

    #[test]
    fn make_and_reset_shapes() {
        let mut venv = VecEnv::make("CartPole-v1", 3).unwrap();
        assert_eq!((venv.num_envs(), venv.obs_dim()), (3, 4));
        assert_eq!(venv.action_space(), &Space::Discrete { n: 2 });
        let obs = venv.reset(0).to_vec();
        assert_eq!(obs.len(), 12);
        assert_ne!(obs[0..4], obs[4..8], "env i is seeded with seed + i");
        assert_eq!(venv.reset(0), obs.as_slice());
    }

    #[test]
    fn rejects_empty_and_mismatched() {
        assert!(matches!(VecEnv::new(vec![]), Err(EnvError::VecMismatch(_))));
        assert!(matches!(
            VecEnv::make("Nope-v0", 2),
            Err(EnvError::UnknownEnv(_))
        ));
        let mut venv = cartpoles(2, 10);
        venv.reset(0);
        assert!(venv.step_discrete(&[0]).is_err());
        assert!(venv.step_discrete(&[0, 2]).is_err());
        assert!(venv
            .step(&[Action::Discrete(0), Action::Continuous(vec![0.0])])
            .is_err());
    }

    #[test]
    fn auto_resets_on_truncation_and_counts_episodes() {
        let mut venv = cartpoles(2, 5);
        let mut obs = venv.reset(1).to_vec();
        for t in 1..=5 {
            let actions: Vec<i64> = (0..2).map(|i| i64::from(obs[i * 4 + 2] > 0.0)).collect();
            let step = venv.step_discrete(&actions).unwrap();
            let done = t == 5;
            assert_eq!(step.truncated, [done, done], "step {t}");
            assert_eq!(step.final_obs.iter().all(Option::is_some), done);
            obs = step.obs.clone();
        }
        // The auto-reset observation is a fresh start, not the final one.
        assert!(obs.iter().all(|v| v.abs() < 0.05));
        let episodes = venv.drain_episodes();
        assert_eq!(
            episodes,
            vec![
                Episode {
                    return_: 5.0,
                    length: 5,
                    success: None,
                };
                2
            ]
        );
        assert!(venv.drain_episodes().is_empty());
    }

    #[test]
    fn terminated_env_reports_final_obs_and_keeps_others_running() {
        let mut venv = cartpoles(2, 500);
        venv.reset(0);
        let mut terminated_at = None;
        for t in 1..=200u64 {
            // Env 0 always pushes right and falls; env 1 is balanced by a controller.
            let theta = venv.out.obs[6] + 0.5 * venv.out.obs[7];
            let step = venv.step_discrete(&[1, i64::from(theta > 0.0)]).unwrap();
            assert!(!step.terminated[1]);
            if step.terminated[0] {
                let last = step.final_obs[0].as_ref().unwrap();
                assert!(last[0].abs() > 2.4 || last[2].abs() > 0.2094);
                assert!(step.obs[0..4].iter().all(|v| v.abs() < 0.05));
                terminated_at = Some(t);
                break;
            }
            assert!(step.final_obs[0].is_none());
        }
        let length = terminated_at.expect("always pushing right terminates");
        let episodes = venv.drain_episodes();
        assert_eq!(
            episodes,
            [Episode {
                return_: length as f64,
                length,
                success: None,
            }]
        );
    }

    #[test]
    fn step_with_actions_matches_step_discrete() {
        let mut a = cartpoles(3, 500);
        let mut b = cartpoles(3, 500);
        a.reset(9);
        b.reset(9);
        for t in 0..50 {
            let raw = [t % 2, (t / 3) % 2, 1];
            let actions: Vec<Action> = raw.iter().map(|&x| Action::Discrete(x)).collect();
            let sa = a.step(&actions).unwrap().clone();
            assert_eq!(&sa, b.step_discrete(&raw).unwrap(), "step {t}");
        }
        assert_eq!(a.drain_episodes(), b.drain_episodes());
    }

    /// `mid_batch_reset = false`: a finished env keeps its final observation and sits out
    /// (reward 0, no end, no final observation, no second episode) until `reset_held`, which
    /// starts only it; the other env steps on throughout.
    #[test]
    fn held_envs_wait_for_the_next_rollout() {
        let mut venv = VecEnv::new(vec![
            Box::new(TimeLimit::new(CartPole::new(), 2)) as Box<dyn Env>,
            Box::new(TimeLimit::new(CartPole::new(), 100)) as Box<dyn Env>,
        ])
        .unwrap();
        venv.hold_finished(true).unwrap();
        venv.reset(0);
        assert!(venv.reset_held().is_none(), "nothing held yet");
        venv.step_discrete(&[0, 0]).unwrap();
        let ended = venv.step_discrete(&[0, 0]).unwrap().clone();
        assert!(ended.truncated[0] && !ended.truncated[1]);
        assert_eq!(ended.final_obs[0].as_deref(), Some(&ended.obs[0..4]));
        assert_eq!(venv.held(), &[true, false]);
        for _ in 0..3 {
            let step = venv.step_discrete(&[1, 1]).unwrap();
            assert_eq!(
                &step.obs[0..4],
                &ended.obs[0..4],
                "the final observation stays"
            );
            assert_ne!(&step.obs[4..8], &ended.obs[4..8], "env 1 moves on");
            assert_eq!((step.reward[0], step.truncated[0]), (0.0, false));
            assert!(step.final_obs[0].is_none());
        }
        assert_eq!(venv.drain_episodes().len(), 1);
        let moving = venv.step_discrete(&[1, 1]).unwrap().obs[4..8].to_vec();
        let obs = venv.reset_held().expect("env 0 was held").to_vec();
        assert_ne!(&obs[0..4], &ended.obs[0..4], "env 0 starts a new episode");
        assert_eq!(&obs[4..8], moving.as_slice(), "env 1 is not reset");
        assert_eq!(venv.held(), &[false, false]);
        let step = venv.step_discrete(&[0, 0]).unwrap();
        assert_eq!(step.reward[0], 1.0, "env 0 steps again");
    }
}
