//! Data parallelism over threads that share one set of parameters.
//!
//! Each worker holds a handle on the same networks ([`Heads::shallow_clone`]); a step splits
//! the minibatch into shards, runs forward and backward on every shard at once (one on the
//! calling thread), and the gradients add up in the parameters' `.grad` (libtorch serialises
//! that accumulation). With each shard's loss weighted by its share of the minibatch, the sum
//! is exactly the full minibatch's gradient, so the optimiser step is the same as on one
//! thread: only the wall time changes.

use std::sync::mpsc::{channel, Receiver, RecvError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use crate::models::Heads;

/// How long a thread busy-waits for its next message before sleeping. Steps come every
/// fraction of a millisecond during an update, and a futex wake-up costs tens of microseconds
/// each way, which would eat most of what the second thread saves.
const SPIN: Duration = Duration::from_micros(300);

fn recv_spinning<T>(rx: &Receiver<T>) -> Result<T, RecvError> {
    let start = Instant::now();
    while start.elapsed() < SPIN {
        match rx.try_recv() {
            Ok(value) => return Ok(value),
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
            Err(TryRecvError::Disconnected) => return Err(RecvError),
        }
    }
    rx.recv()
}

/// Work for one shard: runs on some thread with that thread's handle on the networks (`H`:
/// the networks' type, [`Heads`] for the actor-critic).
pub type Job<R, H = Heads> = Box<dyn FnOnce(&H) -> R + Send>;

struct Worker<R, H> {
    jobs: Sender<Job<R, H>>,
    results: Receiver<R>,
}

/// Long-lived worker threads (a fresh thread per step would pay libtorch's per-thread setup
/// every time). Each holds a handle on networks: the caller's own (threads sharing one set of
/// parameters, [`ShardPool::new`]) or a replica on another device ([`ShardPool::with_handles`]
/// with [`crate::algos::replicas::Replicas`]).
pub struct ShardPool<R, H = Heads> {
    workers: Vec<Worker<R, H>>,
}

impl<R, H> std::fmt::Debug for ShardPool<R, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardPool({} workers)", self.workers.len())
    }
}

impl<R: Send + 'static> ShardPool<R> {
    /// `extra_threads` workers besides the caller, each with its own handle on `heads`.
    pub fn new(heads: &Heads, extra_threads: usize) -> ShardPool<R> {
        ShardPool::with_handles((0..extra_threads).map(|_| heads.shallow_clone()).collect())
    }
}

impl<R: Send + 'static, H: Send + 'static> ShardPool<R, H> {
    /// One worker per handle, besides the caller.
    pub fn with_handles(handles: Vec<H>) -> ShardPool<R, H> {
        let threads = tch::get_num_threads();
        let workers = handles
            .into_iter()
            .enumerate()
            .map(|(i, handle)| {
                let (jobs, job_rx) = channel::<Job<R, H>>();
                let (result_tx, results) = channel();
                std::thread::Builder::new()
                    .name(format!("shard-{}", i + 1))
                    .spawn(move || {
                        tch::set_num_threads(threads);
                        crate::cpu::flush_denormals();
                        while let Ok(job) = recv_spinning(&job_rx) {
                            if result_tx.send(job(&handle)).is_err() {
                                break;
                            }
                        }
                    })
                    .expect("spawning a shard thread");
                Worker { jobs, results }
            })
            .collect();
        ShardPool { workers }
    }

    /// Threads a step runs on, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `jobs[0]` here and the rest on the workers (at most one each); results in order.
    pub fn run(&self, local: &H, mut jobs: Vec<Job<R, H>>) -> Vec<R> {
        assert!(
            !jobs.is_empty() && jobs.len() <= self.threads(),
            "one job per thread"
        );
        let remote: Vec<Job<R, H>> = jobs.drain(1..).collect();
        let busy = remote.len();
        for (worker, job) in self.workers.iter().zip(remote) {
            worker
                .jobs
                .send(job)
                .expect("shard threads live as long as the pool");
        }
        let first = jobs.pop().expect("checked non-empty")(local);
        let mut results = vec![first];
        for worker in &self.workers[..busy] {
            results.push(
                recv_spinning(&worker.results).expect("shard threads live as long as the pool"),
            );
        }
        results
    }
}
