//! Learner ranks as threads of this test, on gloo over loopback: every rank trains on its own
//! part of a fixed batch, and the parameters end as one learner's on the whole batch.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

use super::{differing_keys, Backend, CollectiveError, Group, GroupSpec};
use crate::algos::{registry, Algorithm, Batch};
use crate::config::RunConfig;
use crate::items::rollout::{Actions, RolloutBatch};
use crate::items::transition::TransitionBatch;

/// Updates in each exactness run.
const UPDATES: usize = 50;

/// Models of this file are built one at a time from a seed: libtorch's generator is the
/// process's. The crate's other tests draw from it too, so where two learners must start from
/// the same weights one is copied into the other ([`Start`]).
static BUILD: Mutex<()> = Mutex::new(());

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("bound").port()
}

fn spec(port: u16, rank: u32, world_size: u32, timeout: Duration) -> GroupSpec {
    GroupSpec {
        rendezvous: format!("127.0.0.1:{port}"),
        rank,
        world_size,
        backend: Backend::Gloo,
        timeout,
    }
}

/// Runs `rank_fn(rank)` on `world_size` threads at once; results in rank order.
fn ranks<R: Send>(world_size: u32, rank_fn: impl Fn(u32) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..world_size)
            .map(|rank| {
                let rank_fn = &rank_fn;
                s.spawn(move || rank_fn(rank))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

fn config(text: &str) -> RunConfig {
    RunConfig::from_toml(text, "test").expect("test config")
}

/// PPO on CartPole: 4 epochs of one unshuffled minibatch (the update draws no random
/// numbers), advantages as they come (normalising them is per rank). Adam divides by the
/// root of the second moment, which magnifies float rounding where gradients are small; at
/// lr 1e-2 the 200 steps of 50 updates drift apart by 6e-6 (summation order), at 1e-3 by
/// less than 1e-6.
fn ppo() -> RunConfig {
    config(
        "[env]\nid = \"CartPole-v1\"\n[algo]\nname = \"ppo\"\nepochs = 4\nminibatches = 1\n\
         learning_rate = 1e-3\nnormalize_advantage = false\n",
    )
}

/// DDPG on Pendulum (the TD3 update without target smoothing: no random numbers).
fn ddpg() -> RunConfig {
    config(
        "[env]\nid = \"Pendulum-v1\"\n[algo]\nname = \"ddpg\"\npolicy_delay = 1\n\
         target_noise = 0.0\npolicy_lr = 1e-3\nqf_lr = 1e-3\n",
    )
}

fn sac() -> RunConfig {
    config("[env]\nid = \"Pendulum-v1\"\n[algo]\nname = \"sac\"\n")
}

/// The algorithm `config` names with weights drawn from `seed`.
fn build(config: &RunConfig, seed: i64) -> Box<dyn Algorithm> {
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let env = crate::envs::make_configured(&config.env).expect("env");
    tch::manual_seed(seed);
    registry::build(
        config,
        &env.observation_space(),
        &env.action_space(),
        &[Device::Cpu],
    )
    .expect("algorithm")
}

/// Where every learner of one exactness check starts: a model's parameters and the rest of its
/// state (target networks, optimiser), copied into each one rather than drawn again from a
/// seed, which another test's draws between `manual_seed` and the build would change. (Behind
/// a lock: tensors are not `Sync`, and every rank's thread reads them.)
struct Start(Mutex<Snapshot>);

struct Snapshot {
    params: Vec<(String, Tensor)>,
    state: Vec<(String, Tensor)>,
}

fn copies(named: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    named.into_iter().map(|(n, t)| (n, t.copy())).collect()
}

impl Start {
    fn of(config: &RunConfig) -> Start {
        let algo = build(config, 7);
        Start(Mutex::new(Snapshot {
            params: copies(algo.trained().model().named_parameters()),
            state: copies(algo.state()),
        }))
    }

    fn snapshot(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The starting parameters.
    fn params(&self) -> Vec<(String, Tensor)> {
        copies(
            self.snapshot()
                .params
                .iter()
                .map(|(n, t)| (n.clone(), t.shallow_clone()))
                .collect(),
        )
    }

    /// The algorithm `config` names, starting here.
    fn build(&self, config: &RunConfig) -> Box<dyn Algorithm> {
        let mut algo = build(config, 7);
        let start = self.snapshot();
        let model = algo.trained_mut().model_mut();
        model
            .load_named(&start.params)
            .expect("the start's parameters");
        algo.load_state(&start.state).expect("the start's state");
        algo
    }
}

/// A deterministic CartPole rollout batch `[T = 8, B = 6]` for update `k`.
fn rollouts(k: usize) -> RolloutBatch {
    let (t, b) = (8usize, 6usize);
    let n = t * b;
    let wave = |i: usize, m: usize| (((i * 7 + k * 3) % m) as f32) / m as f32 - 0.5;
    RolloutBatch {
        t,
        b,
        obs_dim: 4,
        obs: (0..n * 4).map(|i| wave(i, 13)).collect::<Vec<f32>>().into(),
        action: Actions::Discrete((0..n).map(|i| ((i + k) % 2) as i64).collect()),
        reward: (0..n).map(|i| 1.0 + wave(i, 5)).collect(),
        terminated: (0..n).map(|i| i % 17 == 9).collect(),
        truncated: vec![false; n],
        log_prob: (0..n).map(|i| -0.7 + wave(i, 7) * 0.2).collect(),
        value: (0..n).map(|i| wave(i, 11)).collect(),
        final_value: vec![0.0; n],
        bootstrap_value: (0..b).map(|i| wave(i, 3)).collect(),
        bootstrap_obs: (0..b * 4).map(|i| wave(i, 9)).collect(),
        policy_version: vec![0],
        init_state: None,
        valid: None,
    }
}

/// Columns (envs) `cols` of a `[T, B]` batch: the rows one rank would have been sent.
fn columns(batch: &RolloutBatch, cols: std::ops::Range<usize>) -> RolloutBatch {
    let (t, b, d) = (batch.t, batch.b, batch.obs_dim);
    let pick = |width: usize| -> Vec<usize> {
        (0..t)
            .flat_map(|row| {
                cols.clone()
                    .flat_map(move |c| (0..width).map(move |j| (row * b + c) * width + j))
            })
            .collect()
    };
    let take = |v: &[f32], idx: &[usize]| idx.iter().map(|&i| v[i]).collect::<Vec<f32>>();
    let rows = pick(1);
    let crate::items::rollout::Observations::F32(obs) = &batch.obs else {
        panic!("f32 observations")
    };
    let Actions::Discrete(actions) = &batch.action else {
        panic!("discrete actions")
    };
    let per_col = |v: &[f32], width: usize| -> Vec<f32> {
        cols.clone()
            .flat_map(|c| v[c * width..(c + 1) * width].to_vec())
            .collect()
    };
    RolloutBatch {
        t,
        b: cols.len(),
        obs_dim: d,
        obs: take(obs, &pick(d)).into(),
        action: Actions::Discrete(rows.iter().map(|&i| actions[i]).collect()),
        reward: take(&batch.reward, &rows),
        terminated: rows.iter().map(|&i| batch.terminated[i]).collect(),
        truncated: rows.iter().map(|&i| batch.truncated[i]).collect(),
        log_prob: take(&batch.log_prob, &rows),
        value: take(&batch.value, &rows),
        final_value: take(&batch.final_value, &rows),
        bootstrap_value: per_col(&batch.bootstrap_value, 1),
        bootstrap_obs: per_col(&batch.bootstrap_obs, d),
        policy_version: batch.policy_version.clone(),
        init_state: None,
        valid: None,
    }
}

/// A deterministic Pendulum transition batch of 48 rows for update `k`.
fn transitions(k: usize) -> TransitionBatch {
    let n = 48i64;
    let f = |len: i64, scale: f64, phase: f64| {
        (Tensor::arange(len, (Kind::Float, Device::Cpu)) * 0.37 + (k as f64 * 0.11 + phase)).sin()
            * scale
    };
    TransitionBatch {
        obs: f(n * 3, 1.0, 0.0).view([n, 3]),
        action: f(n, 1.9, 1.0).view([n, 1]),
        reward: f(n, 3.0, 2.0) - 4.0,
        discount: Tensor::full([n], 0.98, (Kind::Float, Device::Cpu)),
        next_obs: f(n * 3, 1.0, 0.5).view([n, 3]),
        weights: Tensor::ones([n], (Kind::Float, Device::Cpu)),
    }
}

fn rows_of(batch: &TransitionBatch, start: i64, len: i64) -> TransitionBatch {
    TransitionBatch {
        obs: batch.obs.narrow(0, start, len),
        action: batch.action.narrow(0, start, len),
        reward: batch.reward.narrow(0, start, len),
        discount: batch.discount.narrow(0, start, len),
        next_obs: batch.next_obs.narrow(0, start, len),
        weights: batch.weights.narrow(0, start, len),
    }
}

/// Rank `rank` of `world`'s share of `n` items: its start and length.
fn share(n: usize, rank: u32, world: u32) -> (usize, usize) {
    let (rank, world) = (rank as usize, world as usize);
    let start = n * rank / world;
    (start, n * (rank + 1) / world - start)
}

/// Trains `UPDATES` updates; `part(k, rank)` is the rank's batch of update `k` and its rows.
/// Returns each rank's parameters (one learner without a group when `world` is 1). Rank 0
/// starts at `start`.
fn train(
    config: &RunConfig,
    start: &Start,
    world: u32,
    part: impl Fn(usize, u32) -> (Batch, usize) + Sync,
) -> Vec<Vec<(String, Tensor)>> {
    let port = free_port();
    ranks(world, |rank| {
        // Every other rank starts from other weights: rank 0's must reach them.
        let mut algo = match rank {
            0 => start.build(config),
            _ => build(config, 7 + i64::from(rank)),
        };
        let group = (world > 1).then(|| {
            let group = Group::join(&spec(port, rank, world, Duration::from_secs(30)), "")
                .expect("joining");
            Arc::new(group)
        });
        if let Some(group) = &group {
            crate::algos::join_ranks(algo.as_mut(), group).expect("joining the ranks");
        }
        for k in 0..UPDATES {
            let (batch, rows) = part(k, rank);
            if let Some(group) = &group {
                group.weigh_rows(rows).expect("row count");
            }
            algo.update(&batch).expect("update");
            if let Some(group) = &group {
                assert_eq!(group.failure(), None);
            }
        }
        algo.trained().model().named_parameters()
    })
}

fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> (String, f64) {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|((name, x), (_, y))| (name.clone(), (x - y).abs().max().double_value(&[])))
        .fold((String::new(), 0.0), |m, d| if d.1 > m.1 { d } else { m })
}

/// Every rank equals the single learner within `tolerance`, and training moved it.
fn assert_exact(
    algo: &str,
    one: &[(String, Tensor)],
    start: &[(String, Tensor)],
    many: &[Vec<(String, Tensor)>],
    tolerance: f64,
) {
    let moved = max_diff(one, start).1;
    assert!(moved > 1e-2, "{algo}: parameters barely moved ({moved})");
    for (rank, params) in many.iter().enumerate() {
        let (name, diff) = max_diff(params, one);
        eprintln!(
            "{algo}, {} ranks: rank {rank} within {diff:.1e} of one learner (moved {moved:.2})",
            many.len()
        );
        assert!(
            diff < tolerance,
            "{algo}, {} ranks: rank {rank}'s `{name}` differs from one learner's by {diff}",
            many.len()
        );
    }
}

#[test]
fn ranks_on_parts_of_a_batch_train_exactly_like_one_learner_on_all_of_it() {
    let started = Instant::now();
    let ppo = ppo();
    let start = Start::of(&ppo);
    let whole = |k, _| (Batch::Rollouts(Box::new(rollouts(k))), 48);
    let one = train(&ppo, &start, 1, whole).remove(0);
    for world in [2, 3] {
        let many = train(&ppo, &start, world, |k, rank| {
            let (c0, len) = share(6, rank, world);
            let part = columns(&rollouts(k), c0..c0 + len);
            (Batch::Rollouts(Box::new(part)), len * 8)
        });
        assert_exact("ppo", &one, &start.params(), &many, 1e-6);
    }
    let ddpg = ddpg();
    let start = Start::of(&ddpg);
    let whole = |k, _| (Batch::Transitions(transitions(k)), 48);
    let one = train(&ddpg, &start, 1, whole).remove(0);
    for world in [2, 3] {
        let many = train(&ddpg, &start, world, |k, rank| {
            let (s, len) = share(48, rank, world);
            let part = rows_of(&transitions(k), s as i64, len as i64);
            (Batch::Transitions(part), len)
        });
        assert_exact("ddpg", &one, &start.params(), &many, 1e-6);
    }
    eprintln!("exactness: {:.1} s", started.elapsed().as_secs_f64());
}

/// SAC samples its policy's noise from libtorch's generator, so no single learner draws the
/// same numbers; what the group guarantees is that the ranks take identical steps.
#[test]
fn sac_ranks_stay_identical_on_their_own_batches() {
    let sac = sac();
    let start = Start::of(&sac);
    let many = train(&sac, &start, 2, |k, rank| {
        let part = rows_of(&transitions(k + 100 * rank as usize), 0, 24);
        (Batch::Transitions(part), 24)
    });
    assert!(
        max_diff(&many[0], &start.params()).1 > 1e-2,
        "SAC barely moved"
    );
    let (name, diff) = max_diff(&many[0], &many[1]);
    assert!(
        diff < 1e-6,
        "rank 1's `{name}` differs from rank 0's by {diff}"
    );
}

#[test]
fn a_rank_whose_config_differs_is_refused_naming_the_keys() {
    let port = free_port();
    let leader = "seed = 1\n[learner]\nrank = 0\nworld_size = 2\n[algo]\nname = \"ppo\"\n";
    let other = "seed = 2\n[learner]\nrank = 1\nworld_size = 2\n[algo]\nname = \"a2c\"\n";
    let results = ranks(2, |rank| {
        let text = if rank == 0 { leader } else { other };
        Group::join(&spec(port, rank, 2, Duration::from_secs(3)), text).map(|_| ())
    });
    assert_eq!(
        results[1],
        Err(CollectiveError::ConfigMismatch {
            rank: 1,
            keys: vec!["algo.name".into(), "seed".into()],
        })
    );
    // Rank 0 waits for the refused rank in vain, for the timeout and no longer.
    let error = results[0].clone().unwrap_err().to_string();
    assert!(error.contains("rendezvous at 127.0.0.1"), "{error}");
    assert_eq!(differing_keys(leader, leader), Vec::<String>::new());
}

/// Where [`a_rank_that_dies_stops_the_others_within_the_timeout_naming_it`] tells the copy of
/// this binary it starts as rank 1 the rendezvous port.
const DYING_RANK_PORT: &str = "FLEETRL_TEST_DYING_RANK_PORT";

/// What that rank prints once its first all-reduce is done.
const REDUCED: &str = "dying rank: reduced once";

/// The collective timeout of the dying-rank test (also the rendezvous's, which waits for the
/// second process to load libtorch).
const DYING_TIMEOUT: Duration = Duration::from_secs(10);

/// Rank 1 of [`a_rank_that_dies_stops_the_others_within_the_timeout_naming_it`], in a process of
/// its own as a learner rank is: joins, takes part in one all-reduce, says so, and waits to be
/// killed. Run by that test only.
#[test]
#[ignore = "rank 1 of a_rank_that_dies_stops_the_others_within_the_timeout_naming_it, which starts it"]
fn dying_rank() {
    let port: u16 = std::env::var(DYING_RANK_PORT)
        .expect("started by a_rank_that_dies_stops_the_others_within_the_timeout_naming_it")
        .parse()
        .expect("a port");
    let group = Group::join(&spec(port, 1, 2, DYING_TIMEOUT), "").expect("joining");
    let grads = Tensor::ones([1000], (Kind::Float, Device::Cpu));
    group
        .reduce_gradients(&grads)
        .expect("the first all-reduce");
    println!("{REDUCED}");
    std::thread::sleep(DYING_TIMEOUT * 6);
}

/// Rank 1 runs in a second process (this binary again, running [`dying_rank`]) and is killed
/// after the first all-reduce: the kernel closes its sockets, as when a learner's process or
/// machine goes. (This test had both ranks as threads of one process, rank 1 dropping its group
/// while rank 0 reduced: the binary died with SIGSEGV in about one run of ten on 2026-12-07,
/// never in a deployment's shape, where each rank has its own process.)
#[test]
fn a_rank_that_dies_stops_the_others_within_the_timeout_naming_it() {
    use std::io::BufRead;
    let port = free_port();
    let mut rank1 = std::process::Command::new(std::env::current_exe().expect("this binary"))
        .args([
            "--exact",
            "collective::tests::dying_rank",
            "--ignored",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(DYING_RANK_PORT, port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting rank 1");
    // Killed however this test ends.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = rank1.stdout.take().expect("rank 1's stdout");
    let mut rank1 = Kill(rank1);
    let group = Group::join(&spec(port, 0, 2, DYING_TIMEOUT), "").expect("joining");
    let grads = Tensor::ones([1000], (Kind::Float, Device::Cpu));
    group
        .reduce_gradients(&grads)
        .expect("the first all-reduce");
    let reduced = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest prints the test's name on the same line first.
        .any(|line| line.ends_with(REDUCED));
    assert!(reduced, "rank 1 exited before saying it had reduced");
    rank1.0.kill().expect("killing rank 1");
    rank1.0.wait().expect("rank 1's exit");
    let started = Instant::now();
    let error = group.reduce_gradients(&grads).unwrap_err();
    let took = started.elapsed();
    // Latched: the next collective fails at once.
    assert_eq!(group.all_reduce_sum(&grads, "again"), Err(error.clone()));
    let error = error.to_string();
    assert!(error.contains("rank 1 stopped answering"), "{error}");
    assert!(
        took < DYING_TIMEOUT + Duration::from_secs(2),
        "took {took:?}"
    );
}

#[test]
fn counts_are_summed_and_a_rank_that_leaves_is_named_by_the_others() {
    let port = free_port();
    let results = ranks(3, |rank| {
        let group = Group::join(&spec(port, rank, 3, Duration::from_secs(5)), "").expect("joining");
        let mut counts = [0.0; super::COUNTS];
        counts[0] = f64::from(rank + 1);
        counts[5] = 1.0;
        let sums = group.agree(counts).expect("the first agreement");
        if rank == 2 {
            group.leave().expect("leaving");
            // The rank that left does not go on either.
            return (sums, group.agree(counts).map(|_| ()).unwrap_err());
        }
        (sums, group.agree(counts).map(|_| ()).unwrap_err())
    });
    for (rank, (sums, error)) in results.iter().enumerate() {
        assert_eq!(sums[0], 6.0, "rank {rank}");
        assert_eq!(sums[5], 3.0, "rank {rank}");
        assert_eq!(
            *error,
            CollectiveError::Left {
                rank: rank as u32,
                world_size: 3,
                left: vec![2]
            }
        );
    }
    assert!(
        results[0]
            .1
            .to_string()
            .contains("learner rank 2 left the group"),
        "{}",
        results[0].1
    );
}
