// LayerNorm: argument validation, kernel choice, launch.
#include <cfloat>
#include <cmath>

#include "internal.hpp"

namespace fnorm {

namespace {

const fnorm_tensor_desc &require_set(const fnorm_tensor_desc *d, const char *arg) {
  if (d == nullptr) fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
  FNORM_REQUIRE(d->is_set, FNORM_STATUS_BAD_PARAM,
                "argument '%s' was never set (call fnorm_tensor_desc_set first)", arg);
  return *d;
}

// Dimensions [axis, rank) must be packed row-major (size-1 dimensions may
// have any stride).
void require_packed_tail(const fnorm_tensor_desc &d, int32_t axis, const char *arg) {
  int64_t expected = 1;
  for (int32_t i = d.rank - 1; i >= axis; --i) {
    FNORM_REQUIRE(d.dims[i] == 1 || d.strides[i] == expected, FNORM_STATUS_NOT_SUPPORTED,
                  "argument '%s': the normalized dimensions must be packed, but strides[%d] is "
                  "%lld where %lld was expected",
                  arg, i, static_cast<long long>(d.strides[i]), static_cast<long long>(expected));
    expected *= d.dims[i];
  }
}

// The single stride between consecutive rows, when dimensions [0, axis)
// collapse into one (size-1 dimensions are ignored); cols when rows == 1.
int64_t collapse_row_stride(const fnorm_tensor_desc &d, int32_t axis, int64_t cols,
                            const char *arg) {
  int64_t row_stride = cols;
  int64_t expected = -1;
  for (int32_t i = axis - 1; i >= 0; --i) {
    if (d.dims[i] == 1) continue;
    if (expected < 0) {
      row_stride = d.strides[i];
    } else {
      FNORM_REQUIRE(d.strides[i] == expected, FNORM_STATUS_NOT_SUPPORTED,
                    "argument '%s': the row dimensions do not collapse into one row stride "
                    "(strides[%d] is %lld, expected %lld)",
                    arg, i, static_cast<long long>(d.strides[i]),
                    static_cast<long long>(expected));
    }
    FNORM_REQUIRE(d.strides[i] <= INT64_MAX / d.dims[i], FNORM_STATUS_BAD_PARAM,
                  "argument '%s': strides[%d] * dims[%d] overflows int64", arg, i, i);
    expected = d.strides[i] * d.dims[i];
  }
  return row_stride;
}

bool aligned(const void *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Bytes spanned by a [rows, cols] view with the given row stride.
uint64_t span_bytes(int64_t rows, int64_t cols, int64_t row_stride, size_t elem) {
  return (static_cast<uint64_t>(rows - 1) * static_cast<uint64_t>(row_stride) +
          static_cast<uint64_t>(cols)) *
         elem;
}

bool overlaps(const void *a, uint64_t a_bytes, const void *b, uint64_t b_bytes) {
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

RowView check_layernorm_fwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                                  const fnorm_tensor_desc *y_desc) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  const fnorm_tensor_desc &y = require_set(y_desc, "y_desc");
  FNORM_REQUIRE(norm->mode == FNORM_NORM_LAYERNORM, FNORM_STATUS_NOT_SUPPORTED,
                "argument 'norm': mode %d is not LAYERNORM", static_cast<int>(norm->mode));
  FNORM_REQUIRE(y.dtype == x.dtype, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'y_desc': dtype %s differs from x_desc's %s", dtype_name(y.dtype),
                dtype_name(x.dtype));
  FNORM_REQUIRE(y.rank == x.rank, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'y_desc': rank %d differs from x_desc's %d", y.rank, x.rank);
  for (int32_t i = 0; i < x.rank; ++i) {
    FNORM_REQUIRE(y.dims[i] == x.dims[i], FNORM_STATUS_BAD_PARAM_SHAPE,
                  "argument 'y_desc': dims[%d] is %lld but x_desc's is %lld", i,
                  static_cast<long long>(y.dims[i]), static_cast<long long>(x.dims[i]));
  }
  const int32_t axis = resolve_axis(norm->begin_norm_axis, x.rank, "norm's begin_norm_axis");
  RowView v;
  v.dtype = x.dtype;
  v.rows = 1;
  for (int32_t i = 0; i < axis; ++i) v.rows *= x.dims[i];
  v.cols = 1;
  for (int32_t i = axis; i < x.rank; ++i) v.cols *= x.dims[i];
  require_packed_tail(x, axis, "x_desc");
  require_packed_tail(y, axis, "y_desc");
  v.x_row_stride = collapse_row_stride(x, axis, v.cols, "x_desc");
  v.y_row_stride = collapse_row_stride(y, axis, v.cols, "y_desc");
  FNORM_REQUIRE(v.y_row_stride >= v.cols, FNORM_STATUS_BAD_PARAM,
                "argument 'y_desc': rows overlap (row stride %lld < %lld normalized elements)",
                static_cast<long long>(v.y_row_stride), static_cast<long long>(v.cols));
  FNORM_REQUIRE(v.x_row_stride >= v.cols, FNORM_STATUS_NOT_SUPPORTED,
                "argument 'x_desc': overlapping rows (row stride %lld < %lld normalized "
                "elements) are not supported",
                static_cast<long long>(v.x_row_stride), static_cast<long long>(v.cols));
  FNORM_REQUIRE(norm->epsilon <= FLT_MAX, FNORM_STATUS_BAD_PARAM,
                "argument 'norm': epsilon %g does not fit in fp32", norm->epsilon);
  return v;
}

void check_weight_desc(const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *x_desc,
                       int32_t begin_axis, const RowView &view, bool needed) {
  if (!needed) return;
  const fnorm_tensor_desc &w = require_set(w_desc, "w_desc");
  const fnorm_tensor_desc &x = *x_desc;
  FNORM_REQUIRE(w.dtype == x.dtype, FNORM_STATUS_NOT_SUPPORTED,
                "argument 'w_desc': dtype %s differs from x_desc's %s; parameters in another "
                "dtype than x are not implemented in this version",
                dtype_name(w.dtype), dtype_name(x.dtype));
  const bool flat = w.rank == 1 && w.dims[0] == view.cols;
  bool same = w.rank == x.rank - begin_axis;
  for (int32_t i = 0; same && i < w.rank; ++i) same = w.dims[i] == x.dims[begin_axis + i];
  FNORM_REQUIRE(flat || same, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'w_desc': its sizes must equal x's normalized dimensions (or be one "
                "dimension of %lld); got rank %d with dims[0] = %lld",
                static_cast<long long>(view.cols), w.rank, static_cast<long long>(w.dims[0]));
  require_packed_tail(w, 0, "w_desc");
}

LayerNormFwdPlan plan_layernorm_fwd(const RowView &view, const void *x, const void *y,
                                    const void *gamma, const void *beta, const DeviceInfo &dev) {
  const size_t max_smem_optin = static_cast<size_t>(dev.max_smem_optin);
  const size_t elem = dtype_size(view.dtype);
  LayerNormFwdPlan plan;
  // Widest pack (<= 16 bytes) that every pointer, the row length and both
  // row strides allow.
  for (int p = static_cast<int>(16 / elem); p >= 1; p /= 2) {
    const size_t bytes = static_cast<size_t>(p) * elem;
    const bool strides_ok =
        view.rows == 1 || (view.x_row_stride % p == 0 && view.y_row_stride % p == 0);
    if (view.cols % p == 0 && strides_ok && aligned(x, bytes) && aligned(y, bytes) &&
        (gamma == nullptr || aligned(gamma, bytes)) && (beta == nullptr || aligned(beta, bytes))) {
      plan.pack = p;
      break;
    }
  }
  const int64_t packs = view.cols / plan.pack;
  // Register tiers aim at kTargetNpack packs per thread (independent loads
  // in flight before the first reduction): the narrowest power-of-two group
  // that gets there, then the fewest packs per thread that cover the row.
  constexpr int64_t kTargetNpack = 4;
  int width_log2 = 0;
  while ((int64_t{kTargetNpack} << width_log2) < packs && width_log2 < 5) ++width_log2;
  // Few rows: spread each row over more lanes (fewer packs each) until the
  // rows fill the device's resident threads, so small problems still use
  // every SM (49152 rows of 32 fp16 columns ran 2x slower at one lane per
  // row on the H200, 2026-11-22).
  const int64_t resident = int64_t{dev.sm_count} * dev.max_threads_per_sm;
  while (width_log2 < 5 && (int64_t{1} << width_log2) < packs &&
         (view.rows << width_log2) < resident)
    ++width_log2;
  const int64_t need = (packs + (int64_t{1} << width_log2) - 1) >> width_log2;
  const LayerNormFwdInstance *best = nullptr;
  for (size_t i = 0; i < kLayerNormFwdInstanceCount; ++i) {
    const LayerNormFwdInstance &c = kLayerNormFwdInstances[i];
    if (c.dtype == view.dtype && c.pack == plan.pack && c.tier == Tier::Warp && c.npack >= need &&
        (best == nullptr || c.npack < best->npack))
      best = &c;
  }
  if (best != nullptr) {
    plan.tier = Tier::Warp;
    plan.npack = best->npack;
    plan.width_log2 = width_log2;
  } else {
    // Block-register tier: the fewest packs per thread whose block (a whole
    // number of warps) holds the row in at most 1024 threads.
    for (size_t i = 0; i < kLayerNormFwdInstanceCount; ++i) {
      const LayerNormFwdInstance &c = kLayerNormFwdInstances[i];
      if (c.dtype != view.dtype || c.pack != plan.pack || c.tier != Tier::BlockRegisters) continue;
      const int64_t threads = (packs + c.npack - 1) / c.npack;
      const int64_t block = (threads + 31) / 32 * 32;
      if (block <= 1024 && (best == nullptr || c.npack < best->npack)) {
        best = &c;
        plan.block_threads = static_cast<int>(block);
      }
    }
    if (best != nullptr) {
      plan.tier = Tier::BlockRegisters;
      plan.npack = best->npack;
    } else {
      // Static shared memory of the block kernels (reduction scratch) is
      // small; keep 1 KiB of margin for it.
      const uint64_t row_bytes = static_cast<uint64_t>(view.cols) * elem;
      plan.tier = row_bytes + 1024 <= max_smem_optin ? Tier::BlockSmem : Tier::BlockUncached;
      for (size_t i = 0; i < kLayerNormFwdInstanceCount; ++i) {
        const LayerNormFwdInstance &c = kLayerNormFwdInstances[i];
        if (c.dtype == view.dtype && c.pack == plan.pack && c.tier == plan.tier) best = &c;
      }
    }
  }
  FNORM_REQUIRE(best != nullptr, FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "no LayerNorm forward kernel for dtype %s, pack %d in this build (the build's "
                "dtypes option left it out)",
                dtype_name(view.dtype), plan.pack);
  plan.instance = best;
  return plan;
}

}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_layernorm_fwd_workspace_size(fnorm_norm_desc_t norm,
                                                            fnorm_tensor_desc_t x_desc,
                                                            fnorm_tensor_desc_t y_desc,
                                                            size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    (void)fnorm::check_layernorm_fwd_descs(norm, x_desc, y_desc);
    *workspace_bytes = 0;
  });
}

