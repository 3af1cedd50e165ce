//! What a table is declared with: name, capacity, sampler, remover, rate limiter and item
//! signature. Specs come from the server's TOML file, from `EnsureTable` requests, and from
//! checkpoints; [`TableSpec::check`] rejects every combination that could never work.

use crate::Dtype;
use serde::{Deserialize, Serialize};

use super::ReplayError;

/// One named tensor of every item in a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// Field name, the key in the item's tensor map.
    pub name: String,
    /// Element type (`"f32"`, `"f64"`, `"i64"`, `"i32"`, `"u8"`, `"bool"` in TOML).
    #[serde(with = "dtype_name")]
    pub dtype: Dtype,
    /// Exact shape of the field in one item; a time slice of length T leads with T.
    pub shape: Vec<i64>,
}

impl FieldSpec {
    /// A field spec.
    pub fn new(name: &str, dtype: Dtype, shape: &[i64]) -> FieldSpec {
        FieldSpec {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// Bytes one item's value of this field takes.
    pub fn bytes(&self) -> u64 {
        // Saturating: absurd shapes from the wire must fail the size check, not overflow.
        self.shape.iter().fold(self.dtype.size() as u64, |n, &d| {
            n.saturating_mul(d.max(0) as u64)
        })
    }
}

/// Most items one table may hold (a table addresses its rows with 32-bit slots).
pub const MAX_TABLE_ITEMS: u64 = 1 << 31;

/// The fields every item of a table has, exactly (no more, no fewer).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Signature {
    /// The fields, in a stable order.
    pub fields: Vec<FieldSpec>,
}

impl Signature {
    /// Bytes one item takes.
    pub fn item_bytes(&self) -> u64 {
        self.fields
            .iter()
            .fold(0u64, |n, f| n.saturating_add(f.bytes()))
    }
}

/// How a table picks items, used both to sample and (as a remover) to evict.
///
/// Deterministic selectors (FIFO, LIFO, the heaps) hand out up to `n` distinct items in their
/// order; uniform and prioritized draw `n` items with replacement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SelectorKind {
    /// Every item equally likely.
    Uniform,
    /// Probability proportional to `priority ^ exponent` (a sum tree: O(log n) per operation).
    Prioritized {
        /// 0 is uniform, 1 is proportional to priority.
        exponent: f64,
    },
    /// Oldest first.
    Fifo,
    /// Newest first.
    Lifo,
    /// Highest priority first; ties go to the oldest item.
    MaxHeap,
    /// Lowest priority first; ties go to the oldest item.
    MinHeap,
}

impl SelectorKind {
    /// Short name for logs and `Info`, e.g. `"prioritized"`.
    pub fn name(&self) -> &'static str {
        match self {
            SelectorKind::Uniform => "uniform",
            SelectorKind::Prioritized { .. } => "prioritized",
            SelectorKind::Fifo => "fifo",
            SelectorKind::Lifo => "lifo",
            SelectorKind::MaxHeap => "max_heap",
            SelectorKind::MinHeap => "min_heap",
        }
    }

    /// Whether a batch holds distinct items (and so needs as many items in the table).
    pub fn without_replacement(&self) -> bool {
        !matches!(
            self,
            SelectorKind::Uniform | SelectorKind::Prioritized { .. }
        )
    }
}

/// When inserts and samples may proceed, in the terms of Reverb's rate limiters: with
/// `diff = inserted * samples_per_insert - sampled`, an insert waits while it would push `diff`
/// above `max_diff` (unless the table is still below `min_size_to_sample`), and a sample of `n`
/// waits while the table is below `min_size_to_sample` or `diff - n` would fall below `min_diff`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RateLimiterSpec {
    /// Samples wait until the table holds `min_size` items; inserts never wait.
    MinSize {
        /// Items needed before the first sample.
        min_size: u64,
    },
    /// Keeps `samples / inserts` near `samples_per_insert`, within `error_buffer` samples either
    /// way, once `min_size_to_sample` items are in.
    SamplesPerInsert {
        /// Target number of sampled items per inserted item.
        samples_per_insert: f64,
        /// Items needed before the first sample.
        min_size_to_sample: u64,
        /// Slack, in sampled items, around the target; at least `2 * max(1, samples_per_insert)`.
        error_buffer: f64,
    },
    /// Each item sampled exactly once: inserts wait while `size` items are unsampled, samples
    /// wait while there are too few. Pair with `max_times_sampled = 1`.
    Queue {
        /// Items the queue holds; at most the table's `max_size`.
        size: u64,
    },
}

