// SPDX-License-Identifier: Apache-2.0
//! Size queries (safe: they only read descriptors and device properties)
//! and launches (`unsafe`: raw device pointers and a raw stream whose
//! validity and lifetimes the caller guarantees, as in C).
//!
//! Rules shared by every launch (the header's conventions):
//! - the work is only enqueued on `stream` (a `cudaStream_t` cast to
//!   [`Stream`], or null for the legacy default stream); the call returns
//!   before it finishes, never synchronizes, never allocates, and may be
//!   captured in a CUDA graph;
//! - on `Err`, nothing was written (validation happens before any launch);
//! - scratch memory comes from the caller: at least the matching size
//!   query's bytes, on the handle's device;
//! - a null pointer means "absent" where the header calls the argument
//!   optional, and is refused (`Err`, BAD_PARAM_NULL_POINTER) elsewhere.
//!
//! # Safety (every launch)
//! Each non-null pointer must point to device memory on the handle's device
//! holding what its descriptor describes (or the documented count), aligned
//! to its element, and must stay valid and unaliased (except as each
//! function allows) until the enqueued work completes on `stream`. `stream`
//! must be null or a live stream of the handle's device.
use core::ffi::c_void;
use core::ptr;

use fusednorm_sys as sys;

use crate::desc::*;
use crate::error::{check, Result};
use crate::types::QuantScaling;

/// A CUDA stream as the C API takes it (`cudaStream_t` / `CUstream`);
/// `core::ptr::null_mut()` is the legacy default stream.
pub type Stream = sys::fnorm_stream_t;

fn opt_tensor(d: Option<&TensorDesc>) -> sys::fnorm_tensor_desc_t {
    d.map_or(ptr::null_mut(), TensorDesc::as_raw)
}

/// A size query's answer: `query` calls the C function, which writes the
/// bytes through the pointer it is given; its status is checked.
fn size_query(query: impl FnOnce(*mut usize) -> sys::fnorm_status_t) -> Result<usize> {
    let mut bytes = 0usize;
    check(query(&mut bytes))?;
    Ok(bytes)
}

impl Handle {
    // ---- LayerNorm / RMSNorm -------------------------------------------

