//! Conversions between table definitions and their wire messages (`fleetrl.v1.TableConfig`).

use crate::v1 as pb;
use crate::Dtype;
use pb::selector::Kind;

use super::{FieldSpec, RateLimiterSpec, ReplayError, SelectorKind, Signature, TableSpec};

impl From<&TableSpec> for pb::TableConfig {
    fn from(spec: &TableSpec) -> Self {
        use pb::rate_limiter::{Kind as L, MinSize, Queue, SamplesPerInsert};
        let rate_limiter = match spec.rate_limiter {
            RateLimiterSpec::MinSize { min_size } => L::MinSize(MinSize { min_size }),
            RateLimiterSpec::SamplesPerInsert {
                samples_per_insert,
                min_size_to_sample,
                error_buffer,
            } => L::SamplesPerInsert(SamplesPerInsert {
                samples_per_insert,
                min_size_to_sample,
                error_buffer,
            }),
            RateLimiterSpec::Queue { size } => L::Queue(Queue { size }),
        };
        pb::TableConfig {
            name: spec.name.clone(),
            max_size: spec.max_size,
            sampler: Some(selector(spec.sampler)),
            remover: Some(selector(spec.remover)),
            max_times_sampled: spec.max_times_sampled,
            rate_limiter: Some(pb::RateLimiter {
                kind: Some(rate_limiter),
            }),
            allow_non_finite: spec.allow_non_finite,
            signature: spec.signature.fields.iter().map(Into::into).collect(),
        }
    }
}

impl TryFrom<&pb::TableConfig> for TableSpec {
    type Error = ReplayError;

    /// Decodes a definition; the result still needs [`TableSpec::check`].
    fn try_from(config: &pb::TableConfig) -> Result<Self, ReplayError> {
        use pb::rate_limiter::Kind as L;
        let bad =
            |why: &str| ReplayError::InvalidRequest(format!("table `{}`: {why}", config.name));
        let selector_kind = |which: &str, s: &Option<pb::Selector>| {
            let s = s
                .as_ref()
                .ok_or_else(|| bad(&format!("{which} is missing")))?;
            Ok(match s.kind() {
                Kind::Uniform => SelectorKind::Uniform,
                Kind::Prioritized => SelectorKind::Prioritized {
                    exponent: s.priority_exponent,
                },
                Kind::Fifo => SelectorKind::Fifo,
                Kind::Lifo => SelectorKind::Lifo,
                Kind::MaxHeap => SelectorKind::MaxHeap,
                Kind::MinHeap => SelectorKind::MinHeap,
                Kind::Unspecified => return Err(bad(&format!("{which} kind is unspecified"))),
            })
        };
        let rate_limiter = match config.rate_limiter.as_ref().and_then(|r| r.kind.as_ref()) {
            Some(L::MinSize(m)) => RateLimiterSpec::MinSize {
                min_size: m.min_size,
            },
            Some(L::SamplesPerInsert(s)) => RateLimiterSpec::SamplesPerInsert {
                samples_per_insert: s.samples_per_insert,
                min_size_to_sample: s.min_size_to_sample,
                error_buffer: s.error_buffer,
            },
            Some(L::Queue(q)) => RateLimiterSpec::Queue { size: q.size },
            None => return Err(bad("rate_limiter is missing")),
        };
        let mut fields = Vec::with_capacity(config.signature.len());
        for field in &config.signature {
            let dtype = Dtype::try_from(field.dtype).map_err(|_| {
                bad(&format!(
                    "field `{}` has unknown dtype {}",
                    field.name, field.dtype
                ))
            })?;
            fields.push(FieldSpec::new(&field.name, dtype, &field.shape));
        }
        Ok(TableSpec {
            name: config.name.clone(),
            max_size: config.max_size,
            sampler: selector_kind("sampler", &config.sampler)?,
            remover: selector_kind("remover", &config.remover)?,
            max_times_sampled: config.max_times_sampled,
            rate_limiter,
            allow_non_finite: config.allow_non_finite,
            signature: Signature { fields },
        })
    }
}