/// The numbers a [`RateLimiterSpec`] reduces to (see its docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimiterBounds {
    /// Sampled items per inserted item.
    pub samples_per_insert: f64,
    /// Items needed before the first sample.
    pub min_size_to_sample: u64,
    /// Lowest `diff` a sample may leave.
    pub min_diff: f64,
    /// Highest `diff` an insert may leave.
    pub max_diff: f64,
}

impl RateLimiterSpec {
    /// Short name for logs and `Info`.
    pub fn name(&self) -> &'static str {
        match self {
            RateLimiterSpec::MinSize { .. } => "min_size",
            RateLimiterSpec::SamplesPerInsert { .. } => "samples_per_insert",
            RateLimiterSpec::Queue { .. } => "queue",
        }
    }

    /// The limiter's bounds.
    pub fn bounds(&self) -> LimiterBounds {
        match *self {
            RateLimiterSpec::MinSize { min_size } => LimiterBounds {
                samples_per_insert: 1.0,
                min_size_to_sample: min_size,
                min_diff: f64::NEG_INFINITY,
                max_diff: f64::INFINITY,
            },
            RateLimiterSpec::SamplesPerInsert {
                samples_per_insert,
                min_size_to_sample,
                error_buffer,
            } => {
                let center = samples_per_insert * min_size_to_sample as f64;
                LimiterBounds {
                    samples_per_insert,
                    min_size_to_sample,
                    min_diff: center - error_buffer,
                    max_diff: center + error_buffer,
                }
            }
            RateLimiterSpec::Queue { size } => LimiterBounds {
                samples_per_insert: 1.0,
                min_size_to_sample: 1,
                min_diff: 0.0,
                max_diff: size as f64,
            },
        }
    }
}

/// Everything needed to build a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    /// Table name, unique per server.
    pub name: String,
    /// Items the table holds; beyond it the remover evicts (unless the limiter makes inserts wait).
    pub max_size: u64,
    /// How items are sampled.
    pub sampler: SelectorKind,
    /// Which item a full table evicts.
    pub remover: SelectorKind,
    /// An item is deleted after being sampled this many times; 0 keeps it until evicted.
    #[serde(default)]
    pub max_times_sampled: u32,
    /// When inserts and samples may proceed.
    pub rate_limiter: RateLimiterSpec,
    /// Whether float fields may hold NaN or infinities; rejected by default.
    #[serde(default)]
    pub allow_non_finite: bool,
    /// What every item must look like.
    pub signature: Signature,
}

impl TableSpec {
    /// An on-policy queue: FIFO, each item sampled exactly once, inserts wait when full.
    pub fn queue(name: &str, max_size: u64, signature: Signature) -> TableSpec {
        TableSpec {
            name: name.to_string(),
            max_size,
            sampler: SelectorKind::Fifo,
            remover: SelectorKind::Fifo,
            max_times_sampled: 1,
            rate_limiter: RateLimiterSpec::Queue { size: max_size },
            allow_non_finite: false,
            signature,
        }
    }

