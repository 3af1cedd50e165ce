//! PPO+D's demo tables: the reward-demo buffer and the value-demo buffer a replay server keeps
//! for its actors, with PPO+D's bookkeeping (admission, eviction, threshold, annealing).
//!
//! # Buffers
//!
//! - **Reward demos**: the initial demos loaded at start ([`DemoKind::Initial`]: human,
//!   scripted or checkpoint play; never evicted) and agent episodes whose return reaches the
//!   reward threshold ([`DemoKind::Agent`]).
//! - **Value demos** ([`DemoKind::Value`]): agent episodes below the threshold, ranked by the
//!   maximum value the network predicted along them.
//!
//! Both share `capacity`. **Eviction order** when over capacity: value demos first, the one
//! with the lowest max value; then agent reward demos, the longest first (ties: the oldest);
//! initial demos never.
//!
//! # Threshold
//!
//! The threshold starts at `reward_threshold` if set, else at the lowest return among the
//! initial demos (none and no initial demos: no episode qualifies until a demo arrives in the
//! supplementary directory). An agent episode with a return above every reward demo held so
//! far drops the agent reward demos (never the initial ones), and after each admission the
//! threshold becomes the lowest return among the agent reward demos if that is higher: it
//! only rises.
//!
//! # Annealing
//!
//! Each agent episode admitted to the reward buffer moves `phi0 / anneal_steps` from phi to
//! rho, each clipped to `[0, rho0 + phi0]`, so rho + phi stays rho0 + phi0 and after
//! `anneal_steps` successes phi = 0. `anneal_steps` is fixed (default: capacity minus the
//! initial demos), unlike pytorchrl, which divides by the changing number of value demos.
//!
//! # Value-demo weights
//!
//! [`fleetrl_runtime::demo::value_weights`]: p_j proportional to `exp(alpha * (v_j - max_k v_k))`, i.e. a softmax
//! with temperature 1/alpha. It is positive and increasing in v for negative values too, where
//! pytorchrl's `v^alpha` is not.

mod persist;
#[cfg(test)]
mod tests;

use fleetrl_runtime::demo::{Demo, DemoError, DemoKind};

pub use persist::{load, save};

/// A demo in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDemo {
    /// Unique within the store, never reused.
    pub id: u64,
    /// Its buffer.
    pub kind: DemoKind,
    /// Highest value predicted along it (value demos are ranked by it).
    pub max_value: f32,
    /// Its return, cached.
    pub total_reward: f64,
    /// The episode.
    pub demo: Demo,
}

/// The store's parameters (from `[ppod]`).
#[derive(Debug, Clone, PartialEq)]
pub struct DemoStoreConfig {
    /// Demos held in all.
    pub capacity: usize,
    /// Initial rho.
    pub rho: f64,
    /// Initial phi.
    pub phi: f64,
    /// Successes over which phi moves to rho (0: capacity minus the initial demos).
    pub anneal_steps: usize,
    /// Configured minimum return of a reward demo.
    pub reward_threshold: Option<f64>,
}

/// What became of an offered episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Joined the reward buffer.
    Reward,
    /// Joined the value buffer.
    Value,
    /// Not kept.
    Rejected,
}

/// Counts and parameters, as reported in metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DemoStats {
    /// Current rho.
    pub rho: f64,
    /// Current phi.
    pub phi: f64,
    /// Current reward threshold (infinite while none is defined).
    pub reward_threshold: f64,
    /// Initial demos held.
    pub initial: usize,
    /// Agent reward demos held.
    pub agent: usize,
    /// Value demos held.
    pub value: usize,
    /// Agent episodes admitted to the reward buffer so far.
    pub successes: u64,
    /// Changes so far (clients resynchronise when it moves).
    pub generation: u64,
}

/// The demo buffers and their bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoStore {
    config: DemoStoreConfig,
    demos: Vec<StoredDemo>,
    next_id: u64,
    rho: f64,
    phi: f64,
    threshold: f64,
    successes: u64,
    collections: u64,
    generation: u64,
    /// Supplementary files already read (by file name).
    seen_files: Vec<String>,
}

impl DemoStore {
    /// A store holding `initial` demos (never evicted). Fails if they do not fit the capacity
    /// or are inconsistent.
    pub fn new(config: DemoStoreConfig, initial: Vec<Demo>) -> Result<DemoStore, DemoError> {
        if initial.len() > config.capacity {
            return Err(DemoError::Inconsistent(format!(
                "{} initial demos do not fit ppod.capacity {}",
                initial.len(),
                config.capacity
            )));
        }
        let lowest = initial
            .iter()
            .map(Demo::total_reward)
            .min_by(f64::total_cmp);
        let threshold = config.reward_threshold.or(lowest).unwrap_or(f64::INFINITY);
        let mut store = DemoStore {
            rho: config.rho,
            phi: config.phi,
            config,
            demos: Vec::new(),
            next_id: 0,
            threshold,
            successes: 0,
            collections: 0,
            generation: 0,
            seen_files: Vec::new(),
        };
        for demo in initial {
            demo.validate()?;
            store.push(DemoKind::Initial, demo, f32::NEG_INFINITY);
        }
        Ok(store)
    }