FNORM_API fnorm_status_t fnorm_layernorm_fwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                             fnorm_norm_desc_t norm,
                                             fnorm_tensor_desc_t x_desc, const void *x,
                                             fnorm_tensor_desc_t w_desc, const void *gamma,
                                             const void *beta,
                                             fnorm_tensor_desc_t y_desc, void *y,
                                             float *mean, float *rstd,
                                             void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(handle);
    const fnorm::RowView v = fnorm::check_layernorm_fwd_descs(norm, x_desc, y_desc);
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(y);
    const int32_t axis = fnorm::resolve_axis(norm->begin_norm_axis, x_desc->rank,
                                             "norm's begin_norm_axis");
    fnorm::check_weight_desc(w_desc, x_desc, axis, v, gamma != nullptr || beta != nullptr);
    const size_t elem = fnorm::dtype_size(v.dtype);
    const uint64_t x_bytes = fnorm::span_bytes(v.rows, v.cols, v.x_row_stride, elem);
    const uint64_t y_bytes = fnorm::span_bytes(v.rows, v.cols, v.y_row_stride, elem);
    FNORM_REQUIRE(!fnorm::overlaps(x, x_bytes, y, y_bytes) ||
                      (x == y && v.x_row_stride == v.y_row_stride),
                  FNORM_STATUS_BAD_PARAM,
                  "arguments 'x' and 'y' overlap without being the same tensor (in-place "
                  "needs y == x with equal strides)");
    (void)workspace;
    (void)workspace_bytes;  // the size query answers 0 for every LayerNorm forward

    fnorm::DeviceGuard guard(handle->device);
    const fnorm::LayerNormFwdPlan plan = fnorm::plan_layernorm_fwd(v, x, y, gamma, beta, handle->info);
    fnorm::LayerNormFwdParams p;
    p.x = x;
    p.y = y;
    p.gamma = gamma;
    p.beta = beta;
    p.mean = mean;
    p.rstd = rstd;
    p.rows = v.rows;
    p.cols = v.cols;
    p.x_row_stride = v.x_row_stride;
    p.y_row_stride = v.y_row_stride;
    p.eps = static_cast<float>(norm->epsilon);
    p.width_log2 = plan.width_log2;
    p.block_threads = plan.block_threads;
    fnorm::LaunchContext ctx;
    ctx.dev = handle->info;
    ctx.cache = &handle->cache;
    ctx.stream = reinterpret_cast<cudaStream_t>(stream);
    fnorm::check_cuda(plan.instance->launch(p, ctx), plan.instance->name);
  });
}

}  // extern "C"
