/* SPDX-License-Identifier: Apache-2.0 */
/** @file
 * libfusednorm: fused normalization kernels for NVIDIA GPUs behind a C ABI.
 *
 * Conventions (every function below follows them):
 *  - Every fallible call returns fnorm_status_t; outputs go through trailing
 *    pointers. On failure nothing is written to outputs (host or device) and
 *    a thread-local message naming the failing argument is kept for
 *    fnorm_get_last_error_message().
 *  - The stream is an argument of every launch. A launch only enqueues work
 *    on that stream: it never synchronizes the host, never allocates device
 *    memory, and may be captured in a CUDA graph.
 *  - Scratch memory comes from the caller: ask ..._workspace_size(), allocate
 *    at least that many bytes on the handle's device, pass it to the launch.
 *    Size queries take the handle (the answer may depend on its device's
 *    properties and kernels' occupancy); they enqueue nothing and never
 *    synchronize.
 *  - Optional inputs and outputs are NULL-able where documented.
 *  - Sizes are overflow-checked: a shape whose byte counts (tensor extents,
 *    workspace, aux or reserve space) do not fit in size_t is refused with
 *    FNORM_STATUS_BAD_PARAM_SHAPE naming the argument.
 *  - Device pointers are not inspected by default: a launch checks their
 *    alignment, NULL-ness and overlaps, not what memory they point to. A host
 *    pointer (or a buffer smaller than its descriptor) passed as device data
 *    makes the kernel fault, which poisons the CUDA context of the whole
 *    process. Checked mode (FNORM_CHECK_POINTERS, see fnorm_create) verifies
 *    every pointer first.
 *  - Handles and descriptors are opaque; destroy functions accept NULL.
 *  - Aliasing: a launch's outputs (the workspace and reserve space
 *    included, over the bytes the call is given) overlap none of its other
 *    buffers, except an output that is the very same tensor (same pointer,
 *    sizes and strides) as the in-place partner the function documents.
 *    Any other overlap between an output and another buffer is BAD_PARAM
 *    naming both arguments; inputs may overlap each other.
 *  - Empty tensors: a descriptor may have sizes of 0. A launch over tensors
 *    with no elements validates its other arguments as usual (NULL is then
 *    accepted for the data pointers of the empty tensors), writes nothing
 *    into the empty outputs and enqueues nothing, except where an output
 *    that still has elements is defined as a sum over no values: it is
 *    written with zeros (e.g. dgamma / dbeta of a backward over zero rows),
 *    as frameworks return them. Each op says what else it does. The size
 *    queries of such a call answer 0.
 *  - Host cost: the first launch of a description (descriptors, dtypes,
 *    flags, and the alignment class of the pointers) on a handle, on a
 *    thread, plans it; later launches on that thread reuse the plan without
 *    planning or taking a lock.
 *  - Run-time dependencies: libfusednorm links only the CUDA runtime
 *    (libcudart). cuBLASLt (the fully-connected layer), cuDNN (the BatchNorm
 *    cuDNN engine) and NCCL (SyncBatchNorm) are opened on first use: a copy
 *    already loaded in the process is used first (for NCCL, the one the
 *    caller's communicator came from), else the soname of the major version
 *    the library was built against (libcublasLt.so.13, libcudnn.so.9,
 *    libnccl.so.2 for CUDA 13) through the loader's search path. An op whose
 *    library cannot be opened returns FNORM_STATUS_NOT_SUPPORTED_BUILD with a
 *    message naming the library; every other op works without it.
 *  - A launch on a GPU this build has no code for (see the meson option
 *    gpu_archs) returns FNORM_STATUS_NOT_SUPPORTED_BUILD with a message
 *    naming the device's compute capability and the architectures built.
 *
 * This header includes no CUDA header: `fnorm_stream_t` is the type that
 * `cudaStream_t` and `CUstream` point to, so either converts implicitly.
 */
#ifndef FUSEDNORM_H
#define FUSEDNORM_H

#include <stddef.h>
#include <stdint.h>

#include "fusednorm_version.h"

#if defined(FNORM_BUILDING_LIBRARY)
#define FNORM_API __attribute__((visibility("default")))
#else
#define FNORM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Basic types                                                              */
/* ------------------------------------------------------------------------ */

/** A CUDA stream: pass a cudaStream_t (or CUstream), or NULL for the legacy
 *  default stream. */
typedef struct CUstream_st *fnorm_stream_t;

/** Status codes. Values are explicit and never renumbered. The thousands
 *  digit is the category: 0 success, 1 bad parameter (fix the call),
 *  2 not supported (the library cannot do this case), 3 internal error,
 *  4 no usable device, 5 a CUDA / library call failed during execution.
 *  fnorm_status_category() returns that band. */
typedef enum fnorm_status {
  FNORM_STATUS_SUCCESS = 0,

  FNORM_STATUS_BAD_PARAM = 1000,               /* an argument is invalid */
  FNORM_STATUS_BAD_PARAM_NULL_POINTER = 1001,  /* a required pointer is NULL */
  FNORM_STATUS_BAD_PARAM_SHAPE = 1002,         /* shapes/strides/dtypes disagree */
  FNORM_STATUS_INSUFFICIENT_WORKSPACE = 1003,  /* workspace_bytes < the size query */

  FNORM_STATUS_NOT_SUPPORTED = 2000,           /* valid, but not implemented here */
  FNORM_STATUS_NOT_SUPPORTED_BUILD = 2001,     /* left out of this build, no code for
                                                  this GPU, or a library it needs
                                                  (cuBLASLt, cuDNN, NCCL) is missing */

  FNORM_STATUS_INTERNAL_ERROR = 3000,          /* a bug in the library: report it */
  FNORM_STATUS_ALLOC_FAILED = 3001,            /* host memory allocation failed */

  FNORM_STATUS_NO_DEVICE = 4000,               /* no CUDA device or driver */

  FNORM_STATUS_CUDA_ERROR = 5000,              /* a CUDA runtime call failed */
  FNORM_STATUS_CUBLAS_ERROR = 5001,
  FNORM_STATUS_CUDNN_ERROR = 5002,
  FNORM_STATUS_NCCL_ERROR = 5003
} fnorm_status_t;

/** Element types. Values are explicit and never renumbered. The one-byte
 *  types are quantized outputs: only fnorm_norm_fwd_quant's y_desc may
 *  carry them (any other descriptor argument with one is BAD_PARAM_SHAPE). */
typedef enum fnorm_dtype {
  FNORM_DTYPE_FLOAT32 = 0,
  FNORM_DTYPE_FLOAT16 = 1,
  FNORM_DTYPE_BFLOAT16 = 2,
  /** OCP FP8 E4M3 (torch.float8_e4m3fn): bias 7, no infinities, NaN is
   *  S.1111.111, largest finite 448. */
  FNORM_DTYPE_FLOAT8_E4M3 = 3,
  /** OCP FP8 E5M2 (torch.float8_e5m2): bias 15, IEEE-like, largest finite 57344. */
  FNORM_DTYPE_FLOAT8_E5M2 = 4,
  /** Signed 8-bit integers (symmetric quantization: codes -127..127). */
  FNORM_DTYPE_INT8 = 5
} fnorm_dtype_t;

/** Normalization over the last dimensions of a tensor. */
typedef enum fnorm_norm_mode {
  FNORM_NORM_LAYERNORM = 0, /* y = (x - mean) * rstd * gamma + beta */
  FNORM_NORM_RMSNORM = 1    /* y = x * rrms * gamma */
} fnorm_norm_mode_t;

/** Largest tensor rank a descriptor holds. */
#define FNORM_MAX_RANK 8

/** A library context bound to one CUDA device (fnorm_create). */
typedef struct fnorm_handle *fnorm_handle_t;
/** A tensor's element type, sizes and strides (fnorm_tensor_desc_create). */
typedef struct fnorm_tensor_desc *fnorm_tensor_desc_t;
/** Which normalization LayerNorm / RMSNorm calls compute (fnorm_norm_desc_create). */
typedef struct fnorm_norm_desc *fnorm_norm_desc_t;

/* ------------------------------------------------------------------------ */
/* Version and errors                                                       */
/* ------------------------------------------------------------------------ */

/** The library's version, encoded as FNORM_VERSION is (major * 10000 +
 *  minor * 100 + patch). Compare with FNORM_VERSION to detect a header/library
 *  mismatch. Thread-safety: safe. */
FNORM_API uint32_t fnorm_get_version(void);

/** A static, never-NULL English name for a status ("FNORM_STATUS_BAD_PARAM:
 *  an argument is invalid"); unknown values give "FNORM_STATUS_UNKNOWN".
 *  Thread-safety: safe. */
