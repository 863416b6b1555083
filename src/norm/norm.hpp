/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm inside the library: the descriptor object and the two
// ops of the contract (core/op.hpp), NormFwd and NormBwd.
//   norm_desc.cpp      fnorm_norm_desc_* (the descriptor API)
//   norm_describe.cpp  describe (descriptors -> NormProblem), buffers, check
//   norm_plan.cpp      pointer_class (choose_pack) and plan (NormProblem + pack + device -> plan)
//   norm_launch.cpp    launch, launch_empty
//   norm_api.cpp       the C entry points: one run_op / query_op each
//   norm_fwd.cuh, norm_bwd.cuh  the kernels and their launchers (instantiated by the generator)
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/handle.hpp"
#include "core/op.hpp"
#include "core/validate.hpp"
#include "norm/norm_params.hpp"

struct fnorm_norm_desc {
  fnorm_norm_mode_t mode = FNORM_NORM_LAYERNORM;
  int32_t begin_norm_axis = -1;
  double epsilon = 1e-5;
  uint32_t flags = 0;
};

namespace fnorm {

// The optional tensors a call gives (NormProblem::present), one bit each.
using NormTensor = uint32_t;
constexpr NormTensor kNormResidual = 1u << 0;
constexpr NormTensor kNormSum = 1u << 1;
constexpr NormTensor kNormGamma = 1u << 2;
constexpr NormTensor kNormBeta = 1u << 3;
constexpr NormTensor kNormMean = 1u << 4;
constexpr NormTensor kNormRstd = 1u << 5;
constexpr NormTensor kNormDsum = 1u << 6;
constexpr NormTensor kNormDgamma = 1u << 7;
constexpr NormTensor kNormDbeta = 1u << 8;
// fnorm_norm_fwd_quant: the per-tensor scale read, or the per-token scales
// written (one of the two: they are the scaling), and amax.
constexpr NormTensor kNormScale = 1u << 9;
constexpr NormTensor kNormScales = 1u << 10;
constexpr NormTensor kNormAmax = 1u << 11;

// describe: a LayerNorm / RMSNorm call without its pointers, as the [rows,
// cols] view of its tensors (core/validate.hpp's MatrixView, one row stride
// per tensor). The plan caches' key (no padding: compared as bytes).
struct NormProblem {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_row_stride = 0;   // x (and residual / sum in the forward)
  int64_t y_row_stride = 0;   // forward: y; backward: dy (and dsum)
  int64_t dx_row_stride = 0;  // backward only
  int32_t axis = 0;           // first normalized dimension of x
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;      // x's
  fnorm_dtype_t out_dtype = FNORM_DTYPE_FLOAT32;  // y's (forward: FP8 / INT8 when quantized) or dx's
  int32_t param_dtype = -1;   // w_desc's dtype; -1: no weight descriptor
  int32_t mode = FNORM_NORM_LAYERNORM;
  uint32_t flags = 0;         // fnorm_norm_flag_t
  uint32_t eps_bits = 0;      // epsilon as the fp32 the kernels add
  uint32_t present = 0;       // NormTensor bits

