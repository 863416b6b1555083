/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm backward.
//
//   x_hat = (s - mean) * rstd   (RMSNorm: s * rrms)      g = dy * scale
//   dx    = rstd * (g - c1 - x_hat * c2) [+ dsum]         c1 = mean(g) (RMSNorm: 0)
//                                                         c2 = mean(g * x_hat)
//   dgamma = sum_rows dy * x_hat,  dbeta = sum_rows dy
//   (FNORM_NORM_FLAG_ROUND_XHAT: dgamma sums dy * round_T(x_hat), the value
//   the forward scaled; dx keeps the fp32 x_hat.)
//
// Tiers:
//   BlockRows  rows of 16-byte packs that one group holds at one or two
//            packs per thread (8 values in blocks of up to 1024 threads, 16
//            of a 16-bit type in up to 512; the planner chooses): a
//            persistent grid (one block of up to 8 such groups per SM,
//            sized to the GPU, not the rows);
//            each group works on its own row, each thread owns fixed columns
//            (gamma and the dgamma/dbeta accumulators stay in registers), x
//            and dy come through a thread-private cp.async ring 2-4 rows
//            deep. One partial row per block: the partial sums' traffic
//            grows with the SM count, not the rows.
//   Warp / BlockRegisters  a group of lanes / a block per row; each thread
//            owns fixed columns for all the rows it visits, so it accumulates
//            dgamma/dbeta in registers. Its x and dy come through a
//            thread-private ring in shared memory, filled by cp.async one row
//            ahead: the next row's loads are in flight while this row's
//            reduction (c1, c2) and dx run. One partial row per block goes to
//            the workspace. Rows longer than a block holds take a thread
//            block cluster of blocks per row (one partial row per cluster;
//            the runtime plans clusters of 2).
//   ColumnTiled  any row length, for few rows, rows longer than a cluster
//            of 2 holds, or GPUs without clusters: a
//            first kernel reduces (c1, c2) per row, a second walks column
//            tiles over a slice of rows, writes dx and accumulates its
//            columns' partial sums.
// The partial rows are then summed per column in a fixed order
// (core/column_sums.cu), so dgamma/dbeta are the same bits run to run.
#pragma once

#include <algorithm>

#include <cooperative_groups.h>

#include "core/device.cuh"
#include "norm/norm_params.hpp"

namespace fnorm {

// (rstd, -rstd * c2, -rstd * c1): the per-row constants of store_dx.
// LayerNorm over one column: y does not depend on x (x - mean is 0), so dx
// is exactly 0 (plus dsum). The general expression left the rounding error
// of rstd * g there (3e-3 at fp32 [4097, 1], eps 1e-5: rstd = 316).
__device__ __forceinline__ float3 dx_coefs(const NormBwdParams &p, float rstd, float c1, float c2) {
  if (!p.rms && p.cols == 1) return make_float3(0.f, 0.f, 0.f);
  return make_float3(rstd, -rstd * c2, -rstd * c1);
}

// dgamma's x_hat: what the forward multiplied by gamma, rounded to T with
// the ROUND_XHAT flag (p.round_xhat is kernel-uniform).
template <typename T>
__device__ __forceinline__ float dgamma_xhat(const NormBwdParams &p, float xh) {
  return p.round_xhat ? round_to<T>(xh) : xh;
}

template <typename T, int PACK>
struct BwdRowIo {
  const NormBwdParams &p;
  // x_hat and g of a pack from x and dy as stored (T), the scale from gamma.
  __device__ __forceinline__ void derive(const Pack<T, PACK> &xr, const Pack<T, PACK> &dyr, int64_t col,
                                         float mean, float rstd, float (&xh)[PACK], float (&g)[PACK],
                                         float (&dyv)[PACK]) const {
    float sc[PACK];
    if (p.gamma != nullptr) {
      load_param<T, PACK>(p.gamma, p.param_f32, col, sc);
#pragma unroll
      for (int i = 0; i < PACK; ++i) sc[i] = p.zero_centered ? 1.f + sc[i] : sc[i];
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) sc[i] = 1.f;
    }
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      dyv[i] = Convert<T>::to_float(dyr.v[i]);
      xh[i] = (Convert<T>::to_float(xr.v[i]) - mean) * rstd;
      g[i] = dyv[i] * sc[i];
    }
  }
  __device__ __forceinline__ void load_raw(int64_t row, int64_t col, Pack<T, PACK> &xr, Pack<T, PACK> &dyr) const {
    xr = ld_pack<T, PACK>(static_cast<const T *>(p.x) + row * p.x_row_stride + col);
    dyr = ld_pack<T, PACK>(static_cast<const T *>(p.dy) + row * p.dy_row_stride + col);
  }
  __device__ __forceinline__ void load(int64_t row, int64_t col, float mean, float rstd,
                                       float (&xh)[PACK], float (&g)[PACK], float (&dyv)[PACK]) const {
    Pack<T, PACK> xr, dyr;
    load_raw(row, col, xr, dyr);
    derive(xr, dyr, col, mean, rstd, xh, g, dyv);
  }
  // dx = rstd * (g - c1 - x_hat * c2) as two FMAs: rstd * g + (x_hat * a + b)
  // with a = -rstd * c2, b = -rstd * c1 (dx_coefs).
  __device__ __forceinline__ void store_dx(int64_t row, int64_t col, const float3 &k,
                                           const float (&xh)[PACK], const float (&g)[PACK]) const {
    float dx[PACK];
#pragma unroll
    for (int i = 0; i < PACK; ++i) dx[i] = fmaf(k.x, g[i], fmaf(xh[i], k.y, k.z));
    if (p.dsum != nullptr) {
      float ds[PACK];
      load_pack<T, PACK>(static_cast<const T *>(p.dsum) + row * p.dy_row_stride + col, ds);
#pragma unroll
      for (int i = 0; i < PACK; ++i) dx[i] += ds[i];
    }
    store_pack<T, PACK>(static_cast<T *>(p.dx) + row * p.dx_row_stride + col, dx);
  }
};

