/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm (+ SiLU, + per-sample scale / shift): the ops GnFwd and GnBwd
// on the op contract of core/op.hpp, run by its driver (gn_api.cpp):
//   describe  gn_describe.cpp: descriptors -> GnProblem (pointer-free; the
//             plan cache's key with GnPtrs, the pack the pointers allow),
//             the call's buffers and pointer rules
//   plan      gn_plan.cpp: GnProblem + pack + device -> GnPlan (tile
//             geometry, grid, workspace layout); the size queries answer
//             from it
//   launch    gn_launch.cpp + gn_kernels.cuh: the counters' reset and the
//             planned kernel with the call's pointers.
//
// One kernel family (gn_kernels.cuh) serves both passes and both layouts:
// a persistent grid of co-resident blocks takes tiles round-robin, in
// order. A "unit" is (sample, gb consecutive groups); its T tiles each
// write partial sums to the workspace, the last to arrive combines them in
// tile order (fixed: deterministic) and releases the others, and every
// block then normalizes the values it still holds in registers. x (and dy)
// is read once from DRAM when a tile is one register load (reps == 1);
// where a unit would need more tiles than blocks are resident, a tile
// covers reps loads and re-reads them after the combine (two passes over
// x). A unit never has more tiles than resident blocks, so its tiles span
// at most two rounds and every unit completes (gn_kernels.cuh).
//
// The streaming schedule (gn_stream.cuh) runs the passes as separate
// kernels: sums over x (and dy) in one pass, the (channel and) group terms,
// then the outputs in a second pass over x (and dy), which walks the first
// pass's order backwards so as to start on what is still in L2. It reads x
// twice, but no block waits on another; on the H100 it is faster than the
// persistent kernel wherever the planner takes it (gn_plan.cpp). Its
// channels-first forward runs in one launch (gn_s_fused_cf) where x is
// larger than L2: a unit's outputs follow its sums closely enough that
// most of x's second read comes from L2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/error.hpp"
#include "core/handle.hpp"
#include "core/launch.hpp"
#include "core/op.hpp"
#include "core/tensor.hpp"
#include "fusednorm.h"

struct fnorm_groupnorm_desc {
  int64_t groups = 32;
  double epsilon = 1e-5;
  fnorm_gn_activation_t activation = FNORM_GN_ACTIVATION_NONE;
};