  int64_t elements() const { return rows * cols; }
  bool rms() const { return mode == FNORM_NORM_RMSNORM; }
  bool has(NormTensor t) const { return (present & t) != 0; }
  // y holds quantized codes (fnorm_norm_fwd_quant); per token when the
  // scales are written.
  bool quantized() const { return is_quantized_dtype(out_dtype); }
  bool per_token() const { return has(kNormScales); }
  // gamma / beta are fp32 while x is not.
  bool param_f32() const { return param_dtype == FNORM_DTYPE_FLOAT32 && dtype != FNORM_DTYPE_FLOAT32; }
  float eps() const;
};

// The pointers of a forward call (launch's named argument struct).
struct NormFwdArgs {
  const void *x = nullptr;
  const void *residual = nullptr;
  void *sum = nullptr;
  const void *gamma = nullptr;
  const void *beta = nullptr;
  void *y = nullptr;
  float *mean = nullptr;
  float *rstd = nullptr;
  // fnorm_norm_fwd_quant: the scale (read per tensor, written per token) and amax.
  float *scale = nullptr;
  float *amax = nullptr;
  void *workspace = nullptr;  // the size query answers 0: never read
  size_t workspace_bytes = 0;
  uint32_t present() const;
};

// The pointers of a backward call.
struct NormBwdArgs {
  const void *x = nullptr;
  const void *dy = nullptr;
  const float *mean = nullptr;
  const float *rstd = nullptr;
  const void *gamma = nullptr;
  const void *dsum = nullptr;
  void *dx = nullptr;
  void *dgamma = nullptr;
  void *dbeta = nullptr;
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
  uint32_t present() const;
};

// ---- describe (norm_describe.cpp) ----------------------------------

// Validates the descriptors of a forward (everything the size query sees;
// w_desc only when gamma or beta is present) and returns the problem.
// Throws Error.
NormProblem describe_norm_fwd(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                              const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc, uint32_t present);
// A forward with a quantized output: y_desc in FP8 / INT8 (its strides in
// its one-byte elements), the scaling known and supported for that format.
// `present` carries kNormScale or kNormScales (the scaling).
NormProblem describe_norm_fwd_quant(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                                    const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc,
                                    fnorm_quant_scaling_t scaling, uint32_t present);
// The scaling's presence bit; BAD_PARAM for an unknown value.
NormTensor quant_scaling_bit(fnorm_quant_scaling_t scaling);
// Bytes of fnorm_norm_fwd_quant's scale: one fp32, or one per row.
size_t quant_scale_bytes(const NormProblem &pb);
// Backward: x, dy, dx descriptors (dy_desc / dx_desc null in the size query,
// which then assumes x's layout); w_desc when gamma, dgamma or dbeta is present.
NormProblem describe_norm_bwd(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                              const fnorm_tensor_desc *dy_desc, const fnorm_tensor_desc *dx_desc,
                              const fnorm_tensor_desc *w_desc, uint32_t present);

// Normalized begin axis in [0, rank), or throws naming `arg`.
int32_t resolve_axis(int32_t axis, int32_t rank, const char *arg);

// ---- plan (norm_plan.cpp) -----------------------------------------------------

// The widest pack (elements, <= kMaxPackBytes) that every given data
// pointer, the row length and the row strides allow. fp32 parameter pointers
// need only 4 * min(pack, 4) bytes of alignment.
int choose_pack(const NormProblem &v, std::initializer_list<const void *> data,
                std::initializer_list<int64_t> strides, std::initializer_list<const void *> params,
                bool param_f32);

// The chosen kernel instance and the launch shape it needs.
template <class Instance>
struct Plan {
  const Instance *instance = nullptr;
  int pack = 1;
  Tier tier = Tier::Warp;
  int npack = 0;
  int width_log2 = 0;     // warp tier
  int block_threads = 0;  // block-register tier
  int cluster = 1;        // backward block-register tier: blocks per row (a cluster)
  bool grid_per_row = false;  // forward: a block (of row groups) per row, not one wave
};

struct NormFwdPlan : Plan<NormFwdInstance> {
  LaunchShape shape;  // with a device only
  Sizes sizes;        // none
};

// Workspace layout of a backward with `partials` partial rows.
struct BwdWorkspace {
  size_t dgamma_offset = 0, dbeta_offset = 0, coef_offset = 0, bytes = 0;
};

struct NormBwdPlan : Plan<NormBwdInstance> {
  int grid = 0;            // partial rows the launch writes (its grid)
  NormBwdShape shape;      // with a device only
  BwdWorkspace workspace;  // where the partials and row coefficients go
  Sizes sizes;             // workspace.bytes
};

// Picks tier and instance for a forward (RMSNorm when `rms`) with the given
// pack. With a device (ctx.occupancy set), a row-in-registers block that
// only one block per SM can hold hands its rows to the shared-memory tier
// when that keeps two or more, and a block-register plan of kTargetNpack or
// more packs per thread takes a block per row where fwd_grid_per_row says
// so; without one (host tests) the plan stops before those steps. Throws
// NOT_SUPPORTED_BUILD when no instance fits.
NormFwdPlan plan_norm_fwd(const NormProblem &view, int pack, const DeviceContext &ctx, bool rms,
                          bool residual = false);
// Whether a forward's block-register plan launches a block per row (rather
// than one wave of resident blocks) at `blocks_per_sm` resident blocks; with
// a residual (add & norm) only at 4 or more.
bool fwd_grid_per_row(const NormProblem &view, int blocks_per_sm, const DeviceInfo &dev, bool residual = false);
// The handle's tuning applied to a forward plan (bench/README.md).
void apply_fwd_tuning(const NormProblem &view, int pack, const DeviceInfo &dev, const Tuning::NormFwd &t,
                      NormFwdPlan &plan);

// The backward's tier and instance (shape and device properties only).
NormBwdPlan plan_norm_bwd_tier(const NormProblem &view, int pack, const DeviceInfo &dev);
// The whole backward plan: tier, then the grid the instance will launch
// (asks the device's occupancy) and the workspace layout it needs.
NormBwdPlan plan_norm_bwd(const NormProblem &view, int pack, const DeviceContext &ctx);

BwdWorkspace bwd_workspace_layout(const NormProblem &v, int partials, bool want_partials, bool coef);

// Launch parameters of a plan, pointers left unset.
NormFwdParams norm_fwd_params(const NormProblem &v, const NormFwdPlan &plan);
NormBwdParams norm_bwd_params(const NormProblem &v, const NormBwdPlan &plan);

// ---- the ops (core/op.hpp) ------------------------------------------------------

// The plan's pointer class: the pack the call's pointers allow.
struct NormPtrs {
  int32_t pack = 1;
  int32_t unused = 0;
};

// fnorm_norm_fwd and fnorm_norm_fwd_quant (a quantized y_desc; the scaling).
struct NormFwd : OpDefaults {
  struct Descs {
    const fnorm_norm_desc *norm;
    const fnorm_tensor_desc *x, *w, *y;
    bool quant = false;
    fnorm_quant_scaling_t scaling = FNORM_QUANT_SCALING_PER_TENSOR;
  };
  using Desc = NormProblem;
  using Args = NormFwdArgs;
  using Ptrs = NormPtrs;
  using Plan = NormFwdPlan;
  static constexpr const char *kWorkspaceQuery = "fnorm_norm_fwd_workspace_size";
  static constexpr size_t kWorkspaceAlign = 1;
  FNORM_OP_STEPS
  static Empty empty(const Desc &pb, const Args &a);
  static void launch_empty(const Desc &pb, const Args &a, cudaStream_t stream);
  static Sizes sizes(fnorm_handle *, const Desc &, const Ptrs &) { return {}; }
  static size_t workspace_size(fnorm_handle *, const Desc &) { return 0; }
};

struct NormBwd : OpDefaults {
  struct Descs {
    const fnorm_norm_desc *norm;
    const fnorm_tensor_desc *x, *dy, *dx, *w;
  };
  using Desc = NormProblem;
  using Args = NormBwdArgs;
  using Ptrs = NormPtrs;
  using Plan = NormBwdPlan;
  static constexpr const char *kWorkspaceQuery = "fnorm_norm_bwd_workspace_size";
  static constexpr size_t kWorkspaceAlign = 16;
  FNORM_OP_STEPS
  static Empty empty(const Desc &pb, const Args &a);
  static void launch_empty(const Desc &pb, const Args &a, cudaStream_t stream);
  // The grid (and so the workspace) follows the kernel's occupancy: planned
  // (and cached) to answer.
  static Sizes sizes(fnorm_handle *h, const Desc &pb, const Ptrs &ptrs);
  static size_t workspace_size(fnorm_handle *h, const Desc &pb);
};

}  // namespace fnorm