    /// Bytes of workspace [`norm_fwd`](Self::norm_fwd) needs (`fnorm_norm_fwd_workspace_size`).
    pub fn norm_fwd_workspace_size(&self, norm: &NormDesc, x_desc: &TensorDesc, y_desc: &TensorDesc) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_norm_fwd_workspace_size(self.as_raw(), norm.as_raw(), x_desc.as_raw(), y_desc.as_raw(), b)
        })
    }

    /// Normalization forward (`fnorm_norm_fwd`): y = LayerNorm/RMSNorm(s)
    /// with s = x, or s = x + residual (written to `sum` when not null).
    /// `residual`, `sum`, `gamma`, `beta`, `mean`, `rstd` may be null;
    /// `w_desc` describes gamma and beta (None when both are null).
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn norm_fwd(
        &self,
        stream: Stream,
        norm: &NormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        residual: *const c_void,
        sum: *mut c_void,
        w_desc: Option<&TensorDesc>,
        gamma: *const c_void,
        beta: *const c_void,
        y_desc: &TensorDesc,
        y: *mut c_void,
        mean: *mut f32,
        rstd: *mut f32,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_norm_fwd(
            self.as_raw(),
            stream,
            norm.as_raw(),
            x_desc.as_raw(),
            x,
            residual,
            sum,
            opt_tensor(w_desc),
            gamma,
            beta,
            y_desc.as_raw(),
            y,
            mean,
            rstd,
            workspace,
            workspace_bytes,
        ))
    }

    /// Bytes of workspace [`norm_fwd_quant`](Self::norm_fwd_quant) needs
    /// (`fnorm_norm_fwd_quant_workspace_size`); `y_desc` in a quantized dtype.
    pub fn norm_fwd_quant_workspace_size(
        &self,
        norm: &NormDesc,
        x_desc: &TensorDesc,
        y_desc: &TensorDesc,
        scaling: QuantScaling,
    ) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_norm_fwd_quant_workspace_size(
                self.as_raw(),
                norm.as_raw(),
                x_desc.as_raw(),
                y_desc.as_raw(),
                scaling.raw(),
                b,
            )
        })
    }

    /// Bytes of [`norm_fwd_quant`](Self::norm_fwd_quant)'s `scale`
    /// (`fnorm_norm_fwd_quant_scale_size`): 4 per tensor, 4 * rows per token.
    pub fn norm_fwd_quant_scale_size(&self, norm: &NormDesc, x_desc: &TensorDesc, scaling: QuantScaling) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_norm_fwd_quant_scale_size(self.as_raw(), norm.as_raw(), x_desc.as_raw(), scaling.raw(), b)
        })
    }

    /// Normalization forward writing y quantized (`fnorm_norm_fwd_quant`):
    /// the arguments of [`norm_fwd`](Self::norm_fwd), `y_desc` in
    /// [`Dtype::F8E4M3`], [`Dtype::F8E5M2`] or [`Dtype::I8`], then the
    /// scaling, `scale` (read per tensor, written per token: see
    /// [`norm_fwd_quant_scale_size`](Self::norm_fwd_quant_scale_size)) and
    /// the optional `amax` (one fp32: the largest |value| before scaling).
    /// The rounding, saturation and NaN rules are the header's.
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn norm_fwd_quant(
        &self,
        stream: Stream,
        norm: &NormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        residual: *const c_void,
        sum: *mut c_void,
        w_desc: Option<&TensorDesc>,
        gamma: *const c_void,
        beta: *const c_void,
        y_desc: &TensorDesc,
        y: *mut c_void,
        scaling: QuantScaling,
        scale: *mut f32,
        amax: *mut f32,
        mean: *mut f32,
        rstd: *mut f32,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_norm_fwd_quant(
            self.as_raw(),
            stream,
            norm.as_raw(),
            x_desc.as_raw(),
            x,
            residual,
            sum,
            opt_tensor(w_desc),
            gamma,
            beta,
            y_desc.as_raw(),
            y,
            scaling.raw(),
            scale,
            amax,
            mean,
            rstd,
            workspace,
            workspace_bytes,
        ))
    }

    /// Bytes of workspace [`norm_bwd`](Self::norm_bwd) needs
    /// (`fnorm_norm_bwd_workspace_size`); `w_desc` None: no dgamma/dbeta.
    pub fn norm_bwd_workspace_size(&self, norm: &NormDesc, x_desc: &TensorDesc, w_desc: Option<&TensorDesc>) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_norm_bwd_workspace_size(self.as_raw(), norm.as_raw(), x_desc.as_raw(), opt_tensor(w_desc), b)
        })
    }

    /// Normalization backward (`fnorm_norm_bwd`). `mean` (null for RMSNorm),
    /// `rstd`: the forward's statistics. `gamma`, `dsum`, `dgamma`, `dbeta`
    /// may be null; `w_desc` is required when dgamma or dbeta is given.
    /// The workspace must be 16-byte aligned (cudaMalloc's are).
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn norm_bwd(
        &self,
        stream: Stream,
        norm: &NormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        dy_desc: &TensorDesc,
        dy: *const c_void,
        mean: *const f32,
        rstd: *const f32,
        w_desc: Option<&TensorDesc>,
        gamma: *const c_void,
        dsum: *const c_void,
        dx_desc: &TensorDesc,
        dx: *mut c_void,
        dgamma: *mut c_void,
        dbeta: *mut c_void,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_norm_bwd(
            self.as_raw(),
            stream,
            norm.as_raw(),
            x_desc.as_raw(),
            x,
            dy_desc.as_raw(),
            dy,
            mean,
            rstd,
            opt_tensor(w_desc),
            gamma,
            dsum,
            dx_desc.as_raw(),
            dx,
            dgamma,
            dbeta,
            workspace,
            workspace_bytes,
        ))
    }

    // ---- BatchNorm -----------------------------------------------------

    /// Bytes of workspace the training forward needs.
    pub fn batchnorm_fwd_train_workspace_size(&self, bn: &BatchNormDesc, x_desc: &TensorDesc) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_batchnorm_fwd_train_workspace_size(self.as_raw(), bn.as_raw(), x_desc.as_raw(), b)
        })
    }

    /// Bytes of the reserve space the training forward writes and the
    /// backward reads (the ReLU mask with the native engine).
    pub fn batchnorm_reserve_space_size(&self, bn: &BatchNormDesc, x_desc: &TensorDesc) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_batchnorm_reserve_space_size(self.as_raw(), bn.as_raw(), x_desc.as_raw(), b)
        })
    }

    /// Bytes of workspace the inference forward needs.
    pub fn batchnorm_fwd_infer_workspace_size(&self, bn: &BatchNormDesc, x_desc: &TensorDesc) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_batchnorm_fwd_infer_workspace_size(self.as_raw(), bn.as_raw(), x_desc.as_raw(), b)
        })
    }

    /// Bytes of workspace the backward needs.
    pub fn batchnorm_bwd_workspace_size(&self, bn: &BatchNormDesc, x_desc: &TensorDesc) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_batchnorm_bwd_workspace_size(self.as_raw(), bn.as_raw(), x_desc.as_raw(), b)
        })
    }

    /// BatchNorm training forward (`fnorm_batchnorm_fwd_train`), SyncBatchNorm
    /// when the descriptor has a communicator. Per-channel vectors are C
    /// fp32 values. `z` (ADD_RELU only), `gamma`, `beta`, the running
    /// statistics (both or neither), `num_batches_tracked`, `saved_mean`,
    /// `saved_invstd` may be null; `reserve` is required when the reserve
    /// query answers more than 0 bytes (16-byte aligned).
    ///
    /// # Safety
    /// See the module documentation; with a communicator, every rank must
    /// make the same calls in the same order.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn batchnorm_fwd_train(
        &self,
        stream: Stream,
        bn: &BatchNormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        z: *const c_void,
        gamma: *const f32,
        beta: *const f32,
        running_mean: *mut f32,
        running_var: *mut f32,
        num_batches_tracked: *mut i64,
        y_desc: &TensorDesc,
        y: *mut c_void,
        saved_mean: *mut f32,
        saved_invstd: *mut f32,
        workspace: *mut c_void,
        workspace_bytes: usize,
        reserve: *mut c_void,
        reserve_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_batchnorm_fwd_train(
            self.as_raw(),
            stream,
            bn.as_raw(),
            x_desc.as_raw(),
            x,
            z,
            gamma,
            beta,
            running_mean,
            running_var,
            num_batches_tracked,
            y_desc.as_raw(),
            y,
            saved_mean,
            saved_invstd,
            workspace,
            workspace_bytes,
            reserve,
            reserve_bytes,
        ))
    }

    /// BatchNorm inference forward (`fnorm_batchnorm_fwd_infer`) with the
    /// running statistics (required).
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn batchnorm_fwd_infer(
        &self,
        stream: Stream,
        bn: &BatchNormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        z: *const c_void,
        gamma: *const f32,
        beta: *const f32,
        running_mean: *const f32,
        running_var: *const f32,
        y_desc: &TensorDesc,
        y: *mut c_void,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_batchnorm_fwd_infer(
            self.as_raw(),
            stream,
            bn.as_raw(),
            x_desc.as_raw(),
            x,
            z,
            gamma,
            beta,
            running_mean,
            running_var,
            y_desc.as_raw(),
            y,
            workspace,
            workspace_bytes,
        ))
    }

    /// BatchNorm backward (`fnorm_batchnorm_bwd`) from the training
    /// forward's saved statistics and reserve space. `y` and `beta` are read
    /// only by the cuDNN engine with an epilogue (null otherwise); `dz`
    /// (ADD_RELU), `gamma`, `dgamma`, `dbeta` may be null.
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn batchnorm_bwd(
        &self,
        stream: Stream,
        bn: &BatchNormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        dy_desc: &TensorDesc,
        dy: *const c_void,
        y: *const c_void,
        gamma: *const f32,
        beta: *const f32,
        saved_mean: *const f32,
        saved_invstd: *const f32,
        reserve: *const c_void,
        reserve_bytes: usize,
        dx_desc: &TensorDesc,
        dx: *mut c_void,
        dz: *mut c_void,
        dgamma: *mut f32,
        dbeta: *mut f32,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_batchnorm_bwd(
            self.as_raw(),
            stream,
            bn.as_raw(),
            x_desc.as_raw(),
            x,
            dy_desc.as_raw(),
            dy,
            y,
            gamma,
            beta,
            saved_mean,
            saved_invstd,
            reserve,
            reserve_bytes,
            dx_desc.as_raw(),
            dx,
            dz,
            dgamma,
            dbeta,
            workspace,
            workspace_bytes,
        ))
    }

    // ---- GroupNorm -----------------------------------------------------

    /// Bytes of workspace [`groupnorm_fwd`](Self::groupnorm_fwd) needs
    /// (`fnorm_groupnorm_fwd_workspace_size`): per-split partial statistics,
    /// from the descriptor, x's description and the device alone.
    pub fn groupnorm_fwd_workspace_size(&self, gn: &GroupNormDesc, x_desc: &TensorDesc) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_groupnorm_fwd_workspace_size(self.as_raw(), gn.as_raw(), x_desc.as_raw(), b)
        })
    }

    /// GroupNorm forward (`fnorm_groupnorm_fwd`), training and inference
    /// alike: y = act((x - mean) * rstd * gamma + beta) per (sample, group),
    /// with `* (1 + scale[n, c]) + shift[n, c]` before the activation when
    /// scale / shift are given. x: [N, C, spatial...] channels-first packed
    /// or channels-last; y the same.
    /// `w_desc` describes `gamma` and `beta` (C values, x's dtype or F32),
    /// `ss_desc` describes `scale` and `shift` ([N, C] or [N, C, 1, ...],
    /// any strides); each is None when both its pointers are null. `gamma`,
    /// `beta`, `scale`, `shift`, `mean`, `rstd` may be null; `mean` / `rstd`
    /// receive N * G fp32 values (index n * G + g) for the backward. `y` may
    /// be `x` (in place).
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn groupnorm_fwd(
        &self,
        stream: Stream,
        gn: &GroupNormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        w_desc: Option<&TensorDesc>,
        gamma: *const c_void,
        beta: *const c_void,
        ss_desc: Option<&TensorDesc>,
        scale: *const c_void,
        shift: *const c_void,
        y_desc: &TensorDesc,
        y: *mut c_void,
        mean: *mut f32,
        rstd: *mut f32,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_groupnorm_fwd(
            self.as_raw(),
            stream,
            gn.as_raw(),
            x_desc.as_raw(),
            x,
            opt_tensor(w_desc),
            gamma,
            beta,
            opt_tensor(ss_desc),
            scale,
            shift,
            y_desc.as_raw(),
            y,
            mean,
            rstd,
            workspace,
            workspace_bytes,
        ))
    }

    /// Bytes of workspace [`groupnorm_bwd`](Self::groupnorm_bwd) needs
    /// (`fnorm_groupnorm_bwd_workspace_size`); `w_desc` None: no dgamma /
    /// dbeta, `ss_desc` None: no dscale / dshift will be asked for.
    pub fn groupnorm_bwd_workspace_size(
        &self,
        gn: &GroupNormDesc,
        x_desc: &TensorDesc,
        w_desc: Option<&TensorDesc>,
        ss_desc: Option<&TensorDesc>,
    ) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_groupnorm_bwd_workspace_size(
                self.as_raw(),
                gn.as_raw(),
                x_desc.as_raw(),
                opt_tensor(w_desc),
                opt_tensor(ss_desc),
                b,
            )
        })
    }

    /// GroupNorm backward (`fnorm_groupnorm_bwd`) from the forward's saved
    /// `mean` / `rstd` (required, as are `x` and `dy`), with the forward's
    /// `gamma`, `beta`, `scale`, `shift` (null: absent; shift is read only
    /// with SiLU, whose derivative is recomputed from x, beta with SiLU or
    /// for dscale). `dgamma`,
    /// `dbeta` (described by `w_desc`), `dscale`, `dshift` (by `ss_desc`)
    /// are optional outputs; every sum is deterministic. `dx` may be `dy` or
    /// `x` (in place).
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn groupnorm_bwd(
        &self,
        stream: Stream,
        gn: &GroupNormDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        dy_desc: &TensorDesc,
        dy: *const c_void,
        mean: *const f32,
        rstd: *const f32,
        w_desc: Option<&TensorDesc>,
        gamma: *const c_void,
        beta: *const c_void,
        ss_desc: Option<&TensorDesc>,
        scale: *const c_void,
        shift: *const c_void,
        dx_desc: &TensorDesc,
        dx: *mut c_void,
        dgamma: *mut c_void,
        dbeta: *mut c_void,
        dscale: *mut c_void,
        dshift: *mut c_void,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_groupnorm_bwd(
            self.as_raw(),
            stream,
            gn.as_raw(),
            x_desc.as_raw(),
            x,
            dy_desc.as_raw(),
            dy,
            mean,
            rstd,
            opt_tensor(w_desc),
            gamma,
            beta,
            opt_tensor(ss_desc),
            scale,
            shift,
            dx_desc.as_raw(),
            dx,
            dgamma,
            dbeta,
            dscale,
            dshift,
            workspace,
            workspace_bytes,
        ))
    }

    // ---- Fully-connected layer -----------------------------------------

    /// Bytes of the aux buffer a training forward with an activation writes
    /// (`fnorm_linear_aux_size`); 0 for None and Bias.
    pub fn linear_aux_size(&self, desc: &LinearDesc, y_desc: &TensorDesc) -> Result<usize> {
        size_query(|b| unsafe { sys::fnorm_linear_aux_size(self.as_raw(), desc.as_raw(), y_desc.as_raw(), b) })
    }

    /// Bytes of workspace [`linear_fwd`](Self::linear_fwd) needs.
    pub fn linear_fwd_workspace_size(
        &self,
        desc: &LinearDesc,
        x_desc: &TensorDesc,
        w_desc: &TensorDesc,
        y_desc: &TensorDesc,
    ) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_linear_fwd_workspace_size(
                self.as_raw(),
                desc.as_raw(),
                x_desc.as_raw(),
                w_desc.as_raw(),
                y_desc.as_raw(),
                b,
            )
        })
    }

    /// Linear forward (`fnorm_linear_fwd`): y = act(x W + b). `bias` is
    /// required by the Bias* epilogues and null otherwise; `aux` (16-byte
    /// aligned, at least the aux query's bytes) is for training with
    /// BiasRelu / BiasGelu, null otherwise.
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn linear_fwd(
        &self,
        stream: Stream,
        desc: &LinearDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        w_desc: &TensorDesc,
        w: *const c_void,
        bias: *const c_void,
        y_desc: &TensorDesc,
        y: *mut c_void,
        aux: *mut c_void,
        aux_bytes: usize,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_linear_fwd(
            self.as_raw(),
            stream,
            desc.as_raw(),
            x_desc.as_raw(),
            x,
            w_desc.as_raw(),
            w,
            bias,
            y_desc.as_raw(),
            y,
            aux,
            aux_bytes,
            workspace,
            workspace_bytes,
        ))
    }

    /// Bytes of workspace [`linear_bwd`](Self::linear_bwd) needs;
    /// `x_producer` as in the launch.
    pub fn linear_bwd_workspace_size(
        &self,
        desc: &LinearDesc,
        x_desc: &TensorDesc,
        w_desc: &TensorDesc,
        dy_desc: &TensorDesc,
        x_producer: Option<&LinearDesc>,
    ) -> Result<usize> {
        size_query(|b| unsafe {
            sys::fnorm_linear_bwd_workspace_size(
                self.as_raw(),
                desc.as_raw(),
                x_desc.as_raw(),
                w_desc.as_raw(),
                dy_desc.as_raw(),
                x_producer.map_or(ptr::null_mut(), LinearDesc::as_raw),
                b,
            )
        })
    }

    /// Linear backward (`fnorm_linear_bwd`): dx = dz W^T, dw = x^T dz,
    /// db = column sums of dz, with dz = dy * act'(z) from the forward's aux.
    /// Each output may be null (not computed); `dx_desc` is needed with `dx`.
    /// `x_producer`, `x_aux`, `x_db`: chained layers (see the header).
    ///
    /// # Safety
    /// See the module documentation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn linear_bwd(
        &self,
        stream: Stream,
        desc: &LinearDesc,
        x_desc: &TensorDesc,
        x: *const c_void,
        w_desc: &TensorDesc,
        w: *const c_void,
        dy_desc: &TensorDesc,
        dy: *const c_void,
        aux: *const c_void,
        aux_bytes: usize,
        x_producer: Option<&LinearDesc>,
        x_aux: *const c_void,
        x_aux_bytes: usize,
        dx_desc: Option<&TensorDesc>,
        dx: *mut c_void,
        dw: *mut c_void,
        db: *mut c_void,
        x_db: *mut c_void,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::fnorm_linear_bwd(
            self.as_raw(),
            stream,
            desc.as_raw(),
            x_desc.as_raw(),
            x,
            w_desc.as_raw(),
            w,
            dy_desc.as_raw(),
            dy,
            aux,
            aux_bytes,
            x_producer.map_or(ptr::null_mut(), LinearDesc::as_raw),
            x_aux,
            x_aux_bytes,
            opt_tensor(dx_desc),
            dx,
            dw,
            db,
            x_db,
            workspace,
            workspace_bytes,
        ))
    }
}
