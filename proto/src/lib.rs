//! The `fleetrl.v1` gRPC protocol: generated messages and services, plus the hand-written
//! conversions between proto tensors and Rust data (and tch tensors, with the `tch` feature).
//!
//! Handlers never touch raw tensor bytes: they go through [`tensor`].

#![allow(missing_docs, unreachable_pub)]

/// Generated code for package `fleetrl.v1`.
pub mod v1 {
    tonic::include_proto!("fleetrl.v1");
}

pub mod codec;
pub mod tensor;

pub use tensor::{Element, TensorError};
pub use v1::{Dtype, Tensor, TensorMap};