FNORM_API const char *fnorm_get_error_string(fnorm_status_t status);

/** The category band of a status: status rounded down to a multiple of 1000
 *  (FNORM_STATUS_SUCCESS, _BAD_PARAM, _NOT_SUPPORTED, _INTERNAL_ERROR,
 *  _NO_DEVICE or _CUDA_ERROR). Thread-safety: safe. */
FNORM_API fnorm_status_t fnorm_status_category(fnorm_status_t status);

/** Copy the calling thread's last error message (set by the last call on this
 *  thread that failed; "" if none failed) into buf, truncated and always
 *  NUL-terminated when size > 0. buf may be NULL when size is 0.
 *  Returns the message's full length in bytes, not counting the NUL, so a
 *  caller can size its buffer. The message names the function, the argument
 *  and the value that failed. Successful calls do not clear it.
 *  Thread-safety: safe; each thread has its own message. */
FNORM_API size_t fnorm_get_last_error_message(char *buf, size_t size);

/* ------------------------------------------------------------------------ */
/* Handle                                                                   */
/* ------------------------------------------------------------------------ */

/** Create a handle bound to the calling thread's current CUDA device
 *  (cudaGetDevice). The handle caches device properties; launches made with
 *  it run on that device whatever the caller's current device is, and leave
 *  the caller's current device as it was.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER (handle NULL); NO_DEVICE (no
 *  driver or device: *handle is left unchanged); CUDA_ERROR; ALLOC_FAILED.
 *  Checked mode: when the environment variable FNORM_CHECK_POINTERS is set
 *  (to anything but "" or "0") at fnorm_create, every launch made with this
 *  handle first asks CUDA (cudaPointerGetAttributes) about each non-NULL
 *  pointer it is given: it must be device memory of the handle's device,
 *  managed memory, or mapped pinned host memory, and where the driver can
 *  tell the allocation's extent (cuMemGetAddressRange), the allocation must
 *  hold the bytes the descriptors (or workspace_bytes, aux_bytes,
 *  reserve_bytes) say from the pointer on. Otherwise the launch returns
 *  FNORM_STATUS_BAD_PARAM naming the argument and enqueues nothing. The
 *  checks cost a few microseconds of host time per pointer: a debugging aid,
 *  off by default. Without it, such a pointer makes the kernel fault.
 *  Thread-safety: a handle may be used by several threads at once: it holds
 *  immutable device properties, an internally locked occupancy cache and
 *  the per-op states created on first use (under a lock); plans are cached
 *  per thread. */
FNORM_API fnorm_status_t fnorm_create(fnorm_handle_t *handle);

/** Destroy a handle. NULL is accepted and does nothing. Work already enqueued
 *  with the handle is not affected. Thread-safety: no other thread may use
 *  the handle during or after this call. */
FNORM_API fnorm_status_t fnorm_destroy(fnorm_handle_t handle);

/** The CUDA device ordinal the handle is bound to.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER. */
FNORM_API fnorm_status_t fnorm_get_device(fnorm_handle_t handle, int *device);

/* ------------------------------------------------------------------------ */
/* Tensor descriptors                                                       */
/* ------------------------------------------------------------------------ */

/** Create an empty tensor descriptor (rank 0, not set). Needs no device.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; ALLOC_FAILED. */
FNORM_API fnorm_status_t fnorm_tensor_desc_create(fnorm_tensor_desc_t *desc);

/** Destroy a tensor descriptor. NULL is accepted. */
FNORM_API fnorm_status_t fnorm_tensor_desc_destroy(fnorm_tensor_desc_t desc);

/** Describe a tensor: element type, rank (1..FNORM_MAX_RANK), sizes
 *  (each >= 0; a size of 0 makes an empty tensor, see "Empty tensors"
 *  above) and strides in elements (each >= 1). strides may be NULL for a
 *  packed row-major tensor (the last dimension contiguous; a size of 0
 *  strides as a size of 1 there, as PyTorch's contiguous strides do).
 *  The product of the sizes other than 0 must fit in int64_t.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER (desc or dims); BAD_PARAM (bad
 *  dtype, rank, size or stride, named in the message). On failure the
 *  descriptor keeps its previous contents. */
FNORM_API fnorm_status_t fnorm_tensor_desc_set(fnorm_tensor_desc_t desc, fnorm_dtype_t dtype,
                                               int32_t rank, const int64_t *dims,
                                               const int64_t *strides);

/** Read a descriptor back. Any output pointer may be NULL; dims and strides,
 *  when given, must hold max_rank entries and receive min(rank, max_rank).
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER (desc); BAD_PARAM (desc was never
 *  set, or max_rank < 0). */
FNORM_API fnorm_status_t fnorm_tensor_desc_get(fnorm_tensor_desc_t desc, fnorm_dtype_t *dtype,
                                               int32_t *rank, int64_t *dims, int64_t *strides,
                                               int32_t max_rank);

/** Number of elements described (product of the sizes).
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM (never set). */
FNORM_API fnorm_status_t fnorm_tensor_desc_get_elements(fnorm_tensor_desc_t desc,
                                                        int64_t *elements);

/* ------------------------------------------------------------------------ */
/* Normalization descriptor (LayerNorm / RMSNorm over the last dimensions)  */
/* ------------------------------------------------------------------------ */

/** Flags of a normalization descriptor (bitwise OR). */
typedef enum fnorm_norm_flag {
  FNORM_NORM_FLAG_NONE = 0,
  /** gamma is stored zero-centred: the scale applied is (1 + gamma), as in
   *  Gemma-style models and Transformer Engine's zero_centered_gamma. */
  FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA = 1,
  /** Hugging Face transformers' "Llama cast order": x_hat ((s - mean) * rstd,
   *  or s * rrms, computed in fp32 as always) is rounded to x's dtype (to
   *  nearest even; nothing changes for FLOAT32 data) before it is multiplied
   *  by the scale (gamma, or 1 + gamma with ZERO_CENTERED_GAMMA: the flags
   *  combine); then beta is added and y rounded to its dtype as without the
   *  flag. This is LlamaRMSNorm's `weight * hidden_states.to(input_dtype)`
   *  (Llama, Qwen2/3, Mistral, Phi3, DeepseekV3): with gamma in x's dtype,
   *  y is bit for bit `weight * (x.float() * torch.rsqrt(x.float().pow(2)
   *  .mean(-1, keepdim=True) + eps)).to(x.dtype)` up to the order in which
   *  the mean square is summed. Without the flag x_hat stays fp32 and y is
   *  rounded once (Gemma's order, and torch.nn's). In the backward, dgamma
   *  sums dy * x_hat rounded the same way; dx keeps the fp32 formula. */
  FNORM_NORM_FLAG_ROUND_XHAT = 2
} fnorm_norm_flag_t;

/** Create a normalization descriptor with defaults: LAYERNORM, normalizing
 *  the last dimension (begin_norm_axis = -1), epsilon = 1e-5, no flags.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; ALLOC_FAILED. */
FNORM_API fnorm_status_t fnorm_norm_desc_create(fnorm_norm_desc_t *desc);

/** Destroy a normalization descriptor. NULL is accepted. */
FNORM_API fnorm_status_t fnorm_norm_desc_destroy(fnorm_norm_desc_t desc);

/** Set the normalization: mode (LAYERNORM or RMSNORM); begin_norm_axis, the
 *  first normalized dimension of x (dimensions [begin_norm_axis, rank) are
 *  normalized together as one row of `cols` elements; the dimensions before
 *  it are rows; negative values count from the end, -1 being the last
 *  dimension); epsilon (finite, >= 0, representable in fp32) added to the
 *  variance (LayerNorm) or the mean square (RMSNorm). Flags are kept.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM (mode, axis, epsilon). */
FNORM_API fnorm_status_t fnorm_norm_desc_set(fnorm_norm_desc_t desc, fnorm_norm_mode_t mode,
                                             int32_t begin_norm_axis, double epsilon);

/** Read a normalization descriptor back. Output pointers may be NULL. */
FNORM_API fnorm_status_t fnorm_norm_desc_get(fnorm_norm_desc_t desc, fnorm_norm_mode_t *mode,
                                             int32_t *begin_norm_axis, double *epsilon);

/** Set the descriptor's flags (fnorm_norm_flag_t values ORed).
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM (unknown bits). */
FNORM_API fnorm_status_t fnorm_norm_desc_set_flags(fnorm_norm_desc_t desc, uint32_t flags);

/** Read the descriptor's flags. Returns SUCCESS; BAD_PARAM_NULL_POINTER. */
FNORM_API fnorm_status_t fnorm_norm_desc_get_flags(fnorm_norm_desc_t desc, uint32_t *flags);

