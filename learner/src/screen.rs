//! Off-policy: the rows of a sampled batch that fail the learner's checks come out of it, and
//! the rest is still trained on. The trainer deletes the refused items from their table (left
//! there, one poison item would be sampled again and again and cost every batch it is in) and
//! takes them off the run's progress, which is counted from inserts.

use std::collections::HashSet;

use fleetrl_core::items::check::ItemError;
use fleetrl_proto::v1::SampleResponse;
use fleetrl_proto::TensorMap;

/// The rows of a sampled batch that failed the learner's checks.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// The batch without them, `None` when no row passed.
    pub(crate) kept: Option<Box<SampleResponse>>,
    /// Their keys.
    pub(crate) keys: Vec<u64>,
    /// What was wrong with the first of them.
    pub(crate) error: ItemError,
}

/// Checks `response`'s batch with `check`, a row at a time once the whole batch fails; `Ok`
/// when every row passes.
pub(crate) fn screen(
    response: &SampleResponse,
    check: impl Fn(&TensorMap) -> Result<(), ItemError>,
) -> Result<(), Refusal> {
    let Some(batch) = response.batch.as_ref() else {
        return Ok(());
    };
    let Err(error) = check(batch) else {
        return Ok(());
    };
    let rows = response.keys.len();
    let mut passed = Vec::with_capacity(rows);
    for row in 0..rows {
        // A batch whose rows cannot be taken apart (a malformed tensor) is refused whole.
        match batch.select_rows(&[row]) {
            Ok(item) if check(&item).is_ok() => passed.push(row),
            Ok(_) => {}
            Err(_) => {
                passed.clear();
                break;
            }
        }
    }
    let keys = (0..rows)
        .filter(|r| !passed.contains(r))
        .map(|r| response.keys[r])
        .collect();
    let kept = (!passed.is_empty())
        .then(|| keep_rows(response, batch, &passed))
        .flatten();
    Err(Refusal { kept, keys, error })
}

/// `response` with only `rows` (of its batch, keys and probabilities).
fn keep_rows(
    response: &SampleResponse,
    batch: &TensorMap,
    rows: &[usize],
) -> Option<Box<SampleResponse>> {
    let pick = |values: &[f64]| {
        rows.iter()
            .filter_map(|&r| values.get(r).copied())
            .collect()
    };
    Some(Box::new(SampleResponse {
        batch: Some(batch.select_rows(rows).ok()?),
        keys: rows.iter().map(|&r| response.keys[r]).collect(),
        probabilities: pick(&response.probabilities),
        times_sampled: rows
            .iter()
            .filter_map(|&r| response.times_sampled.get(r).copied())
            .collect(),
        table_size: response.table_size,
    }))
}

/// Items already refused, by shard and key: until their deletion reaches the server they may
/// be sampled again (or twice in one batch), and each must be counted and taken off the
/// run's progress once.
#[derive(Debug, Default)]
pub(crate) struct Refused(HashSet<(usize, u64)>);

/// Keys remembered at most; then the oldest deletions have long reached the server.
const REMEMBERED: usize = 65_536;

impl Refused {
    /// Those of `keys` (of `shard`) not refused before, remembered from now on.
    pub(crate) fn new_keys(&mut self, shard: usize, keys: &[u64]) -> Vec<u64> {
        if self.0.len() + keys.len() > REMEMBERED {
            self.0.clear();
        }
        keys.iter()
            .copied()
            .filter(|&k| self.0.insert((shard, k)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetrl_proto::Tensor;

    /// Rows whose `action` is negative fail; the rest of the batch is kept in order.
    #[test]
    fn the_rows_that_fail_come_out_and_the_rest_is_kept() {
        let check = |items: &TensorMap| {
            let actions = items.field("action").unwrap().to_vec::<i64>().unwrap();
            match actions.iter().any(|&a| a < 0) {
                true => Err(ItemError {
                    field: "action".into(),
                    problem: "negative".into(),
                }),
                false => Ok(()),
            }
        };
        let response = SampleResponse {
            batch: Some(TensorMap::from_pairs([(
                "action",
                Tensor::from_slice(&[4], &[0i64, -1, 1, -5]),
            )])),
            keys: vec![10, 11, 12, 13],
            probabilities: vec![0.1, 0.2, 0.3, 0.4],
            times_sampled: vec![1, 2, 3, 4],
            table_size: 9,
        };
        let refusal = screen(&response, check).unwrap_err();
        assert_eq!(refusal.keys, vec![11, 13]);
        assert_eq!(refusal.error.field, "action");
        let kept = refusal.kept.unwrap();
        assert_eq!(kept.keys, vec![10, 12]);
        assert_eq!(kept.probabilities, vec![0.1, 0.3]);
        let actions = kept.batch.unwrap().field("action").unwrap().to_vec::<i64>();
        assert_eq!(actions.unwrap(), vec![0, 1]);

        let mut all_bad = response.clone();
        all_bad.batch = Some(TensorMap::from_pairs([(
            "action",
            Tensor::from_slice(&[4], &[-1i64; 4]),
        )]));
        let refusal = screen(&all_bad, check).unwrap_err();
        assert!(refusal.kept.is_none());
        assert_eq!(refusal.keys.len(), 4);
        assert!(screen(&SampleResponse::default(), check).is_ok());
    }

    #[test]
    fn each_refused_key_counts_once() {
        let mut refused = Refused::default();
        assert_eq!(refused.new_keys(0, &[1, 2, 2]), vec![1, 2]);
        assert_eq!(refused.new_keys(0, &[2, 3]), vec![3]);
        assert_eq!(refused.new_keys(1, &[2]), vec![2], "another shard's key 2");
    }
}
