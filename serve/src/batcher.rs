//! The inference thread: takes queued Act requests, runs as many as arrive together as one
//! forward pass of the policy, and answers each with its own rows. Between batches it swaps
//! in the newest weights the learner published (when following one). tch work never runs on
//! the async runtime: requests reach this thread through a channel and their answers go back
//! on oneshots.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;

use fleetrl_core::acting::clipped;
use fleetrl_core::acting::policy_loader::{build_policy, ActingPolicy};
use fleetrl_core::broadcast::Received;
use fleetrl_core::config::RunConfig;
use fleetrl_core::items::rollout::Actions;
use fleetrl_core::models::{ModelError, PolicyStep, RnnState};
use fleetrl_proto::space::{Action, Space};
use tokio::sync::{oneshot, watch};

use crate::error::ServeError;
use crate::limits::Limits;
use crate::metrics::ServeMetrics;

/// One Act request, validated: `rows` observations of `obs_dim` values each, row-major, and
/// for a recurrent policy their states (`2H` values a row: h, then c; `None`: zeros).
pub(crate) struct Job {
    pub(crate) obs: Vec<f32>,
    pub(crate) rows: usize,
    pub(crate) state: Option<Vec<f32>>,
    pub(crate) queued: Instant,
    pub(crate) reply: oneshot::Sender<Result<Answer, ServeError>>,
}

/// The actions of one request.
#[derive(Debug)]
pub(crate) struct Answer {
    /// Discrete: one index a row. Continuous: `dim` values a row, clipped to the space.
    pub(crate) actions: Actions,
    pub(crate) version: i64,
    /// Rows in the forward pass that computed them.
    pub(crate) batch_rows: usize,
    /// A recurrent policy's next state, `2H` values a row.
    pub(crate) state: Option<Vec<f32>>,
}

/// Where the served weights come from.
pub(crate) enum Weights {
    /// A checkpoint's, loaded once.
    Checkpoint {
        tensors: Vec<(String, tch::Tensor)>,
        version: i64,
    },
    /// A learner's stream: the newest version whenever a batch starts.
    Following(watch::Receiver<Option<Arc<Received>>>),
}

/// The sending side of the queue, for the service: bounded by rows, not by requests.
#[derive(Clone)]
pub(crate) struct Queue {
    jobs: mpsc::Sender<Job>,
    queued_rows: Arc<AtomicUsize>,
    max_queued_rows: usize,
    metrics: Arc<ServeMetrics>,
}

impl Queue {
    /// Queues `job`; [`ServeError::Busy`] when its rows would take the queue past its bound,
    /// [`ServeError::Stopped`] when the inference thread is gone.
    pub(crate) fn submit(&self, job: Job) -> Result<(), ServeError> {
        let rows = job.rows;
        let before = self.queued_rows.fetch_add(rows, Ordering::AcqRel);
        if before + rows > self.max_queued_rows {
            self.queued_rows.fetch_sub(rows, Ordering::AcqRel);
            return Err(ServeError::Busy {
                queued: before,
                limit: self.max_queued_rows,
            });
        }
        self.metrics.queued_rows.set((before + rows) as f64);
        self.jobs.send(job).map_err(|_| ServeError::Stopped)
    }
}

/// What the inference thread needs besides its queue.
pub(crate) struct Inference {
    pub(crate) config: RunConfig,
    pub(crate) obs_space: Space,
    pub(crate) action_space: Space,
    pub(crate) weights: Weights,
    pub(crate) limits: Limits,
    pub(crate) metrics: Arc<ServeMetrics>,
}

