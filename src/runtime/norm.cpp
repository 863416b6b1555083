// LayerNorm / RMSNorm: argument validation, kernel choice, launch.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

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

void require_same_shape(const fnorm_tensor_desc &a, const char *a_name,
                        const fnorm_tensor_desc &x) {
  FNORM_REQUIRE(a.dtype == x.dtype, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': dtype %s differs from x_desc's %s", a_name, dtype_name(a.dtype),
                dtype_name(x.dtype));
  FNORM_REQUIRE(a.rank == x.rank, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': rank %d differs from x_desc's %d", a_name, a.rank, x.rank);
  for (int32_t i = 0; i < x.rank; ++i) {
    FNORM_REQUIRE(a.dims[i] == x.dims[i], FNORM_STATUS_BAD_PARAM_SHAPE,
                  "argument '%s': dims[%d] is %lld but x_desc's is %lld", a_name, i,
                  static_cast<long long>(a.dims[i]), static_cast<long long>(x.dims[i]));
  }
}

// Row view of x, plus the row stride of another tensor of x's shape.
RowView view_of(const fnorm_norm_desc *norm, const fnorm_tensor_desc &x) {
  FNORM_REQUIRE(norm->mode == FNORM_NORM_LAYERNORM || norm->mode == FNORM_NORM_RMSNORM,
                FNORM_STATUS_BAD_PARAM, "argument 'norm': unknown mode %d",
                static_cast<int>(norm->mode));
  FNORM_REQUIRE(norm->epsilon <= FLT_MAX, FNORM_STATUS_BAD_PARAM,
                "argument 'norm': epsilon %g does not fit in fp32", norm->epsilon);
  RowView v;
  v.dtype = x.dtype;
  v.axis = resolve_axis(norm->begin_norm_axis, x.rank, "norm's begin_norm_axis");
  v.rows = 1;
  for (int32_t i = 0; i < v.axis; ++i) v.rows *= x.dims[i];
  v.cols = 1;
  for (int32_t i = v.axis; i < x.rank; ++i) v.cols *= x.dims[i];
  require_packed_tail(x, v.axis, "x_desc");
  v.x_row_stride = collapse_row_stride(x, v.axis, v.cols, "x_desc");
  FNORM_REQUIRE(v.x_row_stride >= v.cols, FNORM_STATUS_NOT_SUPPORTED,
                "argument 'x_desc': overlapping rows (row stride %lld < %lld normalized "
                "elements) are not supported",
                static_cast<long long>(v.x_row_stride), static_cast<long long>(v.cols));
  return v;
}

// Row stride of an output (or second input) described like x.
int64_t output_row_stride(const fnorm_tensor_desc &d, const RowView &v, const char *arg,
                          bool output) {
  require_packed_tail(d, v.axis, arg);
  const int64_t s = collapse_row_stride(d, v.axis, v.cols, arg);
  if (output) {
    FNORM_REQUIRE(s >= v.cols, FNORM_STATUS_BAD_PARAM,
                  "argument '%s': rows overlap (row stride %lld < %lld normalized elements)", arg,
                  static_cast<long long>(s), static_cast<long long>(v.cols));
  } else {
    FNORM_REQUIRE(s >= v.cols, FNORM_STATUS_NOT_SUPPORTED,
                  "argument '%s': overlapping rows (row stride %lld < %lld) are not supported",
                  arg, static_cast<long long>(s), static_cast<long long>(v.cols));
  }
  return s;
}

bool aligned(const void *p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// A [rows, cols] view in memory, for aliasing checks.
struct Region {
  const char *name;
  const void *ptr;
  int64_t row_stride;
  uint64_t bytes;
};

Region region(const char *name, const void *p, const RowView &v, int64_t row_stride) {
  const uint64_t span = (static_cast<uint64_t>(v.rows - 1) * static_cast<uint64_t>(row_stride) +
                         static_cast<uint64_t>(v.cols)) *
                        dtype_size(v.dtype);
  return {name, p, row_stride, p == nullptr ? 0 : span};
}

bool overlaps(const Region &a, const Region &b) {
  if (a.ptr == nullptr || b.ptr == nullptr) return false;
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a.ptr), pb = reinterpret_cast<uintptr_t>(b.ptr);
  return pa < pb + b.bytes && pb < pa + a.bytes;
}

// An output must not overlap any other region, except being the very same
// tensor as one listed in `same_ok` (in-place).
void require_no_alias(const Region &out, std::initializer_list<Region> others,
                      std::initializer_list<const char *> same_ok) {
  for (const Region &o : others) {
    if (!overlaps(out, o)) continue;
    bool allowed = false;
    for (const char *n : same_ok)
      allowed = allowed || (std::string(n) == o.name && out.ptr == o.ptr && out.row_stride == o.row_stride);
    FNORM_REQUIRE(allowed, FNORM_STATUS_BAD_PARAM,
                  "arguments '%s' and '%s' overlap without being the same tensor", out.name, o.name);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

RowView check_norm_fwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *y_desc) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  const fnorm_tensor_desc &y = require_set(y_desc, "y_desc");
  require_same_shape(y, "y_desc", x);
  RowView v = view_of(norm, x);
  v.y_row_stride = output_row_stride(y, v, "y_desc", true);
  return v;
}

RowView check_norm_bwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *dy_desc, const fnorm_tensor_desc *dx_desc) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  RowView v = view_of(norm, x);
  v.y_row_stride = v.x_row_stride;
  v.dx_row_stride = v.x_row_stride;
  if (dy_desc != nullptr) {
    const fnorm_tensor_desc &dy = require_set(dy_desc, "dy_desc");
    require_same_shape(dy, "dy_desc", x);
    v.y_row_stride = output_row_stride(dy, v, "dy_desc", false);
  }
  if (dx_desc != nullptr) {
    const fnorm_tensor_desc &dx = require_set(dx_desc, "dx_desc");
    require_same_shape(dx, "dx_desc", x);
    v.dx_row_stride = output_row_stride(dx, v, "dx_desc", true);
  }
  return v;
}