fn selector(kind: SelectorKind) -> pb::Selector {
    let (kind, priority_exponent) = match kind {
        SelectorKind::Uniform => (Kind::Uniform, 0.0),
        SelectorKind::Prioritized { exponent } => (Kind::Prioritized, exponent),
        SelectorKind::Fifo => (Kind::Fifo, 0.0),
        SelectorKind::Lifo => (Kind::Lifo, 0.0),
        SelectorKind::MaxHeap => (Kind::MaxHeap, 0.0),
        SelectorKind::MinHeap => (Kind::MinHeap, 0.0),
    };
    pb::Selector {
        kind: kind as i32,
        priority_exponent,
    }
}

/// Describes the first difference between two definitions of the same table, or `None` when
/// they are equal: the message an `EnsureTable` conflict carries.
pub fn difference(existing: &TableSpec, wanted: &TableSpec) -> Option<String> {
    let name = &existing.name;
    let differs = |what: &str, a: String, b: String| {
        Some(format!(
            "table `{name}` already exists with {what} {a}; the request asks for {b}"
        ))
    };
    if existing.max_size != wanted.max_size {
        return differs(
            "max_size",
            existing.max_size.to_string(),
            wanted.max_size.to_string(),
        );
    }
    if existing.sampler != wanted.sampler {
        return differs(
            "sampler",
            format!("{:?}", existing.sampler),
            format!("{:?}", wanted.sampler),
        );
    }
    if existing.remover != wanted.remover {
        return differs(
            "remover",
            format!("{:?}", existing.remover),
            format!("{:?}", wanted.remover),
        );
    }
    if existing.max_times_sampled != wanted.max_times_sampled {
        return differs(
            "max_times_sampled",
            existing.max_times_sampled.to_string(),
            wanted.max_times_sampled.to_string(),
        );
    }
    if existing.rate_limiter != wanted.rate_limiter {
        return differs(
            "rate_limiter",
            format!("{:?}", existing.rate_limiter),
            format!("{:?}", wanted.rate_limiter),
        );
    }
    if existing.allow_non_finite != wanted.allow_non_finite {
        return differs(
            "allow_non_finite",
            existing.allow_non_finite.to_string(),
            wanted.allow_non_finite.to_string(),
        );
    }
    if existing.signature != wanted.signature {
        return differs(
            "signature",
            format!("{:?}", existing.signature.fields),
            format!("{:?}", wanted.signature.fields),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_config_round_trips() {
        let signature = Signature {
            fields: vec![FieldSpec::new("obs", Dtype::U8, &[4, 84, 84])],
        };
        let mut spec = TableSpec::replay("atari", 1000, 2.0, 50, signature);
        spec.sampler = SelectorKind::Prioritized { exponent: 0.6 };
        spec.remover = SelectorKind::MinHeap;
        let wire: pb::TableConfig = (&spec).into();
        assert_eq!(TableSpec::try_from(&wire).unwrap(), spec);
        let queue = TableSpec::queue("q", 4, Signature::default());
        assert_eq!(
            TableSpec::try_from(&pb::TableConfig::from(&queue)).unwrap(),
            queue
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// What `EnsureTable` does with a request's bytes: decode, convert, check, size
        /// batches. Any bytes end in a spec or an error, and a checked spec round trips.
        #[test]
        fn any_table_config_bytes_give_a_spec_or_an_error(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
        ) {
            use prost::Message;
            let Ok(config) = pb::TableConfig::decode(bytes.as_slice()) else { return Ok(()) };
            let Ok(spec) = TableSpec::try_from(&config) else { return Ok(()) };
            if spec.check(u64::MAX).is_ok() {
                let _ = spec.max_batch_size();
                proptest::prop_assert_eq!(TableSpec::try_from(&pb::TableConfig::from(&spec)).unwrap(), spec);
            }
        }
    }

    #[test]
    fn difference_names_the_setting() {
        let a = TableSpec::queue("q", 4, Signature::default());
        let mut b = a.clone();
        assert_eq!(difference(&a, &b), None);
        b.max_size = 8;
        assert_eq!(
            difference(&a, &b).unwrap(),
            "table `q` already exists with max_size 4; the request asks for 8"
        );
    }
}