constexpr int kBwdStages = kNormBwdStages;

// A thread-private ring of rows in dynamic shared memory: for each of its
// `stages` stages, this thread's NPACK packs of x and of dy (as stored) and
// the row's (mean, rstd). Layout [stage][x, dy][k][thread] of packs, then
// [stage][thread] of float2: consecutive threads touch consecutive slots (no
// bank conflicts). Each thread reads only what it copied, so the ring needs
// no barriers.
template <typename T, int PACK, int NPACK>
struct BwdStaging {
  using P = Pack<T, PACK>;
  static_assert(sizeof(P) == PACK * sizeof(T), "packs are dense");
  static constexpr size_t bytes(int threads) {  // host side (launch); constant-folded in static_asserts
    return norm_bwd_staging_bytes(threads, NPACK, PACK, sizeof(T));
  }
  P *packs;
  float2 *stats;
  int threads;
  __device__ BwdStaging(unsigned char *smem, int threads_, int stages = kBwdStages)
      : packs(reinterpret_cast<P *>(smem)),
        stats(reinterpret_cast<float2 *>(smem + static_cast<size_t>(stages) * threads_ * 2 * NPACK * sizeof(P))),
        threads(threads_) {}
  __device__ __forceinline__ P &slot(int s, int j, int k) const {
    return packs[((s * 2 + j) * NPACK + k) * threads + static_cast<int>(threadIdx.x)];
  }
  __device__ __forceinline__ float2 &stat(int s) const { return stats[s * threads + static_cast<int>(threadIdx.x)]; }

  // Starts copying this thread's share of `row` (pack k at column
  // (k * width + lane) * PACK) into stage s, then commits one group (empty
  // when the row is not active: one group per step keeps the counts uniform).
  __device__ __forceinline__ void issue(const NormBwdParams &p, int64_t row, bool active, int lane,
                                        int width, int s) const {
    if (active) {
      const int64_t packs_per_row = p.cols / PACK;
      const T *x = static_cast<const T *>(p.x) + row * p.x_row_stride;
      const T *dy = static_cast<const T *>(p.dy) + row * p.dy_row_stride;
#pragma unroll
      for (int k = 0; k < NPACK; ++k) {
        const int64_t pk = static_cast<int64_t>(k) * width + lane;
        if (pk < packs_per_row) {
          cp_async<sizeof(P)>(&slot(s, 0, k), x + pk * PACK);
          cp_async<sizeof(P)>(&slot(s, 1, k), dy + pk * PACK);
        }
      }
      if (!p.rms) cp_async<4>(&stat(s).x, p.mean + row);
      cp_async<4>(&stat(s).y, p.rstd + row);
    }
    cp_async_commit();
  }
};

// One row from stage s of the ring, held by `width` threads: (c1, c2) over
// the row, this thread's columns of dgamma/dbeta accumulated in registers,
// then dx. Up to 16 values per thread, x_hat and g stay in registers between
// the passes (shared memory is read once); above that they are derived again
// from the ring (registers are the occupancy limit there).
// RMS (p.rms, compiled apart): no centring term c1 and no dbeta, so neither
// their accumulators (registers: occupancy) nor their instructions.
template <typename T, int PACK, int NPACK, bool RMS, class AllReduce2>
__device__ __forceinline__ void norm_bwd_row_staged(const NormBwdParams &p,
                                                    const BwdStaging<T, PACK, NPACK> &st, int s,
                                                    int64_t row, bool active, int lane, int width,
                                                    AllReduce2 allreduce2, float (&dg)[NPACK][PACK],
                                                    float (&db)[RMS ? 1 : NPACK][PACK]) {
  // Measured on the H200 (fp16, 49152 rows): keeping them took 4096 and 8192
  // columns from 67% to 76% of copy bandwidth; at 32 values the registers
  // cost more than the second read (1 block of 512 threads per SM either way).
  constexpr bool kKeepDerived = NPACK * PACK <= 16;
  const BwdRowIo<T, PACK> io{p};
  const int64_t packs_per_row = p.cols / PACK;
  float mean = 0.f, rstd = 0.f;
  if (active) {
    const float2 m = st.stat(s);
    mean = RMS ? 0.f : m.x;
    rstd = m.y;
  }
  float xh_keep[kKeepDerived ? NPACK : 1][PACK], g_keep[kKeepDerived ? NPACK : 1][PACK];
  float2 acc = make_float2(0.f, 0.f);
#pragma unroll
  for (int k = 0; k < NPACK; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * width + lane;
    if (active && pk < packs_per_row) {
      float xh[PACK], g[PACK], dyv[PACK];
      io.derive(ld_pack<T, PACK>(st.slot(s, 0, k).v), ld_pack<T, PACK>(st.slot(s, 1, k).v), pk * PACK, mean,
                  rstd, xh, g, dyv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        if constexpr (!RMS) acc.x += g[i];
        acc.y += g[i] * xh[i];
        dg[k][i] += dyv[i] * dgamma_xhat<T>(p, xh[i]);
        if constexpr (!RMS) db[k][i] += dyv[i];
        if constexpr (kKeepDerived) {
          xh_keep[k][i] = xh[i];
          g_keep[k][i] = g[i];
        }
      }
    }
  }
  acc = allreduce2(acc);
  const float inv_cols = 1.f / static_cast<float>(p.cols);
  const float3 kdx = dx_coefs(p, rstd, RMS ? 0.f : acc.x * inv_cols, acc.y * inv_cols);
  if (!active) return;
#pragma unroll
  for (int k = 0; k < NPACK; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * width + lane;
    if (pk < packs_per_row) {
      if constexpr (kKeepDerived) {
        io.store_dx(row, pk * PACK, kdx, xh_keep[k], g_keep[k]);
      } else {
        float xh[PACK], g[PACK], dyv[PACK];
        io.derive(ld_pack<T, PACK>(st.slot(s, 0, k).v), ld_pack<T, PACK>(st.slot(s, 1, k).v), pk * PACK, mean,
                  rstd, xh, g, dyv);
        io.store_dx(row, pk * PACK, kdx, xh, g);
      }
    }
  }
}