bool check_weight_desc(const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *x_desc,
                       const RowView &view, bool needed) {
  if (!needed) return false;
  const fnorm_tensor_desc &w = require_set(w_desc, "w_desc");
  const fnorm_tensor_desc &x = *x_desc;
  FNORM_REQUIRE(w.dtype == x.dtype || w.dtype == FNORM_DTYPE_FLOAT32, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'w_desc': dtype %s must be x_desc's (%s) or FLOAT32", dtype_name(w.dtype),
                dtype_name(x.dtype));
  const bool flat = w.rank == 1 && w.dims[0] == view.cols;
  bool same = w.rank == x.rank - view.axis;
  for (int32_t i = 0; same && i < w.rank; ++i) same = w.dims[i] == x.dims[view.axis + i];
  FNORM_REQUIRE(flat || same, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'w_desc': its sizes must equal x's normalized dimensions (or be one "
                "dimension of %lld); got rank %d with dims[0] = %lld",
                static_cast<long long>(view.cols), w.rank, static_cast<long long>(w.dims[0]));
  require_packed_tail(w, 0, "w_desc");
  return w.dtype != x.dtype;
}

int choose_pack(const RowView &v, std::initializer_list<const void *> data,
                std::initializer_list<int64_t> strides, std::initializer_list<const void *> params,
                bool param_f32) {
  const size_t elem = dtype_size(v.dtype);
  for (int p = static_cast<int>(16 / elem); p > 1; p /= 2) {
    bool ok = v.cols % p == 0;
    for (int64_t s : strides) ok = ok && (v.rows == 1 || s % p == 0);
    for (const void *d : data) ok = ok && (d == nullptr || aligned(d, p * elem));
    const size_t param_align = param_f32 ? 4 * static_cast<size_t>(std::min(p, 4)) : p * elem;
    for (const void *w : params) ok = ok && (w == nullptr || aligned(w, param_align));
    if (ok) return p;
  }
  return 1;
}

