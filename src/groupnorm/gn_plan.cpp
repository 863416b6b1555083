/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's planner: the pack, the tile geometry (groupnorm.hpp and
// gn_kernels.cuh say what each field is), the grid and the workspace
// layout. A pure function of the problem, the pack and the device's SM
// count; the launch plan also checks the kernel's occupancy once.
#include <algorithm>
#include <cstring>

#include "core/arith.hpp"
#include "core/op.hpp"
#include "core/validate.hpp"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {

#ifdef FNORM_GN_HAS_F32
extern const GnInstance kGnInstances_f32[];
extern const int kGnInstanceCount_f32;
#endif
#ifdef FNORM_GN_HAS_F16
extern const GnInstance kGnInstances_f16[];
extern const int kGnInstanceCount_f16;
#endif
#ifdef FNORM_GN_HAS_BF16
extern const GnInstance kGnInstances_bf16[];
extern const int kGnInstanceCount_bf16;
#endif

const GnInstance *gn_instance(fnorm_dtype_t dtype, int pack, bool channels_last, bool bwd) {
  const GnInstance *table = nullptr;
  int count = 0;
  switch (dtype) {
#ifdef FNORM_GN_HAS_F32
    case FNORM_DTYPE_FLOAT32: table = kGnInstances_f32; count = kGnInstanceCount_f32; break;
#endif
#ifdef FNORM_GN_HAS_F16
    case FNORM_DTYPE_FLOAT16: table = kGnInstances_f16; count = kGnInstanceCount_f16; break;
#endif
#ifdef FNORM_GN_HAS_BF16
    case FNORM_DTYPE_BFLOAT16: table = kGnInstances_bf16; count = kGnInstanceCount_bf16; break;
#endif
    default: break;
  }
  for (int i = 0; i < count; ++i)
    if (table[i].pack == pack && table[i].channels_last == channels_last && table[i].bwd == bwd) return &table[i];
  return nullptr;
}

