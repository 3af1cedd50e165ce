//! What a trained PEARL checkpoint on the sparse point robot does with a context that holds a
//! success. For each held-out task of the run it builds contexts from scripted episodes (one
//! straight to the goal that stays there and scores, others straight to points of the half
//! circle at least 0.6 from it that score nothing), infers the posterior, and plays the
//! adapted episode (the posterior's mean, the policy's mean action). If the adapted episode
//! finds the goal when the context holds a success, the encoder reads successes and what is
//! missing is exploration that finds one; if not, the encoder or the policy has not learned
//! to use them.
//! It then prints where the policy goes with `z` at the prior's quantiles, beside the
//! posterior mean each goal's success gets, by goal angle: whether the prior's draws cover the
//! goals' codes (`algo.exploration_pool` draws exploration from the training posteriors when
//! they do not).
//!   cargo run --release -p fleetrl-core --example pearl_probe -- RUN/checkpoints/ckpt-N

use fleetrl_core::acting::policy_loader::load_pearl;
use fleetrl_core::envs::{make, Env};
use fleetrl_core::models::PearlModel;
use fleetrl_core::tasks::TaskSet;
use fleetrl_proto::space::Action;
use tch::{Kind, Tensor};

/// One transition as the context encoder sees it.
#[derive(Clone, Copy)]
struct Transition {
    obs: [f32; 2],
    action: [f32; 2],
    score: f32,
    next_obs: [f32; 2],
}

/// One step of `env` with unit-scale `action` from `obs`: the transition and the dense reward.
fn step(env: &mut dyn Env, obs: [f32; 2], action: [f32; 2]) -> (Transition, f32) {
    let out = env
        .step(&Action::Continuous(action.to_vec()))
        .expect("a valid action");
    let next_obs = [out.obs[0], out.obs[1]];
    let score = env.score_reward().unwrap_or(0.0);
    (
        Transition {
            obs,
            action,
            score,
            next_obs,
        },
        out.reward,
    )
}

/// The goal of the env's task, found from the dense reward (minus the distance): standing
/// still at the origin gives `|g|`, a step along x gives `gx`; goals lie on the upper half.
fn find_goal(env: &mut dyn Env) -> [f32; 2] {
    env.reset(None);
    let (_, r0) = step(env, [0.0; 2], [0.0, 0.0]);
    let (_, r1) = step(env, [0.0; 2], [1.0, 0.0]);
    let (d0, d1) = (-r0, -r1);
    let gx = (d0 * d0 - d1 * d1 + 0.01) / 0.2;
    [gx, (d0 * d0 - gx * gx).max(0.0).sqrt()]
}

/// A 20-step episode from the origin heading straight for `target` and staying there.
fn scripted(env: &mut dyn Env, target: [f32; 2]) -> Vec<Transition> {
    let mut obs = [0.0f32; 2];
    env.reset(None);
    (0..20)
        .map(|_| {
            let a = [
                ((target[0] - obs[0]) / 0.1).clamp(-1.0, 1.0),
                ((target[1] - obs[1]) / 0.1).clamp(-1.0, 1.0),
            ];
            let (t, _) = step(env, obs, a);
            obs = t.next_obs;
            t
        })
        .collect()
}

/// The posterior's mean over `context`.
fn posterior_mean(model: &PearlModel, context: &[Transition]) -> Tensor {
    let n = context.len() as i64;
    let flat = |f: &dyn Fn(&Transition) -> Vec<f32>| {
        Tensor::from_slice(&context.iter().flat_map(f).collect::<Vec<f32>>()).view([n, -1])
    };
    let c = model.context(
        &flat(&|t| t.obs.to_vec()),
        &flat(&|t| t.action.to_vec()),
        &flat(&|t| vec![t.score]).view([n]),
        &flat(&|t| t.next_obs.to_vec()),
    );
    model.posterior(&c.unsqueeze(0)).0
}

/// A 20-step episode with `z` and the policy's mean action: whether it reached the goal's
/// radius, and where it ended.
fn play(model: &PearlModel, env: &mut dyn Env, z: &Tensor) -> (bool, [f32; 2]) {
    let mut obs = env.reset(None);
    let mut reached = false;
    for _ in 0..20 {
        let a = model.act(&Tensor::from_slice(&obs).view([1, 2]), z, true);
        let a = Vec::<f32>::try_from(a.reshape([-1])).expect("an action");
        let out = env.step(&Action::Continuous(a)).expect("a valid action");
        reached |= env.score_reward().unwrap_or(0.0) > 0.0;
        obs = out.obs;
    }
    (reached, [obs[0], obs[1]])
}

