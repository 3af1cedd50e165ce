//! What a learner checks in every item before it reaches tch: an item the replay server
//! accepted may still come from a buggy or hostile client, and one bad value (an action index
//! outside the space, a NaN reward) would otherwise crash or poison training.

use fleetrl_proto::space::Space;
use fleetrl_proto::{Dtype, TensorError, TensorMap};

/// Name of the action field in every item kind (rollouts, transitions, sequences).
const ACTION: &str = "action";

/// Why an item is refused: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("field `{field}`: {problem}")]
pub struct ItemError {
    /// The offending field.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl ItemError {
    fn new(field: &str, problem: impl Into<String>) -> ItemError {
        ItemError {
            field: field.to_string(),
            problem: problem.into(),
        }
    }
}

/// Checks a meta-RL item's `task` field: present, and one of the run's training tasks (a
/// test task must never be trained on; an id outside the set is a forged or foreign item).
pub fn check_task(items: &TensorMap, tasks: &crate::tasks::TaskSet) -> Result<(), ItemError> {
    const TASK: &str = crate::items::rollout::field::TASK;
    let ids = items
        .field(TASK)
        .and_then(|t| t.to_vec::<i64>())
        .map_err(|e| ItemError::new(TASK, e.to_string()))?;
    for id in ids {
        let known = u64::try_from(id).map_err(|_| ItemError::new(TASK, format!("task {id}")));
        let id = known?;
        tasks
            .get(id)
            .map_err(|e| ItemError::new(TASK, e.to_string()))?;
        if !tasks.is_train(id) {
            return Err(ItemError::new(
                TASK,
                format!("task {id} is a held-out test task, not a training task"),
            ));
        }
    }
    Ok(())
}

/// Checks `items` (one item or a stacked batch of any kind) against the env's action space:
/// a discrete action must be an index in `0..n`, and every floating-point value (observations,
/// rewards, actions of a box space, log-probabilities, values, recurrent states) must be finite.
/// Fields are checked in name order, so the first error named is stable.
pub fn check_items(items: &TensorMap, action_space: &Space) -> Result<(), ItemError> {
    let mut names: Vec<&String> = items.tensors.keys().collect();
    names.sort();
    for name in names {
        let tensor = &items.tensors[name];
        let malformed = |e: TensorError| ItemError::new(name, e.to_string());
        match tensor.validate().map_err(malformed)? {
            Dtype::F32 => {
                let values = tensor.to_vec::<f32>().map_err(malformed)?;
                if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                    return Err(ItemError::new(name, format!("holds {v} (must be finite)")));
                }
            }
            Dtype::F64 => {
                let values = tensor.to_vec::<f64>().map_err(malformed)?;
                if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                    return Err(ItemError::new(name, format!("holds {v} (must be finite)")));
                }
            }
            Dtype::I64 if name == ACTION => {
                let Space::Discrete { n } = action_space else {
                    return Err(ItemError::new(
                        name,
                        "integer actions in a continuous action space",
                    ));
                };
                let actions = tensor.to_vec::<i64>().map_err(malformed)?;
                if let Some(a) = actions.iter().find(|a| !(0..*n).contains(*a)) {
                    return Err(ItemError::new(
                        name,
                        format!("holds action {a}, outside the action space 0..{n}"),
                    ));
                }
            }
            _ => {}
        }
    }
    if let (Space::Discrete { .. }, Ok(action)) = (action_space, items.field(ACTION)) {
        if action.checked_dtype() != Ok(Dtype::I64) {
            return Err(ItemError::new(
                ACTION,
                "a discrete action space needs i64 actions",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetrl_proto::Tensor;

    fn items(action: Tensor, reward: &[f32]) -> TensorMap {
        TensorMap::from_pairs([
            ("action", action),
            ("reward", Tensor::from_slice(&[reward.len() as i64], reward)),
            ("done", Tensor::from_slice(&[1], &[true])),
        ])
    }

    /// A meta-RL item must name a training task: a test task or an unknown id (a forged
    /// item) is refused with the id, and an item without its task too.
    #[test]
    fn task_ids_must_be_training_tasks() {
        let set = crate::tasks::TaskSet::new(
            &crate::tasks::TasksConfig {
                num_train: 10,
                num_test: 5,
                multi_task: false,
            },
            0,
        );
        let item = |id: i64| TensorMap::from_pairs([("task", Tensor::scalar(id))]);
        assert!(check_task(&item(9), &set).is_ok());
        let test = check_task(&item(10), &set).unwrap_err().to_string();
        assert!(test.contains("task 10 is a held-out test task"), "{test}");
        let unknown = check_task(&item(99), &set).unwrap_err().to_string();
        assert!(unknown.contains("unknown task 99"), "{unknown}");
        let negative = check_task(&item(-1), &set).unwrap_err().to_string();
        assert!(negative.contains("task -1"), "{negative}");
        let missing = check_task(&TensorMap::default(), &set).unwrap_err();
        assert_eq!(missing.field, "task");
    }

    #[test]
    fn accepts_items_inside_the_space() {
        let space = Space::Discrete { n: 2 };
        let ok = items(Tensor::from_slice(&[3], &[0i64, 1, 1]), &[1.0, -2.5, 0.0]);
        assert_eq!(check_items(&ok, &space), Ok(()));
    }

    #[test]
    fn names_the_field_and_the_value() {
        let space = Space::Discrete { n: 2 };
        let bad_action = items(Tensor::from_slice(&[2], &[1i64, 1000]), &[0.0]);
        assert_eq!(
            check_items(&bad_action, &space).unwrap_err().to_string(),
            "field `action`: holds action 1000, outside the action space 0..2"
        );
        let negative = items(Tensor::from_slice(&[1], &[-1i64]), &[0.0]);
        assert!(check_items(&negative, &space).is_err());
        let nan = items(Tensor::from_slice(&[1], &[0i64]), &[f32::NAN]);
        assert_eq!(
            check_items(&nan, &space).unwrap_err().to_string(),
            "field `reward`: holds NaN (must be finite)"
        );
        let inf = items(Tensor::from_slice(&[1], &[0i64]), &[f32::INFINITY]);
        assert_eq!(check_items(&inf, &space).unwrap_err().field, "reward");
        let float_action = items(Tensor::from_slice(&[1], &[0.5f32]), &[0.0]);
        assert_eq!(
            check_items(&float_action, &space).unwrap_err().field,
            "action"
        );
    }

    #[test]
    fn continuous_actions_must_be_finite_floats() {
        let space = Space::Box {
            shape: vec![1],
            low: vec![-2.0],
            high: vec![2.0],
        };
        let ok = items(Tensor::from_slice(&[1, 1], &[7.5f32]), &[0.0]);
        assert_eq!(check_items(&ok, &space), Ok(()));
        let nan = items(Tensor::from_slice(&[1, 1], &[f32::NAN]), &[0.0]);
        assert_eq!(check_items(&nan, &space).unwrap_err().field, "action");
        let ints = items(Tensor::from_slice(&[1], &[1i64]), &[0.0]);
        assert_eq!(check_items(&ints, &space).unwrap_err().field, "action");
    }

    #[test]
    fn malformed_tensors_are_named() {
        let mut short = Tensor::from_slice(&[2], &[1.0f32, 2.0]);
        short.data = short.data.slice(0..4);
        let map = TensorMap::from_pairs([("obs", short)]);
        let err = check_items(&map, &Space::Discrete { n: 2 }).unwrap_err();
        assert_eq!(err.field, "obs");
    }
}