/* ------------------------------------------------------------------------ */
/* Normalization forward (LayerNorm / RMSNorm, optional residual add)        */
/* ------------------------------------------------------------------------ */

/** Scratch bytes fnorm_norm_fwd needs for these arguments on the handle's
 *  device (0 today; ask anyway). Validates the same descriptor arguments as
 *  the launch. Touches no GPU: the handle only supplies device properties.
 *  Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED as fnorm_norm_fwd. */
FNORM_API fnorm_status_t fnorm_norm_fwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t y_desc,
                                                       size_t *workspace_bytes);

/** Normalization forward over the last `cols` elements of each row, fp32 math:
 *    LAYERNORM: y = (s - mean) * rstd * gamma + beta, rstd = 1/sqrt(var + eps)
 *    RMSNORM:   y = s * rrms * gamma,              rrms = 1/sqrt(mean(s^2) + eps)
 *  with s = x, or s = x + residual (rounded to x's dtype) when residual is
 *  given ("add & norm"); var is the biased variance. With the
 *  ZERO_CENTERED_GAMMA flag the scale is (1 + gamma). With ROUND_XHAT the
 *  normalized value (s - mean) * rstd (s * rrms) is rounded to x's dtype
 *  before the scale multiplies it (fnorm_norm_flag_t); y is rounded to its
 *  dtype last, with or without the flag.
 *
 *  x_desc, y_desc: the same sizes and dtype (fp32, fp16 or bf16). The
 *    normalized dimensions must be packed; the row dimensions may have any
 *    stride >= cols as long as they collapse into one row stride (a slice of
 *    a larger tensor). No pointer (data, parameters, statistics) needs more
 *    than its element's natural alignment: wider accesses are used when
 *    pointers and strides allow.
 *  residual, sum: optional, described by x_desc (its sizes and strides). With residual, s = x +
 *    residual is normalized and, when sum is not NULL, written to sum (the
 *    next layer's residual). sum without residual is BAD_PARAM.
 *  w_desc, gamma, beta: each optional (gamma = 1, beta = 0). w_desc describes
 *    both: packed, sized as x's normalized dimensions (or one dimension of
 *    cols), dtype x's or FLOAT32. RMSNORM takes no beta (BAD_PARAM).
 *  mean, rstd: optional fp32 outputs of `rows` elements for backward. RMSNORM
 *    writes rrms to rstd and takes no mean (BAD_PARAM).
 *  Aliasing: y may be the very same tensor as x, and sum as x or residual
 *    (in place); any other overlap involving an output (y, sum, mean, rstd)
 *    is BAD_PARAM.
 *  Empty tensors: with no rows (or rows of no columns) nothing is written,
 *    mean and rstd included, and nothing is enqueued.
 *
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM_SHAPE; BAD_PARAM;
 *  INSUFFICIENT_WORKSPACE; NOT_SUPPORTED (e.g. rows that do not collapse
 *  into one stride); NOT_SUPPORTED_BUILD (dtype left out of this build);
 *  CUDA_ERROR (with CUDA's text).
 *  Stream-ordered: enqueued on `stream`; returns before the work finishes.
 *  Thread-safety: safe with a shared handle; descriptors are only read. */
FNORM_API fnorm_status_t fnorm_norm_fwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                        fnorm_norm_desc_t norm,
                                        fnorm_tensor_desc_t x_desc, const void *x,
                                        const void *residual, void *sum,
                                        fnorm_tensor_desc_t w_desc, const void *gamma,
                                        const void *beta,
                                        fnorm_tensor_desc_t y_desc, void *y,
                                        float *mean, float *rstd,
                                        void *workspace, size_t workspace_bytes);

/* ------------------------------------------------------------------------ */
/* Normalization forward with a quantized output (FP8 / INT8)               */
/* ------------------------------------------------------------------------ */

/** How a quantized output is scaled. Values are explicit and never renumbered. */
typedef enum fnorm_quant_scaling {
  /** Static: one fp32 scale for the whole tensor, given by the caller. */
  FNORM_QUANT_SCALING_PER_TENSOR = 0,
  /** Dynamic: one fp32 scale per row (token), computed and written by the
   *  launch from the row's largest magnitude. */
  FNORM_QUANT_SCALING_PER_TOKEN = 1
} fnorm_quant_scaling_t;

/** Scratch bytes fnorm_norm_fwd_quant needs for these arguments (0 today; ask
 *  anyway). Validates the descriptors and the scaling as the launch does;
 *  touches no GPU. Returns as fnorm_norm_fwd_quant's validation. */
FNORM_API fnorm_status_t fnorm_norm_fwd_quant_workspace_size(fnorm_handle_t handle,
                                                             fnorm_norm_desc_t norm,
                                                             fnorm_tensor_desc_t x_desc,
                                                             fnorm_tensor_desc_t y_desc,
                                                             fnorm_quant_scaling_t scaling,
                                                             size_t *workspace_bytes);

/** Bytes of fnorm_norm_fwd_quant's `scale` argument: 4 (PER_TENSOR: one
 *  fp32) or 4 * rows (PER_TOKEN: one fp32 per row, rows = the product of
 *  x's dimensions before the normalized ones). The amax output is always
 *  one fp32. Validates norm, x_desc and scaling; touches no GPU.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM; BAD_PARAM_SHAPE. */
FNORM_API fnorm_status_t fnorm_norm_fwd_quant_scale_size(fnorm_handle_t handle,
                                                         fnorm_norm_desc_t norm,
                                                         fnorm_tensor_desc_t x_desc,
                                                         fnorm_quant_scaling_t scaling,
                                                         size_t *scale_bytes);

/** Normalization forward (as fnorm_norm_fwd, with and without the residual
 *  add; sum, mean and rstd as there) writing y quantized in one pass.
 *
 *  Let v be the fp32 value fnorm_norm_fwd would round to x's dtype (the
 *  normalized value after gamma and beta; with the ROUND_XHAT flag the
 *  normalized value is rounded to x's dtype before gamma, as there), and M
 *  the format's largest magnitude: 448 (FLOAT8_E4M3), 57344 (FLOAT8_E5M2),
 *  127 (INT8).
 *  Every operation below is fp32, rounded to nearest even.
 *
 *  Scale s (the dequantization scale: v is about code * s):
 *    PER_TENSOR: s = scale[0], read on the device (no check of its value).
 *    PER_TOKEN:  for each row r, s_r = max(a_r / M, s_min), written to
 *      scale[r], where a_r is the largest |v| of the row and s_min =
 *      1 / (M * 512) for FP8, FLT_EPSILON (2^-23) for INT8 (an all-zero row
 *      gets s_min and zero codes). A NaN in the row makes a_r and s_r NaN.
 *  Codes: t = v / s (a correctly rounded division, as torch's `v / s`), then
 *    FP8: t clamped to [-M, M] (infinities included), rounded to the nearest
 *      FP8 value, ties to the even mantissa, subnormals kept, zero's sign
 *      kept; NaN gives 0x7F. For every non-NaN v this is torch's
 *      `(v / s).clamp(-M, M).to(torch.float8_e4m3fn / float8_e5m2)`.
 *    INT8: t rounded to the nearest integer, ties to even, clamped to
 *      [-127, 127]; NaN gives 0. For every non-NaN v this is torch's
 *      `(v / s).round().clamp(-127, 127).to(torch.int8)`.
 *  amax: optional (NULL: not computed): one fp32, the largest |v| over the
 *    whole tensor, before any scaling (the amax of delayed scaling, as
 *    Transformer Engine keeps it); NaN if any v is NaN. The launch first
 *    enqueues a 4-byte memset of *amax on `stream` (nothing synchronizes;
 *    graph capture works); the value is exact, the same bits run to run.
 *
 *  x_desc, residual, sum, w_desc, gamma, beta, mean, rstd: as fnorm_norm_fwd.
 *  y_desc: x's sizes, dtype FLOAT8_E4M3, FLOAT8_E5M2 or INT8; strides in
 *    its own (one-byte) elements, with fnorm_norm_fwd's layout rules. No
 *    pointer needs more than its element's natural alignment.
 *  scaling: PER_TENSOR (FP8 only: INT8 with a static scale is NOT_SUPPORTED)
 *    or PER_TOKEN.
 *  scale: required; fnorm_norm_fwd_quant_scale_size bytes of fp32, read
 *    (PER_TENSOR) or written (PER_TOKEN).
 *  Aliasing: sum may be the very same tensor as x or residual (in place).
 *    y (one-byte codes: never in place), amax, mean, rstd and, per token,
 *    scale are outputs; per tensor, scale is an input. Any other overlap
 *    with an output is BAD_PARAM.
 *  Empty tensors: with no elements, nothing is written but amax (when given),
 *    set to 0; scale and the data pointers may then be NULL.
 *
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM_SHAPE (y_desc's dtype
 *  is not a quantized one, or sizes disagree); BAD_PARAM (unknown scaling,
 *  overlaps, as fnorm_norm_fwd); INSUFFICIENT_WORKSPACE; NOT_SUPPORTED (INT8
 *  PER_TENSOR; layouts as fnorm_norm_fwd); NOT_SUPPORTED_BUILD; CUDA_ERROR.
 *  Stream-ordered; thread-safe with a shared handle; descriptors only read. */