// The rows base + group, base + stride + group, ... (base block-uniform, so
// every thread reaches every reduction; rows past the end compute on nothing
// and store nothing), kBwdStages - 1 rows copied ahead of the one worked on.
template <typename T, int PACK, int NPACK, bool RMS, class AllReduce2>
__device__ __forceinline__ void norm_bwd_rows_staged(const NormBwdParams &p,
                                                     const BwdStaging<T, PACK, NPACK> &st, int64_t base,
                                                     int64_t stride, int group, int lane, int width,
                                                     AllReduce2 allreduce2, float (&dg)[NPACK][PACK],
                                                     float (&db)[RMS ? 1 : NPACK][PACK]) {
#pragma unroll
  for (int s = 0; s + 1 < kBwdStages; ++s) {
    const int64_t row = base + s * stride + group;
    st.issue(p, row, row < p.rows, lane, width, s);
  }
  int s = 0;
  for (; base < p.rows; base += stride) {
    const int64_t ahead = base + (kBwdStages - 1) * stride + group;
    st.issue(p, ahead, ahead < p.rows, lane, width, s == 0 ? kBwdStages - 1 : s - 1);
    cp_async_wait<kBwdStages - 1>();  // this row's group has landed
    const int64_t row = base + group;
    norm_bwd_row_staged<T, PACK, NPACK, RMS>(p, st, s, row, row < p.rows, lane, width, allreduce2, dg, db);
    s = s + 1 == kBwdStages ? 0 : s + 1;
  }
  cp_async_wait<0>();
}

template <bool RMS, int NPACK, int PACK>
__device__ __forceinline__ void zero_accumulators(float (&dg)[NPACK][PACK], float (&db)[RMS ? 1 : NPACK][PACK]) {
#pragma unroll
  for (int k = 0; k < NPACK; ++k)
#pragma unroll
    for (int i = 0; i < PACK; ++i) dg[k][i] = 0.f;
#pragma unroll
  for (int k = 0; k < (RMS ? 1 : NPACK); ++k)
#pragma unroll
    for (int i = 0; i < PACK; ++i) db[k][i] = 0.f;
}

constexpr int kBwdWarpBlock = 128;

// Assumptions: blockDim.x == kBwdWarpBlock; dynamic shared memory holds
// BwdStaging<T, PACK, NPACK>::bytes(kBwdWarpBlock).
// RMS == p.rms.
template <typename T, int PACK, int NPACK, bool RMS>
__global__ void __launch_bounds__(kBwdWarpBlock) norm_bwd_warp_kernel(NormBwdParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const BwdStaging<T, PACK, NPACK> st(smem_raw, kBwdWarpBlock);
  const int width = 1 << p.width_log2;
  const int lane = threadIdx.x & (width - 1);
  const int groups_per_block = kBwdWarpBlock >> p.width_log2;
  const int group = threadIdx.x >> p.width_log2;
  float dg[NPACK][PACK], db[RMS ? 1 : NPACK][PACK];
  zero_accumulators<RMS>(dg, db);
  norm_bwd_rows_staged<T, PACK, NPACK, RMS>(
      p, st, static_cast<int64_t>(blockIdx.x) * groups_per_block,
      static_cast<int64_t>(gridDim.x) * groups_per_block, group, lane, width,
      [width](float2 v) { return group_allreduce<Sum2Op>(v, width); }, dg, db);
  if (p.dgamma_partial == nullptr && p.dbeta_partial == nullptr) return;
  // The block's groups' partial sums, combined in group order, in the
  // staging ring's memory (free now: every copy landed, every thread is past
  // its last read after the barrier; launch_norm_bwd asserts that it fits).
  float *combine = reinterpret_cast<float *>(smem_raw);
  __syncthreads();
  const int64_t cols_covered = static_cast<int64_t>(width) * NPACK * PACK;
  for (int which = 0; which < (RMS ? 1 : 2); ++which) {
    float *out = which == 0 ? p.dgamma_partial : p.dbeta_partial;
    if (out == nullptr) continue;  // uniform
#pragma unroll
    for (int k = 0; k < NPACK; ++k)
#pragma unroll
      for (int i = 0; i < PACK; ++i)
        combine[group * cols_covered + (static_cast<int64_t>(k) * width + lane) * PACK + i] =
            which == 0 ? dg[k][i] : db[RMS ? 0 : k][i];
    __syncthreads();
    for (int64_t c = threadIdx.x; c < p.cols; c += kBwdWarpBlock) {
      float s = 0.f;
      for (int gi = 0; gi < groups_per_block; ++gi) s += combine[gi * cols_covered + c];
      out[static_cast<int64_t>(blockIdx.x) * p.cols + c] = s;
    }
    __syncthreads();
  }
}