namespace {

// The instance of `tier` for (dtype, pack) with the fewest packs per thread
// among those `fits` accepts, or null.
template <class Instance, class Fits>
const Instance *fewest_npack(const Instance *table, size_t count, fnorm_dtype_t dtype, int pack,
                             Tier tier, Fits fits) {
  const Instance *best = nullptr;
  for (size_t i = 0; i < count; ++i) {
    const Instance &c = table[i];
    if (c.dtype == dtype && c.pack == pack && c.tier == tier && fits(c.npack) &&
        (best == nullptr || c.npack < best->npack))
      best = &c;
  }
  return best;
}

// One block per row, or per cluster of `cluster` blocks: a whole number of
// warps per block holding its share of the row, the fewest packs per thread
// that `fits` accepts. Leaves `plan` unchanged and returns false when none does.
template <class Instance, class Fits>
bool plan_block_tier(const Instance *table, size_t count, const RowView &view, int cluster,
                     int64_t max_block, Fits fits, Plan<Instance> &plan) {
  const int64_t packs = view.cols / plan.pack;
  auto block_for = [&](int n) { return ceil_div(ceil_div(packs, int64_t{cluster} * n), 32) * 32; };
  const Instance *inst = fewest_npack(table, count, view.dtype, plan.pack, Tier::BlockRegisters, [&](int n) {
    return block_for(n) <= max_block && fits(Tier::BlockRegisters, n, block_for(n));
  });
  if (inst == nullptr) return false;
  plan.instance = inst;
  plan.tier = Tier::BlockRegisters;
  plan.npack = inst->npack;
  plan.width_log2 = 0;
  plan.block_threads = static_cast<int>(block_for(inst->npack));
  plan.cluster = cluster;
  return true;
}

// The register tiers, shared by forward and backward: a group of lanes per
// row, else one block (of at most max_block threads) per row. They aim at
// target_npack packs per thread (independent loads in flight before the
// first reduction): the narrowest power-of-two group that gets there, then
// the fewest packs per thread that cover the row. Returns false when the row
// is too long for registers.
// `fits(tier, npack, threads)` says whether an instance may run at that many
// threads per block (registers / shared memory of the op).
template <class Instance, class Fits>
bool plan_register_tiers(const Instance *table, size_t count, const RowView &view, const DeviceInfo &dev,
                         int64_t target_npack, int64_t max_block, Fits fits, Plan<Instance> &plan) {
  const int64_t packs = view.cols / plan.pack;
  int width_log2 = 0;
  while ((target_npack << width_log2) < packs && width_log2 < 5) ++width_log2;
  // Few rows: spread each row over more lanes (fewer packs each) until the
  // rows fill the device's resident threads, so small problems still use
  // every SM (49152 rows of 32 fp16 columns ran 2x slower at one lane per
  // row on the H200, 2026-11-22).
  const int64_t resident = int64_t{dev.sm_count} * dev.max_threads_per_sm;
  while (width_log2 < 5 && (int64_t{1} << width_log2) < packs && (view.rows << width_log2) < resident)
    ++width_log2;
  const int64_t need = (packs + (int64_t{1} << width_log2) - 1) >> width_log2;
  plan.instance = fewest_npack(table, count, view.dtype, plan.pack, Tier::Warp,
                               [&](int n) { return n >= need && fits(Tier::Warp, n, 128); });
  if (plan.instance != nullptr) {
    plan.tier = Tier::Warp;
    plan.npack = plan.instance->npack;
    plan.width_log2 = width_log2;
    return true;
  }
  return plan_block_tier(table, count, view, 1, max_block, fits, plan);
}

auto any_npack = [](int) { return true; };

// Packs per thread the register tiers aim at (gen/instances.py: TARGET_NPACK).
constexpr int kTargetNpack = 4;

}  // namespace

NormFwdPlan plan_norm_fwd(const RowView &view, int pack, const DeviceInfo &dev, bool rms) {
  NormFwdPlan plan;
  plan.pack = pack;
  // RMSNorm has one reduction per row, so a block per row costs it one
  // barrier: at 128-256 packs of 16 bytes per row a block holding one pack
  // per thread beat a warp holding four (fp16 49152 x 1024: 60.3 -> 58.3 us, x 2048:
  // 119.8 -> 114.6; LayerNorm, with two reductions, lost 9-13% that way;
  // H200, 2026-11-22).
  const int64_t packs = view.cols / pack;
  if (rms && packs >= 128 && packs <= 256 && pack * dtype_size(view.dtype) == 16 &&
      plan_block_tier(kNormFwdInstances, kNormFwdInstanceCount, view, 1, 1024,
                      [](Tier, int n, int64_t) { return n == 1; }, plan))
    return plan;
  // Otherwise the register tiers hold at least kTargetNpack packs per thread.
  if (!plan_register_tiers(kNormFwdInstances, kNormFwdInstanceCount, view, dev, kTargetNpack, 1024,
                           [](Tier t, int n, int64_t) { return t == Tier::Warp || n >= kTargetNpack; }, plan)) {
    // Static shared memory of the block kernels (reduction scratch) is small;
    // keep 1 KiB of margin for it.
    const uint64_t row_bytes = static_cast<uint64_t>(view.cols) * dtype_size(view.dtype);
    plan.tier = row_bytes + 1024 <= static_cast<uint64_t>(dev.max_smem_optin) ? Tier::BlockSmem
                                                                            : Tier::BlockUncached;
    plan.instance = fewest_npack(kNormFwdInstances, kNormFwdInstanceCount, view.dtype, pack, plan.tier, any_npack);
  }
  FNORM_REQUIRE(plan.instance != nullptr, FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "no normalization forward kernel for dtype %s, pack %d in this build (the "
                "build's dtypes option left it out)",
                dtype_name(view.dtype), pack);
  return plan;
}

