// SPDX-License-Identifier: Apache-2.0
//! Test and example support: just enough of the CUDA runtime to allocate,
//! copy and free device memory (not a CUDA wrapper), fp16/bf16 conversion,
//! a deterministic generator and a result checker. Publish = false.
pub mod cuda;
pub mod half;
pub mod check;

pub use cuda::{device_count, DeviceBuffer};