// All-reduce of a float2 over a cluster of p.cluster blocks that share a row
// (thread block clusters, sm_90): each block's sum goes to a slot in its
// shared memory, one cluster barrier, then every thread adds the slots of
// all blocks in rank order (the same bits in every block). Two slots
// alternate by row, so a slot is rewritten only after the next row's barrier,
// which every block passes after reading it.
struct ClusterSum2 {
  float2 *scratch;  // 32 entries: block_allreduce's
  float2 *slots;    // 2 entries
  int cluster;
  __device__ __forceinline__ float2 operator()(float2 v, int parity) const {
    v = block_allreduce<Sum2Op>(v, scratch);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster > 1) {
      namespace cg = cooperative_groups;
      cg::cluster_group c = cg::this_cluster();
      if (threadIdx.x == 0) slots[parity] = v;
      c.sync();
      float2 t = make_float2(0.f, 0.f);
      for (int r = 0; r < cluster; ++r) {
        const float2 *peer = c.map_shared_rank(slots + parity, r);
        t.x += peer->x;
        t.y += peer->y;
      }
      v = t;
    }
#endif
    return v;
  }
};

// One row per block, or per cluster of p.cluster blocks (launched as a thread
// block cluster): block r of a cluster holds the lanes r * blockDim.x + tid
// of a row p.cluster * blockDim.x lanes wide, so its columns interleave with
// its peers' at pack granularity. Partial row of a cluster = its index.
// Assumptions: blockDim.x == p.block_threads, a multiple of 32, <= 512;
// p.cols <= p.cluster * blockDim.x * NPACK * PACK; gridDim.x is a multiple
// of p.cluster; dynamic shared memory holds BwdStaging<T, PACK, NPACK>::bytes(blockDim.x).
// CLUSTER = false: the plain one-block-per-row kernel (p.cluster == 1),
// compiled apart so that it carries none of the cluster's registers.
// RMS == p.rms.
template <typename T, int PACK, int NPACK, bool CLUSTER, bool RMS>
__global__ void __launch_bounds__(512) norm_bwd_block_kernel(NormBwdParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float2 scratch_storage[32];
  __shared__ float2 cluster_slots[CLUSTER ? 2 : 1];
  const BwdStaging<T, PACK, NPACK> st(smem_raw, static_cast<int>(blockDim.x));
  float dg[NPACK][PACK], db[RMS ? 1 : NPACK][PACK];
  zero_accumulators<RMS>(dg, db);
  const int cluster = CLUSTER ? p.cluster : 1;
  const int rank = static_cast<int>(blockIdx.x) % cluster;
  const int64_t group_index = blockIdx.x / cluster;
  const int lane = rank * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
  const int width = cluster * static_cast<int>(blockDim.x);
  const ClusterSum2 reduce{scratch_storage, cluster_slots, cluster};
  int parity = 0;
  if constexpr (CLUSTER) {
    norm_bwd_rows_staged<T, PACK, NPACK, RMS>(
        p, st, group_index, gridDim.x / cluster, 0, lane, width,
        [&](float2 v) {
          v = reduce(v, parity);
          parity ^= 1;
          return v;
        },
        dg, db);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // No block may leave while a peer can still read its slots.
    cooperative_groups::this_cluster().sync();
#endif
  } else {
    norm_bwd_rows_staged<T, PACK, NPACK, RMS>(
        p, st, blockIdx.x, gridDim.x, 0, lane, width,
        [&](float2 v) { return block_allreduce<Sum2Op>(v, scratch_storage); }, dg, db);
  }
  const int64_t packs_per_row = p.cols / PACK;
#pragma unroll
  for (int k = 0; k < NPACK; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * width + lane;
    if (pk >= packs_per_row) continue;
    const int64_t off = group_index * p.cols + pk * PACK;
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      if (p.dgamma_partial != nullptr) p.dgamma_partial[off + i] = dg[k][i];
      if constexpr (!RMS) {
        if (p.dbeta_partial != nullptr) p.dbeta_partial[off + i] = db[k][i];
      }
    }
  }
}

// ---- Rows tier ---------------------------------------------------------------
// Block of `groups` row groups of p.block_threads threads (a multiple of 32,
// up to bwd_rows_max_threads); thread `lane` of a group owns packs lane, lane + width, ...
// (NPACK of them). The grid is one wave of resident blocks, each
// block striding over the rows `groups` at a time, so a block's partial row
// sums every row it visited.
// (kBwdRowsMaxThreads, kBwdRowsSmemMargin: kernel_config.hpp. The margin
// covers the static reduction slots below, 4 KiB.)
constexpr int kBwdRowsMaxGroups = 8;
constexpr int kBwdRowsMaxStages = 4;

