//! Where an off-policy update's time goes, without the pipeline: one preset's gradient update
//! on a synthetic batch of its batch size (PEARL: of its `meta_batch_size` rounds), decoding a sampled (stacked) batch into tch tensors,
//! exporting the weights (what the learner publishes), importing them (what an actor does on a
//! new version) and one action for one env. Compare the update's time with the learner's
//! `fleetrl_learner_update_seconds` histogram (`_sum` / `_count`) in a real run to see the pipeline's share.
//!
//! `cargo run --release -p fleetrl-core --example offpolicy_timing -- <preset> [key=value]...`
//! (presets on gymnasium envs, `gym:` ids, need the embedded Python: add `--features python`).
//! `learner.device=cuda` times the update and the decode on the GPU, as the learner runs them
//! there: the clock is read after the device has finished the timed calls, and the update is
//! replayed from a CUDA graph unless `learner.cuda_graph=false`. It first checks the graph
//! against the update as written:
//! two learners from the same initial weights and seed take the same 50 updates on the same
//! batches, one replaying a graph and one not, and it prints how far their parameters ended
//! apart, then times both.

use std::time::Instant;

use anyhow::Context;
use tch::Device;

use fleetrl_core::algos::registry::{build, build_model, spec};
use fleetrl_core::algos::{Batch, TrainsOn};
use fleetrl_core::config::RunConfig;
use fleetrl_core::envs::make_configured;
use fleetrl_core::items::round;
use fleetrl_core::items::transition::{field, TransitionBatch};
use fleetrl_core::models::Policy;
use fleetrl_proto::space::Space;
use fleetrl_proto::{Tensor, TensorMap};

/// A stacked batch of `b` transitions as the replay server sends it.
fn stacked(obs: &Space, action: &Space, b: usize) -> TensorMap {
    let d = obs.flat_dim();
    let rows = |n: usize| {
        (0..b * n)
            .map(|i| (i % 13) as f32 / 13.0)
            .collect::<Vec<f32>>()
    };
    let action = match action {
        Space::Discrete { n } => Tensor::from_slice(
            &[b as i64],
            &(0..b as i64).map(|i| i % n).collect::<Vec<_>>(),
        ),
        Space::Box { .. } => {
            let a = action.flat_dim();
            Tensor::from_slice(&[b as i64, a as i64], &rows(a))
        }
    };
    TensorMap::from_pairs([
        (
            field::OBS,
            Tensor::from_slice(&[b as i64, d as i64], &rows(d)),
        ),
        (field::ACTION, action),
        (field::REWARD, Tensor::from_slice(&[b as i64], &rows(1))),
        (
            field::DISCOUNT,
            Tensor::from_slice(&[b as i64], &vec![0.99f32; b]),
        ),
        (
            field::NEXT_OBS,
            Tensor::from_slice(&[b as i64, d as i64], &rows(d)),
        ),
        (
            field::POLICY_VERSION,
            Tensor::from_slice(&[b as i64], &vec![0i64; b]),
        ),
    ])
}

/// A stacked batch of `k` rounds of `n` steps as the replay server sends it (PEARL's).
fn stacked_rounds(obs: &Space, action: &Space, k: usize, n: usize) -> TensorMap {
    let (d, a) = (obs.flat_dim(), action.flat_dim());
    let values = |width: usize, phase: usize| {
        let v: Vec<f32> = (0..k * n * width)
            .map(|i| ((i + phase) % 13) as f32 / 13.0 - 0.5)
            .collect();
        Tensor::from_slice(&[k as i64, n as i64, width as i64], &v)
    };
    let per_step = |phase: usize| {
        let v: Vec<f32> = (0..k * n).map(|i| ((i + phase) % 7) as f32 / 7.0).collect();
        Tensor::from_slice(&[k as i64, n as i64], &v)
    };
    TensorMap::from_pairs([
        (round::field::OBS, values(d, 0)),
        (round::field::ACTION, values(a, 3)),
        (round::field::REWARD, per_step(0)),
        (round::field::SCORE, per_step(2)),
        (
            round::field::TERMINATED,
            Tensor::from_slice(&[k as i64, n as i64], &vec![0f32; k * n]),
        ),
        (round::field::NEXT_OBS, values(d, 1)),
    ])
}

/// A synthetic sample of what the algorithm trains on (`kind`), as its learner receives it.
fn sample_for(config: &RunConfig, kind: TrainsOn, obs: &Space, action: &Space) -> TensorMap {
    let b = batch_size(config);
    match (kind, config.algo.as_pearl()) {
        (TrainsOn::Rounds, Some(pearl)) => {
            stacked_rounds(obs, action, b, pearl.round_steps() as usize)
        }
        (TrainsOn::Transitions, _) => stacked(obs, action, b),
        _ => panic!("offpolicy_timing times algorithms that train on transitions or rounds"),
    }
}

/// The sample decoded as `kind` on `device`.
fn decode(kind: TrainsOn, sample: &TensorMap, device: Device) -> Batch {
    Batch::from_stacked(kind, sample, None, device).expect("a batch of the preset's kind")
}

/// `batch` with its observations and rewards moved by `by` (a different batch of the same
/// shapes).
fn shifted(batch: &Batch, by: f64) -> Batch {
    let shift = |t: &tch::Tensor| t + by;
    match batch {
        Batch::Transitions(b) => Batch::Transitions(TransitionBatch {
            obs: shift(&b.obs),
            action: b.action.shallow_clone(),
            reward: shift(&b.reward),
            discount: b.discount.shallow_clone(),
            next_obs: shift(&b.next_obs),
            weights: b.weights.shallow_clone(),
        }),
        Batch::Rounds(b) => Batch::Rounds(round::RoundBatch {
            obs: shift(&b.obs),
            action: b.action.shallow_clone(),
            reward: shift(&b.reward),
            score: b.score.shallow_clone(),
            terminated: b.terminated.shallow_clone(),
            next_obs: shift(&b.next_obs),
        }),
        _ => panic!("offpolicy_timing times transition and round batches"),
    }
}