FNORM_API fnorm_status_t fnorm_norm_fwd_quant(fnorm_handle_t handle, fnorm_stream_t stream,
                                              fnorm_norm_desc_t norm,
                                              fnorm_tensor_desc_t x_desc, const void *x,
                                              const void *residual, void *sum,
                                              fnorm_tensor_desc_t w_desc, const void *gamma,
                                              const void *beta,
                                              fnorm_tensor_desc_t y_desc, void *y,
                                              fnorm_quant_scaling_t scaling, float *scale,
                                              float *amax, float *mean, float *rstd,
                                              void *workspace, size_t workspace_bytes);

/* ------------------------------------------------------------------------ */
/* Normalization backward                                                   */
/* ------------------------------------------------------------------------ */

/** Scratch bytes fnorm_norm_bwd needs (per-block partial sums of dgamma and
 *  dbeta, reduced in a fixed order by a second pass). Depends on the
 *  descriptors and on the handle's device: it asks the driver for kernel
 *  occupancy there, but enqueues nothing and never synchronizes. The answer
 *  covers the least favourable pointer alignment, so a launch may use less.
 *  w_desc NULL: no dgamma/dbeta will be asked for (a smaller answer).
 *  Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED as fnorm_norm_bwd. */
FNORM_API fnorm_status_t fnorm_norm_bwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t w_desc,
                                                       size_t *workspace_bytes);

/** Normalization backward. With x_hat = (s - mean) * rstd (LayerNorm) or
 *  s * rrms (RMSNorm) and g = dy * gamma (the scale actually applied):
 *    LAYERNORM: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))
 *    RMSNORM:   dx = rrms * (g - x_hat * mean(g * x_hat))
 *    dgamma = sum over rows of dy * x_hat;  dbeta = sum over rows of dy
 *  plus dsum, the gradient that reached the forward's `sum` output from the
 *  residual path, when given. dx is then also the gradient of the residual.
 *  With the ROUND_XHAT flag, dgamma = sum over rows of dy * round(x_hat),
 *  x_hat rounded to x's dtype (to nearest even) as the forward multiplied
 *  it; dx and dbeta are the formulas above, with the fp32 x_hat (the
 *  rounding's derivative taken as 1, as autograd through `.to(dtype)` does).
 *
 *  x_desc, x: the tensor that was normalized (s: x, or the forward's sum).
 *  dy_desc, dy; dx_desc, dx: sizes and dtype of x (strides as for x).
 *  mean, rstd: the forward's saved statistics (rows fp32 values each; mean
 *    is NULL for RMSNORM).
 *  w_desc, gamma: as in the forward (gamma NULL: scale 1).
 *  dsum: optional, described by dy_desc (its sizes and strides).
 *  The descriptor's epsilon is not used (the statistics come from forward).
 *  dgamma, dbeta: optional outputs described by w_desc (w_desc is required
 *    when either is given); dbeta is BAD_PARAM for RMSNORM. The sums over
 *    rows are deterministic: the same bits run to run on the same device.
 *  workspace: at least fnorm_norm_bwd_workspace_size bytes, 16-byte aligned
 *    (cudaMalloc's are), else INSUFFICIENT_WORKSPACE / BAD_PARAM.
 *  Aliasing: dx may be the very same tensor as dy or dsum (in place); any
 *    other overlap involving an output (dx, dgamma, dbeta, workspace) is
 *    BAD_PARAM.
 *  Empty tensors: with no rows, dx is empty and dgamma / dbeta (when
 *    given, and cols > 0) are written with zeros, the sums over no rows;
 *    x, dy, mean, rstd may then be NULL. The size query answers 0.
 *  Returns as fnorm_norm_fwd. Stream-ordered; thread-safe with a shared
 *  handle. */
FNORM_API fnorm_status_t fnorm_norm_bwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                        fnorm_norm_desc_t norm,
                                        fnorm_tensor_desc_t x_desc, const void *x,
                                        fnorm_tensor_desc_t dy_desc, const void *dy,
                                        const float *mean, const float *rstd,
                                        fnorm_tensor_desc_t w_desc, const void *gamma,
                                        const void *dsum,
                                        fnorm_tensor_desc_t dx_desc, void *dx,
                                        void *dgamma, void *dbeta,
                                        void *workspace, size_t workspace_bytes);

/* ------------------------------------------------------------------------ */
/* BatchNorm                                                                */
/* ------------------------------------------------------------------------ */

/** What follows the normalization. Values are explicit and never renumbered. */
typedef enum fnorm_bn_epilogue {
  FNORM_BN_EPILOGUE_NONE = 0,     /* y = bn(x) */
  FNORM_BN_EPILOGUE_RELU = 1,     /* y = max(bn(x), 0) */
  FNORM_BN_EPILOGUE_ADD_RELU = 2  /* y = max(bn(x) + z, 0): ResNet's residual join */
} fnorm_bn_epilogue_t;

/** How training updates the running statistics. */
typedef enum fnorm_bn_average {
  /** running = (1 - momentum) * running + momentum * batch statistic */
  FNORM_BN_AVERAGE_EXPONENTIAL = 0,
  /** A cumulative average (PyTorch's momentum=None): the factor is
   *  1 / (num_batches_tracked + 1), read from the device counter the forward
   *  is given (and increments). */
  FNORM_BN_AVERAGE_CUMULATIVE = 1
} fnorm_bn_average_t;

/** Which implementation runs a BatchNorm call. */
typedef enum fnorm_bn_engine {
  /** The library's choice per case (see fnorm_batchnorm_desc_set_engine). */
  FNORM_BN_ENGINE_AUTO = 0,
  /** libfusednorm's own kernels: every layout, size and epilogue. */
  FNORM_BN_ENGINE_NATIVE = 1,
  /** cuDNN's BatchNorm (cudnnBatchNormalization*Ex); shapes cuDNN refuses
   *  return NOT_SUPPORTED. */
  FNORM_BN_ENGINE_CUDNN = 2
} fnorm_bn_engine_t;

/** A BatchNorm's epilogue, epsilon, running-statistics rule, engine and
 *  communicator (fnorm_batchnorm_desc_create). */
typedef struct fnorm_batchnorm_desc *fnorm_batchnorm_desc_t;

/** Create a BatchNorm descriptor with defaults: epilogue NONE, epsilon 1e-5,
 *  EXPONENTIAL averaging with momentum 0.1 (PyTorch's defaults), engine AUTO.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; ALLOC_FAILED. */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_create(fnorm_batchnorm_desc_t *desc);

/** Destroy a BatchNorm descriptor. NULL is accepted. */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_destroy(fnorm_batchnorm_desc_t desc);

/** Set epilogue, epsilon (finite, >= 0, added to the variance), averaging
 *  mode and momentum (in [0, 1]; ignored by CUMULATIVE). The engine is kept.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM (naming the value). */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_set(fnorm_batchnorm_desc_t desc,
                                                  fnorm_bn_epilogue_t epilogue, double epsilon,
                                                  fnorm_bn_average_t average, double momentum);

/** Read a BatchNorm descriptor back. Output pointers may be NULL. */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_get(fnorm_batchnorm_desc_t desc,
                                                  fnorm_bn_epilogue_t *epilogue, double *epsilon,
                                                  fnorm_bn_average_t *average, double *momentum);

