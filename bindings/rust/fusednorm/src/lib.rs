// SPDX-License-Identifier: Apache-2.0
//! Safe Rust API of libfusednorm: fused LayerNorm/RMSNorm (with residual
//! add), BatchNorm (+ReLU / +Add+ReLU, native and cuDNN engines),
//! SyncBatchNorm over the caller's NCCL communicator, GroupNorm (+SiLU,
//! + per-sample scale / shift), and a cuBLASLt
//! fully-connected layer, on the caller's CUDA stream.
//!
//! The flow is the C API's: create a [`Handle`] (bound to the current
//! device), describe tensors with [`TensorDesc`] and the op with its
//! descriptor, ask the workspace size (a safe call), allocate it yourself,
//! then launch (an `unsafe fn`: raw device pointers and a raw stream, whose
//! validity the caller guarantees — see the [`ops`] module).
//!
//! ```no_run
//! use core::ptr::null_mut;
//! use fusednorm::{Dtype, Handle, NormDesc, NormMode, TensorDesc};
//! # fn main() -> Result<(), fusednorm::Error> {
//! let handle = Handle::new()?;
//! let x = TensorDesc::with(Dtype::F16, &[4096, 1024], None)?;
//! let w = TensorDesc::with(Dtype::F32, &[1024], None)?;
//! let ln = NormDesc::with(NormMode::LayerNorm, -1, 1e-5)?;
//! let ws_bytes = handle.norm_fwd_workspace_size(&ln, &x, &x)?;
//! # let (xp, yp, g, b, ws): (*const core::ffi::c_void, *mut core::ffi::c_void, *const core::ffi::c_void, *const core::ffi::c_void, *mut core::ffi::c_void) = (core::ptr::null(), null_mut(), core::ptr::null(), core::ptr::null(), null_mut());
//! // xp, yp, g, b, ws: device pointers you allocated (cudaMalloc).
//! unsafe {
//!     handle.norm_fwd(null_mut(), &ln, &x, xp, core::ptr::null(), null_mut(), Some(&w), g, b,
//!                     &x, yp, null_mut(), null_mut(), ws, ws_bytes)?;
//! }
//! # Ok(()) }
//! ```
//!
//! Errors: every call the library refuses returns [`Error`] with the
//! status, its [`Category`] and the library's message. Nothing in the safe
//! layer panics on any input.

mod desc;
mod error;
pub mod ops;
mod types;

pub use desc::{
    BatchNormConfig, BatchNormDesc, GroupNormConfig, GroupNormDesc, Handle, LinearConfig, LinearDesc, NcclComm,
    NormConfig, NormDesc, TensorDesc, TensorInfo, MAX_RANK,
};
pub use error::{last_error_message, Category, Error, Result, Status};
pub use ops::Stream;
pub use types::{
    BnAverage, BnEngine, BnEpilogue, BnSyncFlags, Dtype, GnActivation, LinearEpilogue, LinearFlags, NormFlags, NormMode,
    QuantScaling, WeightLayout,
};

/// The raw declarations (`fusednorm-sys`), for what the safe layer does not
/// wrap differently.
pub use fusednorm_sys as sys;

/// The version of the library loaded at run time (`fnorm_get_version`),
/// encoded as major * 10000 + minor * 100 + patch.
pub fn version() -> u32 {
    // SAFETY: no arguments, no state.
    unsafe { sys::fnorm_get_version() }
}

/// The version of the header this binding was generated from.
pub const HEADER_VERSION: u32 = sys::FNORM_VERSION;