NormBwdPlan plan_norm_bwd(const RowView &view, int pack, const DeviceInfo &dev) {
  NormBwdPlan plan;
  plan.pack = pack;
  // Backward holds two fp32 accumulators per value in registers (x and dy
  // wait in a shared-memory ring): four packs per thread as the forward,
  // blocks of at most 512 threads (128 registers each), rings that fit the
  // device's shared memory.
  const size_t elem = dtype_size(view.dtype);
  auto fits = [&](Tier, int n, int64_t threads) {
    return norm_bwd_staging_bytes(static_cast<int>(threads), n, pack, elem) + 1024 <=
           static_cast<size_t>(dev.max_smem_optin);
  };
  const bool registers =
      plan_register_tiers(kNormBwdInstances, kNormBwdInstanceCount, view, dev, kTargetNpack, 512, fits, plan);
  // A block per row needs several rows per block to keep its ring busy: with
  // fewer than 8 rows per multiprocessor (1024 x 12288 bf16 ran at 22% of
  // copy bandwidth that way on the H200) column tiles spread the work wider.
  const bool many_rows = view.rows >= 8 * int64_t{dev.sm_count};
  if (registers && (plan.tier == Tier::Warp || many_rows)) return plan;
  // Rows too long for one block: a thread block cluster of 2 blocks per row
  // (sm_90), each holding an interleaved share of the columns. Wider
  // clusters lose to the column tiles: fp16 4096 x 65536 took 1468 us on a
  // cluster of 4 and 751 us on column tiles (H200, 2026-11-22); a cluster of
  // 2 still wins at 49152 x 32768 (4202 us against 4623).
  if (many_rows && dev.cc_major >= 9 &&
      plan_block_tier(kNormBwdInstances, kNormBwdInstanceCount, view, 2, 512, fits, plan))
    return plan;
  plan = NormBwdPlan{};
  plan.pack = pack;
  plan.tier = Tier::ColumnTiled;
  plan.instance = fewest_npack(kNormBwdInstances, kNormBwdInstanceCount, view.dtype, pack, plan.tier, any_npack);
  FNORM_REQUIRE(plan.instance != nullptr, FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "no normalization backward kernel for dtype %s, pack %d in this build",
                dtype_name(view.dtype), pack);
  return plan;
}

BwdWorkspace bwd_workspace_layout(const RowView &v, int partials, bool want_partials, bool coef) {
  auto round_up = [](size_t n) { return (n + 255) / 256 * 256; };
  BwdWorkspace w;
  const size_t part = want_partials ? round_up(static_cast<size_t>(partials) * v.cols * sizeof(float)) : 0;
  w.dgamma_offset = 0;
  w.dbeta_offset = part;
  w.coef_offset = 2 * part;
  w.bytes = 2 * part + (coef ? round_up(static_cast<size_t>(v.rows) * 2 * sizeof(float)) : 0);
  return w;
}

