//! Learner update throughput for the Atari conv model: one PPO gradient step (forward, clipped
//! surrogate + value + entropy loss, backward, gradient-norm clipping, Adam) on a batch of
//! 4x84x84 uint8 frames, split over `--devices` data-parallel replicas exactly as the learner
//! does ([`fleetrl_core::algos::replicas`]). Prints one JSON line. Run by `bench/learner_update.sh`.
//!
//!   learner_update --devices cpu,cpu --batch 2048 --iters 3

use std::time::Instant;

use anyhow::Context;
use fleetrl_core::algos::data_parallel::{Job, ShardPool};
use fleetrl_core::algos::ppo::{clipped_surrogate, value_loss};
use fleetrl_core::algos::replicas::Replicas;
use fleetrl_core::config::parse_device;
use fleetrl_core::models::{AtariModel, FrameShape};
use fleetrl_core::optim::Adam;
use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

const ACTIONS: i64 = 6;

/// One shard's rows on its device.
struct Shard {
    frames: Tensor,
    action: Tensor,
    old_log_prob: Tensor,
    old_value: Tensor,
    advantage: Tensor,
    returns: Tensor,
}

fn shard_backward(model: &AtariModel, s: &Shard, weight: f64) {
    let out = model.forward(&s.frames, None, None);
    let log_probs = out.logits.log_softmax(-1, Kind::Float);
    let log_prob = log_probs
        .gather(1, &s.action.unsqueeze(1), false)
        .squeeze_dim(1);
    let entropy = -(log_probs.exp() * &log_probs)
        .sum_dim_intlist(-1, false, Kind::Float)
        .mean(Kind::Float);
    let (pg, _ratio) = clipped_surrogate(&log_prob, &s.old_log_prob, &s.advantage, 0.1, None);
    let vf = value_loss(&out.value, &s.old_value, &s.returns, Some(0.1), None);
    let loss = pg + vf * 0.5 - entropy * 0.01;
    (loss * weight).backward();
}

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let devices: Vec<Device> = arg(&args, "--devices", "cpu")
        .split(',')
        .map(|d| parse_device(d.trim()).map_err(anyhow::Error::from))
        .collect::<anyhow::Result<_>>()
        .context("--devices")?;
    let batch: i64 = arg(&args, "--batch", "2048").parse()?;
    let iters: usize = arg(&args, "--iters", "3").parse()?;
    let warmup: usize = arg(&args, "--warmup", "1").parse()?;
    let threads: i32 = arg(&args, "--threads", "0").parse()?;
    let threads = if threads > 0 {
        threads
    } else {
        let cores = fleetrl_core::cpu::cores() as i32;
        (cores / devices.len() as i32).max(1)
    };
    tch::set_num_threads(threads);
    fleetrl_core::cpu::keep_tensor_memory(); // as the learner does
    fleetrl_core::cpu::flush_denormals();
    tch::manual_seed(0);
    let frame = FrameShape::default();
    let build = |device| {
        let vs = VarStore::new(device);
        let model = AtariModel::new(&vs.root(), frame, 512, 0, ACTIONS);
        (vs, model)
    };
    let (master_vs, master) = build(devices[0]);
    let mut optim = Adam::new(&master_vs, 1e-5);
    let mut handles = Vec::new();
    let replicas = Replicas::new(
        &master_vs,
        &devices,
        |d| {
            let (vs, model) = build(d);
            handles.push(model);
            vs
        },
        |vs| vs,
    );
    let pool: ShardPool<(), AtariModel> = ShardPool::with_handles(handles);

    // The batch, made once on the CPU as a learner receives it.
    let frames = Tensor::randint(256, [batch, 4, 84, 84], (Kind::Uint8, Device::Cpu));
    let action = Tensor::randint(ACTIONS, [batch], (Kind::Int64, Device::Cpu));
    let old_log_prob = Tensor::full([batch], -(ACTIONS as f64).ln(), (Kind::Float, Device::Cpu));
    let old_value = Tensor::randn([batch], (Kind::Float, Device::Cpu));
    let advantage = Tensor::randn([batch], (Kind::Float, Device::Cpu));
    let returns = Tensor::randn([batch], (Kind::Float, Device::Cpu));

    let step = |optim: &mut Adam| {
        optim.zero_grad();
        replicas.broadcast(optim.flat_params());
        let k = devices.len() as i64;
        let mut jobs: Vec<Job<(), AtariModel>> = Vec::new();
        let mut start = 0;
        for i in 0..k {
            let len = (batch - start) / (k - i);
            let d = devices[i as usize];
            let rows = |t: &Tensor| t.narrow(0, start, len).to_device(d);
            let shard = Shard {
                frames: rows(&frames),
                action: rows(&action),
                old_log_prob: rows(&old_log_prob),
                old_value: rows(&old_value),
                advantage: rows(&advantage),
                returns: rows(&returns),
            };
            let weight = len as f64 / batch as f64;
            jobs.push(Box::new(move |m: &AtariModel| {
                shard_backward(m, &shard, weight)
            }));
            start += len;
        }
        pool.run(&master, jobs);
        replicas.reduce(optim.flat_grads());
        let _ = optim.clipped_step(2.5e-4, 0.5);
        for d in &devices {
            if let Device::Cuda(index) = d {
                tch::Cuda::synchronize(*index as i64);
            }
        }
    };
    for _ in 0..warmup {
        step(&mut optim);
    }
    let started = Instant::now();
    for _ in 0..iters {
        step(&mut optim);
    }
    let seconds = started.elapsed().as_secs_f64() / iters as f64;
    let names: Vec<String> = devices.iter().map(|d| format!("{d:?}")).collect();
    println!(
        "{}",
        serde_json::json!({
            "system": "fleetrl",
            "devices": names,
            "batch": batch,
            "torch_threads_per_replica": threads,
            "iters": iters,
            "seconds_per_update": seconds,
            "updates_per_second": 1.0 / seconds,
        })
    );
    Ok(())
}