fn main() -> anyhow::Result<()> {
    let _guard = tch::no_grad_guard();
    tch::manual_seed(0);
    let path = std::env::args()
        .nth(1)
        .expect("usage: pearl_probe CHECKPOINT");
    let (model, config) = load_pearl(std::path::Path::new(&path))?;
    let tasks = TaskSet::new(&config.tasks, config.seed).test_tasks();
    let mut env = make(&config.env.id)?;
    let kinds = [
        "success alone",
        "4 misses + 1 success",
        "5 misses",
        "no context",
    ];
    let mut reached = [0usize; 4];
    let mut distance = [0.0f32; 4];
    let mut means = Vec::new();
    let mut angles = Vec::new();
    for task in &tasks {
        env.set_task(task)?;
        let goal = find_goal(env.as_mut());
        let angle = goal[1].atan2(goal[0]);
        angles.push(angle);
        let hit = scripted(env.as_mut(), goal);
        // Misses: 5 of 12 points spread over the half circle, each at least 0.6 rad from the
        // goal (0.56 from it at the closest point of the way there, outside its radius).
        let far: Vec<f32> = (0..12)
            .map(|i| std::f32::consts::PI * i as f32 / 11.0)
            .filter(|a| (a - angle).abs() >= 0.6)
            .collect();
        let misses: Vec<Vec<Transition>> = (0..5)
            .map(|i| {
                let a = far[i * far.len() / 5];
                scripted(env.as_mut(), [a.cos(), a.sin()])
            })
            .collect();
        assert!(misses.iter().flatten().all(|t| t.score == 0.0));
        let with_hit: Vec<Transition> = misses[..4].iter().flatten().chain(&hit).copied().collect();
        let none: Vec<Transition> = misses.iter().flatten().copied().collect();
        let zs = [
            posterior_mean(&model, &hit),
            posterior_mean(&model, &with_hit),
            posterior_mean(&model, &none),
            model.prior(1).0,
        ];
        means.push(zs[0].shallow_clone());
        for (k, z) in zs.iter().enumerate() {
            let (r, end) = play(&model, env.as_mut(), z);
            reached[k] += usize::from(r);
            distance[k] += (end[0] - goal[0]).hypot(end[1] - goal[1]);
        }
    }
    let n = tasks.len();
    println!("{path}: adapted episodes on {n} held-out goals, by what the context held");
    for k in 0..4 {
        println!(
            "  {:<22} reached the radius on {:>2}/{n}, mean final distance {:.2}",
            kinds[k],
            reached[k],
            distance[k] / n as f32
        );
    }
    // Where exploration goes: the policy's mean action with z at the 20 quantiles
    // (k + 0.5) / 20 of the prior, in every latent dimension at once (a diagonal through the
    // prior), so the map from z to where the episode ends can be read in order.
    let latent = model.latent_dim();
    let ends: Vec<(f32, [f32; 2])> = (0..20)
        .map(|k| {
            let p = (k as f64 + 0.5) / 20.0;
            let q = Tensor::from_slice(&[2.0 * p - 1.0]).erfinv() * std::f64::consts::SQRT_2;
            let z = q
                .to_kind(Kind::Float)
                .expand([1, latent], false)
                .contiguous();
            (
                q.double_value(&[0]) as f32,
                play(&model, env.as_mut(), &z).1,
            )
        })
        .collect();
    println!("  exploration, z at the prior's 20 quantiles: z -> where the episode ends (angle, distance)");
    let map: Vec<String> = ends
        .iter()
        .map(|(z, e)| format!("{z:+.2}->{:.2}/{:.2}", e[1].atan2(e[0]), e[0].hypot(e[1])))
        .collect();
    for row in map.chunks(5) {
        println!("    {}", row.join("  "));
    }
    println!("  posterior mean over a success, by goal angle:");
    let mut by_angle: Vec<(f32, f32)> = angles
        .iter()
        .zip(&means)
        .map(|(a, m)| (*a, m.double_value(&[0, 0]) as f32))
        .collect();
    by_angle.sort_by(|a, b| a.0.total_cmp(&b.0));
    let row: Vec<String> = by_angle
        .iter()
        .map(|(a, m)| format!("{a:.2}:{m:+.2}"))
        .collect();
    for r in row.chunks(5) {
        println!("    {}", r.join("  "));
    }
    let means = Tensor::cat(&means, 0);
    println!(
        "  posterior means over a success, spread across goals (std per latent dim): {:?}",
        Vec::<f32>::try_from(means.std_dim(0, true, false).to_kind(Kind::Float))?
    );
    Ok(())
}
