use super::*;
use fleetrl_proto::space::{Action, Space};
use fleetrl_runtime::demo::{value_weights, DemoSource, Recorder};

/// An episode of `len` steps whose last step pays `reward` (every other step 0).
fn episode(len: usize, reward: f32) -> Demo {
    let mut rec = Recorder::new(
        "SparseMountainCar-v0",
        DemoSource::Agent,
        vec![2],
        &Space::Discrete { n: 3 },
        &[0.0, 0.0],
    );
    for t in 0..len {
        let r = if t + 1 == len { reward } else { 0.0 };
        rec.push(&Action::Discrete(1), r, &[t as f32, 0.0], Some(0.0));
    }
    rec.finish(reward > 0.0)
}

fn config(capacity: usize) -> DemoStoreConfig {
    DemoStoreConfig {
        capacity,
        rho: 0.1,
        phi: 0.3,
        anneal_steps: 0,
        reward_threshold: None,
    }
}

fn kinds(store: &DemoStore) -> Vec<(DemoKind, usize)> {
    store
        .demos()
        .iter()
        .map(|d| (d.kind, d.demo.len()))
        .collect()
}

#[test]
fn threshold_starts_at_the_lowest_initial_return_and_only_rises() {
    let mut store = DemoStore::new(config(10), vec![episode(50, 2.0), episode(60, 3.0)]).unwrap();
    assert_eq!(store.stats().reward_threshold, 2.0);
    assert_eq!(
        store.offer(episode(40, 1.0), 0.5).unwrap(),
        Admission::Value
    );
    assert_eq!(
        store.offer(episode(40, 2.0), 0.0).unwrap(),
        Admission::Reward
    );
    assert_eq!(store.stats().reward_threshold, 2.0);
    // A new best drops the agent reward demos, never the initial ones, and raises the bar.
    assert_eq!(
        store.offer(episode(30, 5.0), 0.0).unwrap(),
        Admission::Reward
    );
    assert_eq!(store.stats().reward_threshold, 5.0);
    assert_eq!(
        kinds(&store),
        vec![
            (DemoKind::Initial, 50),
            (DemoKind::Initial, 60),
            (DemoKind::Value, 40),
            (DemoKind::Agent, 30)
        ]
    );
    assert_eq!(
        store.offer(episode(20, 4.0), 0.0).unwrap(),
        Admission::Value
    );
    assert_eq!(store.stats().reward_threshold, 5.0);
    // No initial demos and no configured threshold: nothing qualifies.
    let mut empty = DemoStore::new(config(4), vec![]).unwrap();
    assert_eq!(
        empty.offer(episode(10, 9.0), 0.0).unwrap(),
        Admission::Value
    );
    let mut set = DemoStore::new(
        DemoStoreConfig {
            reward_threshold: Some(1.0),
            ..config(4)
        },
        vec![],
    )
    .unwrap();
    assert_eq!(set.offer(episode(10, 1.0), 0.0).unwrap(), Admission::Reward);
}

#[test]
fn capacity_evicts_value_demos_by_max_value_then_the_longest_agent_demo() {
    let mut store = DemoStore::new(config(4), vec![episode(100, 1.0)]).unwrap();
    assert_eq!(
        store.offer(episode(10, 0.0), 0.3).unwrap(),
        Admission::Value
    );
    assert_eq!(
        store.offer(episode(11, 0.0), 0.1).unwrap(),
        Admission::Value
    );
    assert_eq!(
        store.offer(episode(12, 0.0), 0.2).unwrap(),
        Admission::Value
    );
    // Full: a value candidate below every held max value is rejected, above one evicts it.
    assert_eq!(
        store.offer(episode(13, 0.0), 0.05).unwrap(),
        Admission::Rejected
    );
    assert_eq!(
        store.offer(episode(14, 0.0), 0.25).unwrap(),
        Admission::Value
    );
    let values: Vec<f32> = store
        .demos()
        .iter()
        .filter(|d| d.kind == DemoKind::Value)
        .map(|d| d.max_value)
        .collect();
    assert_eq!(values, vec![0.3, 0.2, 0.25]);
    let top: Vec<(f32, usize)> = (store.top_value_demos(2).iter())
        .map(|d| (d.max_value, d.demo.len()))
        .collect();
    assert_eq!(top, vec![(0.3, 10), (0.25, 14)]);
    // Successes push out value demos first, lowest max value first ...
    for len in [70, 80, 60] {
        assert_eq!(
            store.offer(episode(len, 1.0), 0.0).unwrap(),
            Admission::Reward
        );
    }
    assert_eq!(
        kinds(&store),
        vec![
            (DemoKind::Initial, 100),
            (DemoKind::Agent, 70),
            (DemoKind::Agent, 80),
            (DemoKind::Agent, 60)
        ]
    );
    // ... then the longest agent demo; the (longer) initial demo stays.
    store.offer(episode(75, 1.0), 0.0).unwrap();
    assert_eq!(
        kinds(&store),
        vec![
            (DemoKind::Initial, 100),
            (DemoKind::Agent, 70),
            (DemoKind::Agent, 60),
            (DemoKind::Agent, 75)
        ]
    );
    // Initial demos that do not fit are an error, not an eviction.
    assert!(DemoStore::new(config(1), vec![episode(5, 1.0), episode(6, 1.0)]).is_err());
}

