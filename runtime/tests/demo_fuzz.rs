//! Demo files under property tests: whatever a file holds (bytes cut short or changed, any
//! header value), [`Demo::from_bytes`] gives a demo or a `DemoError`, never a panic.
//!
//! These sit outside `src/demo.rs` so that they can run beside changes to its parser.

use std::collections::HashMap;
use std::path::Path;

use fleetrl_proto::space::{Action, Space};
use fleetrl_runtime::demo::{Demo, DemoSource, Recorder};
use proptest::prelude::*;
use safetensors::tensor::TensorView;
use safetensors::SafeTensors;

/// A two-step CartPole demo as its file's bytes.
fn demo_bytes() -> Vec<u8> {
    let space = Space::Discrete { n: 2 };
    let mut recorder = Recorder::new(
        "CartPole-v1",
        DemoSource::Scripted,
        vec![2],
        &space,
        &[0., 1.],
    );
    recorder.push(&Action::Discrete(1), 1.0, &[2., 3.], Some(0.5));
    recorder.push(&Action::Discrete(0), 0.5, &[4., 5.], Some(0.25));
    recorder.finish(true).to_bytes().unwrap()
}

/// `bytes` (a demo file) with header `key` set to `value`.
fn with_header(bytes: &[u8], key: &str, value: &str) -> Vec<u8> {
    let file = SafeTensors::deserialize(bytes).unwrap();
    let (_, meta) = SafeTensors::read_metadata(bytes).unwrap();
    let mut header: HashMap<String, String> = meta.metadata().clone().unwrap_or_default();
    header.insert(key.to_string(), value.to_string());
    let views: Vec<(String, TensorView<'_>)> = file.tensors();
    safetensors::serialize(views, &Some(header)).unwrap()
}

fn parse(bytes: &[u8]) -> bool {
    Demo::from_bytes(bytes, Path::new("fuzz.demo.safetensors")).is_ok()
}

/// Header values around what the parser looks for, multi-byte characters included.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("discrete(".to_string()),
        "discrete\\([0-9a-zé€)]{0,4}",
        "discrete\\([0-9]{1,3}\\)",
        "box\\([0-9]{0,3}\\)",
        "[a-z0-9()é€]{0,12}",
        any::<String>(),
    ]
}

const HEADERS: &[&str] = &[
    "format",
    "version",
    "source",
    "action_space",
    "env_id",
    "terminated",
];

#[test]
fn the_unchanged_file_parses() {
    assert!(parse(&demo_bytes()));
}

#[test]
fn action_space_discrete_open_paren_alone_is_an_error() {
    assert!(!parse(&with_header(
        &demo_bytes(),
        "action_space",
        "discrete("
    )));
}

#[test]
fn action_space_ending_in_a_multibyte_character_is_an_error() {
    assert!(!parse(&with_header(
        &demo_bytes(),
        "action_space",
        "discrete(2é"
    )));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A demo file cut short, with a byte changed, or replaced by other bytes.
    #[test]
    fn corrupted_demo_bytes_are_a_demo_or_an_error(
        cut in any::<prop::sample::Index>(),
        flip in any::<Option<(prop::sample::Index, u8)>>(),
        other in proptest::option::weighted(0.2, proptest::collection::vec(any::<u8>(), 0..128)),
    ) {
        let mut bytes = demo_bytes();
        bytes.truncate(cut.index(bytes.len() + 1));
        if let (Some((at, value)), false) = (flip, bytes.is_empty()) {
            let at = at.index(bytes.len());
            bytes[at] ^= value.max(1);
        }
        parse(&other.unwrap_or(bytes));
    }

    /// Any header value but an `action_space` that starts with `discrete(` and does not end in
    /// an ASCII `)`, the two cases above that still panic.
    #[test]
    fn any_header_value_is_a_demo_or_an_error(
        key in prop::sample::select(HEADERS),
        value in header_value(),
    ) {
        prop_assume!(key != "action_space" || !value.starts_with("discrete(") || value.ends_with(')'));
        parse(&with_header(&demo_bytes(), key, &value));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The same with nothing excluded.
    #[test]
    fn any_header_value_at_all_is_a_demo_or_an_error(
        key in prop::sample::select(HEADERS),
        value in header_value(),
    ) {
        parse(&with_header(&demo_bytes(), key, &value));
    }
}