    /// Adds `demos` as initial *agent* demos (`ppod.initial_agent_demos_dir`, pytorchrl's
    /// `initial_agent_demos_dir`): reward demos like the agent's own, so a better episode
    /// evicts them, where the initial (human) demos are never evicted. Without a configured
    /// `reward_threshold`, the threshold is the lowest return among all initial demos.
    pub fn with_agent_demos(mut self, demos: Vec<Demo>) -> Result<DemoStore, DemoError> {
        if self.demos.len() + demos.len() > self.config.capacity {
            return Err(DemoError::Inconsistent(format!(
                "{} initial and {} initial agent demos do not fit ppod.capacity {}",
                self.demos.len(),
                demos.len(),
                self.config.capacity
            )));
        }
        if self.config.reward_threshold.is_none() {
            let lowest = self
                .demos
                .iter()
                .map(|d| d.total_reward)
                .chain(demos.iter().map(Demo::total_reward))
                .min_by(f64::total_cmp);
            self.threshold = lowest.unwrap_or(f64::INFINITY);
        }
        for demo in demos {
            demo.validate()?;
            self.push(DemoKind::Agent, demo, f32::NEG_INFINITY);
        }
        Ok(self)
    }

    /// Every demo held, in admission order.
    pub fn demos(&self) -> &[StoredDemo] {
        &self.demos
    }

    /// Counts and parameters.
    pub fn stats(&self) -> DemoStats {
        let count = |kind| self.demos.iter().filter(|d| d.kind == kind).count();
        DemoStats {
            rho: self.rho,
            phi: self.phi,
            reward_threshold: self.threshold,
            initial: count(DemoKind::Initial),
            agent: count(DemoKind::Agent),
            value: count(DemoKind::Value),
            successes: self.successes,
            generation: self.generation,
        }
    }

    /// The parameters it was built with.
    pub fn config(&self) -> &DemoStoreConfig {
        &self.config
    }

    fn push(&mut self, kind: DemoKind, demo: Demo, max_value: f32) {
        self.demos.push(StoredDemo {
            id: self.next_id,
            kind,
            max_value,
            total_reward: demo.total_reward(),
            demo,
        });
        self.next_id += 1;
        self.generation += 1;
    }

    /// Offers an agent episode with the highest value predicted along it. Episodes reaching
    /// the threshold join the reward buffer (see the module docs), others compete for the
    /// value buffer.
    pub fn offer(&mut self, demo: Demo, max_value: f32) -> Result<Admission, DemoError> {
        demo.validate()?;
        if demo.is_empty() {
            return Ok(Admission::Rejected);
        }
        let demo = truncated_after_last_reward(demo);
        if demo.total_reward() >= self.threshold {
            self.admit_reward(demo);
            return Ok(Admission::Reward);
        }
        let max_value = if max_value.is_nan() {
            f32::NEG_INFINITY
        } else {
            max_value
        };
        let lowest = self
            .demos
            .iter()
            .filter(|d| d.kind == DemoKind::Value)
            .map(|d| d.max_value)
            .min_by(f32::total_cmp);
        let room = self.demos.len() < self.config.capacity;
        if !(room || lowest.is_some_and(|low| max_value > low)) {
            return Ok(Admission::Rejected);
        }
        self.push(DemoKind::Value, demo, max_value);
        self.enforce_capacity();
        Ok(Admission::Value)
    }

    /// Adds a demo from the supplementary directory: an agent reward demo if it reaches the
    /// threshold (or the reward buffer is empty), else rejected.
    pub fn offer_supplementary(&mut self, name: &str, demo: Demo) -> Result<Admission, DemoError> {
        self.mark_seen(name);
        demo.validate()?;
        let empty = !self.demos.iter().any(|d| d.kind.is_reward());
        if demo.is_empty() || !(empty || demo.total_reward() >= self.threshold) {
            return Ok(Admission::Rejected);
        }
        self.admit_reward(demo);
        Ok(Admission::Reward)
    }

    /// Records that the supplementary file `name` was read (a bad file is not read again).
    pub fn mark_seen(&mut self, name: &str) {
        if !self.has_seen(name) {
            self.seen_files.push(name.to_string());
        }
    }

    /// Whether the supplementary file `name` was read already.
    pub fn has_seen(&self, name: &str) -> bool {
        self.seen_files.iter().any(|s| s == name)
    }