__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Waits until at most n (0..3) of this thread's cp.async groups are pending.
__device__ __forceinline__ void cp_async_wait_upto(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// All-reduce of a float2 over one row group (whole warps, `width` threads,
// barrier 1 + group: the groups of a block do not wait for each other).
// Warp sums go to slots[parity][group], which alternate by row: a slot is
// rewritten only after the next row's barrier, which every thread of the
// group passes after reading it. Butterflies give every lane the same bits.
struct GroupSum2 {
  float2 (*slots)[kBwdRowsMaxGroups][32];
  int group;
  int width;
  __device__ __forceinline__ float2 operator()(float2 v, int parity, int lane) const {
    v = group_allreduce<Sum2Op>(v, 32);
    if (width <= 32) return v;
    const int l = static_cast<int>(threadIdx.x) & 31;
    if (l == 0) slots[parity][group][lane >> 5] = v;
    named_barrier(1 + group, width);
    const float2 r = l < (width >> 5) ? slots[parity][group][l] : make_float2(0.f, 0.f);
    return group_allreduce<Sum2Op>(r, 32);
  }
};

// Assumptions: blockDim.x == groups * p.block_threads <= 1024, groups <=
// kBwdRowsMaxGroups, p.block_threads a multiple of 32 with p.block_threads *
// NPACK * PACK >= p.cols; 2 <= stages <= kBwdRowsMaxStages; dynamic shared
// memory holds `stages` stages of the ring (norm_bwd_stage_bytes) and the
// groups' combine buffer (blockDim.x * NPACK * PACK floats). RMS == p.rms.
template <typename T, int PACK, int NPACK, bool RMS>
__global__ void __launch_bounds__(bwd_rows_max_threads(NPACK * PACK), 1)
    norm_bwd_rows_kernel(NormBwdParams p, int groups, int stages) {
  using P = Pack<T, PACK>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float2 slots[2][kBwdRowsMaxGroups][32];
  const int width = p.block_threads;
  const int threads = groups * width;
  const int group = static_cast<int>(threadIdx.x) / width;
  const int lane = static_cast<int>(threadIdx.x) - group * width;
  // Columns are int here: a group holds at most 1024 * 8 of them.
  const int packs_per_row = static_cast<int>(p.cols / PACK);
  // The ring (layout as BwdStaging's): this thread's slot of pack k of
  // tensor j (x, dy) in stage s is ring[s * 2 * NPACK * threads + (j * NPACK
  // + k) * threads]; its (mean, rstd) of stage s is stats[s * threads].
  P *ring = reinterpret_cast<P *>(smem_raw) + threadIdx.x;
  float2 *stats = reinterpret_cast<float2 *>(smem_raw + static_cast<size_t>(stages) * threads * 2 * NPACK * sizeof(P)) +
                  threadIdx.x;
  const int stage_packs = 2 * NPACK * threads;
  auto issue = [&](int64_t row, int s) {
    if (row < p.rows) {
      const T *x = static_cast<const T *>(p.x) + row * p.x_row_stride;
      const T *dy = static_cast<const T *>(p.dy) + row * p.dy_row_stride;
      P *dst = ring + s * stage_packs;
#pragma unroll
      for (int k = 0; k < NPACK; ++k) {
        const int pk = k * width + lane;
        if (pk < packs_per_row) {
          cp_async<sizeof(P)>(dst + k * threads, x + pk * PACK);
          cp_async<sizeof(P)>(dst + (NPACK + k) * threads, dy + pk * PACK);
        }
      }
      if (!RMS) cp_async<4>(&stats[s * threads].x, p.mean + row);
      cp_async<4>(&stats[s * threads].y, p.rstd + row);
    }
    cp_async_commit();  // one group per step, empty or not: the counts stay uniform
  };
  // This thread's columns never change: their scale is loaded once.
  float sc[NPACK][PACK];
#pragma unroll
  for (int k = 0; k < NPACK; ++k) {
    const int pk = k * width + lane;
    if (p.gamma != nullptr && pk < packs_per_row) {
      load_param<T, PACK>(p.gamma, p.param_f32, pk * PACK, sc[k]);
#pragma unroll
      for (int i = 0; i < PACK; ++i) sc[k][i] = p.zero_centered ? 1.f + sc[k][i] : sc[k][i];
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) sc[k][i] = 1.f;
    }
  }
  float dg[NPACK][PACK], db[RMS ? 1 : NPACK][PACK];
  zero_accumulators<RMS>(dg, db);
  const GroupSum2 reduce{slots, group, width};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * groups;
  int64_t base = static_cast<int64_t>(blockIdx.x) * groups;
  for (int s = 0; s + 1 < stages; ++s) issue(base + s * stride + group, s);
  const float inv_cols = 1.f / static_cast<float>(p.cols);
  int s = 0, parity = 0;
  // base is block-uniform: every group reaches every barrier of its own.
  for (; base < p.rows; base += stride) {
    issue(base + static_cast<int64_t>(stages - 1) * stride + group, s == 0 ? stages - 1 : s - 1);
    cp_async_wait_upto(stages - 1);  // this row's group has landed
    const int64_t row = base + group;
    const bool active = row < p.rows;
    float mean = 0.f, rstd = 0.f;
    if (active) {
      const float2 m = stats[s * threads];
      mean = RMS ? 0.f : m.x;
      rstd = m.y;
    }
    // 16-bit x and dy stay as stored between the passes (half the registers
    // of x_hat and g) and the second pass derives them again; fp32 packs are
    // read from the ring again instead (registers: 64 at 1024 threads).
    constexpr bool kReread = sizeof(T) == 4;
    P xr[NPACK], dyr[NPACK];
    float2 acc = make_float2(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
      if (active && k * width + lane < packs_per_row) {
        xr[k] = ld_pack<T, PACK>(ring[s * stage_packs + k * threads].v);
        dyr[k] = ld_pack<T, PACK>(ring[s * stage_packs + (NPACK + k) * threads].v);
#pragma unroll
        for (int i = 0; i < PACK; ++i) {
          const float dyv = Convert<T>::to_float(dyr[k].v[i]);
          const float xh = (Convert<T>::to_float(xr[k].v[i]) - mean) * rstd;
          const float g = dyv * sc[k][i];
          if constexpr (!RMS) acc.x += g;
          acc.y += g * xh;
          dg[k][i] += dyv * dgamma_xhat<T>(p, xh);
          if constexpr (!RMS) db[k][i] += dyv;
        }
      }
    }
    acc = reduce(acc, parity, lane);
    parity ^= 1;
    const float3 kdx = dx_coefs(p, rstd, RMS ? 0.f : acc.x * inv_cols, acc.y * inv_cols);
    if (active) {
      T *dx_row = static_cast<T *>(p.dx) + row * p.dx_row_stride;
#pragma unroll
      for (int k = 0; k < NPACK; ++k) {
        const int pk = k * width + lane;
        if (pk < packs_per_row) {
          if constexpr (kReread) {
            xr[k] = ld_pack<T, PACK>(ring[s * stage_packs + k * threads].v);
            dyr[k] = ld_pack<T, PACK>(ring[s * stage_packs + (NPACK + k) * threads].v);
          }
          float dx[PACK];
#pragma unroll
          for (int i = 0; i < PACK; ++i) {
            const float xh = (Convert<T>::to_float(xr[k].v[i]) - mean) * rstd;
            const float g = Convert<T>::to_float(dyr[k].v[i]) * sc[k][i];
            dx[i] = fmaf(kdx.x, g, fmaf(xh, kdx.y, kdx.z));
          }
          if (p.dsum != nullptr) {
            float ds[PACK];
            load_pack<T, PACK>(static_cast<const T *>(p.dsum) + row * p.dy_row_stride + pk * PACK, ds);
#pragma unroll
            for (int i = 0; i < PACK; ++i) dx[i] += ds[i];
          }
          store_pack<T, PACK>(dx_row + pk * PACK, dx);
        }
      }
    }
    s = s + 1 == stages ? 0 : s + 1;
  }
  cp_async_wait<0>();
  if (p.dgamma_partial == nullptr && p.dbeta_partial == nullptr) return;  // uniform
  static_assert(PACK % 4 == 0, "the rows tier takes 16-byte packs of 16- or 32-bit values");
  // (k and i are compile-time in every use: the accumulators stay registers.)
  auto acc_at = [&](int which, int k, int i) { return which == 0 ? dg[k][i] : db[RMS ? 0 : k][i]; };
  if (groups == 1) {
    for (int which = 0; which < (RMS ? 1 : 2); ++which) {
      float *out = which == 0 ? p.dgamma_partial : p.dbeta_partial;
      if (out == nullptr) continue;
#pragma unroll
      for (int k = 0; k < NPACK; ++k) {
        const int64_t pk = static_cast<int64_t>(k) * width + lane;
        if (pk >= packs_per_row) continue;
        float4 *o = reinterpret_cast<float4 *>(out + static_cast<int64_t>(blockIdx.x) * p.cols + pk * PACK);
#pragma unroll
        for (int q = 0; q < PACK / 4; ++q)
          o[q] = make_float4(acc_at(which, k, 4 * q), acc_at(which, k, 4 * q + 1), acc_at(which, k, 4 * q + 2),
                             acc_at(which, k, 4 * q + 3));
      }
    }
    return;
  }
  // The groups' sums, added in group order, in the ring's memory (free now:
  // every copy landed, and after the barrier every thread is past its reads).
  float *combine = reinterpret_cast<float *>(smem_raw);
  const int64_t covered = static_cast<int64_t>(width) * NPACK * PACK;
  __syncthreads();
  for (int which = 0; which < (RMS ? 1 : 2); ++which) {
    float *out = which == 0 ? p.dgamma_partial : p.dbeta_partial;
    if (out == nullptr) continue;  // uniform
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
      float4 *c = reinterpret_cast<float4 *>(combine + group * covered + (static_cast<int64_t>(k) * width + lane) * PACK);
#pragma unroll
      for (int q = 0; q < PACK / 4; ++q)
        c[q] = make_float4(acc_at(which, k, 4 * q), acc_at(which, k, 4 * q + 1), acc_at(which, k, 4 * q + 2),
                           acc_at(which, k, 4 * q + 3));
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < p.cols; c += threads) {
      float sum = 0.f;
      for (int gi = 0; gi < groups; ++gi) sum += combine[gi * covered + c];
      out[static_cast<int64_t>(blockIdx.x) * p.cols + c] = sum;
    }
    __syncthreads();
  }
}