namespace {

// The packs compiled for a dtype, widest first (gen/instances.py groupnorm_packs).
int packs_of(int64_t dtype, int (&out)[3]) {
  if (dtype == FNORM_DTYPE_FLOAT32) {
    out[0] = 4, out[1] = 1;
    return 2;
  }
  out[0] = 8, out[1] = 4, out[2] = 1;
  return 3;
}

// The layout's rule for a pack: whole packs per channel row (channels-first)
// or per spatial row (channels-last).
bool layout_allows(const GnProblem &pb, int pack) {
  return (pb.channels_last ? pb.c : pb.s) % pack == 0;
}

// What the planner is given besides the problem: the resident blocks of
// the persistent grid and the handle's tile override (FNORM_GN_TILE_K, 0:
// none).
struct GnBudget {
  int64_t resident = 1;
  int tile_k = 0;
  int64_t sms = 1;
  int64_t l2_bytes = 0;
  Tuning::GnSchedule schedule = Tuning::GnSchedule::Planner;
};
GnBudget budget_of(fnorm_handle *h, const GnProblem &pb) {
  const int64_t sms = h->info.sm_count;
  return GnBudget{sms * gn_blocks_per_sm(pb.channels_last != 0), h->tuning.gn_tile_k, sms, h->info.l2_bytes,
                  h->tuning.gn_schedule};
}

// The streaming schedule's grids fit CUDA's limits (any pack): n * ceil(c / 32) channel-sum
// blocks, n * groups / 8 group blocks, ceil(c / 256) column chunks (grid.y),
// n first-pass blocks at least; else the persistent kernel runs it.
bool stream_fits(const GnProblem &pb) {
  constexpr int64_t kGridX = (int64_t{1} << 31) - 1, kGridY = 65535;
  return pb.n * ceil_div(pb.c, int64_t{32}) <= kGridX && ceil_div(pb.n * pb.groups, int64_t{kGsWarps}) <= kGridX &&
         ceil_div(pb.c, int64_t{kGnThreads}) <= kGridY && pb.n <= kGridX / 8;
}

// Whether the streaming schedule runs the problem (groupnorm.hpp). On the
// H100 (bench/gn_time, bf16, 32 groups, same process; bench/results
// rows_groupnorm) it was faster than the persistent kernel in every cell
// but one: channels-first forward 1.01-1.6x, backward 1.24-1.47x;
// channels-last backward 1.57-2.48x, forward 1.08-1.32x, except one sample
// of 2^24 values or fewer ([1, 512, 128, 128]: 35.5 us against 28.7),
// which the persistent kernel reads once from DRAM and keeps.
bool takes_stream(const GnProblem &pb, const GnBudget &bud) {
  if (!stream_fits(pb)) return false;
  if (bud.schedule != Tuning::GnSchedule::Planner) return bud.schedule != Tuning::GnSchedule::Persistent;
  const bool fwd = pb.pass == static_cast<int64_t>(GnPass::Fwd);
  return !(fwd && pb.channels_last && pb.n == 1 && pb.elements() <= (int64_t{1} << 24));
}

// Whether a streaming channels-first forward runs in one launch
// (gn_s_fused_cf): where x is larger than L2. On the H100 (bench/gn_time,
// bf16, 32 groups, same process, 2026-11-27) it reached 69-78% of copy at
// 64-256 MiB of x against the two launches' 60-63%, and lost below L2
// ([1, 512, 128, 128], 32 MiB: 47% against 56%), where the two launches'
// second pass already finds much of x in L2 and the one launch's pipeline
// never fills. On the H200 it was 0.2-3.7 points ahead at the same shapes.
bool takes_fused(const GnProblem &pb, const GnBudget &bud) {
  if (pb.channels_last || pb.pass != static_cast<int64_t>(GnPass::Fwd)) return false;
  if (bud.schedule != Tuning::GnSchedule::Planner) return bud.schedule == Tuning::GnSchedule::Fused;
  const int64_t bytes = pb.elements() * static_cast<int64_t>(dtype_size(static_cast<fnorm_dtype_t>(pb.dtype)));
  return bud.l2_bytes > 0 && bytes > bud.l2_bytes;
}

// The streaming schedule's geometry (gn_stream.cuh): tasks of about 64 KiB
// (channels-first: at most kGsTable channels each), at least 4 per SM in
// all where the tensor has them; grids of at most 16 blocks per SM (the
// kernels take their tasks grid-stride).
void plan_stream(const GnProblem &pb, int pack, int64_t sms, GnStreamGeo &g) {
  const bool bwd = pb.pass == static_cast<int64_t>(GnPass::Bwd);
  const int64_t fill = 4 * sms, most = 16 * sms;
  if (pb.channels_last) {
    const int64_t pc = pb.c / pack;
    g.cols = std::min<int64_t>(pc, kGnThreads);
    g.ncc = ceil_div(pc, g.cols);
    g.rps = kGnThreads / g.cols;
    g.tp = g.rps * 8;
    const int64_t chunks = ceil_div(pb.s, g.tp);
    // First-pass blocks: 4 per SM forward, 2 backward (x and dy per row).
    g.bps = std::max<int64_t>(1, std::min<int64_t>(ceil_div((bwd ? 2 : 4) * sms, pb.n * g.ncc), chunks));
    g.grid3 = std::max<int64_t>(1, std::min<int64_t>(pb.n * chunks, ceil_div(most, g.ncc)));
    return;
  }
  const int64_t ppc = pb.s / pack, per_group = pb.cg() * ppc, units = pb.n * pb.groups;
  g.tp = std::max<int64_t>(1, std::min<int64_t>(4096, (kGsTable - 2) * ppc));
  g.tg = ceil_div(per_group, g.tp);
  if (units * g.tg < fill) {
    g.tp = std::min(g.tp, std::max<int64_t>(256, ceil_div(per_group, ceil_div(fill, units))));
    g.tg = ceil_div(per_group, g.tp);
  }
  g.grid1 = g.grid3 = std::min(units * g.tg, most);
  if (bwd) {
    const int64_t chans = pb.n * pb.c;
    g.tpc = std::min<int64_t>(ppc, 1024);
    g.tc = ceil_div(ppc, g.tpc);
    if (chans * g.tc < kGsWarps * fill) {
      g.tpc = std::min(g.tpc, std::max<int64_t>(128, ceil_div(ppc, ceil_div(kGsWarps * fill, chans))));
      g.tc = ceil_div(ppc, g.tpc);
    }
    g.grid1 = std::min(ceil_div(chans * g.tc, kGsWarps), most);
  }
}

// Channels-last: the groups per unit. Its row segments should be whole
// 128-byte lines; among the counts whose channels make whole packs (at
// most one pack per thread across the block) the planner takes the first
// whose segment reaches 128 bytes, else the widest. Narrower units have more
// row slices per block and fewer tiles per unit, so they could keep x on
// chip where a 128-byte unit needs two passes, but on the H100 (2026-11-27,
// bench/gn_time) 32-byte segments cost more than the second pass:
// [1, 256, 512, 512] bf16 NHWC forward 46.0% of copy with 8 groups (two
// passes) against 25.6% with 2 (one); backward 42.1% against 11.9%.
void plan_channels_last(const GnProblem &pb, int pack, int kmax, int64_t resident, GnGeometry &g) {
  const int64_t cg = pb.cg(), es = static_cast<int64_t>(dtype_size(static_cast<fnorm_dtype_t>(pb.dtype)));
  int64_t best = 0, best_once = -1, best_bytes = -1, widest = 0;
  for (int64_t gb = 1; gb <= pb.groups && gb <= kGnThreads; ++gb) {
    if (pb.groups % gb != 0 || (gb * cg) % pack != 0) continue;
    const int64_t tpr = gb * cg / pack;
    if (tpr > kGnThreads) {
      if (widest == 0) widest = gb;
      continue;
    }
    const int64_t rps = kGnThreads / tpr;
    const int64_t k = std::min<int64_t>(kmax, ceil_div(pb.s, rps));
    const int64_t once = ceil_div(pb.s, rps * k) <= resident ? 1 : 0;
    const int64_t bytes = std::min<int64_t>(gb * cg * es, 128);
    if (bytes > best_bytes || (bytes == best_bytes && once > best_once)) {
      best = gb;
      best_once = once;
      best_bytes = bytes;
    }
  }
  g.gb = best ? best : widest ? widest : 1;
  const int64_t w = g.gb * cg;
  g.tpr = std::min<int64_t>(w / pack, kGnThreads);
  g.lines = g.tpr * pack;
  g.nrb = ceil_div(w, g.lines);
  g.rps = kGnThreads / g.tpr;
  g.k = std::min<int64_t>(kmax, ceil_div(pb.s, g.rps));
  g.span = g.rps * g.k;
  g.nsc = ceil_div(pb.s, g.span);
}

// Channels-first: a unit is one group ([cg, s], rows packed). The team of
// tpr threads per channel row and the packs per thread that waste the
// fewest slots (in 5% steps), then the largest tile.
void plan_channels_first(const GnProblem &pb, int pack, int kmax, GnGeometry &g) {
  const int64_t cg = pb.cg(), s = pb.s;
  int64_t best_bucket = -1, best_size = 0;
  for (int64_t tpr = 1; tpr <= kGnThreads; tpr *= 2) {
    for (int64_t k = 1; k <= kmax; ++k) {
      const int64_t span = tpr * k * pack, lines = kGnThreads / tpr;
      const int64_t slots = ceil_div(cg, lines) * lines * ceil_div(s, span) * span;
      const int64_t bucket = static_cast<int64_t>(20.0 * static_cast<double>(cg) * static_cast<double>(s) /
                                                  static_cast<double>(slots));
      if (bucket > best_bucket || (bucket == best_bucket && tpr * k > best_size)) {
        best_bucket = bucket;
        best_size = tpr * k;
        g.tpr = tpr;
        g.k = k;
      }
    }
  }
  g.gb = 1;
  g.lines = kGnThreads / g.tpr;
  g.rps = 1;
  g.span = g.tpr * g.k * pack;
  g.nsc = ceil_div(s, g.span);
  g.nrb = ceil_div(cg, g.lines);
}

// The geometry and the workspace of (problem, pack) for `resident` blocks.
// The planner's products (slots, tiles, workspace regions) stay far from
// int64's range below this many elements; no device holds a tensor this
// large (2^48 16-bit values are 512 TiB).
constexpr int64_t kGnMaxElements = int64_t{1} << 48;

GnPlan plan_of(const GnProblem &pb, int pack, const GnBudget &bud) {
  const int64_t resident = bud.resident;
  FNORM_REQUIRE(pb.elements() < kGnMaxElements, FNORM_STATUS_NOT_SUPPORTED,
                "argument 'x_desc' has %lld elements; GroupNorm plans at most 2^48", static_cast<long long>(pb.elements()));
  GnPlan plan;
  GnGeometry &g = plan.geo;
  const bool bwd = pb.pass == static_cast<int64_t>(GnPass::Bwd);
  if (takes_stream(pb, bud)) {
    plan.stream = true;
    g.pack = pack;
    plan_stream(pb, pack, bud.sms, plan.sgeo);
    GnStreamGeo &s = plan.sgeo;
    if (takes_fused(pb, bud)) {
      // Tasks of at most 2048 packs (32 KiB of bf16), a lag of the units
      // whose x fits a twelfth of L2 (4 MiB where L2 is unknown; at least
      // one unit, at most all), 8 blocks per SM. The tickets in flight are
      // the grid's, so the x between a unit's sums and its outputs is about
      // grid * task bytes plus the lag: on the H100, bf16 (2026-11-27)
      // 4096-pack tasks gave 64-72% of copy, a third of L2 as the lag 63-66%,
      // 1024-pack tasks 56-66%, 4 blocks per SM 3-5 points less. Each
      // output task combines its unit's task sums itself: one block
      // combining them for all (the unit's last sums task) was 2-3 points
      // slower on the H200, and evict_last loads in the sums 2-3 points
      // slower on the H100.
      const int64_t per_group = pb.cg() * (pb.s / pack);
      s.tp = std::min<int64_t>(s.tp, 2048);
      s.tg = ceil_div(per_group, s.tp);
      const int64_t unit_bytes = pb.cg() * pb.s * static_cast<int64_t>(dtype_size(static_cast<fnorm_dtype_t>(pb.dtype)));
      const int64_t budget = bud.l2_bytes > 0 ? bud.l2_bytes / 12 : int64_t{4} << 20;
      s.lag = std::max<int64_t>(1, std::min<int64_t>(pb.n * pb.groups, budget / std::max<int64_t>(unit_bytes, 1)));
      s.grid3 = std::min<int64_t>(2 * pb.n * pb.groups * s.tg, 8 * bud.sms);
    }
    const char *arg = "x_desc";
    size_t off = 0;
    auto region = [&](int64_t count, size_t each) {
      const size_t at = off;
      off = checked_align_up(checked_add(off, checked_mul(static_cast<size_t>(count), each, arg), arg), 16, arg);
      return at;
    };
    const int64_t parts = pb.channels_last ? pb.n * s.bps * (!bwd && s.ncc == 1 ? pb.groups : pb.c)
                          : bwd         ? pb.n * pb.c * s.tc
                                        : pb.n * pb.groups * s.tg;
    plan.ws.part = region(parts, sizeof(float) * 2);
    if (s.lag > 0) plan.ws.sync = region(1, sizeof(unsigned long long) + sizeof(unsigned) * static_cast<size_t>(pb.n * pb.groups));
    if (pb.channels_last || bwd) {
      plan.ws.chan = region(pb.n * pb.c, sizeof(double) * 2);
      plan.ws.gstat = region(pb.n * pb.groups, sizeof(float) * 2);
    }
    plan.ws.total = off;
    return plan;
  }
  const int most = bwd ? kGnBwdK : kGnFwdK;
  const int kmax = bud.tile_k > 0 ? std::min(bud.tile_k, most) : most;
  g.pack = pack;
  if (pb.channels_last)
    plan_channels_last(pb, pack, kmax, resident, g);
  else
    plan_channels_first(pb, pack, kmax, g);
  const int64_t subs = g.nrb * g.nsc;
  // A unit never has more tiles than resident blocks (deadlock freedom).
  g.reps = ceil_div(subs, resident);
  g.tiles = ceil_div(subs, g.reps);
  g.units = pb.n * pb.groups / g.gb;
  const int64_t total = g.units * g.tiles;
  FNORM_REQUIRE(g.units < (int64_t{1} << 30), FNORM_STATUS_NOT_SUPPORTED,
                "argument 'x_desc': %lld (sample, group) units exceed the kernel's 2^30 counters",
                static_cast<long long>(g.units));
  plan.shape.grid = std::min<int64_t>(resident, total);
  plan.shape.block = kGnThreads;
  plan.shape.blocks_per_sm = gn_blocks_per_sm(pb.channels_last != 0);
  // Two tiles in shared memory: the kernel's most packs per thread of x
  // (and dy), whatever the override.
  plan.shape.smem = 2 * static_cast<size_t>(most) * kGnThreads * pack *
                    dtype_size(static_cast<fnorm_dtype_t>(pb.dtype)) * (bwd ? 2 : 1);

  GnWorkspace &w = plan.ws;
  const char *arg = "x_desc";
  size_t off = 0;
  auto region = [&](size_t bytes) {
    const size_t at = off;
    off = checked_align_up(checked_add(off, bytes, arg), 16, arg);
    return at;
  };
  w.counter_bytes = checked_mul(static_cast<size_t>(1 + 2 * g.units), sizeof(unsigned), arg);
  w.counters = region(w.counter_bytes);
  w.group_part = region(checked_mul(static_cast<size_t>(total * g.gb), 8, arg));
  w.unit_res = region(checked_mul(static_cast<size_t>(g.units * g.gb), 8, arg));
  if (bwd && (pb.w_present || pb.ss_present)) {  // dgamma, dbeta, dscale or dshift may be asked for
    w.line_part = region(checked_mul(checked_mul(static_cast<size_t>(g.units * subs), static_cast<size_t>(g.lines), arg), 8, arg));
    w.nc_sums = region(checked_mul(static_cast<size_t>(pb.n * pb.c), 8, arg));
  }
  w.total = off;
  return plan;
}

}  // namespace

