/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm backward: the step every tier shares (norm_bwd.cuh
// has the math): a row's x_hat and g from x and dy, dx from the row's
// (c1, c2), and the register tiers' row loop over the thread-private
// cp.async ring.
#pragma once

#include <cooperative_groups.h>

#include "core/device.cuh"
#include "core/row_ring.cuh"
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

// One row from stage s of the ring, held by `width` threads: (c1, c2) over
// the row, this thread's columns of dgamma/dbeta accumulated in registers,
// then dx. Up to 16 values per thread, x_hat and g stay in registers between
// the passes (shared memory is read once); above that they are derived again
// from the ring (registers are the occupancy limit there).
// RMS (p.rms, compiled apart): no centring term c1 and no dbeta, so neither
// their accumulators (registers: occupancy) nor their instructions.
template <typename T, int PACK, int NPACK, bool RMS, class AllReduce2>
__device__ __forceinline__ void norm_bwd_row_staged(const NormBwdParams &p,
                                                    const RowRing<T, PACK, NPACK> &st, int s,
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
                                                     const RowRing<T, PACK, NPACK> &st, int64_t base,
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

}  // namespace fnorm