/** Choose the engine. AUTO decides per call (each launch on its own, from
 *  its shape, pointers and stream) between NATIVE and cuDNN, which compute
 *  the same function:
 *    - cuDNN for training calls (forward and backward) with epilogue NONE,
 *      EXPONENTIAL averaging, no communicator, fp16/bf16 channels-last with
 *      C = 64 and spatial dimensions, from 1 MiB up to twice the device's
 *      L2 size: there cuDNN's persistent kernels were faster on the H200
 *      ([128, 64, 56, 56] fp16: 50 vs 61 us forward, 71 vs 79 backward;
 *      bench/ab_batchnorm.py), and only there;
 *    - NATIVE for everything else, inference, RELU / ADD_RELU (cuDNN's
 *      fused ReLU backward reads y, which AUTO callers need not pass, and
 *      the engines' reserve formats differ), and whenever the launch cannot
 *      take cuDNN: a data pointer, per-channel vector or workspace not
 *      16-byte aligned, an output that is the same tensor as an input (in
 *      place), a workspace smaller than the size query's answer, a cuDNN
 *      refusal, a library built without cuDNN, or a stream being captured
 *      into a CUDA graph while the handle has no cuDNN state yet (the state
 *      is created by the first uncaptured launch that would take cuDNN).
 *  Under AUTO the reserve space of these cases is 0 bytes, and the saved
 *  mean / inverse std mean the same on both engines, so the forward and the
 *  backward of one step may run on different engines. The size queries ask
 *  no pointers: they answer the most either engine needs, once the handle
 *  has cuDNN's state (before that, NATIVE's needs; a launch given those
 *  runs NATIVE).
 *  With NATIVE or CUDNN named, the forward and the backward of one step must
 *  use descriptors with the same engine and epilogue: the reserve space's
 *  format belongs to the engine that wrote it.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM. */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_set_engine(fnorm_batchnorm_desc_t desc,
                                                         fnorm_bn_engine_t engine);

/** Read the engine. Returns SUCCESS; BAD_PARAM_NULL_POINTER. */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_get_engine(fnorm_batchnorm_desc_t desc,
                                                         fnorm_bn_engine_t *engine);

/* SyncBatchNorm. NCCL's communicator type is named here by its struct tag,
 * so this header needs no nccl.h: an ncclComm_t converts to it implicitly. */
struct ncclComm;

/** Flags of fnorm_batchnorm_desc_set_comm (bitwise OR). */
typedef enum fnorm_bn_sync_flag {
  FNORM_BN_SYNC_NONE = 0,
  /** dgamma / dbeta summed over all ranks (by default each rank gets its
   *  own, and the framework reduces weight gradients with the others). */
  FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS = 1
} fnorm_bn_sync_flag_t;

/** Attach an NCCL communicator (the caller's; the library neither creates
 *  nor destroys one; NULL detaches): fnorm_batchnorm_fwd_train and
 *  fnorm_batchnorm_bwd with this descriptor then compute SyncBatchNorm, with
 *  per-channel statistics over the samples of every rank of the
 *  communicator, on any number of ranks and machines:
 *    forward: local statistics -> one all-reduce of 3 C doubles (count, sum,
 *      sum of squares around 0 built from each rank's Welford mean and M2,
 *      so the payload does not grow with the ranks and different per-rank
 *      batch sizes are exact) -> normalize with the global statistics;
 *      running statistics take the global mean and unbiased variance.
 *    backward: local (count, sum_dy, sum_dy_xmu) -> one all-reduce of 3 C
 *      doubles -> dx with the global count.
 *  Everything is enqueued on the call's stream (no host synchronization, no
 *  allocation; capturable in a CUDA graph); every rank must make the same
 *  calls in the same order, as for any NCCL collective. A rank with no
 *  samples passes x, y (forward) or x, dy, dx (backward) as NULL, with x_desc
 *  still describing [1, C, ...] for its channel count and dtype; it takes
 *  part in the collectives and updates its running statistics.
 *  The NATIVE engine only (AUTO picks it; CUDNN is NOT_SUPPORTED); inference
 *  ignores the communicator. The launch checks that the communicator's
 *  device is the handle's (BAD_PARAM otherwise). NCCL failures return
 *  NCCL_ERROR with NCCL's message.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER (desc); BAD_PARAM (flags);
 *  NOT_SUPPORTED_BUILD (built without NCCL). */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_set_comm(fnorm_batchnorm_desc_t desc,
                                                       struct ncclComm *comm, uint32_t flags);

/** Read the attached communicator (NULL: none) and flags. Output pointers may
 *  be NULL. Returns SUCCESS; BAD_PARAM_NULL_POINTER. */
FNORM_API fnorm_status_t fnorm_batchnorm_desc_get_comm(fnorm_batchnorm_desc_t desc,
                                                       struct ncclComm **comm, uint32_t *flags);

/* Tensors of the BatchNorm calls.
 *  x_desc: rank >= 2, sizes [N, C, spatial...] whatever the layout, dtype
 *    fp32, fp16 or bf16. Two layouts, told apart by the strides:
 *    channels-first, packed row-major (NCHW, [N, C, L]), and channels-last
 *    (NHWC / NDHWC: C contiguous, then the spatial dimensions, then N).
 *    [N, C] is both. Strides of dimensions of size 1 are ignored; any other
 *    layout is NOT_SUPPORTED.
 *  y, z, dy, dx, dz: the sizes, dtype and layout of x (their descriptors may
 *    differ from x_desc only in the strides of size-1 dimensions).
 *  Per-channel vectors (gamma, beta, running_mean, running_var, saved_mean,
 *    saved_invstd, dgamma, dbeta): C fp32 values each, 4-byte aligned.
 *  Data pointers need only their element's alignment: wider accesses are
 *    used when pointers and sizes allow.
 *  workspace: at least the call's size query's bytes, 16-byte aligned
 *    (cudaMalloc's are); NULL when the query answers 0.
 *  Statistics are over N * spatial values per channel, in fp32 with Welford
 *    updates per thread and a double-precision combination. */

/** Scratch bytes fnorm_batchnorm_fwd_train needs (per-split partial
 *  statistics and per-channel coefficients) on the handle's device; depends
 *  on x_desc, the descriptor's engine and the device's SM count and L2 size
 *  only (AUTO: and whether the handle has cuDNN's state yet; see
 *  fnorm_batchnorm_desc_set_engine). Touches no GPU. Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED. */
FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes);

/** Bytes of the reserve space that training forward writes and backward
 *  reads. NATIVE engine: with RELU / ADD_RELU, one bit per element (the ReLU
 *  mask, 32-bit words), 0 with NONE. CUDNN engine: what cuDNN asks for (it
 *  may need some with NONE too). AUTO: NATIVE's answer (AUTO sends to cuDNN
 *  only cases where cuDNN asks for none). The caller keeps it between the
 *  two calls.
 *  Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED. */
FNORM_API fnorm_status_t fnorm_batchnorm_reserve_space_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *reserve_bytes);

/** Training forward: per channel c, over its m = N * spatial values,
 *    mean_c, var_c (biased), invstd_c = 1 / sqrt(var_c + eps),
 *    v = (x - mean_c) * invstd_c * gamma_c + beta_c, then the epilogue.
 *  z: the ADD_RELU addend (required then, NULL otherwise); described by y_desc.
 *  gamma, beta: optional (1 and 0).
 *  running_mean, running_var: optional, both or neither; updated in place
 *    with the unbiased variance var_c * m / (m - 1).
 *  num_batches_tracked: optional device int64 counter, incremented by one;
 *    required by CUMULATIVE averaging (when running statistics are given).
 *  saved_mean, saved_invstd: optional outputs for the backward.
 *  reserve: where the reserve-space query answers more than 0 bytes (RELU /
 *    ADD_RELU: the ReLU mask), required, reserve_bytes >= that answer,
 *    16-byte aligned; otherwise it may be NULL.
 *  m = 1 (one value per channel) is BAD_PARAM, as frameworks raise it.
 *  Aliasing: y may be the very same tensor as x or z (in place); any other
 *    overlap involving an output (y, the running statistics, the counter,
 *    the saved statistics, reserve, workspace) is BAD_PARAM.
 *  An empty batch (N * spatial = 0), as torch.nn behaves: nothing is
 *    normalized, the running statistics are left as they are,
 *    num_batches_tracked (when given) is still incremented (torch.nn's
 *    modules count every training call), saved_mean / saved_invstd are not
 *    written (the backward of an empty batch does not read them); x, y, z
 *    may be NULL and the size queries answer 0. SyncBatchNorm: a rank whose
 *    x_desc has no elements (N = 0) takes part in the collectives as a rank
 *    without samples (below), and its workspace query answers what that
 *    needs.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM_SHAPE; BAD_PARAM;
 *  INSUFFICIENT_WORKSPACE; NOT_SUPPORTED (layout; the CUDNN engine on a shape
 *  cuDNN refuses, with cuDNN's reason); NOT_SUPPORTED_BUILD; CUDA_ERROR;
 *  CUDNN_ERROR. Stream-ordered; thread-safe with a shared handle. */
FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, float *running_mean, float *running_var, int64_t *num_batches_tracked,
    fnorm_tensor_desc_t y_desc, void *y, float *saved_mean, float *saved_invstd, void *workspace,
    size_t workspace_bytes, void *reserve, size_t reserve_bytes);