int gn_pack(const GnProblem &pb, std::initializer_list<const void *> data) {
  int packs[3];
  const int np = packs_of(pb.dtype, packs);
  const size_t es = dtype_size(static_cast<fnorm_dtype_t>(pb.dtype));
  for (int i = 0; i < np; ++i)
    if (layout_allows(pb, packs[i]) && all_aligned(data, packs[i] * es)) return packs[i];
  return 1;
}

size_t gn_workspace_bytes(fnorm_handle *h, const GnProblem &pb) {
  if (pb.elements() == 0) return 0;
  int packs[3];
  const int np = packs_of(pb.dtype, packs);
  size_t most = 0;
  for (int i = 0; i < np; ++i)
    if (layout_allows(pb, packs[i])) most = std::max(most, plan_of(pb, packs[i], budget_of(h, pb)).ws.total);
  return most;
}

GnPlan gn_plan(fnorm_handle *h, const GnProblem &pb, int pack) {
  const bool bwd = pb.pass == static_cast<int64_t>(GnPass::Bwd);
  const GnInstance *inst = gn_instance(static_cast<fnorm_dtype_t>(pb.dtype), pack, pb.channels_last != 0, bwd);
  FNORM_REQUIRE(inst != nullptr, FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "dtype %s was left out of this build (meson option 'dtypes')",
                dtype_name(static_cast<fnorm_dtype_t>(pb.dtype)));
  GnPlan plan = plan_of(pb, pack, budget_of(h, pb));
  plan.instance = inst;
  plan.sizes.workspace = plan.ws.total;
  if (plan.stream) return plan;
  int per_sm = 0;
  check_cuda(cached_occupancy(&h->occupancy, inst->func, kGnThreads, plan.shape.smem, &per_sm), "GroupNorm occupancy");
  FNORM_REQUIRE(per_sm >= plan.shape.blocks_per_sm, FNORM_STATUS_INTERNAL_ERROR,
                "the GroupNorm kernel fits %d blocks per SM; its persistent grid needs %d", per_sm,
                plan.shape.blocks_per_sm);
  return plan;
}