/// Mean seconds of `f` over `n` calls, after 10 warm-up calls, until `device` has finished
/// the work they queued.
fn time(device: Device, n: usize, mut f: impl FnMut()) -> f64 {
    let sync = || {
        if let Device::Cuda(i) = device {
            tch::Cuda::synchronize(i as i64);
        }
    };
    for _ in 0..10 {
        f();
    }
    sync();
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    sync();
    start.elapsed().as_secs_f64() / n as f64
}

fn batch_size(config: &RunConfig) -> usize {
    spec(config).replay.expect("off-policy").batch_size as usize
}

/// The check described in the module docs: 50 updates replayed from a graph against the same
/// updates as written, from the same weights, seed and batches (each batch shifted a little
/// so the graph's copy of its inputs matters). Prints the largest parameter difference and
/// both update times.
fn compare_with_eager(
    config: &RunConfig,
    obs: &Space,
    action: &Space,
    device: Device,
    sample: &TensorMap,
) -> anyhow::Result<()> {
    let mut eager_config = config.clone();
    eager_config.learner.cuda_graph = false;
    let mut learners = Vec::new();
    for c in [config, &eager_config] {
        tch::manual_seed(7);
        learners.push(build(c, obs, action, &[device])?);
    }
    let base = decode(learners[0].trains_on(), sample, device);
    let batches: Vec<Batch> = (0..5)
        .map(|i| shifted(&base, 0.05 * f64::from(i)))
        .collect();
    let mut seconds = Vec::new();
    for learner in &mut learners {
        tch::manual_seed(11);
        let mut i = 0;
        seconds.push(time(device, 40, || {
            learner
                .update(&batches[i % batches.len()])
                .expect("an update");
            i += 1;
        }));
    }
    let params = |l: &dyn fleetrl_core::algos::Algorithm| l.trained().model().named_parameters();
    let (mut worst, mut worst_name, mut scale) =
        (0.0f64, String::from("every parameter equal"), 0.0f64);
    for ((name, g), (_, e)) in params(learners[0].as_ref())
        .iter()
        .zip(params(learners[1].as_ref()).iter())
    {
        let diff = (g - e).abs().max().double_value(&[]);
        scale = scale.max(e.abs().max().double_value(&[]));
        if diff > worst {
            (worst, worst_name) = (diff, name.clone());
        }
    }
    println!(
        "graph vs as written after 50 updates: largest parameter difference {worst:.3e} ({worst_name}; \
         largest parameter {scale:.3}) | update {:.3} ms replayed, {:.3} ms as written",
        seconds[0] * 1e3,
        seconds[1] * 1e3
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (preset, overrides) = args
        .split_first()
        .context("usage: offpolicy_timing <preset> [key=value]...")?;
    let config = RunConfig::load(preset, overrides)?;
    tch::set_num_threads(config.learner.torch_threads as i32);
    tch::set_num_interop_threads(1);
    fleetrl_core::cpu::keep_tensor_memory(); // as the learner does
    fleetrl_core::cpu::flush_denormals();
    // An error here (a `gym:` id in this example, which has no embedded Python) says what to do.
    let env = make_configured(&config.env)?;
    let (obs, action) = (env.observation_space(), env.action_space());
    let cpu = Device::Cpu;
    let device = config.learner.resolve_devices(config.algo.name())?[0];
    fleetrl_core::config::check_available(&[device])?;
    let mut algo = build(&config, &obs, &action, &[device]).expect("model");
    let kind = algo.trains_on();
    let sample = sample_for(&config, kind, &obs, &action);
    let batch = decode(kind, &sample, device);

    let graphed = config.learner.cuda_graph && device.is_cuda();
    if graphed {
        compare_with_eager(&config, &obs, &action, device, &sample)?;
    }
    let update = time(device, 300, || {
        algo.update(&batch).expect("an update");
    });
    let decoded = time(device, 300, || {
        decode(kind, &sample, device);
    });
    let export = time(device, 300, || {
        algo.trained().model().export().expect("export");
    });
    // The actor's side: loading published weights and acting for one env. An algorithm that
    // trains on rounds (PEARL) acts through its posterior over a context, not this model
    // (core/examples/acting_timing.rs times acting).
    let acting = if kind == TrainsOn::Rounds {
        String::new()
    } else {
        let weights = algo.trained().model().export().expect("export");
        let mut actor = build_model(&config, &obs, &action, cpu).expect("model");
        let import = time(cpu, 300, || actor.import(&weights).expect("import"));
        let one = tch::Tensor::zeros([1, obs.flat_dim() as i64], (tch::Kind::Float, cpu));
        let act = time(cpu, 2000, || {
            actor.act(&one, false);
        });
        format!(
            " | import weights {:.1} us | act (1 env) {:.1} us",
            import * 1e6,
            act * 1e6
        )
    };
    let b = batch_size(&config);
    println!(
        "{} {} on {device:?}{}: update (batch {b}) {:.3} ms | decode batch {:.1} us | export weights \
         {:.1} us{acting} | learner bound {:.0} updates/s",
        config.env.id,
        config.algo.name(),
        if graphed {
            " with a CUDA graph"
        } else {
            ""
        },
        update * 1e3,
        decoded * 1e6,
        export * 1e6,
        1.0 / update,
    );
    Ok(())
}
