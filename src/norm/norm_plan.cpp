/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm planning: which instance, tier, pack, block and grid a
// call runs with, and the workspace it needs. The size queries and the
// launches both call these, so they cannot disagree.
#include <algorithm>

#include "core/row_plan.hpp"
#include "core/run_op.hpp"
#include "norm/norm.hpp"

namespace fnorm {

namespace {

// One block per row, or per cluster of `cluster` blocks: a whole number of
// warps per block holding its share of the row, the fewest packs per thread
// that `fits` accepts. Leaves `plan` unchanged and returns false when none does.
template <class Instance, class Fits>
bool plan_block_tier(const Instance *table, size_t count, const NormProblem &view, int cluster,
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
bool plan_register_tiers(const Instance *table, size_t count, const NormProblem &view, const DeviceInfo &dev,
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

// Blocks per SM the instance's kernel gets for this view and plan (its
// launch shape, planned and not launched).
int fwd_occupancy(const NormFwdInstance &inst, const NormProblem &view, const NormFwdPlan &plan,
                  const DeviceContext &ctx) {
  NormFwdParams p;
  p.rows = view.rows;
  p.cols = view.cols;
  p.block_threads = plan.block_threads;
  p.width_log2 = plan.width_log2;
  LaunchShape shape;
  check_cuda(inst.shape(p, ctx, &shape), inst.name);
  return shape.blocks_per_sm;
}

// One block per SM idles the SM at each of its row's barriers; the row
// cached in shared memory keeps several rows per SM instead (fp16
// 49152 x 32768: 1024 threads x 4 packs, 1987 us; shared memory, 3 blocks
// per SM, 1815 us; H200, 2026-11-22). Replaces a row-in-registers block plan
// by the shared-memory tier when the registers allow one block per SM and
// shared memory two or more.
void hand_off_to_smem(const NormProblem &view, const DeviceContext &ctx, NormFwdPlan &plan) {
  if (fwd_occupancy(*plan.instance, view, plan, ctx) != 1) return;  // 0: the plan reports it
  const size_t smem = static_cast<size_t>(view.cols) * dtype_size(view.dtype);
  if (smem + 1024 > static_cast<size_t>(ctx.dev.max_smem_optin)) return;
  const NormFwdInstance *cached =
      fewest_npack(kNormFwdInstances, kNormFwdInstanceCount, view.dtype, plan.pack, Tier::BlockSmem, any_npack);
  if (cached == nullptr) return;
  NormFwdPlan alt;
  alt.pack = plan.pack;
  alt.tier = Tier::BlockSmem;
  alt.instance = cached;
  if (fwd_occupancy(*cached, view, alt, ctx) >= 2) plan = alt;
}

// Rows of 257 to 1024 16-byte packs (RMSNorm; LayerNorm to 512: bf16 / fp16
// 4 K - 8 K columns, 4 K) with two waves of rows or more: blocks of two packs
// a thread, which run the register-capped kernel (norm_fwd.cuh: 40
// registers, 6 blocks of 256 per SM = 1536 threads, where four packs a
// thread at 62 registers keep 8 blocks of 128 = 1024), a block per row. H100, one
// process (ab_norm, bench/NOTES.md session 20), against four packs a thread,
// bf16 unless named: RMSNorm 2048 x 4096 16.3 -> 15.7 us, 4096 x 4096
// 28.6 -> 27.7, 2048 x 8192 28.9 -> 28.0, 8192 x 8192 level; LayerNorm
// 2048 x 4096 16.9 -> 16.5, 4096 x 4096 29.9 -> 28.6, fp16 30.8 -> 29.1,
// fp32 4096 x 2048 29.5 -> 28.5, add & norm 4096 x 4096 56.0 -> 53.9. Not
// LayerNorm at 8 K columns (4096 and 8192 rows 0.8% and 2.4% slower in two
// runs), nor fewer rows: the second wave runs part empty (1024 x 4096, 1.3
// waves, lost 6-9%).
bool plan_two_pack_blocks(const NormProblem &view, const DeviceContext &ctx, NormFwdPlan &plan) {
  NormFwdPlan alt;
  alt.pack = plan.pack;
  if (!plan_block_tier(kNormFwdInstances, kNormFwdInstanceCount, view, 1, 1024,
                       [](Tier, int n, int64_t) { return n == 2; }, alt))
    return false;
  const int occ = fwd_occupancy(*alt.instance, view, alt, ctx);
  if (occ == 0 || view.rows < 2 * int64_t{ctx.dev.sm_count} * occ) return false;
  alt.grid_per_row = true;
  plan = alt;
  return true;
}

}  // namespace

// The block-register tier's grid. One wave of resident blocks striding over
// the rows keeps every block alive for many rows, but a block then loads its
// next row only after storing this one; a block per row lets the SM start
// the next row's block as soon as one retires, its loads overlapping the
// other resident blocks' reductions and stores. The latter is faster when
// enough blocks share an SM to cover a block's start: H200, bf16, median of
// three in one process (2026-11-22), RMSNorm 16384x4096 78.2 -> 69.9 us (Liger
// 68.1), 8192x8192 77.1 -> 70.9, LayerNorm 32768x2048 79.1 -> 75.1, fp16
// LayerNorm 49152x4096 220.9 -> 203.7, fp32 RMSNorm 49152x8192 838.7 -> 785.4
// (2 blocks per SM, 186 rows per resident block). It lost where few blocks
// share an SM and each has few rows: LayerNorm bf16 1024x12288, 2 blocks of
// 384 threads per SM, 3.9 rows each, 21.2 -> 22.4 us. Measured (and used)
// for blocks of kTargetNpack or more packs per thread: RMSNorm's blocks of one
// pack per thread (rows of 128-256 packs) were level or up to 0.9% slower
// with it (fp16 49152 x 1024 / 2048, bf16 32768 x 2048).
// With a residual (add & norm: four tensors per element) at 2-3 blocks per SM
// the wave was faster: fp16 49152 x 16384 (512 threads, 2 blocks per SM)
// 1812 us a block per row against 1685 one wave, where LayerNorm alone was
// level (880 / 874) and add & norm at 4 blocks per SM kept the gain (8192
// columns 816 / 819; H200, one process, median of three, 2026-11-22).
bool fwd_grid_per_row(const NormProblem &view, int blocks_per_sm, const DeviceInfo &dev, bool residual) {
  const int64_t resident = int64_t{dev.sm_count} * blocks_per_sm;
  return blocks_per_sm >= 4 || (!residual && blocks_per_sm >= 2 && view.rows >= 8 * resident);
}

NormFwdPlan plan_norm_fwd(const NormProblem &view, int pack, const DeviceContext &ctx, bool rms, bool residual) {
  const DeviceInfo &dev = ctx.dev;
  NormFwdPlan plan;
  plan.pack = pack;
  const int64_t packs = view.cols / pack;
  const bool wide = pack * dtype_size(view.dtype) == 16;
  // RMSNorm has one reduction per row, so a block per row costs it one
  // barrier: at 128-256 packs of 16 bytes per row a block holding one pack
  // per thread beat a warp holding four (fp16 49152 x 1024: 60.3 -> 58.3 us, x 2048:
  // 119.8 -> 114.6; LayerNorm, with two reductions, lost 9-13% that way;
  // H200, 2026-11-22).
  bool block = rms && packs >= 128 && packs <= 256 && wide &&
               plan_block_tier(kNormFwdInstances, kNormFwdInstanceCount, view, 1, 1024,
                               [](Tier, int n, int64_t) { return n == 1; }, plan);
  if (!block && wide && packs > 256 && packs <= (rms ? 1024 : 512) && ctx.occupancy != nullptr)
    block = plan_two_pack_blocks(view, ctx, plan);
  // LayerNorm rows of 128 or more 16-byte packs: a block of kTargetNpack
  // packs per thread (one warp per block at 1024 fp16 columns) with a block
  // per row (below) rather than the warp tier's persistent groups: fp16
  // 49152 x 1024 59.5 -> 55.1 us, bf16 60.8 -> 56.5, fp32 130.6 -> 101.2
  // (the warp tier's 8 packs of fp32 took 72 registers), add & norm fp16
  // 109.0 -> 107.0 (H200, 2026-11-22, one process).
  // Rows too few for those blocks to give the SMs a quarter of their
  // resident threads take two packs a thread (twice the warps): LayerNorm
  // 1024 x 2048 (64-thread blocks, 15 warps per SM resident of the 32 the
  // registers allow; ncu, bench/NOTES.md session 11) bf16 6.1 -> 5.2 us,
  // fp16 5.9 -> 5.1 on the H200, 6.6 -> 5.8 on the H100; at 1024 x 4096 and
  // 2048 x 2048 (a quarter or more) two packs lost 12-18% (session 12).
  const int64_t four_pack_threads = ceil_div(ceil_div(packs, int64_t{kTargetNpack}), 32) * 32;
  const int block_npack =
      view.rows * four_pack_threads < int64_t{dev.sm_count} * dev.max_threads_per_sm / 4 ? 2 : kTargetNpack;
  if (!block && !rms && packs >= 128 && wide)
    block = plan_block_tier(kNormFwdInstances, kNormFwdInstanceCount, view, 1, 1024,
                            [block_npack](Tier, int n, int64_t) { return n == block_npack; }, plan);
  // Otherwise the register tiers hold at least kTargetNpack packs per thread.
  if (!block &&
      !plan_register_tiers(kNormFwdInstances, kNormFwdInstanceCount, view, dev, kTargetNpack, 1024,
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
  if (plan.tier == Tier::BlockRegisters && ctx.occupancy != nullptr) {
    hand_off_to_smem(view, ctx, plan);
    if (plan.tier == Tier::BlockRegisters && plan.npack >= kTargetNpack)
      plan.grid_per_row = fwd_grid_per_row(view, fwd_occupancy(*plan.instance, view, plan, ctx), dev, residual);
  }
  return plan;
}

// Tuning::NormFwd (FNORM_NORM_FWD_PLAN) over a plan.
void apply_fwd_tuning(const NormProblem &view, int pack, const DeviceInfo &dev, const Tuning::NormFwd &t,
                      NormFwdPlan &plan) {
  using T = Tuning::NormFwd;
  FNORM_REQUIRE(t.bad_item[0] == '\0', FNORM_STATUS_BAD_PARAM,
                "FNORM_NORM_FWD_PLAN (read at fnorm_create): unknown item '%s'", t.bad_item);
  const int64_t packs = view.cols / pack;
  const int n = t.npack;
  if (t.tier == T::Tier::Block) {
    NormFwdPlan alt;
    alt.pack = pack;
    FNORM_REQUIRE(plan_block_tier(kNormFwdInstances, kNormFwdInstanceCount, view, 1, 1024,
                                  [n](Tier, int k, int64_t) { return k == n; }, alt),
                  FNORM_STATUS_NOT_SUPPORTED, "FNORM_NORM_FWD_PLAN block:%d: no block of <= 1024 threads holds %lld packs",
                  n, static_cast<long long>(packs));
    alt.grid_per_row = plan.grid_per_row;
    plan = alt;
  } else if (t.tier == T::Tier::Warp) {
    int w = 0;
    while ((int64_t{n} << w) < packs && w < 5) ++w;
    const NormFwdInstance *inst = fewest_npack(kNormFwdInstances, kNormFwdInstanceCount, view.dtype, pack,
                                               Tier::Warp, [n](int k) { return k == n; });
    FNORM_REQUIRE(inst != nullptr && (int64_t{n} << w) >= packs, FNORM_STATUS_NOT_SUPPORTED,
                  "FNORM_NORM_FWD_PLAN warp:%d: the warp tier does not hold %lld packs", n,
                  static_cast<long long>(packs));
    plan.instance = inst;
    plan.tier = Tier::Warp;
    plan.npack = n;
    plan.width_log2 = w;
    plan.block_threads = 0;
  } else if (t.tier == T::Tier::Smem || t.tier == T::Tier::Uncached) {
    const Tier tier = t.tier == T::Tier::Smem ? Tier::BlockSmem : Tier::BlockUncached;
    FNORM_REQUIRE(tier == Tier::BlockUncached || static_cast<uint64_t>(view.cols) * dtype_size(view.dtype) + 1024 <=
                                                     static_cast<uint64_t>(dev.max_smem_optin),
                  FNORM_STATUS_NOT_SUPPORTED, "FNORM_NORM_FWD_PLAN smem: the row does not fit in shared memory");
    plan.instance = fewest_npack(kNormFwdInstances, kNormFwdInstanceCount, view.dtype, pack, tier, any_npack);
    plan.tier = tier;
    plan.npack = 0;
    plan.width_log2 = 0;
    plan.block_threads = 0;
  }
  if (t.grid != T::Grid::Planner) plan.grid_per_row = t.grid == T::Grid::PerRow;
  FNORM_REQUIRE(plan.instance != nullptr, FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "FNORM_NORM_FWD_PLAN names a kernel left out of this build");
}

namespace {
// The rows tier (norm_bwd.cuh): 16-byte packs, a row group of whole warps
// at the instance's packs per thread, holding at least kBwdRowsMinValues
// columns and at most the instance's block (1024 threads at 8 values per
// thread, 512 at 16), a ring of at least two stages of one group in the
// device's shared memory. The block shape and grid (row groups per block,
// ring depth, a block per SM) follow from the rows and the device in the
// instance's shape function.
//
// 16-bit rows have two instances. At one pack a thread (8 values, 1024
// threads) the LayerNorm kernel issues 402 instructions per row step for
// 48 bytes of x, dy and dx: at most 128 * 48 / 402 = 15 bytes per SM cycle
// at full issue, so a device whose DRAM delivers more per SM cycle waits on
// instruction issue there (H200, 18.8 bytes per SM cycle: bf16 16384 x 4096
// took 170 us, as on the H100 at 12.8). Two packs (614 instructions for 96
// bytes) take those devices, and rows that are few per SM on any device
// (the per-row chain of the persistent block is shorter; H100, bf16: 1.01-
// 1.16x from 1024 to 16384 rows, 124 rows per SM); with many rows per SM on
// a device that one pack keeps up with, one pack's 1024 threads were
// faster (H100, fp16 49152 x 1024..4096, 373 rows per SM: 0.93-0.95x at two
// packs). Both A/Bs: bench/NOTES.md, session 12. A dtype with one rows
// instance (fp32: two packs, gen/instances.py) takes that one.
constexpr double kBwdRowsOnePackBytesPerCycle = 128.0 * 48 / 402;
constexpr int64_t kBwdRowsFewRowsPerSm = 256;

int rows_tier_npack(const NormProblem &view, const DeviceInfo &dev) {
  const int64_t rows_per_sm = ceil_div(view.rows, int64_t{std::max(dev.sm_count, 1)});
  return dev.dram_bytes_per_sm_cycle > kBwdRowsOnePackBytesPerCycle || rows_per_sm <= kBwdRowsFewRowsPerSm ? 2 : 1;
}

bool plan_rows_tier(const NormProblem &view, int pack, const DeviceInfo &dev, NormBwdPlan &plan) {
  const size_t elem = dtype_size(view.dtype);
  if (pack * elem != static_cast<size_t>(kMaxPackBytes)) return false;
  const int npack = rows_tier_npack(view, dev);
  const NormBwdInstance *inst = fewest_npack(kNormBwdInstances, kNormBwdInstanceCount, view.dtype, pack,
                                             Tier::BlockRows, [npack](int n) { return n == npack; });
  if (inst == nullptr)
    inst = fewest_npack(kNormBwdInstances, kNormBwdInstanceCount, view.dtype, pack, Tier::BlockRows, any_npack);
  if (inst == nullptr) return false;
  const int64_t width = ceil_div(ceil_div(view.cols / pack, int64_t{inst->npack}), 32) * 32;
  const int values = inst->npack * pack;
  if (width * values < kBwdRowsMinValues || width > bwd_rows_max_threads(values)) return false;
  if (2 * row_ring_stage_bytes(static_cast<int>(width), inst->npack, pack, elem) + kBwdRowsSmemMargin >
      static_cast<size_t>(dev.max_smem_optin))
    return false;
  plan.instance = inst;
  plan.tier = Tier::BlockRows;
  plan.npack = inst->npack;
  plan.width_log2 = 0;
  plan.block_threads = static_cast<int>(width);
  plan.cluster = 1;
  return true;
}
}  // namespace

NormBwdPlan plan_norm_bwd_tier(const NormProblem &view, int pack, const DeviceInfo &dev) {
  NormBwdPlan plan;
  plan.pack = pack;
  if (plan_rows_tier(view, pack, dev, plan)) return plan;
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

BwdWorkspace bwd_workspace_layout(const NormProblem &v, int partials, bool want_partials, bool coef) {
  const char *arg = "x_desc";  // every size here comes from x's dimensions
  auto region = [&](size_t count, size_t per) { return checked_align_up(checked_mul(count, per, arg), 256, arg); };
  BwdWorkspace w;
  const size_t part = want_partials ? region(checked_mul(static_cast<size_t>(partials), static_cast<size_t>(v.cols), arg), sizeof(float)) : 0;
  w.dgamma_offset = 0;
  w.dbeta_offset = part;
  w.coef_offset = checked_mul(2, part, arg);
  w.bytes = checked_add(w.coef_offset, coef ? region(static_cast<size_t>(v.rows), 2 * sizeof(float)) : 0, arg);
  return w;
}


NormBwdPlan plan_norm_bwd(const NormProblem &view, int pack, const DeviceContext &ctx) {
  NormBwdPlan plan = plan_norm_bwd_tier(view, pack, ctx.dev);
  const NormBwdParams p = norm_bwd_params(view, plan);
  check_cuda(plan.instance->shape(p, ctx, &plan.shape), plan.instance->name);
  plan.grid = plan.shape.grid;
  const bool want_partials = view.has(kNormDgamma) || view.has(kNormDbeta);
  plan.workspace = bwd_workspace_layout(view, plan.grid, want_partials, plan.tier == Tier::ColumnTiled);
  return plan;
}

namespace {
// The fields forward and backward parameters share.
template <class Params, class PlanT>
Params shared_params(const NormProblem &v, const PlanT &plan) {
  Params p;
  p.rows = v.rows;
  p.cols = v.cols;
  p.x_row_stride = v.x_row_stride;
  p.rms = v.rms();
  p.zero_centered = (v.flags & FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA) != 0;
  p.round_xhat = (v.flags & FNORM_NORM_FLAG_ROUND_XHAT) != 0;
  p.param_f32 = v.param_f32() || v.dtype == FNORM_DTYPE_FLOAT32;
  p.width_log2 = plan.width_log2;
  p.block_threads = plan.block_threads;
  return p;
}

}  // namespace

NormFwdParams norm_fwd_params(const NormProblem &v, const NormFwdPlan &plan) {
  NormFwdParams p = shared_params<NormFwdParams>(v, plan);
  p.y_row_stride = v.y_row_stride;
  p.eps = v.eps();
  p.grid_per_row = plan.grid_per_row;
  if (v.quantized()) {
    p.quant = v.out_dtype == FNORM_DTYPE_FLOAT8_E4M3   ? QuantKind::E4M3
              : v.out_dtype == FNORM_DTYPE_FLOAT8_E5M2 ? QuantKind::E5M2
                                                       : QuantKind::Int8;
    p.quant_per_token = v.per_token();
  }
  return p;
}

NormBwdParams norm_bwd_params(const NormProblem &v, const NormBwdPlan &plan) {
  NormBwdParams p = shared_params<NormBwdParams>(v, plan);
  p.dy_row_stride = v.y_row_stride;
  p.dx_row_stride = v.dx_row_stride;
  p.cluster = plan.cluster;
  p.grid = plan.grid;
  return p;
}

// ---- the ops' plan steps -----------------------------------------------------------

int choose_pack(const NormProblem &v, std::initializer_list<const void *> data,
                std::initializer_list<int64_t> strides, std::initializer_list<const void *> params,
                bool param_f32) {
  const size_t elem = dtype_size(v.dtype);
  return widest_pack(elem, kMaxPackBytes, [&](int p) {
    bool ok = v.cols % p == 0;
    for (int64_t s : strides) ok = ok && (v.rows == 1 || s % p == 0);
    const size_t param_align = param_f32 ? 4 * static_cast<size_t>(std::min(p, 4)) : p * elem;
    return ok && all_aligned(data, p * elem) && all_aligned(params, param_align);
  });
}


NormPtrs NormFwd::pointer_class(fnorm_handle *, const NormProblem &pb, const NormFwdArgs &a) {
  if (!pb.quantized())
    return {choose_pack(pb, {a.x, a.y, a.residual, a.sum}, {pb.x_row_stride, pb.y_row_stride}, {a.gamma, a.beta},
                        pb.param_f32())};
  // x, residual and sum as the plain forward; y's codes take one byte each.
  int pack = choose_pack(pb, {a.x, a.residual, a.sum}, {pb.x_row_stride}, {a.gamma, a.beta}, pb.param_f32());
  while (pack > 1 && (!is_aligned(a.y, static_cast<size_t>(pack)) || (pb.rows > 1 && pb.y_row_stride % pack != 0)))
    pack /= 2;
  return {pack};
}

NormFwdPlan NormFwd::plan(fnorm_handle *h, const NormProblem &pb, const NormPtrs &ptrs) {
  const DeviceContext ctx = device_context(h);
  NormFwdPlan plan = plan_norm_fwd(pb, ptrs.pack, ctx, pb.rms(), pb.has(kNormResidual));
  apply_fwd_tuning(pb, ptrs.pack, ctx.dev, h->tuning.norm_fwd, plan);
  // A quantized output (the problem's out_dtype keeps its plans apart in
  // the cache) runs the codes instance of the plain plan's kernel, with the
  // plain kernel's shape.
  if (pb.quantized()) {
    const NormFwdInstance &plain = *plan.instance;
    plan.instance = fewest_npack(kNormFwdCodesInstances, kNormFwdCodesInstanceCount, plain.dtype, plain.pack,
                                 plain.tier, [&](int k) { return k == plain.npack; });
    FNORM_REQUIRE(plan.instance != nullptr, FNORM_STATUS_NOT_SUPPORTED_BUILD,
                  "no quantized-output kernel beside %s in this build", plain.name);
  }
  check_cuda(plan.instance->shape(norm_fwd_params(pb, plan), ctx, &plan.shape), plan.instance->name);
  if (plan.shape.blocks_per_sm == 0) check_cuda(cudaErrorInvalidConfiguration, plan.instance->name);
  return plan;
}

NormPtrs NormBwd::pointer_class(fnorm_handle *, const NormProblem &pb, const NormBwdArgs &a) {
  return {choose_pack(pb, {a.x, a.dy, a.dx, a.dsum}, {pb.x_row_stride, pb.y_row_stride, pb.dx_row_stride}, {a.gamma},
                      pb.param_f32())};
}

NormBwdPlan NormBwd::plan(fnorm_handle *h, const NormProblem &pb, const NormPtrs &ptrs) {
  NormBwdPlan plan = plan_norm_bwd(pb, ptrs.pack, device_context(h));
  plan.sizes.workspace = plan.workspace.bytes;
  return plan;
}

Sizes NormBwd::sizes(fnorm_handle *h, const NormProblem &pb, const NormPtrs &ptrs) {
  return cached_plan<NormBwd>(h, pb, ptrs).sizes;
}

size_t NormBwd::workspace_size(fnorm_handle *h, const NormProblem &pb) {
  if (pb.elements() == 0) return 0;
  // The launch's pack follows the pointers' alignment: answer for the
  // largest need over every pack the row length allows.
  size_t most = 0;
  for (int pack = static_cast<int>(kMaxPackBytes / dtype_size(pb.dtype)); pack >= 1; pack /= 2)
    if (pb.cols % pack == 0) most = std::max(most, cached_plan<NormBwd>(h, pb, NormPtrs{pack}).sizes.workspace);
  return most;
}

}  // namespace fnorm
