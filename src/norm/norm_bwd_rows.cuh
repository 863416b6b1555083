/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm backward, the BlockRows tier: a persistent grid of
// row groups, each thread owning fixed columns, x and dy through a
// thread-private cp.async ring 2-4 rows deep.
#pragma once

#include "norm/norm_bwd_row.cuh"

namespace fnorm {

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
// memory holds `stages` stages of the ring (row_ring_stage_bytes) and the
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
  // The ring (layout as RowRing's): this thread's slot of pack k of
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
  auto stage = [&](int groups) { return row_ring_stage_bytes(groups * width, NPACK, PACK, sizeof(T)); };
  while (r.groups > 1 && avail / stage(r.groups) < 2) --r.groups;
  r.stages = static_cast<int>(std::min<size_t>(kBwdRowsMaxStages, avail / stage(r.groups)));
  r.smem = static_cast<size_t>(r.stages) * stage(r.groups);
  return r;
}

}  // namespace fnorm