    /// An off-policy replay table: uniform sampling, oldest evicted first, and samples held to
    /// `samples_per_insert` once `min_size_to_sample` items are in.
    pub fn replay(
        name: &str,
        max_size: u64,
        samples_per_insert: f64,
        min_size_to_sample: u64,
        signature: Signature,
    ) -> TableSpec {
        TableSpec {
            name: name.to_string(),
            max_size,
            sampler: SelectorKind::Uniform,
            remover: SelectorKind::Fifo,
            max_times_sampled: 0,
            rate_limiter: RateLimiterSpec::SamplesPerInsert {
                samples_per_insert,
                min_size_to_sample,
                error_buffer: (2.0 * samples_per_insert.max(1.0)).max(min_size_to_sample as f64),
            },
            allow_non_finite: false,
            signature,
        }
    }

    /// Rejects specs that are ill-formed or could never make progress; items may take at most
    /// `max_item_bytes`. The message names the table and the offending setting.
    pub fn check(&self, max_item_bytes: u64) -> Result<(), ReplayError> {
        let bad =
            |why: String| ReplayError::InvalidRequest(format!("table `{}`: {why}", self.name));
        // Names reach logs, metrics labels and checkpoint file names: letters, digits, `_`,
        // `-` and `.`, not starting with `.` (no `..`, no path, no control characters).
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if self.name.is_empty()
            || self.name.len() > 128
            || self.name.starts_with('.')
            || !self.name.chars().all(allowed)
        {
            return Err(ReplayError::InvalidRequest(format!(
                "table name {:?}: names have 1 to 128 characters from A-Z a-z 0-9 _ - . and do \
                 not start with `.`",
                self.name
            )));
        }
        if self.max_size == 0 || self.max_size > MAX_TABLE_ITEMS {
            return Err(bad(format!(
                "max_size must be in 1..={MAX_TABLE_ITEMS}, got {}",
                self.max_size
            )));
        }
        if let SelectorKind::Prioritized { exponent } = self.sampler {
            if !exponent.is_finite() || exponent < 0.0 {
                return Err(bad(format!(
                    "the prioritized sampler's exponent must be finite and >= 0, got {exponent}"
                )));
            }
        }
        if matches!(self.remover, SelectorKind::Prioritized { .. }) {
            return Err(bad(
                "a prioritized remover is not supported; use min_heap to evict low priorities"
                    .into(),
            ));
        }
        // `bad` says "invalid request" once; the signature's own error would say it again.
        self.signature.check().map_err(|e| {
            let why = match e {
                ReplayError::InvalidRequest(why) => why,
                other => other.to_string(),
            };
            bad(format!("signature: {why}"))
        })?;
        let item_bytes = self.signature.item_bytes();
        if item_bytes > max_item_bytes {
            return Err(bad(format!(
                "an item takes {item_bytes} bytes, above this server's limit of {max_item_bytes}"
            )));
        }
        match self.rate_limiter_problem() {
            Some(why) => Err(bad(why)),
            None => Ok(()),
        }
    }

    /// What makes the rate limiter unable to make progress, if anything.
    fn rate_limiter_problem(&self) -> Option<String> {
        match self.rate_limiter {
            RateLimiterSpec::MinSize { min_size } => {
                if min_size == 0 || min_size > self.max_size {
                    return Some(format!(
                        "min_size {min_size} must be in 1..=max_size ({}), or nothing is ever sampled",
                        self.max_size
                    ));
                }
            }
            RateLimiterSpec::SamplesPerInsert {
                samples_per_insert,
                min_size_to_sample,
                error_buffer,
            } => {
                if !(samples_per_insert.is_finite() && samples_per_insert > 0.0) {
                    return Some(format!(
                        "samples_per_insert must be finite and > 0, got {samples_per_insert}"
                    ));
                }
                if min_size_to_sample == 0 || min_size_to_sample > self.max_size {
                    return Some(format!(
                        "min_size_to_sample {min_size_to_sample} must be in 1..=max_size ({})",
                        self.max_size
                    ));
                }
                let needed = 2.0 * samples_per_insert.max(1.0);
                if !(error_buffer.is_finite() && error_buffer >= needed) {
                    return Some(format!(
                        "error_buffer must be at least 2 * max(1, samples_per_insert) = {needed}, \
                         got {error_buffer}: a smaller buffer can stall both inserts and samples"
                    ));
                }
            }
            RateLimiterSpec::Queue { size } => {
                if size == 0 || size > self.max_size {
                    return Some(format!(
                        "queue size {size} must be in 1..=max_size ({}): a larger queue would \
                         evict items before they are sampled",
                        self.max_size
                    ));
                }
                if self.max_times_sampled != 1 {
                    return Some(format!(
                        "a queue samples each item exactly once, so max_times_sampled must be 1, got {}",
                        self.max_times_sampled
                    ));
                }
            }
        }
        None
    }