namespace {

LaunchContext context_of(fnorm_handle *h, fnorm_stream_t stream) {
  LaunchContext ctx;
  ctx.dev = h->info;
  ctx.cache = &h->cache;
  ctx.stream = reinterpret_cast<cudaStream_t>(stream);
  return ctx;
}

NormBwdParams bwd_params_for(const RowView &v, const fnorm_norm_desc *norm, const NormBwdPlan &plan) {
  NormBwdParams p;
  p.rows = v.rows;
  p.cols = v.cols;
  p.x_row_stride = v.x_row_stride;
  p.dy_row_stride = v.y_row_stride;
  p.dx_row_stride = v.dx_row_stride;
  p.rms = norm->mode == FNORM_NORM_RMSNORM;
  p.zero_centered = (norm->flags & FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA) != 0;
  p.width_log2 = plan.width_log2;
  p.block_threads = plan.block_threads;
  p.cluster = plan.cluster;
  return p;
}

// Bytes a backward needs with this plan (the plan's grid is the number of
// partial rows).
size_t bwd_bytes_for(const RowView &v, const fnorm_norm_desc *norm, const NormBwdPlan &plan,
                     const LaunchContext &ctx, bool want_partials, int *grid) {
  NormBwdParams p = bwd_params_for(v, norm, plan);
  check_cuda(plan.instance->grid(p, ctx, grid), plan.instance->name);
  return bwd_workspace_layout(v, *grid, want_partials, plan.tier == Tier::ColumnTiled).bytes;
}

}  // namespace

}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_norm_fwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t y_desc,
                                                       size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    (void)fnorm::check_norm_fwd_descs(norm, x_desc, y_desc);
    *workspace_bytes = 0;
  });
}

FNORM_API fnorm_status_t fnorm_norm_fwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                        fnorm_norm_desc_t norm,
                                        fnorm_tensor_desc_t x_desc, const void *x,
                                        const void *residual, void *sum,
                                        fnorm_tensor_desc_t w_desc, const void *gamma,
                                        const void *beta,
                                        fnorm_tensor_desc_t y_desc, void *y,
                                        float *mean, float *rstd,
                                        void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const RowView v = check_norm_fwd_descs(norm, x_desc, y_desc);
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(y);
    const bool rms = norm->mode == FNORM_NORM_RMSNORM;
    FNORM_REQUIRE(!(rms && beta != nullptr), FNORM_STATUS_BAD_PARAM,
                  "argument 'beta' must be NULL: RMSNorm has no shift");
    FNORM_REQUIRE(!(rms && mean != nullptr), FNORM_STATUS_BAD_PARAM,
                  "argument 'mean' must be NULL: RMSNorm saves only rrms (in 'rstd')");
    FNORM_REQUIRE(sum == nullptr || residual != nullptr, FNORM_STATUS_BAD_PARAM,
                  "argument 'sum' is given without 'residual'");
    const bool param_f32 = check_weight_desc(w_desc, x_desc, v, gamma != nullptr || beta != nullptr);
    const Region rx = region("x", x, v, v.x_row_stride), rr = region("residual", residual, v, v.x_row_stride),
                 rs = region("sum", sum, v, v.x_row_stride), ry = region("y", y, v, v.y_row_stride);
    require_no_alias(ry, {rx, rr, rs}, {"x"});
    require_no_alias(rs, {rx, rr}, {"x", "residual"});
    (void)workspace;
    (void)workspace_bytes;  // the size query answers 0 for every forward

    DeviceGuard guard(handle->device);
    const int pack = choose_pack(v, {x, y, residual, sum}, {v.x_row_stride, v.y_row_stride},
                                 {gamma, beta}, param_f32);
    const NormFwdPlan plan = plan_norm_fwd(v, pack, handle->info, rms);
    NormFwdParams p;
    p.x = x;
    p.residual = residual;
    p.sum = sum;
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
    p.rms = rms;
    p.param_f32 = param_f32 || v.dtype == FNORM_DTYPE_FLOAT32;
    p.zero_centered = (norm->flags & FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA) != 0;
    p.width_log2 = plan.width_log2;
    p.block_threads = plan.block_threads;
    check_cuda(plan.instance->launch(p, context_of(handle, stream)), plan.instance->name);
  });
}

FNORM_API fnorm_status_t fnorm_norm_bwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t w_desc,
                                                       size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    const RowView v = check_norm_bwd_descs(norm, x_desc, nullptr, nullptr);
    const bool want_partials = w_desc != nullptr;
    if (want_partials) (void)check_weight_desc(w_desc, x_desc, v, true);
    DeviceGuard guard(handle->device);
    const LaunchContext ctx = context_of(handle, nullptr);
    // The launch's pack follows the pointers' alignment: answer for the
    // largest need over every pack the row length allows.
    size_t most = 0;
    for (int pack = static_cast<int>(16 / dtype_size(v.dtype)); pack >= 1; pack /= 2) {
      if (v.cols % pack != 0) continue;
      const NormBwdPlan plan = plan_norm_bwd(v, pack, handle->info);
      int grid = 0;
      most = std::max(most, bwd_bytes_for(v, norm, plan, ctx, want_partials, &grid));
    }
    *workspace_bytes = most;
  });
}