GnPtrs GnFwd::pointer_class(fnorm_handle *, const GnProblem &pb, const GnFwdArgs &a) {
  return GnPtrs{gn_pack(pb, {a.x, a.y})};
}
GnPlan GnFwd::plan(fnorm_handle *h, const GnProblem &pb, const GnPtrs &ptrs) {
  return gn_plan(h, pb, static_cast<int>(ptrs.pack));
}
// The workspace is known without the device: a short one is refused before
// the plan asks the device for the kernel's occupancy.
Sizes GnFwd::sizes(fnorm_handle *h, const GnProblem &pb, const GnPtrs &ptrs) {
  return Sizes{plan_of(pb, static_cast<int>(ptrs.pack), budget_of(h, pb)).ws.total, 0};
}

GnPtrs GnBwd::pointer_class(fnorm_handle *, const GnProblem &pb, const GnBwdArgs &a) {
  return GnPtrs{gn_pack(pb, {a.x, a.dy, a.dx})};
}
GnPlan GnBwd::plan(fnorm_handle *h, const GnProblem &pb, const GnPtrs &ptrs) {
  return gn_plan(h, pb, static_cast<int>(ptrs.pack));
}
Sizes GnBwd::sizes(fnorm_handle *h, const GnProblem &pb, const GnPtrs &ptrs) {
  return Sizes{plan_of(pb, static_cast<int>(ptrs.pack), budget_of(h, pb)).ws.total, 0};
}