// Groups per block and ring stages of the rows tier: as many groups as
// share an SM's worth of rows (at most bwd_rows_max_threads, kBwdRowsMaxGroups), so
// a block per SM covers what the rows offer; then as many ring stages (2..4)
// as the device's shared memory holds for that block. The plan's shape
// function computes it once; the launch takes it from the plan.
struct BwdRowsShape {
  int groups = 1;
  int stages = 2;
  size_t smem = 0;
};

template <typename T, int PACK, int NPACK>
BwdRowsShape bwd_rows_shape(const NormBwdParams &p, const DeviceInfo &dev) {
  const int width = p.block_threads;
  const int64_t rows_per_sm = ceil_div(p.rows, static_cast<int64_t>(std::max(dev.sm_count, 1)));
  BwdRowsShape r;
  r.groups = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({kBwdRowsMaxGroups, bwd_rows_max_threads(NPACK * PACK) / width, rows_per_sm})));
  const size_t margin = kBwdRowsSmemMargin;
  const size_t avail =
      static_cast<size_t>(dev.max_smem_optin) > margin ? static_cast<size_t>(dev.max_smem_optin) - margin : 0;
  auto stage = [&](int groups) { return norm_bwd_stage_bytes(groups * width, NPACK, PACK, sizeof(T)); };
  while (r.groups > 1 && avail / stage(r.groups) < 2) --r.groups;
  r.stages = static_cast<int>(std::min<size_t>(kBwdRowsMaxStages, avail / stage(r.groups)));
  r.smem = static_cast<size_t>(r.stages) * stage(r.groups);
  return r;
}