/// Why the inference thread stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InferenceError {
    /// The policy could not be built, or the weights do not fit it.
    #[error("the served policy: {0}")]
    Model(#[from] ModelError),
    /// A forward pass gave actions that could not be read back.
    #[error("reading the policy's actions: {0}")]
    Tch(#[from] tch::TchError),
}

/// What the inference thread ends with: an error, or `Ok` once every sender of the queue is
/// gone (the sender is dropped if it panics).
pub(crate) type Ended = oneshot::Receiver<Result<(), InferenceError>>;

/// Starts the inference thread, which builds the policy (tch models are not `Send`), and waits
/// until it has; the queue to it, the width H of the policy's recurrent state (0:
/// feed-forward), and how the thread ends.
pub(crate) async fn spawn(inference: Inference) -> anyhow::Result<(Queue, i64, Ended)> {
    let (jobs_tx, jobs) = mpsc::channel();
    let queued_rows = Arc::new(AtomicUsize::new(0));
    let queue = Queue {
        jobs: jobs_tx,
        queued_rows: queued_rows.clone(),
        max_queued_rows: inference.limits.max_queued_rows,
        metrics: inference.metrics.clone(),
    };
    let (ready, built) = oneshot::channel::<Result<i64, String>>();
    let (done, ended) = oneshot::channel();
    std::thread::Builder::new()
        .name("inference".into())
        .spawn(move || {
            let batcher = match Batcher::new(inference, jobs, queued_rows) {
                Ok(batcher) => batcher,
                Err(error) => {
                    let _ = ready.send(Err(error.to_string()));
                    return;
                }
            };
            let _ = ready.send(Ok(batcher.state_size));
            let _ = done.send(batcher.run());
        })?;
    match built.await {
        Ok(Ok(state_size)) => Ok((queue, state_size, ended)),
        Ok(Err(error)) => Err(anyhow::anyhow!(error)),
        Err(_) => anyhow::bail!("the inference thread ended before building the policy"),
    }
}

struct Batcher {
    policy: Box<dyn ActingPolicy>,
    version: i64,
    following: Option<watch::Receiver<Option<Arc<Received>>>>,
    jobs: mpsc::Receiver<Job>,
    queued_rows: Arc<AtomicUsize>,
    /// A request that did not fit the last batch: the first of the next.
    held: Option<Job>,
    obs_dim: i64,
    /// Width H of the recurrent state; 0 for a feed-forward policy.
    state_size: i64,
    action_space: Space,
    limits: Limits,
    metrics: Arc<ServeMetrics>,
}

impl Batcher {
    fn new(
        inference: Inference,
        jobs: mpsc::Receiver<Job>,
        queued_rows: Arc<AtomicUsize>,
    ) -> Result<Batcher, InferenceError> {
        let Inference {
            config,
            obs_space,
            action_space,
            weights,
            limits,
            metrics,
        } = inference;
        let mut policy = build_policy(&config, &obs_space, &action_space)?;
        let (version, following) = match weights {
            Weights::Checkpoint { tensors, version } => {
                policy.load_named(&tensors)?;
                (version, None)
            }
            Weights::Following(rx) => (-1, Some(rx)),
        };
        metrics.policy_version.set(version as f64);
        let state_size = policy.state_size();
        Ok(Batcher {
            policy,
            version,
            following,
            jobs,
            queued_rows,
            held: None,
            obs_dim: obs_space.flat_dim() as i64,
            state_size,
            action_space,
            limits,
            metrics,
        })
    }

    /// Answers batches until every sender of the queue is gone.
    fn run(mut self) -> Result<(), InferenceError> {
        while let Some(batch) = self.next_batch() {
            self.swap_weights()?;
            self.answer(batch)?;
        }
        Ok(())
    }

    /// The next batch: the first waiting request, then whatever else arrives within the
    /// batching window, up to `max_batch_rows` rows (a request that would pass it waits for
    /// the next batch). `None` once the queue is closed.
    fn next_batch(&mut self) -> Option<Vec<Job>> {
        let first = match self.held.take() {
            Some(job) => job,
            None => self.jobs.recv().ok()?,
        };
        let deadline = Instant::now() + self.limits.batch_window();
        let mut rows = first.rows;
        let mut batch = vec![first];
        while rows < self.limits.max_batch_rows {
            let next = match self.jobs.try_recv() {
                Ok(job) => Ok(job),
                Err(_) => self
                    .jobs
                    .recv_timeout(deadline.saturating_duration_since(Instant::now())),
            };
            let job = match next {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            };
            if rows + job.rows > self.limits.max_batch_rows {
                self.held = Some(job);
                break;
            }
            rows += job.rows;
            batch.push(job);
        }
        let left = self.queued_rows.fetch_sub(rows, Ordering::AcqRel) - rows;
        self.metrics.queued_rows.set(left as f64);
        Some(batch)
    }

    /// Copies the newest published weights into the policy, if a newer version came.
    fn swap_weights(&mut self) -> Result<(), ModelError> {
        let Some(rx) = &mut self.following else {
            return Ok(());
        };
        if !rx.has_changed().unwrap_or(false) {
            return Ok(());
        }
        let Some(weights) = rx.borrow_and_update().clone() else {
            return Ok(());
        };
        weights.with_tensors(|t| self.policy.load_named(t))?;
        self.version = weights.version;
        self.metrics.policy_version.set(self.version as f64);
        tracing::info!(version = self.version, "serving a new policy version");
        Ok(())
    }

    /// One forward pass over `batch`, and each request's rows back to it.
    fn answer(&mut self, batch: Vec<Job>) -> Result<(), InferenceError> {
        let rows: usize = batch.iter().map(|j| j.rows).sum();
        if self.version < 0 {
            for job in batch {
                self.metrics.refused_no_weights.inc();
                let _ = job.reply.send(Err(ServeError::NoWeights));
            }
            return Ok(());
        }
        let mut flat = Vec::with_capacity(rows * self.obs_dim as usize);
        for job in &batch {
            flat.extend_from_slice(&job.obs);
        }
        let obs = tch::Tensor::from_slice(&flat).view([rows as i64, self.obs_dim]);
        let (step, next) = match self.state_size {
            0 => (self.policy.act(&obs, self.limits.deterministic), None),
            _ => {
                let (step, next) = self.act_recurrent(&obs, &batch)?;
                (step, Some(next))
            }
        };
        let actions = Actions::from_tensor(&step.action)?;
        let width = 2 * self.state_size as usize;
        self.metrics.batches.inc();
        self.metrics.batch_rows.set(rows as f64);
        let mut start = 0;
        for job in batch {
            let state = next
                .as_ref()
                .map(|n| n[start * width..(start + job.rows) * width].to_vec());
            let answer = Answer {
                actions: self.rows_of(&actions, start, job.rows),
                version: self.version,
                batch_rows: rows,
                state,
            };
            start += job.rows;
            self.metrics.requests.inc();
            self.metrics.rows.add(job.rows as f64);
            self.metrics.latency.observe_duration(job.queued.elapsed());
            let _ = job.reply.send(Ok(answer));
        }
        Ok(())
    }

    /// One recurrent step over `batch`'s observations `obs` from each row's state (zeros where
    /// a request sent none); the step and the next states, `2H` values a row.
    fn act_recurrent(
        &self,
        obs: &tch::Tensor,
        batch: &[Job],
    ) -> Result<(PolicyStep, Vec<f32>), tch::TchError> {
        let h = self.state_size;
        let mut flat = Vec::new();
        for job in batch {
            match &job.state {
                Some(state) => flat.extend_from_slice(state),
                None => flat.resize(flat.len() + job.rows * 2 * h as usize, 0.0),
            }
        }
        let states = tch::Tensor::from_slice(&flat).view([-1, 2 * h]);
        let state = RnnState {
            h: states.narrow(1, 0, h).contiguous(),
            c: states.narrow(1, h, h).contiguous(),
        };
        let (step, next) = self
            .policy
            .act_recurrent(obs, &state, self.limits.deterministic);
        let next = tch::Tensor::cat(&[next.h, next.c], 1).reshape([-1]);
        Ok((step, Vec::<f32>::try_from(&next)?))
    }

    /// Rows `start..start + n` of `actions`, continuous ones clipped to the action space as
    /// `fleetrl eval` plays them.
    fn rows_of(&self, actions: &Actions, start: usize, n: usize) -> Actions {
        match actions {
            Actions::Discrete(a) => Actions::Discrete(a[start..start + n].to_vec()),
            Actions::Continuous { dim, values } => {
                let mine = &values[start * dim..(start + n) * dim];
                let values = clipped(&self.action_space, mine, n)
                    .into_iter()
                    .flat_map(|a| match a {
                        Action::Continuous(v) => v,
                        Action::Discrete(i) => vec![i as f32],
                    })
                    .collect();
                Actions::Continuous { dim: *dim, values }
            }
        }
    }
}