GnParams gn_params(const GnProblem &pb, const GnPlan &plan, void *workspace) {
  GnParams p;
  unsigned char *ws = static_cast<unsigned char *>(workspace);
  p.n = pb.n;
  p.c = pb.c;
  p.s = pb.s;
  p.groups = pb.groups;
  p.cg = pb.cg();
  p.ss_sn = pb.ss_stride_n;
  p.ss_sc = pb.ss_stride_c;
  p.eps = static_cast<float>(pb.epsilon());
  p.w_f32 = pb.w_present && pb.w_dtype == FNORM_DTYPE_FLOAT32;
  p.ss_f32 = pb.ss_present && pb.ss_dtype == FNORM_DTYPE_FLOAT32;
  p.silu = pb.activation == FNORM_GN_ACTIVATION_SILU;
  p.geo = plan.geo;
  p.sgeo = plan.sgeo;
  if (plan.stream) {
    p.part = reinterpret_cast<float2 *>(ws + plan.ws.part);
    if (plan.sgeo.lag > 0) {
      p.ticket = reinterpret_cast<unsigned long long *>(ws + plan.ws.sync);
      p.counters = reinterpret_cast<unsigned *>(p.ticket + 1);
    }
    if (plan.ws.chan || plan.ws.gstat) {
      p.chan = reinterpret_cast<double2 *>(ws + plan.ws.chan);
      p.gstat = reinterpret_cast<float2 *>(ws + plan.ws.gstat);
    }
    return p;
  }
  p.counters = reinterpret_cast<unsigned *>(ws + plan.ws.counters);
  p.group_part = reinterpret_cast<float2 *>(ws + plan.ws.group_part);
  p.unit_res = reinterpret_cast<float2 *>(ws + plan.ws.unit_res);
  if (plan.ws.line_part) p.line_part = reinterpret_cast<float2 *>(ws + plan.ws.line_part);
  if (plan.ws.nc_sums) p.nc_sums = reinterpret_cast<float2 *>(ws + plan.ws.nc_sums);
  return p;
}

}  // namespace fnorm
