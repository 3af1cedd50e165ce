//! A recurrent policy's rollout, re-scored by the learner over whole sequences (initial
//! state from the rollout, resets at episode ends), gives back exactly the log-probabilities
//! and values the actor recorded step by step.

use fleetrl_core::acting::Acting;
use fleetrl_core::config::ModelConfig;
use fleetrl_core::envs::VecEnv;
use fleetrl_core::items::rollout::{RolloutBatch, RolloutBuilder};
use fleetrl_core::models::{ActorCritic, RnnState, Sequence};
use fleetrl_proto::{Tensor as ProtoTensor, TensorMap};
use tch::{Device, Tensor};

fn as_batch(item: &TensorMap) -> RolloutBatch {
    let stacked = TensorMap::from_pairs(
        item.tensors
            .iter()
            .map(|(k, v)| (k.clone(), ProtoTensor::stack(&[v]).expect("stacks"))),
    );
    RolloutBatch::from_stacked(&stacked).expect("a rollout is a batch")
}

#[test]
fn sequence_evaluation_reproduces_the_actors_log_probs() {
    tch::manual_seed(3);
    let (t, m) = (40usize, 3usize);
    let envs = VecEnv::make("CartPoleNoVel-v1", m).unwrap();
    let config = ModelConfig {
        lstm_size: 16,
        ..ModelConfig::default()
    };
    let model = ActorCritic::new(
        &config,
        envs.observation_space(),
        envs.action_space(),
        Device::Cpu,
    )
    .unwrap();
    let mut acting = Acting::new(envs, 11);
    let mut builder = RolloutBuilder::new(t, m, 2);
    // Two rollouts: the second starts from the state the first ended with.
    for round in 0..2 {
        let bootstrap = acting.collect(&model, &mut builder).unwrap();
        let batch = as_batch(&builder.finish(&bootstrap, 0));
        let (h, c) = batch
            .init_state
            .clone()
            .expect("recurrent rollouts carry their state");
        if round == 1 {
            assert!(h.iter().any(|v| *v != 0.0), "state carried across rollouts");
        }
        assert!(
            batch.terminated.iter().any(|d| *d),
            "episodes end inside the rollout"
        );
        let mut reset = vec![0.0f32; m];
        let ended = batch.terminated.iter().zip(&batch.truncated);
        reset.extend(ended.take((t - 1) * m).map(|(a, b)| f32::from(*a || *b)));
        let seq = Sequence {
            t: t as i64,
            b: m as i64,
            reset: Tensor::from_slice(&reset).view([t as i64, m as i64]),
            init: RnnState {
                h: Tensor::from_slice(&h).view([m as i64, 16]),
                c: Tensor::from_slice(&c).view([m as i64, 16]),
            },
        };
        let obs = batch
            .obs
            .to_tensor(tch::Device::Cpu)
            .view([(t * m) as i64, 2]);
        let eval =
            model
                .heads()
                .evaluate_sequence(&obs, &batch.action.to_tensor(Device::Cpu), &seq);
        let log_prob = Vec::<f32>::try_from(&eval.log_prob).unwrap();
        let value = Vec::<f32>::try_from(&eval.value).unwrap();
        for i in 0..t * m {
            assert!(
                (log_prob[i] - batch.log_prob[i]).abs() < 1e-5,
                "row {i} log-prob"
            );
            assert!((value[i] - batch.value[i]).abs() < 1e-5, "row {i} value");
        }
    }
}