namespace fnorm {

// Threads per block of every GroupNorm kernel, and the blocks per SM their
// launch bounds promise (the grid is that many blocks per SM: each holds
// two tiles of 32 KiB of x, or 16 KiB each of x and dy, in shared memory:
// the one it normalizes and the next one it sums).
constexpr int kGnThreads = 256;
// Channels-first fits a third block per SM (80 registers, 74 KiB of shared
// memory; H100 [1, 512, 256, 256] bf16 forward 49.2% -> 55.9% of copy,
// backward 41.0% -> 50.6%); channels-last's per-slot line sums need
// 16 KiB more.
constexpr int gn_blocks_per_sm(bool channels_last) { return channels_last ? 2 : 3; }
// Packs of 16 bytes (or less) per thread per register load.
constexpr int kGnFwdK = 8;
constexpr int kGnBwdK = 4;

enum class GnPass : int64_t { Fwd = 0, Bwd = 1 };

// describe: everything a call's descriptors say (no pointers). All fields
// are 64-bit: the plan cache compares keys as bytes.
struct GnProblem {
  int64_t pass = 0;
  int64_t dtype = 0;          // x, y, dy, dx
  int64_t n = 0, c = 0, s = 1;  // s: product of the spatial sizes
  int64_t groups = 1;
  int64_t channels_last = 0;  // NHWC / NDHWC (spatial 1 counts as channels-last: [N, C])
  int64_t activation = 0;
  uint64_t eps_bits = 0;      // the descriptor's double epsilon
  int64_t w_present = 0, w_dtype = 0;    // w_desc given
  int64_t ss_present = 0, ss_dtype = 0;  // ss_desc given
  int64_t ss_stride_n = 0, ss_stride_c = 0;
  int64_t elements() const { return n * c * s; }
  int64_t cg() const { return c / groups; }
  double epsilon() const;
};

// plan: the tile geometry (gn_kernels.cuh reads it as GnParams).
struct GnGeometry {
  int64_t pack = 1;   // elements per access
  int64_t k = 1;      // packs per thread per register load
  int64_t reps = 1;   // register loads per tile (1: x held, read once)
  int64_t tpr = 1;    // CF: threads per channel row; CL: threads per row of a channel block
  int64_t lines = 1;  // channels of one channel block (CF: rows per tile; CL: tpr * pack)
  int64_t rps = 1;    // CL: row slices of a block (kGnThreads / tpr)
  int64_t span = 1;   // spatial values of one sub-tile per line
  int64_t nsc = 1;    // sub-tiles per channel block along the spatial range
  int64_t nrb = 1;    // channel blocks per unit
  int64_t gb = 1;     // groups per unit
  int64_t tiles = 1;  // per unit: ceil(nrb * nsc / reps)
  int64_t units = 0;  // n * groups / gb
};

// The streaming schedule: warps per block; the channels one channels-first
// task may touch (its coefficient table in shared memory).
constexpr int kGsWarps = kGnThreads / 32;
constexpr int kGsTable = 1024;
// The streaming schedule's geometry (gn_stream.cuh).
struct GnStreamGeo {
  int64_t tp = 1;     // CF: packs per task of the forward sums and the last pass; CL: rows per chunk
  int64_t tg = 1;     // CF: those tasks per group
  int64_t tpc = 1;    // CF backward sums: packs per (warp) task
  int64_t tc = 1;     // CF backward sums: tasks per channel
  int64_t grid1 = 1;  // CF: blocks of the first pass
  int64_t grid3 = 1;  // blocks of the last pass (CL: per column chunk)
  int64_t cols = 1, rps = 1, ncc = 1;  // CL: threads per row, row slices, column chunks
  int64_t bps = 1;    // CL: first-pass blocks per sample (per column chunk)
  int64_t lag = 0;    // CF forward in one launch (gn_s_fused_cf): units between a unit's sums and its outputs; 0: two launches
};

// The workspace: counters (zeroed by the launch), then per-tile group
// partials, unit results and (backward) per-sub-tile line partials and the
// per-(n, c) sums of the weight gradients. Byte offsets; 16-byte aligned.
struct GnWorkspace {
  size_t counters = 0, counter_bytes = 0;
  size_t group_part = 0, unit_res = 0, line_part = 0, nc_sums = 0;
  size_t part = 0, chan = 0, gstat = 0, sync = 0;  // the streaming schedule's (sync: the fused forward's ticket, counters)
  size_t total = 0;
};

struct GnInstance;
struct GnPlan {
  const GnInstance *instance = nullptr;  // the kernel
  bool stream = false;                   // the streaming schedule (sgeo), else the persistent kernel (geo)
  GnGeometry geo;
  GnStreamGeo sgeo;
  GnWorkspace ws;
  LaunchShape shape;
  Sizes sizes;  // ws.total
};

// The pointer class: the pack the data pointers' alignment allows.
struct GnPtrs {
  int64_t pack = 1;
};

// What the kernels read (host-built, passed by value).
struct GnParams {
  const void *x = nullptr, *dy = nullptr;
  void *y = nullptr;  // fwd: y; bwd: dx
  const void *gamma = nullptr, *beta = nullptr, *scale = nullptr, *shift = nullptr;
  float *mean = nullptr, *rstd = nullptr;              // fwd: outputs (optional)
  const float *mean_in = nullptr, *rstd_in = nullptr;  // bwd: inputs
  void *dgamma = nullptr, *dbeta = nullptr, *dscale = nullptr, *dshift = nullptr;
  unsigned *counters = nullptr;  // [0] units done, then arrive[units], ready[units]
  float2 *group_part = nullptr;  // [units][tiles][gb]
  float2 *unit_res = nullptr;    // [units][gb]
  float2 *line_part = nullptr;   // bwd: [units][nrb * nsc][lines]
  float2 *nc_sums = nullptr;     // bwd: [n][c] ((1 + scale) A, (1 + scale) B)
  float2 *part = nullptr;        // streaming: first-pass sums
  unsigned long long *ticket = nullptr;  // fused CF forward: the ticket, then counters = done[units]
  double2 *chan = nullptr;       // streaming: [n][c] channel sums
  float2 *gstat = nullptr;       // streaming: [n][groups] mean, rstd (fwd) or the means of g, g x_hat (bwd)
  int64_t n = 0, c = 0, s = 0, groups = 0, cg = 0;
  int64_t ss_sn = 0, ss_sc = 0;
  float eps = 0.f;
  int w_f32 = 0, ss_f32 = 0, silu = 0;
  GnGeometry geo;
  GnStreamGeo sgeo;
};

// One compiled kernel (groupnorm_<dtype>.cu, generated from gen/instances.py).
struct GnInstance {
  fnorm_dtype_t dtype;
  int pack;
  bool channels_last;
  bool bwd;
  const void *func;
  cudaError_t (*launch)(const GnParams &, const LaunchShape &, cudaStream_t);
  cudaError_t (*launch_stream)(const GnParams &, cudaStream_t);  // the streaming schedule's kernels
};
// The instance of (dtype, pack, layout, pass), or null when its dtype was
// left out of this build.
const GnInstance *gn_instance(fnorm_dtype_t dtype, int pack, bool channels_last, bool bwd);
// Zeros of an [n, c] tensor with strides (sn, sc) of `dtype` (the empty
// backward's dscale / dshift; dgamma / dbeta with sn = 0, n = 1).
cudaError_t gn_zero_strided(void *p, fnorm_dtype_t dtype, int64_t n, int64_t c, int64_t sn, int64_t sc,
                            cudaStream_t stream);

// ---- describe and check (gn_validate.cpp) ----
GnProblem describe_gn(GnPass pass, const fnorm_groupnorm_desc *gn, const fnorm_tensor_desc *x_desc,
                      const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *ss_desc);

struct GnFwdArgs {
  const void *x, *gamma, *beta, *scale, *shift;
  void *y;
  float *mean, *rstd;
  void *workspace;
  size_t workspace_bytes;
};
struct GnBwdArgs {
  const void *x, *dy;
  const float *mean, *rstd;
  const void *gamma, *beta, *scale, *shift;
  void *dx, *dgamma, *dbeta, *dscale, *dshift;
  void *workspace;
  size_t workspace_bytes;
};
// ---- plan (gn_plan.cpp) ----
// The widest pack the layout and the pointers allow.
int gn_pack(const GnProblem &pb, std::initializer_list<const void *> data);
// The plan of (problem, pack) on the handle's device (pure: the driver
// caches it).
GnPlan gn_plan(fnorm_handle *h, const GnProblem &pb, int pack);
// The workspace the size query answers: the largest over the packs a call
// may end up with (so that any pointers do with it).
size_t gn_workspace_bytes(fnorm_handle *h, const GnProblem &pb);
// The plan's kernel parameters for these buffers (pointers set by the caller).
GnParams gn_params(const GnProblem &pb, const GnPlan &plan, void *workspace);

// ---- the ops (gn_describe.cpp, gn_plan.cpp, gn_launch.cpp) ----
struct GnFwd : OpDefaults {
  struct Descs {
    const fnorm_groupnorm_desc *gn;
    const fnorm_tensor_desc *x, *w, *ss, *y;  // y null in the size query
  };
  using Desc = GnProblem;
  using Args = GnFwdArgs;
  using Ptrs = GnPtrs;
  using Plan = GnPlan;
  static constexpr const char *kWorkspaceQuery = "fnorm_groupnorm_fwd_workspace_size";
  static constexpr size_t kWorkspaceAlign = 16;
  FNORM_OP_STEPS
  static Empty empty(const Desc &pb, const Args &) { return pb.elements() == 0 ? Empty::Done : Empty::No; }
  static void launch_empty(const Desc &, const Args &, cudaStream_t) {}
  static Sizes sizes(fnorm_handle *h, const Desc &pb, const Ptrs &ptrs);
  static size_t workspace_size(fnorm_handle *h, const Desc &pb) { return gn_workspace_bytes(h, pb); }
};

struct GnBwd : OpDefaults {
  struct Descs {
    const fnorm_groupnorm_desc *gn;
    const fnorm_tensor_desc *x, *dy, *w, *ss, *dx;  // dy, dx null in the size query
  };
  using Desc = GnProblem;
  using Args = GnBwdArgs;
  using Ptrs = GnPtrs;
  using Plan = GnPlan;
  static constexpr const char *kWorkspaceQuery = "fnorm_groupnorm_bwd_workspace_size";
  static constexpr size_t kWorkspaceAlign = 16;
  FNORM_OP_STEPS
  // The backward over no values: the gradients that are sums are zeros.
  static Empty empty(const Desc &pb, const Args &a);
  static void launch_empty(const Desc &pb, const Args &a, cudaStream_t stream);
  static Sizes sizes(fnorm_handle *h, const Desc &pb, const Ptrs &ptrs);
  static size_t workspace_size(fnorm_handle *h, const Desc &pb) { return gn_workspace_bytes(h, pb); }
};

}  // namespace fnorm