// Column-tiled tier, kernel 1: (c1, c2) of each row, one block per row.
template <typename T, int PACK>
__global__ void __launch_bounds__(512) norm_bwd_row_coef_kernel(NormBwdParams p) {
  __shared__ float2 scratch[32];
  const BwdRowIo<T, PACK> io{p};
  const int64_t packs_per_row = p.cols / PACK;
  const float inv_cols = 1.f / static_cast<float>(p.cols);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const float mean = p.rms ? 0.f : p.mean[row];
    const float rstd = p.rstd[row];
    float2 acc = make_float2(0.f, 0.f);
    for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
      float xh[PACK], g[PACK], dyv[PACK];
      io.load(row, pk * PACK, mean, rstd, xh, g, dyv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        acc.x += g[i];
        acc.y += g[i] * xh[i];
      }
    }
    acc = block_allreduce<Sum2Op>(acc, scratch);
    if (threadIdx.x == 0) {
      p.row_coef[2 * row] = p.rms ? 0.f : acc.x * inv_cols;
      p.row_coef[2 * row + 1] = acc.y * inv_cols;
    }
  }
}

constexpr int kTileRowsPerBlock = 8;  // blockDim = (32, 8)

// Column-tiled tier, kernel 2: blockIdx.x picks 32 packs of columns,
// blockIdx.y a strided slice of rows; dx per element, partial sums per column.
template <typename T, int PACK>
__global__ void __launch_bounds__(32 * kTileRowsPerBlock) norm_bwd_tile_kernel(NormBwdParams p) {
  __shared__ float combine[kTileRowsPerBlock][32 * PACK + 1];
  const BwdRowIo<T, PACK> io{p};
  const int64_t pk = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool in_cols = pk < p.cols / PACK;
  float dg[PACK], db[PACK];
#pragma unroll
  for (int i = 0; i < PACK; ++i) dg[i] = db[i] = 0.f;
  if (in_cols) {
    // Rows are walked from the last: kernel 1 read them first to last, so
    // the last rows' x and dy may still be in L2.
    for (int64_t k = static_cast<int64_t>(blockIdx.y) * kTileRowsPerBlock + threadIdx.y; k < p.rows;
         k += static_cast<int64_t>(gridDim.y) * kTileRowsPerBlock) {
      const int64_t row = p.rows - 1 - k;
      const float mean = p.rms ? 0.f : p.mean[row];
      const float rstd = p.rstd[row];
      float xh[PACK], g[PACK], dyv[PACK];
      io.load(row, pk * PACK, mean, rstd, xh, g, dyv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        dg[i] += dyv[i] * dgamma_xhat<T>(p, xh[i]);
        db[i] += dyv[i];
      }
      io.store_dx(row, pk * PACK, dx_coefs(p, rstd, p.row_coef[2 * row], p.row_coef[2 * row + 1]), xh, g);
    }
  }
  for (int which = 0; which < 2; ++which) {
    float *out = which == 0 ? p.dgamma_partial : p.dbeta_partial;
    if (out == nullptr) continue;  // uniform
#pragma unroll
    for (int i = 0; i < PACK; ++i) combine[threadIdx.y][threadIdx.x * PACK + i] = which == 0 ? dg[i] : db[i];
    __syncthreads();
    // Rows of the tile summed in order: threads of row 0..7 each finish a
    // share of the tile's columns.
    for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * PACK; c += 32 * kTileRowsPerBlock) {
      const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 * PACK + c;
      if (col >= p.cols) continue;
      float s = 0.f;
      for (int r = 0; r < kTileRowsPerBlock; ++r) s += combine[r][c];
      out[static_cast<int64_t>(blockIdx.y) * p.cols + col] = s;
    }
    __syncthreads();
  }
}

template <typename T, int PACK, Tier TIER, int NPACK>
const void *norm_bwd_kernel(bool rms, bool cluster) {
  if constexpr (TIER == Tier::BlockRows) {
    return rms ? reinterpret_cast<const void *>(norm_bwd_rows_kernel<T, PACK, NPACK, true>)
               : reinterpret_cast<const void *>(norm_bwd_rows_kernel<T, PACK, NPACK, false>);
  } else if constexpr (TIER == Tier::Warp) {
    return rms ? reinterpret_cast<const void *>(norm_bwd_warp_kernel<T, PACK, NPACK, true>)
               : reinterpret_cast<const void *>(norm_bwd_warp_kernel<T, PACK, NPACK, false>);
  } else if constexpr (TIER == Tier::BlockRegisters) {
    if (cluster)
      return rms ? reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, true, true>)
                 : reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, true, false>);
    return rms ? reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, false, true>)
               : reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, false, false>);
  } else {
    return reinterpret_cast<const void *>(norm_bwd_tile_kernel<T, PACK>);
  }
}

// Dynamic shared memory of the main kernel at `threads` per block.
template <typename T, int PACK, Tier TIER, int NPACK>
constexpr size_t norm_bwd_smem(int threads) {
  if constexpr (TIER == Tier::ColumnTiled || TIER == Tier::BlockRows) {  // rows: bwd_rows_shape
    return 0;
  } else {
    return BwdStaging<T, PACK, NPACK>::bytes(threads);
  }
}