/** Scratch bytes fnorm_batchnorm_fwd_infer needs (per-channel coefficients).
 *  Returns as fnorm_batchnorm_fwd_train_workspace_size. */
FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes);

/** Inference forward: the training formula with running_mean / running_var
 *  (both required) in place of the batch statistics, then the epilogue (no
 *  mask is written). z as in training. y may be the very same tensor as x or z.
 *  An empty x: nothing is written or enqueued.
 *  Returns as fnorm_batchnorm_fwd_train. */
FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, const float *running_mean, const float *running_var,
    fnorm_tensor_desc_t y_desc, void *y, void *workspace, size_t workspace_bytes);

/** Scratch bytes fnorm_batchnorm_bwd needs. Returns as the forward's query. */
FNORM_API fnorm_status_t fnorm_batchnorm_bwd_workspace_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *workspace_bytes);

/** Backward from the training forward's saved statistics. With RELU /
 *  ADD_RELU, dy is first masked by the forward's ReLU mask (reserve; y is
 *  never read): g = dy where y > 0, else 0; with ADD_RELU, dz = g (optional
 *  output, described by dx_desc). Then, per channel, with m values,
 *    dbeta_c = sum g,  dgamma_c = sum g * (x - mean_c) * invstd_c,
 *    dx = (g - dbeta_c / m - (x - mean_c) * invstd_c^2 * sum(g * (x - mean_c)) / m)
 *         * gamma_c * invstd_c.
 *  saved_mean, saved_invstd: required (the forward's outputs).
 *  gamma: optional (1). dgamma, dbeta: optional outputs. The sums are
 *    deterministic: the same bits run to run for the same pointers.
 *  y, beta: the forward's output and shift. The NATIVE engine never reads
 *    them (pass NULL); cuDNN's fused backward does, so the CUDNN engine with
 *    RELU / ADD_RELU requires y (described by dy_desc) and reads beta when
 *    given (0 otherwise).
 *  reserve: what the forward wrote there (required when the reserve-space
 *    query answers more than 0 bytes).
 *  Aliasing: dx may be the very same tensor as dy or x; dz may be the very
 *    same tensor as dy; any other overlap involving an output (dx, dz,
 *    dgamma, dbeta, workspace) is BAD_PARAM.
 *  An empty batch: dx and dz are empty; dgamma / dbeta (when given) are
 *    written with zeros, the sums over no values; x, dy, dx may be NULL.
 *  Returns as fnorm_batchnorm_fwd_train. */
FNORM_API fnorm_status_t fnorm_batchnorm_bwd(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t dy_desc, const void *dy,
    const void *y, const float *gamma, const float *beta, const float *saved_mean,
    const float *saved_invstd, const void *reserve,
    size_t reserve_bytes, fnorm_tensor_desc_t dx_desc, void *dx, void *dz, float *dgamma,
    float *dbeta, void *workspace, size_t workspace_bytes);

/* ------------------------------------------------------------------------ */
/* GroupNorm (+ SiLU, + per-sample scale / shift)                           */
/* ------------------------------------------------------------------------ */

/* GroupNorm splits the C channels of each sample into G groups of C / G
 * consecutive channels and normalizes each (sample, group) over its
 * C / G * spatial values, with fp32 math whatever the data's dtype:
 *   mean, var (biased) over the group,  rstd = 1 / sqrt(var + eps),
 *   v = (x - mean) * rstd * gamma_c + beta_c                (torch.nn.GroupNorm)
 *   v = v * (1 + scale[n, c]) + shift[n, c]     when scale / shift are given
 *   y = v, or y = silu(v) = v / (1 + exp(-v))    with the SILU activation
 * (diffusers' ResnetBlock2D with time_embedding_norm "scale_shift" computes
 * exactly this: norm, then `* (1 + scale) + shift`, then the nonlinearity).
 * y is rounded to its dtype once, at the end. Inference runs the same forward. */

/** The activation after the normalization. Values are explicit and never renumbered. */
typedef enum fnorm_gn_activation {
  FNORM_GN_ACTIVATION_NONE = 0, /* y = v */
  FNORM_GN_ACTIVATION_SILU = 1  /* y = v * sigmoid(v) (torch.nn.SiLU) */
} fnorm_gn_activation_t;

/** A GroupNorm's group count, epsilon and activation (fnorm_groupnorm_desc_create). */
typedef struct fnorm_groupnorm_desc *fnorm_groupnorm_desc_t;

/** Create a GroupNorm descriptor with defaults: 32 groups, epsilon 1e-5,
 *  activation NONE (torch.nn.GroupNorm(32, C)).
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; ALLOC_FAILED. */
FNORM_API fnorm_status_t fnorm_groupnorm_desc_create(fnorm_groupnorm_desc_t *desc);

/** Destroy a GroupNorm descriptor. NULL is accepted. */
FNORM_API fnorm_status_t fnorm_groupnorm_desc_destroy(fnorm_groupnorm_desc_t desc);

/** Set the number of groups (>= 1; the launch checks that it divides C),
 *  epsilon (finite, >= 0, representable in fp32; added to the variance) and
 *  the activation.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM (naming the value). */
FNORM_API fnorm_status_t fnorm_groupnorm_desc_set(fnorm_groupnorm_desc_t desc, int64_t groups,
                                                  double epsilon,
                                                  fnorm_gn_activation_t activation);

/** Read a GroupNorm descriptor back. Output pointers may be NULL. */
FNORM_API fnorm_status_t fnorm_groupnorm_desc_get(fnorm_groupnorm_desc_t desc, int64_t *groups,
                                                  double *epsilon,
                                                  fnorm_gn_activation_t *activation);

/* Tensors of the GroupNorm calls.
 *  x_desc: rank >= 2, sizes [N, C, spatial...] whatever the layout (NCHW,
 *    NCDHW, [N, C, L], [N, C]), dtype fp32, fp16 or bf16. Two layouts, told
 *    apart by the strides as for BatchNorm: channels-first, packed row-major,
 *    and channels-last (NHWC / NDHWC: C contiguous, then the spatial
 *    dimensions, then N). Strides of dimensions of size 1 are ignored; any
 *    other layout (a slice, padding) is NOT_SUPPORTED: the caller makes the
 *    tensor contiguous in one of the two layouts. G must divide C
 *    (BAD_PARAM_SHAPE otherwise).
 *  y, dy, dx: the sizes, dtype and layout of x.
 *  w_desc, gamma, beta: each optional (gamma = 1, beta = 0); w_desc
 *    describes both: C packed values ([C], or C with dimensions of size 1
 *    around it), dtype x's or FLOAT32; required when gamma or beta is given.
 *  ss_desc, scale, shift: the per-sample modulation, each optional (scale = 0
 *    and shift = 0: nothing is applied); ss_desc describes both: sizes
 *    [N, C] or [N, C, 1, ...] with any strides (the halves of diffusers'
 *    `temb.chunk(2, dim=1)` are views with a row stride of 2 C), dtype x's or
 *    FLOAT32; required when scale or shift is given.
 *  mean, rstd: fp32, N * G values each, indexed n * G + g.
 *  Data pointers need only their element's alignment: wider accesses are
 *    used when pointers and sizes allow.
 *  workspace: at least the call's size query's bytes, 16-byte aligned
 *    (cudaMalloc's are); NULL when the query answers 0.
 *  Each (sample, group) statistic is split over as many thread blocks as the
 *  device needs to be filled (batch 1 with 32 groups runs on every SM), and
 *  combined in a fixed order: the same bits run to run on the same device. */

/* GroupNorm plans problems of fewer than 2^48 elements (NOT_SUPPORTED
 * beyond: more than any device holds). */

/** Scratch bytes fnorm_groupnorm_fwd needs (per-split partial statistics and
 *  their counters) on the handle's device; depends on the descriptor, x_desc
 *  and the device's properties only. Touches no GPU.
 *  Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED as fnorm_groupnorm_fwd. */
FNORM_API fnorm_status_t fnorm_groupnorm_fwd_workspace_size(fnorm_handle_t handle,
                                                            fnorm_groupnorm_desc_t gn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *workspace_bytes);

/** GroupNorm forward (training and inference alike): y from x as above;
 *  mean and rstd (optional outputs) receive each (sample, group)'s mean and
 *  1 / sqrt(var + eps) for the backward.
 *  Aliasing: y may be the very same tensor as x (in place); any other
 *    overlap involving an output (y, mean, rstd, workspace) is BAD_PARAM.
 *  Empty tensors: N = 0 or no spatial values: nothing is written (mean and
 *    rstd included: a group of no values has no statistics) and nothing is
 *    enqueued; C = 0 is BAD_PARAM_SHAPE (no group can divide it).
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM_SHAPE; BAD_PARAM;
 *  INSUFFICIENT_WORKSPACE; NOT_SUPPORTED (layout); NOT_SUPPORTED_BUILD (a
 *  dtype left out of this build); CUDA_ERROR. Stream-ordered; thread-safe
 *  with a shared handle; descriptors are only read. */
