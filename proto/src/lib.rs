//! The `fleetrl.v1` gRPC protocol: generated messages and services, plus the hand-written
//! conversions between proto tensors and Rust data (tch conversions are in fleetrl-core, so this
//! crate never depends on tch).
//!
//! Handlers never touch raw tensor bytes: they go through [`tensor`]. The replay table
//! declarations every role shares ([`table`]: spec, signature, batch splitting and stacking) and
//! env [`space`]s live here too, so that no role needs libtorch to speak the protocol.

#![allow(missing_docs, unreachable_pub)]

/// Generated code for package `fleetrl.v1`.
pub mod v1 {
    tonic::include_proto!("fleetrl.v1");
}

/// The encoded `google.protobuf.FileDescriptorSet` of every `fleetrl.v1` proto: what lets a
/// test find every service and method (and its streaming kind) without a hand-written list.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fleetrl.bin"));

pub mod codec;
pub mod space;
pub mod table;
pub mod tensor;

pub use tensor::{Element, TensorError};
pub use v1::{Dtype, Tensor, TensorMap};
