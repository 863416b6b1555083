/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's streaming schedule (gn_stream.cuh): the pieces its kernels
// share: cached / streaming pack loads and stores, du through SiLU, fixed-
// order sums, the statistics, the weight gradients.
#pragma once

#include "core/device.cuh"
#include "groupnorm/gn_tile.cuh"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {

// Packs in flight per thread in the streaming loops.
constexpr int kGsU = 4;

template <typename T, int P>
__device__ __forceinline__ void gn_s_load(const T *p, bool last, float (&out)[P]) {
  constexpr int kBytes = sizeof(T) * P < 16 ? sizeof(T) * P : 16;
  using V = typename VecOf<kBytes>::type;
  V w[sizeof(T) * P / kBytes];
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(w) / kBytes); ++i)
    w[i] = last ? __ldcs(reinterpret_cast<const V *>(p) + i) : reinterpret_cast<const V *>(p)[i];
  Pack<T, P> pk;
  memcpy(&pk, w, sizeof(pk));
  widen_pack<T, P>(pk, out);
}
template <typename T, int P>
__device__ __forceinline__ void gn_s_store(T *p, const float (&in)[P]) {
  constexpr int kBytes = sizeof(T) * P < 16 ? sizeof(T) * P : 16;
  using V = typename VecOf<kBytes>::type;
  Pack<T, P> pk;
#pragma unroll
  for (int i = 0; i < P; ++i) pk.v[i] = Convert<T>::from_float(in[i]);
  V w[sizeof(T) * P / kBytes];
  memcpy(w, &pk, sizeof(w));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(w) / kBytes); ++i) __stcs(reinterpret_cast<V *>(p) + i, w[i]);
}

// du of one element: dy, through SiLU's derivative at u = x_hat gamma' +
// beta' (from x_hat, exact near the mean however large rstd is).
template <typename T>
__device__ __forceinline__ float gn_s_du(float dy, float xh, float gp, float bp, int silu) {
  if (!silu) return dy;
  const float v = fmaf(xh, gp, bp), sg = gn_sigmoid<T>(v);
  return dy * sg * (1.f + v * (1.f - sg));
}

// Block sum of (a, b) in a fixed tree; every thread gets it. `red` holds
// kGsWarps float2; the leading barrier guards its previous readers.
__device__ __forceinline__ float2 gn_s_block_sum(float2 v, float2 *red) {
  v = group_allreduce<Sum2Op>(v, 32);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float2 r = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kGsWarps; ++w) r.x += red[w].x, r.y += red[w].y;
  return r;
}

__device__ __forceinline__ double gn_s_warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// A lane's sum of load(i) over i = lane, lane + 32, ... < count, in that
// order, with 8 loads in flight.
template <class F>
__device__ __forceinline__ double2 gn_s_lane_sum(int64_t count, F load) {
  constexpr int kB = 8;
  double2 s = make_double2(0.0, 0.0);
  for (int64_t i0 = threadIdx.x & 31; i0 < count; i0 += kB * 32) {
    double2 v[kB];
#pragma unroll
    for (int u = 0; u < kB; ++u) v[u] = i0 + u * 32 < count ? load(i0 + u * 32) : make_double2(0.0, 0.0);
#pragma unroll
    for (int u = 0; u < kB; ++u) s.x += v[u].x, s.y += v[u].y;
  }
  return s;
}

// mean, rstd from shifted sums over m values (K the shift), as the
// persistent kernel computes them.
__device__ __forceinline__ float2 gn_s_stats(double s1, double s2, double m, float K, float eps) {
  const double d = s1 / m;
  const double var = fmax(s2 / m - d * d, 0.0);
  return make_float2(static_cast<float>(static_cast<double>(K) + d),
                     static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps))));
}

// dgamma / dbeta (backward, by the last pass's first blocks): the sums over
// samples of (1 + scale) times the channel sums.
template <typename T>
__device__ __forceinline__ void gn_s_weight_grads(const GnParams &p) {
  if (!p.dgamma && !p.dbeta) return;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * kGnThreads + threadIdx.x; c < p.c;
       c += static_cast<int64_t>(gridDim.x) * kGnThreads) {
    float A = 0.f, B = 0.f;
    for (int64_t n = 0; n < p.n; ++n) {
      const double2 v = p.chan[n * p.c + c];
      const float one_s = GnChannel<T>(p, n, c).one_s;
      A += one_s * static_cast<float>(v.x);
      B += one_s * static_cast<float>(v.y);
    }
    if (p.dbeta) gn_st<T>(p.dbeta, p.w_f32, c, A);
    if (p.dgamma) gn_st<T>(p.dgamma, p.w_f32, c, B);
  }
}

}  // namespace fnorm