FNORM_API fnorm_status_t fnorm_norm_bwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                        fnorm_norm_desc_t norm,
                                        fnorm_tensor_desc_t x_desc, const void *x,
                                        fnorm_tensor_desc_t dy_desc, const void *dy,
                                        const float *mean, const float *rstd,
                                        fnorm_tensor_desc_t w_desc, const void *gamma,
                                        const void *dsum,
                                        fnorm_tensor_desc_t dx_desc, void *dx,
                                        void *dgamma, void *dbeta,
                                        void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(dy_desc);
    FNORM_REQUIRE_NOT_NULL(dx_desc);
    const RowView v = check_norm_bwd_descs(norm, x_desc, dy_desc, dx_desc);
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(dy);
    FNORM_REQUIRE_NOT_NULL(dx);
    FNORM_REQUIRE_NOT_NULL(rstd);
    const bool rms = norm->mode == FNORM_NORM_RMSNORM;
    if (rms) {
      FNORM_REQUIRE(mean == nullptr, FNORM_STATUS_BAD_PARAM,
                    "argument 'mean' must be NULL for RMSNorm");
      FNORM_REQUIRE(dbeta == nullptr, FNORM_STATUS_BAD_PARAM,
                    "argument 'dbeta' must be NULL: RMSNorm has no shift");
    } else {
      FNORM_REQUIRE_NOT_NULL(mean);
    }
    const bool want_partials = dgamma != nullptr || dbeta != nullptr;
    const bool param_f32 = check_weight_desc(w_desc, x_desc, v, gamma != nullptr || want_partials);
    const Region rx = region("x", x, v, v.x_row_stride), rdy = region("dy", dy, v, v.y_row_stride),
                 rds = region("dsum", dsum, v, v.y_row_stride), rdx = region("dx", dx, v, v.dx_row_stride);
    require_no_alias(rdx, {rx, rdy, rds}, {"dy", "dsum"});

    DeviceGuard guard(handle->device);
    const int pack = choose_pack(v, {x, dy, dx, dsum}, {v.x_row_stride, v.y_row_stride, v.dx_row_stride},
                                 {gamma}, param_f32);
    const NormBwdPlan plan = plan_norm_bwd(v, pack, handle->info);
    const LaunchContext ctx = context_of(handle, stream);
    int grid = 0;
    const size_t need = bwd_bytes_for(v, norm, plan, ctx, want_partials, &grid);
    FNORM_REQUIRE(workspace_bytes >= need, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
                  "argument 'workspace_bytes' is %zu; this call needs %zu (ask "
                  "fnorm_norm_bwd_workspace_size)",
                  workspace_bytes, need);
    if (need > 0) {
      FNORM_REQUIRE_NOT_NULL(workspace);
      FNORM_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, FNORM_STATUS_BAD_PARAM,
                    "argument 'workspace' must be 16-byte aligned");
    }
    const BwdWorkspace layout = bwd_workspace_layout(v, grid, want_partials, plan.tier == Tier::ColumnTiled);
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    NormBwdParams p = bwd_params_for(v, norm, plan);
    p.x = x;
    p.dy = dy;
    p.gamma = gamma;
    p.dsum = dsum;
    p.mean = mean;
    p.rstd = rstd;
    p.dx = dx;
    p.param_f32 = param_f32 || v.dtype == FNORM_DTYPE_FLOAT32;
    p.grid = grid;
    if (dgamma != nullptr) p.dgamma_partial = reinterpret_cast<float *>(ws + layout.dgamma_offset);
    if (dbeta != nullptr) p.dbeta_partial = reinterpret_cast<float *>(ws + layout.dbeta_offset);
    if (plan.tier == Tier::ColumnTiled) p.row_coef = reinterpret_cast<float *>(ws + layout.coef_offset);
    check_cuda(plan.instance->launch(p, ctx), plan.instance->name);
    if (want_partials) {
      check_cuda(launch_norm_bwd_reduce(p.dgamma_partial, p.dbeta_partial, grid, v.cols,
                                        w_desc->dtype, dgamma, dbeta, ctx.stream),
                 "norm_bwd_reduce");
    }
  });
}

}  // extern "C"
