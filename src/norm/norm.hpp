// LayerNorm / RMSNorm inside the library: the descriptor object, the row
// view of a validated call, and the plan a launch executes.
//   norm_desc.cpp      fnorm_norm_desc_* (the descriptor API)
//   norm_validate.cpp  descriptors and pointers of a call -> RowView, pack
//   norm_plan.cpp      RowView + pack + device -> NormFwdPlan / NormBwdPlan
//   norm_api.cpp       the C entry points: validate, plan, launch
//   norm_fwd.cuh, norm_bwd.cuh  the kernels (instantiated by the generator)
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/handle.hpp"
#include "core/validate.hpp"
#include "norm/norm_params.hpp"

struct fnorm_norm_desc {
  fnorm_norm_mode_t mode = FNORM_NORM_LAYERNORM;
  int32_t begin_norm_axis = -1;
  double epsilon = 1e-5;
  uint32_t flags = 0;
};

namespace fnorm {

// The [rows, cols] view of a normalization problem, after validation.
struct RowView {
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t axis = 0;           // first normalized dimension of x
  int64_t x_row_stride = 0;   // x (and residual / sum in the forward)
  int64_t y_row_stride = 0;   // forward: y; backward: dy (and dsum)
  int64_t dx_row_stride = 0;  // backward only
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
};

// ---- validation (norm_validate.cpp) ----------------------------------------

// Validates the descriptors of a forward (everything the size query sees)
// and returns the row view. Throws Error.
RowView check_norm_fwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *y_desc);
// Backward: x, dy, dx descriptors (dy_desc/dx_desc may be null in the size
// query, which then assumes x's layout).
RowView check_norm_bwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *dy_desc, const fnorm_tensor_desc *dx_desc);

// Validates the weight descriptor against x when `needed`; returns whether
// the parameters are fp32 while x is not. Throws Error.
bool check_weight_desc(const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *x_desc,
                       const RowView &view, bool needed);

// Normalized begin axis in [0, rank), or throws naming `arg`.
int32_t resolve_axis(int32_t axis, int32_t rank, const char *arg);

// The widest pack (elements, <= kMaxPackBytes) that every given data
// pointer, the row length and the row strides allow. fp32 parameter pointers
// need only 4 * min(pack, 4) bytes of alignment.
int choose_pack(const RowView &v, std::initializer_list<const void *> data,
                std::initializer_list<int64_t> strides, std::initializer_list<const void *> params,
                bool param_f32);

// A [rows, cols] tensor of the view at `p` with `row_stride`, for the
// overlap check.
Span row_span(const char *name, const void *p, const RowView &v, int64_t row_stride);
// Bytes of gamma / beta (and dgamma / dbeta): cols values of fp32 when
// `param_f32`, else of x's dtype. Bytes of mean / rstd: rows fp32 values.
size_t param_vector_bytes(const RowView &v, bool param_f32);
size_t row_stat_bytes(const RowView &v);

// ---- plan (norm_plan.cpp) -----------------------------------------------------

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
  bool grid_per_row = false;  // forward: NormFwdParams::grid_per_row
};
using NormFwdPlan = Plan<NormFwdInstance>;

// Workspace layout of a backward with `partials` partial rows.
struct BwdWorkspace {
  size_t dgamma_offset = 0, dbeta_offset = 0, coef_offset = 0, bytes = 0;
};

struct NormBwdPlan : Plan<NormBwdInstance> {
  int grid = 0;            // partial rows the launch writes (its grid)
  BwdWorkspace workspace;  // where the partials and row coefficients go
};

// Picks tier and instance for a forward (RMSNorm when `rms`) with the given
// pack. With a device (ctx.cache set), a row-in-registers block that only
// one block per SM can hold hands its rows to the shared-memory tier when
// that keeps two or more, and a block-register plan of kTargetNpack or more
// packs per thread takes a block per row where fwd_grid_per_row says so;
// without one (host tests) the plan stops before those steps. Throws
// NOT_SUPPORTED_BUILD when no instance fits.
NormFwdPlan plan_norm_fwd(const RowView &view, int pack, const LaunchContext &ctx, bool rms,
                          bool residual = false);
// Whether a forward's block-register plan launches a block per row (rather
// than one wave of resident blocks) at `blocks_per_sm` resident blocks; with
// a residual (add & norm) only at 4 or more.
bool fwd_grid_per_row(const RowView &view, int blocks_per_sm, const DeviceInfo &dev, bool residual = false);

// The backward's tier and instance (shape and device properties only).
NormBwdPlan plan_norm_bwd_tier(const RowView &view, int pack, const DeviceInfo &dev);
// The whole backward plan: tier, then the grid the instance will launch
// (asks the device's occupancy) and the workspace layout it needs.
NormBwdPlan plan_norm_bwd(const RowView &view, int pack, const LaunchContext &ctx,
                          const fnorm_norm_desc *norm, bool want_partials);

BwdWorkspace bwd_workspace_layout(const RowView &v, int partials, bool want_partials, bool coef);

// Launch parameters of a plan, pointers left unset.
NormFwdParams norm_fwd_params(const RowView &v, const fnorm_norm_desc *norm, const NormFwdPlan &plan);
NormBwdParams norm_bwd_params(const RowView &v, const fnorm_norm_desc *norm, const NormBwdPlan &plan);

}  // namespace fnorm