FNORM_API fnorm_status_t fnorm_groupnorm_fwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                             fnorm_groupnorm_desc_t gn,
                                             fnorm_tensor_desc_t x_desc, const void *x,
                                             fnorm_tensor_desc_t w_desc, const void *gamma,
                                             const void *beta,
                                             fnorm_tensor_desc_t ss_desc, const void *scale,
                                             const void *shift,
                                             fnorm_tensor_desc_t y_desc, void *y,
                                             float *mean, float *rstd,
                                             void *workspace, size_t workspace_bytes);

/** Scratch bytes fnorm_groupnorm_bwd needs (per-split partial sums, reduced
 *  in a fixed order). w_desc / ss_desc NULL: no dgamma / dbeta, no dscale /
 *  dshift will be asked for (a smaller answer). Touches no GPU.
 *  Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED as fnorm_groupnorm_bwd. */
FNORM_API fnorm_status_t fnorm_groupnorm_bwd_workspace_size(fnorm_handle_t handle,
                                                            fnorm_groupnorm_desc_t gn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            fnorm_tensor_desc_t w_desc,
                                                            fnorm_tensor_desc_t ss_desc,
                                                            size_t *workspace_bytes);

/** GroupNorm backward from the forward's saved statistics, the gradient of
 *  the function the forward computed with the same descriptor and
 *  arguments. With x_hat = (x - mean) * rstd, v0 = x_hat * gamma_c + beta_c,
 *  v = v0 * (1 + scale) + shift and du = dy (NONE) or
 *  du = dy * sigmoid(v) * (1 + v * (1 - sigmoid(v))) (SILU: v is recomputed
 *  from x, no saved y is needed):
 *    dshift[n, c] = sum over the spatial values of du,
 *    dscale[n, c] = sum of du * v0,
 *    dbeta_c  = sum over samples and spatial values of du * (1 + scale),
 *    dgamma_c = sum of du * (1 + scale) * x_hat,
 *    with g = du * (1 + scale) * gamma_c, per (sample, group) of m values:
 *    dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)).
 *  Every sum is deterministic: the same bits run to run on the same device.
 *  x, dy, mean, rstd: required (mean / rstd as the forward wrote them).
 *  gamma, beta, scale, shift: the forward's (NULL: gamma = 1, the others 0);
 *    shift is read only with SILU, beta only with SILU or when dscale is
 *    asked for (dscale = sum of du * (x_hat * gamma + beta) needs it).
 *  dgamma, dbeta: optional outputs described by w_desc (its dtype);
 *    dscale, dshift: optional outputs described by ss_desc (its strides).
 *    Each descriptor is required when one of its outputs is asked for.
 *  Aliasing: dx may be the very same tensor as dy or x (in place); any other
 *    overlap involving an output (dx, dgamma, dbeta, dscale, dshift,
 *    workspace) is BAD_PARAM.
 *  Empty tensors: with no spatial values or N = 0, dx is empty, and dgamma,
 *    dbeta, dscale, dshift (those given and with elements) are written with
 *    zeros, the sums over no values; x, dy, mean, rstd may then be NULL.
 *  Returns as fnorm_groupnorm_fwd. */
FNORM_API fnorm_status_t fnorm_groupnorm_bwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                             fnorm_groupnorm_desc_t gn,
                                             fnorm_tensor_desc_t x_desc, const void *x,
                                             fnorm_tensor_desc_t dy_desc, const void *dy,
                                             const float *mean, const float *rstd,
                                             fnorm_tensor_desc_t w_desc, const void *gamma,
                                             const void *beta,
                                             fnorm_tensor_desc_t ss_desc, const void *scale,
                                             const void *shift,
                                             fnorm_tensor_desc_t dx_desc, void *dx,
                                             void *dgamma, void *dbeta,
                                             void *dscale, void *dshift,
                                             void *workspace, size_t workspace_bytes);

/* ------------------------------------------------------------------------ */
/* Fully-connected layer (cuBLASLt)                                         */
/* ------------------------------------------------------------------------ */

/* The layer computes, for row-major tensors as frameworks hold them,
 *   z = x W (+ b),   y = act(z)
 * with x [m, k] (leading dimensions of a higher-rank x are collapsed into m),
 * W given as [k, n] or, as torch.nn.Linear.weight holds it, as [n, k]
 * (fnorm_linear_weight_layout_t), b [n], y [m, n]. fp16 and bf16 multiply
 * with fp32 accumulation; fp32 with fp32 arithmetic, or TF32 tensor cores
 * when FNORM_LINEAR_FLAG_ALLOW_TF32 is set. Every tensor of one call has the
 * same dtype. The GEMM runs on cuBLASLt with the bias and the activation
 * fused into its epilogue; the algorithm is chosen once per (shape, strides,
 * dtype, epilogue, pointer alignment) by cuBLASLt's heuristic and cached in
 * the handle.
 *
 * Alignment: no pointer needs more than its element's natural alignment and
 * no row stride needs to be a multiple of anything; cuBLASLt then uses
 * kernels for the smaller alignment. Where it has none for the case,
 * NOT_SUPPORTED says so: never a wrong answer. Only the aux buffer and the
 * workspace have rules of their own (below). */

/** A fully-connected layer's epilogue, weight layout and flags (fnorm_linear_desc_create). */
typedef struct fnorm_linear_desc *fnorm_linear_desc_t;

/** What follows the GEMM. Values are explicit and never renumbered. */
typedef enum fnorm_linear_epilogue {
  FNORM_LINEAR_EPILOGUE_NONE = 0,      /* y = x W */
  FNORM_LINEAR_EPILOGUE_BIAS = 1,      /* y = x W + b */
  FNORM_LINEAR_EPILOGUE_BIAS_RELU = 2, /* y = max(x W + b, 0) */
  /** y = gelu(z), z = x W + b, with cuBLASLt's tanh approximation:
   *  gelu(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), as
   *  torch.nn.functional.gelu(z, approximate="tanh"). */
  FNORM_LINEAR_EPILOGUE_BIAS_GELU = 3
} fnorm_linear_epilogue_t;

/** How W is stored. Values are explicit and never renumbered. */
typedef enum fnorm_linear_weight_layout {
  FNORM_LINEAR_WEIGHT_KN = 0, /* w is [k, n]: y = x w */
  FNORM_LINEAR_WEIGHT_NK = 1  /* w is [n, k] (PyTorch's weight): y = x w^T */
} fnorm_linear_weight_layout_t;

/** Flags of a linear descriptor (bitwise OR). */
typedef enum fnorm_linear_flag {
  FNORM_LINEAR_FLAG_NONE = 0,
  /** fp32 only: let the GEMM round its inputs to TF32 (10-bit mantissa) on
   *  tensor cores. Off by default: fp32 GEMMs are then full fp32, as
   *  PyTorch's default. Ignored for fp16 and bf16. */
  FNORM_LINEAR_FLAG_ALLOW_TF32 = 1
} fnorm_linear_flag_t;

/** Create a linear descriptor with defaults: EPILOGUE_NONE, WEIGHT_KN, no
 *  flags. Needs no device.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; ALLOC_FAILED;
 *  NOT_SUPPORTED_BUILD (the library was built without cuBLASLt: every
 *  fnorm_linear_* function but destroy then returns it). */
FNORM_API fnorm_status_t fnorm_linear_desc_create(fnorm_linear_desc_t *desc);

/** Destroy a linear descriptor. NULL is accepted. */
FNORM_API fnorm_status_t fnorm_linear_desc_destroy(fnorm_linear_desc_t desc);

/** Set the epilogue, the weight layout and the flags (fnorm_linear_flag_t
 *  values ORed). Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM (an
 *  unknown value, named in the message; the descriptor is then unchanged).
 *  Thread-safety: not while another call reads the descriptor. */
FNORM_API fnorm_status_t fnorm_linear_desc_set(fnorm_linear_desc_t desc,
                                               fnorm_linear_epilogue_t epilogue,
                                               fnorm_linear_weight_layout_t weight_layout,
                                               uint32_t flags);

/** Read a linear descriptor back. Output pointers may be NULL.
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER (desc). */
FNORM_API fnorm_status_t fnorm_linear_desc_get(fnorm_linear_desc_t desc,
                                               fnorm_linear_epilogue_t *epilogue,
                                               fnorm_linear_weight_layout_t *weight_layout,
                                               uint32_t *flags);