#[test]
fn annealing_moves_phi_to_rho_in_fixed_steps() {
    // capacity 5 with 1 initial demo: 4 steps of 0.3 / 4.
    let mut store = DemoStore::new(config(5), vec![episode(9, 1.0)]).unwrap();
    for k in 1..=6 {
        store.offer(episode(9, 1.0), 0.0).unwrap();
        let s = store.stats();
        let moved = (0.3 / 4.0 * k as f64).min(0.3);
        assert!((s.rho - (0.1 + moved)).abs() < 1e-12, "{k}: {s:?}");
        assert!((s.phi - (0.3 - moved)).abs() < 1e-12, "{k}: {s:?}");
        assert!((s.rho + s.phi - 0.4).abs() < 1e-12);
        assert_eq!(s.successes, k);
    }
    // Value admissions do not anneal.
    let before = store.stats();
    store.offer(episode(9, 0.0), 1.0).unwrap();
    assert_eq!(store.stats().rho, before.rho);
    // Explicit anneal_steps.
    let mut fixed = DemoStore::new(
        DemoStoreConfig {
            anneal_steps: 3,
            ..config(50)
        },
        vec![episode(9, 1.0)],
    )
    .unwrap();
    fixed.offer(episode(9, 1.0), 0.0).unwrap();
    assert!((fixed.stats().phi - 0.2).abs() < 1e-12);
}

#[test]
fn value_weights_are_sane_for_negative_values() {
    let w = value_weights(&[-5.0, -1.0, -3.0], 1.0);
    assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    assert!(w[1] > w[2] && w[2] > w[0], "{w:?}");
    assert!((w[1] / w[2] - 2f64.exp()).abs() < 1e-9);
    // Large alpha and values do not overflow.
    let w = value_weights(&[1000.0, 999.0], 10.0);
    assert!(w.iter().all(|x| x.is_finite()) && w[0] > 0.99);
    assert_eq!(value_weights(&[2.0, 2.0], 10.0), vec![0.5, 0.5]);
    assert_eq!(value_weights(&[0.3, 0.7], 0.0), vec![0.5, 0.5]);
    assert_eq!(
        value_weights(&[f32::NEG_INFINITY, 1.0], 1.0),
        vec![0.0, 1.0]
    );
    assert!(value_weights(&[], 1.0).is_empty());
}

#[test]
fn candidates_are_cut_after_their_last_reward() {
    let mut demo = episode(10, 0.0);
    demo.rewards[3] = 1.0;
    let cut = truncated_after_last_reward(demo);
    assert_eq!(cut.len(), 4);
    assert_eq!(cut.observations.len(), 5 * 2);
    assert!(!cut.terminated);
    cut.validate().unwrap();
    assert_eq!(truncated_after_last_reward(episode(10, 1.0)).len(), 10);
}

#[test]
fn a_restart_restores_every_demo_buffer() {
    let dir = std::env::temp_dir().join(format!("fleetrl-demos-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut store = DemoStore::new(config(6), vec![episode(50, 1.0)]).unwrap();
    store.offer(episode(40, 1.0), 0.0).unwrap();
    store.offer(episode(30, 0.0), 0.7).unwrap();
    store.offer(episode(20, 0.0), -0.2).unwrap();
    store.refresh_value(store.demos()[2].id, 0.9);
    store
        .offer_supplementary("extra.demo.safetensors", episode(35, 1.0))
        .unwrap();
    store.tick_collection(10);
    save(&store, &dir).unwrap();
    // Saving twice replaces the old copy.
    save(&store, &dir).unwrap();
    let restored = load(&dir, config(6)).unwrap().unwrap();
    assert_eq!(restored, store);
    assert!(restored.has_seen("extra.demo.safetensors"));
    assert_eq!(restored.stats().value, 2);
    assert_eq!(restored.stats().agent, 2);
    // The next id is not reused after a restart.
    let mut restored = restored;
    restored.offer(episode(10, 0.0), 5.0).unwrap();
    let ids: Vec<u64> = restored.demos().iter().map(|d| d.id).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique);
    assert!(load(&dir.join("missing"), config(6)).unwrap().is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Initial agent demos are reward demos a better episode evicts; the initial (human) demos
/// stay. Both set the threshold: the lowest initial return.
#[test]
fn initial_agent_demos_are_evicted_by_a_better_episode_human_ones_never() {
    let mut store = DemoStore::new(config(10), vec![episode(50, 3.0)])
        .unwrap()
        .with_agent_demos(vec![episode(70, 2.0)])
        .unwrap();
    assert_eq!(store.stats().reward_threshold, 2.0);
    assert_eq!(
        kinds(&store),
        vec![(DemoKind::Initial, 50), (DemoKind::Agent, 70)]
    );
    assert_eq!(
        store.offer(episode(30, 5.0), 0.0).unwrap(),
        Admission::Reward
    );
    assert_eq!(
        kinds(&store),
        vec![(DemoKind::Initial, 50), (DemoKind::Agent, 30)]
    );
    let full = DemoStore::new(config(2), vec![episode(5, 1.0)])
        .unwrap()
        .with_agent_demos(vec![episode(6, 1.0), episode(7, 1.0)]);
    assert!(
        full.is_err(),
        "more initial demos than the capacity are an error"
    );
}
