//! The native env step path allocates nothing: a counting global allocator watches
//! `VecEnv::step_discrete` (CartPole-v1 x 64) and `VecEnv::step_continuous` (Pendulum-v1 x 64)
//! over steps in which no episode ends (an episode's end allocates its final observation).
//! One test in this binary, so no other test allocates while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use fleetrl_core::envs::VecEnv;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn native_vector_steps_do_not_allocate() {
    const M: usize = 64;
    let mut cartpole = VecEnv::make("CartPole-v1", M).unwrap();
    let mut obs = cartpole.reset(0).to_vec();
    let mut actions = vec![0i64; M];
    let balance = |obs: &[f32], actions: &mut [i64]| {
        for (i, a) in actions.iter_mut().enumerate() {
            *a = i64::from(obs[i * 4 + 2] + 0.5 * obs[i * 4 + 3] > 0.0);
        }
    };
    balance(&obs, &mut actions);
    cartpole.step_discrete(&actions).unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for t in 0..100 {
        let step = cartpole.step_discrete(&actions).unwrap();
        assert!(
            step.final_obs.iter().all(Option::is_none),
            "episode ended at {t}"
        );
        obs.copy_from_slice(&step.obs);
        balance(&obs, &mut actions);
    }
    let cartpole_allocs = ALLOCATIONS.load(Ordering::Relaxed) - before;

    let mut pendulum = VecEnv::make("Pendulum-v1", M).unwrap();
    pendulum.reset(0);
    let torques: Vec<f32> = (0..M).map(|i| i as f32 / 16.0 - 2.0).collect();
    pendulum.step_continuous(&torques).unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..150 {
        pendulum.step_continuous(&torques).unwrap();
    }
    let pendulum_allocs = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(
        (cartpole_allocs, pendulum_allocs),
        (0, 0),
        "allocations over 100 CartPole and 150 Pendulum vector steps"
    );
}