/** Bytes of the aux buffer a training forward with this descriptor writes
 *  and its backward reads: what the activation's derivative needs, in
 *  cuBLASLt's own formats (BIAS_RELU: a bit per element, 1 where y > 0;
 *  BIAS_GELU: z itself, in y's dtype), each row of y padded as cuBLASLt
 *  requires (to 128 bits for RELU, to 8 elements for GELU). Treat the
 *  contents as opaque. 0 for NONE and BIAS. Depends only on the epilogue,
 *  y's dtype and y's sizes; the handle is not used beyond validation.
 *  Note: for some shapes the library takes the ReLU bit from cuBLASLt's
 *  RELU_AUX epilogue, which decides from z before rounding (and sets it at
 *  z == 0 exactly): for z within rounding of 0 a bit may then be 1 where y
 *  is 0; the backward follows the bit (either is a derivative of a z that
 *  rounding cannot tell from this one).
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM (y_desc never set);
 *  NOT_SUPPORTED_BUILD. */
FNORM_API fnorm_status_t fnorm_linear_aux_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                               fnorm_tensor_desc_t y_desc, size_t *aux_bytes);

/** Scratch bytes fnorm_linear_fwd needs: cuBLASLt's workspace (the same
 *  budget, 32 MiB, for every forward today; ask anyway) plus room to align
 *  it, so any pointer will do. Validates the descriptors as the launch
 *  does; touches no GPU.
 *  Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED_BUILD. */
FNORM_API fnorm_status_t fnorm_linear_fwd_workspace_size(fnorm_handle_t handle,
                                                         fnorm_linear_desc_t desc,
                                                         fnorm_tensor_desc_t x_desc,
                                                         fnorm_tensor_desc_t w_desc,
                                                         fnorm_tensor_desc_t y_desc,
                                                         size_t *workspace_bytes);

/** Forward: y = act(x W + b) as the descriptor's epilogue says.
 *
 *  x_desc: [..., k], rank >= 1, fp32/fp16/bf16; the last dimension packed
 *    (stride 1); the dimensions before it are the m rows and must collapse
 *    into one row stride >= k (a packed tensor, or a slice of a wider one).
 *  w_desc: rank 2, [k, n] (WEIGHT_KN) or [n, k] (WEIGHT_NK), x's dtype, the
 *    last dimension packed, row stride >= the last size.
 *  y_desc: x's dtype and leading sizes, last size n; strides as for x.
 *  bias: n packed elements of x's dtype; required by the BIAS* epilogues,
 *    NULL otherwise.
 *  aux, aux_bytes: for BIAS_RELU / BIAS_GELU in training, a buffer of at
 *    least fnorm_linear_aux_size bytes, 16-byte aligned (cudaMalloc's are),
 *    that receives what fnorm_linear_bwd needs. NULL (inference) skips it.
 *    Must be NULL for NONE and BIAS.
 *  workspace: at least fnorm_linear_fwd_workspace_size bytes (any alignment).
 *  Aliasing: no output (y, aux, workspace) may overlap another buffer of
 *    the call (BAD_PARAM).
 *  Empty tensors: m = 0 or n = 0: y is empty, nothing is written or
 *    enqueued. k = 0 (no inner dimension): y = act(0 + b) in every row (and
 *    aux what the backward needs), without a GEMM; the workspace query then
 *    answers 0.
 *
 *  Returns SUCCESS; BAD_PARAM_NULL_POINTER; BAD_PARAM_SHAPE (sizes or dtypes
 *  disagree); BAD_PARAM; INSUFFICIENT_WORKSPACE; NOT_SUPPORTED (cuBLASLt has
 *  no kernel for this case, e.g. these pointer alignments; the message says
 *  which); NOT_SUPPORTED_BUILD; CUBLAS_ERROR; CUDA_ERROR.
 *  Stream-ordered: enqueued on `stream`; returns before the work finishes.
 *  The first call for a (shape, dtype, epilogue, alignment) asks cuBLASLt's
 *  heuristic (host only, no synchronization); later ones reuse its answer.
 *  Thread-safety: safe with a shared handle (the heuristic's answers are
 *  kept under a lock, plans per thread; cuBLASLt's handle is shared);
 *  descriptors are only read. */
FNORM_API fnorm_status_t fnorm_linear_fwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                          fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x,
                                          fnorm_tensor_desc_t w_desc, const void *w,
                                          const void *bias,
                                          fnorm_tensor_desc_t y_desc, void *y,
                                          void *aux, size_t aux_bytes,
                                          void *workspace, size_t workspace_bytes);

/** Scratch bytes fnorm_linear_bwd needs for these arguments: cuBLASLt's
 *  workspace, plus for BIAS_RELU / BIAS_GELU the gradient of z (m x n
 *  elements), plus per-block partial column sums for the bias gradients
 *  (used where cuBLASLt cannot fuse them, and for n = 1, where the library
 *  computes dx, dw and db without GEMMs). x_producer as in the launch
 *  (NULL: none). Depends on the handle's multiprocessor count; touches no
 *  GPU. Returns SUCCESS; BAD_PARAM_*; NOT_SUPPORTED_BUILD. */
FNORM_API fnorm_status_t fnorm_linear_bwd_workspace_size(fnorm_handle_t handle,
                                                         fnorm_linear_desc_t desc,
                                                         fnorm_tensor_desc_t x_desc,
                                                         fnorm_tensor_desc_t w_desc,
                                                         fnorm_tensor_desc_t dy_desc,
                                                         fnorm_linear_desc_t x_producer,
                                                         size_t *workspace_bytes);

/** Backward of fnorm_linear_fwd. With dz = dy * act'(z) (dz = dy for NONE
 *  and BIAS; act' read from the forward's aux):
 *    dx = dz W^T (in x's layout),  dw = x^T dz (in w's layout),
 *    db = column sums of dz.
 *  db is fused into the dw GEMM (cuBLASLt's BGRADA / BGRADB epilogue); dz
 *  is formed in one pass over dy and aux into the workspace, so dy is read
 *  once. Each output is optional (NULL: not computed); asking for none
 *  does nothing.
 *
 *  desc, x_desc, x, w_desc, w: as in the forward (x is needed only for dw,
 *    w only for dx; either may then be NULL).
 *  dy_desc, dy: the gradient of y; described as y was.
 *  aux, aux_bytes: the forward's aux; required for BIAS_RELU / BIAS_GELU,
 *    NULL otherwise.
 *  dx_desc, dx: x's sizes and dtype (strides as for x); dx_desc is needed
 *    only with dx.
 *  dw: described by w_desc (w's layout and strides).
 *  db: n elements of x's dtype; only for the BIAS* epilogues.
 *
 *  Chained layers (optional): when x is itself the output of an earlier
 *  fnorm_linear_fwd with BIAS_RELU or BIAS_GELU and aux, pass that layer's
 *  descriptor as x_producer, its aux as x_aux / x_aux_bytes, and optionally
 *  x_db for its bias gradient. dx then receives the gradient with respect
 *  to that layer's z (its activation's derivative applied inside the dx
 *  GEMM: cuBLASLt's DRELU_BGRAD / DGELU_BGRAD), and x_db that layer's bias
 *  gradient from the same GEMM. Finish the earlier layer with a descriptor
 *  whose epilogue is NONE (dy = this dx; its db is already done).
 *  x_producer NULL: x_aux, x_aux_bytes and x_db must be NULL / 0.
 *
 *  workspace: at least fnorm_linear_bwd_workspace_size bytes (any alignment).
 *  Aliasing: no output (dx, dw, db, x_db, workspace) may overlap another
 *    buffer of the call (BAD_PARAM).
 *  Empty tensors: outputs with elements whose sums run over no values are
 *    written with zeros: dw and db when m = 0, dx (and x_db) when n = 0;
 *    with k = 0, db is the column sums of dz as usual (dx and dw are
 *    empty). The workspace query answers 0 when m = 0 or n = 0.
 *  Returns as fnorm_linear_fwd. Stream-ordered; thread-safe with a shared
 *  handle. db and x_db are deterministic run to run on one device. */
FNORM_API fnorm_status_t fnorm_linear_bwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                          fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x,
                                          fnorm_tensor_desc_t w_desc, const void *w,
                                          fnorm_tensor_desc_t dy_desc, const void *dy,
                                          const void *aux, size_t aux_bytes,
                                          fnorm_linear_desc_t x_producer,
                                          const void *x_aux, size_t x_aux_bytes,
                                          fnorm_tensor_desc_t dx_desc, void *dx,
                                          void *dw, void *db, void *x_db,
                                          void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FUSEDNORM_H */