    fn admit_reward(&mut self, demo: Demo) {
        let total = demo.total_reward();
        let best = self
            .demos
            .iter()
            .filter(|d| d.kind.is_reward())
            .map(|d| d.total_reward)
            .max_by(f64::total_cmp);
        if best.is_some_and(|b| total > b) {
            self.demos.retain(|d| d.kind != DemoKind::Agent);
        }
        self.push(DemoKind::Agent, demo, f32::NEG_INFINITY);
        self.enforce_capacity();
        self.anneal();
        let lowest_agent = self
            .demos
            .iter()
            .filter(|d| d.kind == DemoKind::Agent)
            .map(|d| d.total_reward)
            .min_by(f64::total_cmp);
        if let Some(low) = lowest_agent {
            if !(self.threshold.is_finite() && self.threshold >= low) {
                self.threshold = low;
            }
        }
    }

    /// Counts one success and moves `phi0 / anneal_steps` from phi to rho.
    fn anneal(&mut self) {
        self.successes += 1;
        self.set_annealed();
    }

    /// Sets rho and phi from the success count (so a restored store gets the same bits).
    fn set_annealed(&mut self) {
        let initial = self
            .demos
            .iter()
            .filter(|d| d.kind == DemoKind::Initial)
            .count();
        let steps = match self.config.anneal_steps {
            0 => self.config.capacity.saturating_sub(initial).max(1),
            n => n,
        };
        let moved = self.config.phi / steps as f64 * self.successes as f64;
        let total = self.config.rho + self.config.phi;
        self.rho = (self.config.rho + moved).clamp(0.0, total);
        self.phi = (self.config.phi - moved).clamp(0.0, total);
    }

    /// Evicts (value demos by lowest max value, then the longest agent reward demos) until
    /// the store fits its capacity; initial demos stay.
    fn enforce_capacity(&mut self) {
        while self.demos.len() > self.config.capacity {
            let value = self
                .demos
                .iter()
                .enumerate()
                .filter(|(_, d)| d.kind == DemoKind::Value)
                .min_by(|a, b| a.1.max_value.total_cmp(&b.1.max_value))
                .map(|(i, _)| i);
            // max_by_key keeps the last maximum; reverse so ties evict the oldest.
            let agent = self
                .demos
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, d)| d.kind == DemoKind::Agent)
                .max_by_key(|(_, d)| d.demo.len())
                .map(|(i, _)| i);
            match value.or(agent) {
                Some(i) => {
                    self.demos.remove(i);
                    self.generation += 1;
                }
                None => break,
            }
        }
    }

    /// Refreshes a value demo's max value after an actor replayed it with the current
    /// network (ignored if it is gone or not a value demo).
    pub fn refresh_value(&mut self, id: u64, max_value: f32) {
        if max_value.is_nan() {
            return;
        }
        if let Some(d) = self
            .demos
            .iter_mut()
            .find(|d| d.id == id && d.kind == DemoKind::Value)
        {
            d.max_value = max_value;
            self.generation += 1;
        }
    }

    /// Counts one collection; true every `every` collections (time to save and to scan).
    pub fn tick_collection(&mut self, every: u64) -> bool {
        self.collections += 1;
        self.collections.is_multiple_of(every.max(1))
    }

    /// The `k` value demos with the highest values predicted along them (pytorchrl saves
    /// them beside the reward demos).
    pub fn top_value_demos(&self, k: usize) -> Vec<&StoredDemo> {
        self.top(DemoKind::Value, k, |a, b| {
            b.max_value.total_cmp(&a.max_value)
        })
    }

    /// The `k` agent reward demos with the highest returns (ties: shorter first).
    pub fn top_agent_demos(&self, k: usize) -> Vec<&StoredDemo> {
        self.top(DemoKind::Agent, k, |a, b| {
            b.total_reward
                .total_cmp(&a.total_reward)
                .then(a.demo.len().cmp(&b.demo.len()))
        })
    }

    /// The first `k` demos of `kind` in `order`.
    fn top(
        &self,
        kind: DemoKind,
        k: usize,
        order: impl FnMut(&&StoredDemo, &&StoredDemo) -> std::cmp::Ordering,
    ) -> Vec<&StoredDemo> {
        let mut ranked: Vec<&StoredDemo> = self.demos.iter().filter(|d| d.kind == kind).collect();
        ranked.sort_by(order);
        ranked.truncate(k);
        ranked
    }
}

/// The episode cut after its last positive reward, as PPO+D stores candidates (unchanged
/// when no reward is positive or the last one is on the last step).
pub fn truncated_after_last_reward(mut demo: Demo) -> Demo {
    let Some(last) = demo.rewards.iter().rposition(|&r| r > 0.0) else {
        return demo;
    };
    let keep = last + 1;
    if keep == demo.len() {
        return demo;
    }
    let d = demo.obs_dim();
    demo.rewards.truncate(keep);
    demo.observations.truncate((keep + 1) * d);
    if let Some(values) = &mut demo.values {
        values.truncate(keep);
    }
    match &mut demo.actions {
        fleetrl_runtime::demo::DemoActions::Discrete { actions, .. } => actions.truncate(keep),
        fleetrl_runtime::demo::DemoActions::Continuous { low, actions, .. } => {
            actions.truncate(keep * low.len())
        }
    }
    demo.terminated = false;
    demo
}