// The plan's launch shape (norm/norm_plan.cpp): the main kernel's grid,
// which is also the number of partial rows, and the column-tiled tier's
// row-coefficient grid. Asking the occupancy also opens each kernel's
// shared memory limit before its launch.
template <typename T, int PACK, Tier TIER, int NPACK>
cudaError_t shape_norm_bwd(const NormBwdParams &p, const DeviceContext &ctx, NormBwdShape *s) {
  const void *kernel = norm_bwd_kernel<T, PACK, TIER, NPACK>(p.rms, p.cluster > 1);
  const int64_t sms = ctx.dev.sm_count;
  *s = NormBwdShape{};
  int occ = 0;
  if constexpr (TIER == Tier::BlockRows) {
    const BwdRowsShape shape = bwd_rows_shape<T, PACK, NPACK>(p, ctx.dev);
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, shape.groups * p.block_threads, shape.smem, &occ);
    if (err != cudaSuccess) return err;
    if (occ == 0) return cudaErrorInvalidConfiguration;
    s->grid = static_cast<int>(std::min(ceil_div(p.rows, int64_t{shape.groups}), sms * occ));
    s->groups = shape.groups;
    s->stages = shape.stages;
    s->smem = shape.smem;
  } else if constexpr (TIER == Tier::Warp) {
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, kBwdWarpBlock,
                                       norm_bwd_smem<T, PACK, TIER, NPACK>(kBwdWarpBlock), &occ);
    if (err != cudaSuccess) return err;
    if (occ == 0) return cudaErrorInvalidConfiguration;
    const int64_t groups_per_block = kBwdWarpBlock >> p.width_log2;
    s->grid = static_cast<int>(std::min(ceil_div(p.rows, groups_per_block), sms * occ));
  } else if constexpr (TIER == Tier::BlockRegisters) {
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, p.block_threads,
                                       norm_bwd_smem<T, PACK, TIER, NPACK>(p.block_threads), &occ);
    if (err != cudaSuccess) return err;
    if (occ == 0) return cudaErrorInvalidConfiguration;
    // Clusters (a row each): as many as the resident blocks make, at least one.
    s->grid = static_cast<int>(std::min(p.rows, std::max<int64_t>(1, sms * occ / p.cluster)));
  } else {
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, 32 * kTileRowsPerBlock, 0, &occ);
    if (err != cudaSuccess) return err;
    // Enough row slices that all column tiles together fill the device.
    const int64_t tiles = ceil_div(p.cols / PACK, 32);
    const int64_t want = ceil_div(sms * std::max(occ, 1), tiles);
    s->grid = static_cast<int>(std::max<int64_t>(
        1, std::min({want, ceil_div(p.rows, kTileRowsPerBlock), int64_t{65535}})));
    int coef_occ = 0;
    err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(norm_bwd_row_coef_kernel<T, PACK>), 512,
                           0, &coef_occ);
    if (err != cudaSuccess) return err;
    s->coef_grid = std::min<int64_t>(p.rows, sms * std::max(coef_occ, 1));
  }
  return cudaSuccess;
}

// The register tiers' main kernel, compiled apart for RMSNorm (RMS == p.rms).
template <typename T, int PACK, Tier TIER, int NPACK, bool RMS>
cudaError_t launch_norm_bwd_staged(const NormBwdParams &p, const NormBwdShape &s, cudaStream_t stream) {
  if constexpr (TIER == Tier::Warp) {
    static_assert(kBwdWarpBlock * NPACK * PACK * sizeof(float) <= norm_bwd_smem<T, PACK, TIER, NPACK>(kBwdWarpBlock),
                  "the group combine buffer fits in the staging ring");
    norm_bwd_warp_kernel<T, PACK, NPACK, RMS>
        <<<s.grid, kBwdWarpBlock, norm_bwd_smem<T, PACK, TIER, NPACK>(kBwdWarpBlock), stream>>>(p);
  } else {
    static_assert(NPACK * PACK <= 32, "registers: two fp32 accumulators per value at 512 threads");
    const size_t smem = norm_bwd_smem<T, PACK, TIER, NPACK>(p.block_threads);
    if (p.cluster == 1) {
      norm_bwd_block_kernel<T, PACK, NPACK, false, RMS><<<s.grid, p.block_threads, smem, stream>>>(p);
    } else {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(static_cast<unsigned>(s.grid) * static_cast<unsigned>(p.cluster));
      config.blockDim = dim3(static_cast<unsigned>(p.block_threads));
      config.dynamicSmemBytes = smem;
      config.stream = stream;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = static_cast<unsigned>(p.cluster);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      config.attrs = attr;
      config.numAttrs = 1;
      cudaError_t err = cudaLaunchKernelEx(&config, norm_bwd_block_kernel<T, PACK, NPACK, true, RMS>, p);
      if (err != cudaSuccess) return err;
    }
  }
  return cudaGetLastError();
}

// Executes the plan with its launch shape.
template <typename T, int PACK, Tier TIER, int NPACK>
cudaError_t launch_norm_bwd(const NormBwdParams &p, const NormBwdShape &s, cudaStream_t stream) {
  if constexpr (TIER == Tier::BlockRows) {
    const unsigned block = static_cast<unsigned>(s.groups * p.block_threads);
    if (p.rms)
      norm_bwd_rows_kernel<T, PACK, NPACK, true><<<s.grid, block, s.smem, stream>>>(p, s.groups, s.stages);
    else
      norm_bwd_rows_kernel<T, PACK, NPACK, false><<<s.grid, block, s.smem, stream>>>(p, s.groups, s.stages);
  } else if constexpr (TIER == Tier::Warp || TIER == Tier::BlockRegisters) {
    return p.rms ? launch_norm_bwd_staged<T, PACK, TIER, NPACK, true>(p, s, stream)
                 : launch_norm_bwd_staged<T, PACK, TIER, NPACK, false>(p, s, stream);
  } else {
    static_assert(NPACK == 0, "the column-tiled tier takes no NPACK");
    norm_bwd_row_coef_kernel<T, PACK><<<static_cast<unsigned>(s.coef_grid), 512, 0, stream>>>(p);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    const dim3 grid(static_cast<unsigned>(ceil_div(p.cols / PACK, 32)), static_cast<unsigned>(s.grid));
    norm_bwd_tile_kernel<T, PACK><<<grid, dim3(32, kTileRowsPerBlock), 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace fnorm