    /// Largest batch a sample request may ask for: larger ones could never be served.
    pub fn max_batch_size(&self) -> u64 {
        let bounds = self.rate_limiter.bounds();
        let by_limiter = bounds.max_diff - bounds.min_diff - bounds.samples_per_insert;
        // Never more than the table can hold, even sampling with replacement: a bigger batch
        // repeats items, and its size would be up to the client alone.
        let most = self.max_size;
        match self.rate_limiter {
            // Whole items: the queue's diff reaches its size exactly.
            RateLimiterSpec::Queue { size } => most.min(size),
            _ if by_limiter.is_finite() => most.min(by_limiter.max(1.0).floor() as u64),
            _ => most,
        }
    }
}

/// Serialises [`Dtype`] by its short lowercase name (`"f32"`, `"u8"`, ...).
mod dtype_name {
    use crate::Dtype;
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    const NAMES: [(Dtype, &str); 6] = [
        (Dtype::F32, "f32"),
        (Dtype::F64, "f64"),
        (Dtype::I64, "i64"),
        (Dtype::I32, "i32"),
        (Dtype::U8, "u8"),
        (Dtype::Bool, "bool"),
    ];

    pub(super) fn serialize<S: Serializer>(dtype: &Dtype, s: S) -> Result<S::Ok, S::Error> {
        match NAMES.iter().find(|(d, _)| d == dtype) {
            Some((_, name)) => s.serialize_str(name),
            None => Err(serde::ser::Error::custom("dtype is unspecified")),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Dtype, D::Error> {
        let name = String::deserialize(d)?;
        NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(dtype, _)| *dtype)
            .ok_or_else(|| {
                D::Error::custom(format!(
                    "unknown dtype `{name}`; expected one of f32, f64, i64, i32, u8, bool"
                ))
            })
    }
}

impl From<&FieldSpec> for crate::v1::FieldSpec {
    fn from(spec: &FieldSpec) -> Self {
        crate::v1::FieldSpec {
            name: spec.name.clone(),
            dtype: spec.dtype as i32,
            shape: spec.shape.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signature() -> Signature {
        Signature {
            fields: vec![
                FieldSpec::new("obs", Dtype::F32, &[4]),
                FieldSpec::new("action", Dtype::I64, &[]),
            ],
        }
    }

    fn message(spec: &TableSpec) -> String {
        spec.check(1 << 20).unwrap_err().to_string()
    }

    #[test]
    fn parses_a_table_from_toml() {
        let spec: TableSpec = toml::from_str(
            r#"
            name = "replay"
            max_size = 1000
            max_times_sampled = 0
            sampler = { kind = "prioritized", exponent = 0.6 }
            remover = { kind = "fifo" }
            rate_limiter = { kind = "samples_per_insert", samples_per_insert = 4.0, min_size_to_sample = 100, error_buffer = 100.0 }
            signature = [
              { name = "obs", dtype = "f32", shape = [4] },
              { name = "action", dtype = "i64", shape = [] },
            ]
            "#,
        )
        .unwrap();
        assert_eq!(spec.sampler, SelectorKind::Prioritized { exponent: 0.6 });
        assert_eq!(spec.signature, signature());
        spec.check(1 << 20).unwrap();
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<TableSpec>(&json).unwrap(), spec);
    }

    #[test]
    fn unknown_dtype_and_keys_are_named() {
        let err = toml::from_str::<FieldSpec>("name = 'x'\ndtype = 'f16'\nshape = []")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown dtype `f16`"), "{err}");
        let err = toml::from_str::<FieldSpec>("name = 'x'\ndtype = 'f32'\nshape = []\nsize = 3")
            .unwrap_err()
            .to_string();
        assert!(err.contains("size"), "{err}");
    }

    #[test]
    fn rejects_configurations_that_cannot_make_progress() {
        let mut spec = TableSpec::replay("r", 100, 8.0, 10, signature());
        spec.check(1 << 20).unwrap();
        spec.rate_limiter = RateLimiterSpec::SamplesPerInsert {
            samples_per_insert: 8.0,
            min_size_to_sample: 10,
            error_buffer: 4.0,
        };
        assert!(message(&spec)
            .contains("error_buffer must be at least 2 * max(1, samples_per_insert) = 16"));
        spec.rate_limiter = RateLimiterSpec::MinSize { min_size: 101 };
        assert!(message(&spec).contains("min_size 101 must be in 1..=max_size (100)"));
        let mut queue = TableSpec::queue("q", 8, signature());
        queue.check(1 << 20).unwrap();
        queue.rate_limiter = RateLimiterSpec::Queue { size: 9 };
        assert!(message(&queue).contains("queue size 9"));
        queue.rate_limiter = RateLimiterSpec::Queue { size: 8 };
        queue.max_times_sampled = 0;
        assert!(message(&queue).contains("max_times_sampled must be 1"));
    }

    /// A bad signature is named once as an invalid request, with its table.
    #[test]
    fn a_bad_signature_is_one_invalid_request() {
        let spec = TableSpec::queue("q", 8, Signature { fields: vec![] });
        assert_eq!(
            message(&spec),
            "invalid request: table `q`: signature: the signature is empty: a table needs at \
             least one field"
        );
    }

    #[test]
    fn rejects_bad_selectors_sizes_and_oversized_items() {
        let mut spec = TableSpec::replay("r", 100, 1.0, 1, signature());
        spec.sampler = SelectorKind::Prioritized { exponent: -1.0 };
        assert!(message(&spec).contains("exponent must be finite and >= 0"));
        spec.sampler = SelectorKind::Uniform;
        spec.max_size = 0;
        assert!(message(&spec).contains("max_size must be in 1..=2147483648, got 0"));
        spec.max_size = MAX_TABLE_ITEMS + 1;
        assert!(message(&spec).contains("max_size must be in 1..=2147483648"));
        spec.max_size = 100;
        let err = spec.check(16).unwrap_err().to_string();
        assert!(
            err.contains("an item takes 24 bytes, above this server's limit of 16"),
            "{err}"
        );
    }

    #[test]
    fn table_names_cannot_be_paths_or_control_characters() {
        for bad in [
            "../../etc/x\n",
            "",
            ".hidden",
            "a/b",
            "tab\tle",
            &"x".repeat(129),
        ] {
            let err = TableSpec::queue(bad, 8, signature())
                .check(u64::MAX)
                .unwrap_err();
            assert!(
                err.to_string().contains("names have 1 to 128 characters"),
                "{err}"
            );
        }
        for good in ["rollouts", "task_3.demos-v2", &"x".repeat(128)] {
            TableSpec::queue(good, 8, signature())
                .check(u64::MAX)
                .unwrap();
        }
    }

    #[test]
    fn max_batch_size_follows_the_limiter() {
        assert_eq!(TableSpec::queue("q", 8, signature()).max_batch_size(), 8);
        let replay = TableSpec::replay("r", 1000, 1.0, 100, signature());
        // error_buffer 100 either side of the target: a batch needs 200 - 1 of slack at most.
        assert_eq!(replay.max_batch_size(), 199);
    }
}
