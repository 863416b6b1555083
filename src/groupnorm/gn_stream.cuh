/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's streaming schedule (groupnorm.hpp says when the planner takes
// it): separate passes over x (and dy), no block ever waiting on another.
//
//   forward, channels-first:  sums (per task: shifted sums of a span of one
//                             group) -> normalize (each block combines its
//                             group's task sums in a fixed order)
//   forward, channels-last:   sums (per block and group; per block and
//                             channel, then channel sums, where the
//                             channels take more than one block's columns)
//                             -> group statistics -> normalize
//   backward, both layouts:   sums of du and du x_hat (per task or block
//                             and channel) -> channel sums (dscale, dshift)
//                             -> group terms -> dx (dgamma, dbeta by its
//                             first blocks)
//
// The last pass walks its tasks in the reverse of the first pass's order,
// so that it starts on what the first pass read last (still in L2); it
// reads x (and dy) with evict-first loads and writes with streaming stores.
// Every combination is in a fixed order: the outputs are the same bits run
// to run. Tasks are taken grid-stride, so any grid is correct.
#pragma once

#include "core/device.cuh"
#include "groupnorm/gn_tile.cuh"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {

// Packs in flight per thread in the streaming loops.
constexpr int kGsU = 4;

template <typename T, int P>
__device__ __forceinline__ void gs_load(const T *p, bool last, float (&out)[P]) {
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
__device__ __forceinline__ void gs_store(T *p, const float (&in)[P]) {
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
__device__ __forceinline__ float gs_du(float dy, float xh, float gp, float bp, int silu) {
  if (!silu) return dy;
  const float v = fmaf(xh, gp, bp), sg = gn_sigmoid<T>(v);
  return dy * sg * (1.f + v * (1.f - sg));
}

// Block sum of (a, b) in a fixed tree; every thread gets it. `red` holds
// kGsWarps float2; the leading barrier guards its previous readers.
__device__ __forceinline__ float2 gs_block_sum(float2 v, float2 *red) {
  v = group_allreduce<Sum2Op>(v, 32);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float2 r = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < kGsWarps; ++w) r.x += red[w].x, r.y += red[w].y;
  return r;
}

__device__ __forceinline__ double gs_warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// A lane's sum of load(i) over i = lane, lane + 32, ... < count, in that
// order, with 8 loads in flight.
template <class F>
__device__ __forceinline__ double2 gs_lane_sum(int64_t count, F load) {
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
__device__ __forceinline__ float2 gs_stats(double s1, double s2, double m, float K, float eps) {
  const double d = s1 / m;
  const double var = fmax(s2 / m - d * d, 0.0);
  return make_float2(static_cast<float>(static_cast<double>(K) + d),
                     static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps))));
}

// dgamma / dbeta (backward, by the last pass's first blocks): the sums over
// samples of (1 + scale) times the channel sums.
template <typename T>
__device__ __forceinline__ void gs_weight_grads(const GnParams &p) {
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

// ---------------------------------------------------------------------------
// Channels-first forward, pass 1: task t = (group ng, span j of tp packs);
// shifted sums (the group's first value) -> part[t].
template <typename T, int P>
__global__ void __launch_bounds__(kGnThreads) gs_fwd_sums_cf(const __grid_constant__ GnParams p) {
  __shared__ float2 red[kGsWarps];
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const int64_t per_group = p.cg * p.s / P, tasks = p.n * p.groups * g.tg;
  for (int64_t t = blockIdx.x; t < tasks; t += gridDim.x) {
    const int64_t ng = t / g.tg, lo = (t % g.tg) * g.tp, hi = min(per_group, lo + g.tp);
    const T *xg = x + ng * p.cg * p.s;
    const float K = Convert<T>::to_float(xg[0]);
    float a = 0.f, b = 0.f;
    int64_t i = lo + threadIdx.x;
    for (; i + (kGsU - 1) * kGnThreads < hi; i += kGsU * kGnThreads) {
      float f[kGsU][P];
#pragma unroll
      for (int u = 0; u < kGsU; ++u) gs_load<T, P>(xg + (i + u * kGnThreads) * P, false, f[u]);
#pragma unroll
      for (int u = 0; u < kGsU; ++u)
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const float d = f[u][e] - K;
          a += d;
          b = fmaf(d, d, b);
        }
    }
    for (; i < hi; i += kGnThreads) {
      float f[P];
      gs_load<T, P>(xg + i * P, false, f);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float d = f[e] - K;
        a += d;
        b = fmaf(d, d, b);
      }
    }
    const float2 r = gs_block_sum(make_float2(a, b), red);
    if (threadIdx.x == 0) p.part[t] = r;
  }
}

// Channels-first last pass (forward: y; backward: dx), tasks as pass 1's
// forward tasks, in reverse. Per task: the group's statistics (forward:
// from the task sums; backward: the saved mean / rstd and the group terms),
// each channel's coefficients in shared memory, then the span.
template <typename T, int P, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gs_last_cf(const __grid_constant__ GnParams p) {
  __shared__ float4 coef[kGsTable];
  __shared__ float2 st;
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  T *out = static_cast<T *>(p.y);
  const int tid = threadIdx.x, lane = tid & 31;
  if constexpr (BWD) gs_weight_grads<T>(p);
  const int64_t per_group = p.cg * p.s / P, ppc = p.s / P, tasks = p.n * p.groups * g.tg;
  for (int64_t k = blockIdx.x; k < tasks; k += gridDim.x) {
    const int64_t t = tasks - 1 - k;
    const int64_t ng = t / g.tg, j = t % g.tg, n = ng / p.groups, q = ng % p.groups;
    const int64_t lo = j * g.tp, hi = min(per_group, lo + g.tp);
    __syncthreads();  // the previous task's readers of coef, st
    if (tid < 32) {
      if constexpr (BWD) {
        if (lane == 0) st = p.gstat[ng];
      } else {
        const double2 s = gs_lane_sum(g.tg, [&](int64_t i) {
          const float2 v = p.part[ng * g.tg + i];
          return make_double2(v.x, v.y);
        });
        double s1 = s.x, s2 = s.y;
        s1 = gs_warp_sum(s1);
        s2 = gs_warp_sum(s2);
        if (lane == 0) {
          const float K = Convert<T>::to_float(x[ng * p.cg * p.s]);
          st = gs_stats(s1, s2, static_cast<double>(p.cg) * static_cast<double>(p.s), K, p.eps);
          if (j == 0) {
            if (p.mean) p.mean[ng] = st.x;
            if (p.rstd) p.rstd[ng] = st.y;
          }
        }
      }
    }
    __syncthreads();
    const int64_t c_lo = lo / ppc, c_hi = (hi - 1) / ppc;
    for (int64_t c = c_lo + tid; c <= c_hi; c += kGnThreads) {
      const GnChannel<T> ch(p, n, q * p.cg + c);
      if constexpr (BWD) {
        // gamma', beta' (SiLU's input from x_hat); dx = c1 du + c2 + c3 x_hat
        coef[c - c_lo] = make_float4(ch.gp, ch.bp, p.rstd_in[ng] * ch.gp, 0.f);
      } else {
        const float a = st.y * ch.gp;
        coef[c - c_lo] = make_float4(a, ch.bp - st.x * a, 0.f, 0.f);
      }
    }
    __syncthreads();
    float mean = 0.f, rs = 0.f, c2 = 0.f, c3 = 0.f;
    if constexpr (BWD) {
      mean = p.mean_in[ng];
      rs = p.rstd_in[ng];
      c2 = -rs * st.x;
      c3 = -rs * st.y;
    }
    const int64_t base = ng * p.cg * p.s;
    for (int64_t i = lo + tid; i < hi; i += kGnThreads) {
      const float4 cf = coef[i / ppc - c_lo];
      float f[P];
      gs_load<T, P>(x + base + i * P, true, f);
      if constexpr (BWD) {
        float d[P];
        gs_load<T, P>(dy + base + i * P, true, d);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const float xh = (f[e] - mean) * rs;
          const float du = gs_du<T>(d[e], xh, cf.x, cf.y, p.silu);
          f[e] = fmaf(cf.z, du, fmaf(c3, xh, c2));
        }
      } else {
#pragma unroll
        for (int e = 0; e < P; ++e) {
          float v = fmaf(f[e], cf.x, cf.y);
          if (p.silu) v *= gn_sigmoid<T>(v);
          f[e] = v;
        }
      }
      gs_store<T, P>(out + base + i * P, f);
    }
  }
}

// Channels-first backward, pass 1: warp task t = (channel nc, span j of
// tpc packs): sums of du and du x_hat -> part[t].
template <typename T, int P>
__global__ void __launch_bounds__(kGnThreads) gs_bwd_sums_cf(const __grid_constant__ GnParams p) {
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  const int lane = threadIdx.x & 31;
  const int64_t ppc = p.s / P, tasks = p.n * p.c * g.tc;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kGsWarps + (threadIdx.x >> 5); t < tasks;
       t += static_cast<int64_t>(gridDim.x) * kGsWarps) {
    const int64_t nc = t / g.tc, lo = (t % g.tc) * g.tpc, hi = min(ppc, lo + g.tpc);
    const int64_t n = nc / p.c, c = nc % p.c, ng = n * p.groups + c / p.cg;
    const float mean = p.mean_in[ng], rs = p.rstd_in[ng];
    float a = 0.f, b = 0.f;  // gamma', beta'
    if (p.silu) {
      const GnChannel<T> ch(p, n, c);
      a = ch.gp;
      b = ch.bp;
    }
    const T *xc = x + nc * p.s, *dc = dy + nc * p.s;
    float sa = 0.f, sb = 0.f;
    int64_t i = lo + lane;
    for (; i + (kGsU - 1) * 32 < hi; i += kGsU * 32) {
      float f[kGsU][P], d[kGsU][P];
#pragma unroll
      for (int u = 0; u < kGsU; ++u) {
        gs_load<T, P>(xc + (i + u * 32) * P, false, f[u]);
        gs_load<T, P>(dc + (i + u * 32) * P, false, d[u]);
      }
#pragma unroll
      for (int u = 0; u < kGsU; ++u)
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const float xh = (f[u][e] - mean) * rs, du = gs_du<T>(d[u][e], xh, a, b, p.silu);
          sa += du;
          sb = fmaf(du, xh, sb);
        }
    }
    for (; i < hi; i += 32) {
      float f[P], d[P];
      gs_load<T, P>(xc + i * P, false, f);
      gs_load<T, P>(dc + i * P, false, d);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float xh = (f[e] - mean) * rs, du = gs_du<T>(d[e], xh, a, b, p.silu);
        sa += du;
        sb = fmaf(du, xh, sb);
      }
    }
    const float2 r = group_allreduce<Sum2Op>(make_float2(sa, sb), 32);
    if (lane == 0) p.part[t] = r;
  }
}

// ---------------------------------------------------------------------------
// Channels-last, pass 1 (forward: shifted sums; backward: du, du x_hat):
// block (n, b) of grid (n * bps, ncc) takes rows j * rt .. of sample n for
// j = b, b + bps, ...; thread (r, j) = (tid / cols, tid % cols) holds the P
// channels cc * cols * P + j * P + [0, P) (column chunk cc = blockIdx.y) and
// rows r, r + rps, ...; per channel its sums over the row slices, in a
// fixed tree -> part[(n * bps + b) * c + channel].
template <typename T, int P, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gs_sums_cl(const __grid_constant__ GnParams p) {
  __shared__ float2 red[kGnThreads * P];
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  const int tid = threadIdx.x, cols = static_cast<int>(g.cols), rps = static_cast<int>(g.rps);
  const int r = tid / cols, jc = tid % cols;
  const int64_t n = blockIdx.x / g.bps, b = blockIdx.x % g.bps;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * cols + jc) * P;
  const bool on = r < rps && c0 < p.c;
  float K[P], co0[P], co1[P], co2[P], co3[P], sa[P], sb[P];
#pragma unroll
  for (int e = 0; e < P; ++e) {
    sa[e] = sb[e] = 0.f;
    K[e] = co0[e] = co1[e] = co2[e] = co3[e] = 0.f;
    if (!on) continue;
    const int64_t c = c0 + e, ng = n * p.groups + c / p.cg;
    if constexpr (BWD) {
      co0[e] = p.mean_in[ng];
      co1[e] = p.rstd_in[ng];
      if (p.silu) {
        const GnChannel<T> ch(p, n, c);
        co2[e] = ch.gp;
        co3[e] = ch.bp;
      }
    } else {
      K[e] = Convert<T>::to_float(x[n * p.s * p.c + (c / p.cg) * p.cg]);
    }
  }
  constexpr int U = BWD ? 2 : kGsU;  // registers: x, dy and four coefficients per channel
  if (on) {
    const int64_t chunks = (p.s + g.tp - 1) / g.tp;
    for (int64_t ch = b; ch < chunks; ch += g.bps) {
      const int64_t hi = min(p.s, (ch + 1) * g.tp);
      int64_t row = ch * g.tp + r;
      for (; row + (U - 1) * rps < hi; row += U * rps) {
        float f[U][P], d[U][P];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t o = (n * p.s + row + u * rps) * p.c + c0;
          gs_load<T, P>(x + o, false, f[u]);
          if constexpr (BWD) gs_load<T, P>(dy + o, false, d[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < P; ++e) {
            if constexpr (BWD) {
              const float xh = (f[u][e] - co0[e]) * co1[e], du = gs_du<T>(d[u][e], xh, co2[e], co3[e], p.silu);
              sa[e] += du;
              sb[e] = fmaf(du, xh, sb[e]);
            } else {
              const float dd = f[u][e] - K[e];
              sa[e] += dd;
              sb[e] = fmaf(dd, dd, sb[e]);
            }
          }
      }
      for (; row < hi; row += rps) {
        float f[P], d[P];
        const int64_t o = (n * p.s + row) * p.c + c0;
        gs_load<T, P>(x + o, false, f);
        if constexpr (BWD) gs_load<T, P>(dy + o, false, d);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          if constexpr (BWD) {
            const float xh = (f[e] - co0[e]) * co1[e], du = gs_du<T>(d[e], xh, co2[e], co3[e], p.silu);
            sa[e] += du;
            sb[e] = fmaf(du, xh, sb[e]);
          } else {
            const float dd = f[e] - K[e];
            sa[e] += dd;
            sb[e] = fmaf(dd, dd, sb[e]);
          }
        }
      }
    }
  }
  // Row slices' sums per channel: a tree over r in shared memory.
#pragma unroll
  for (int e = 0; e < P; ++e) red[tid * P + e] = make_float2(sa[e], sb[e]);
  int st = 1;
  while (st < rps) st <<= 1;
  for (st >>= 1; st >= 1; st >>= 1) {
    __syncthreads();
    if (r < st && r + st < rps) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float2 o = red[(tid + st * cols) * P + e];
        red[tid * P + e].x += o.x;
        red[tid * P + e].y += o.y;
      }
    }
  }
  __syncthreads();
  if (!BWD && g.ncc == 1) {
    // Forward with every channel in the block: a warp per group sums its
    // channels' sums (red[channel] for r == 0) -> part[(n * bps + b) * groups + q].
    const int lane = tid & 31;
    for (int64_t q = tid >> 5; q < p.groups; q += kGsWarps) {
      float2 v = make_float2(0.f, 0.f);
      for (int64_t i = lane; i < p.cg; i += 32) {
        const float2 o = red[q * p.cg + i];
        v.x += o.x;
        v.y += o.y;
      }
      v = group_allreduce<Sum2Op>(v, 32);
      if (lane == 0) p.part[(n * g.bps + b) * p.groups + q] = v;
    }
    return;
  }
  if (r == 0 && on) {
#pragma unroll
    for (int e = 0; e < P; ++e)
      if (c0 + e < p.c) p.part[(n * g.bps + b) * p.c + c0 + e] = red[tid * P + e];
  }
}

// Channel sums: chan[n * c + c] = the sum of channel c's partials (blocks
// of 32 channels x 8 slices, a 1-D grid of n * ceil(c / 32); fixed order). Channels-first backward: the
// tc task sums of (n, c); channels-last: the bps block sums of sample n.
// Backward also writes dscale / dshift and keeps du's sums.
template <typename T, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gs_chan(const __grid_constant__ GnParams p, int cl) {
  __shared__ double2 red[kGsWarps][32];
  const GnStreamGeo &g = p.sgeo;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t cb = (p.c + 31) / 32, n = blockIdx.x / cb, c = (blockIdx.x % cb) * 32 + lane;
  double s1 = 0.0, s2 = 0.0;
  if (c < p.c) {
    // Eight loads in flight per thread, added in index order.
    constexpr int kB = 8;
    const int64_t parts = cl ? g.bps : g.tc;
    for (int64_t i0 = w; i0 < parts; i0 += kB * kGsWarps) {
      float2 v[kB];
#pragma unroll
      for (int u = 0; u < kB; ++u) {
        const int64_t i = i0 + u * kGsWarps;
        v[u] = i >= parts ? make_float2(0.f, 0.f)
               : cl       ? p.part[(n * g.bps + i) * p.c + c]
                          : p.part[(n * p.c + c) * g.tc + i];
      }
#pragma unroll
      for (int u = 0; u < kB; ++u) s1 += v[u].x, s2 += v[u].y;
    }
  }
  red[w][lane] = make_double2(s1, s2);
  __syncthreads();
  if (w != 0 || c >= p.c) return;
  s1 = s2 = 0.0;
#pragma unroll
  for (int i = 0; i < kGsWarps; ++i) s1 += red[i][lane].x, s2 += red[i][lane].y;
  p.chan[n * p.c + c] = make_double2(s1, s2);
  if constexpr (BWD) {
    const GnChannel<T> ch(p, n, c);
    const int64_t si = n * p.ss_sn + c * p.ss_sc;
    const float A = static_cast<float>(s1), B = static_cast<float>(s2);
    if (p.dshift) gn_st<T>(p.dshift, p.ss_f32, si, A);
    if (p.dscale) gn_st<T>(p.dscale, p.ss_f32, si, ch.gamma * B + ch.beta * A);
  }
}

// Group terms, a warp per (n, group): forward the mean and rstd (and the
// saved outputs) from the channel sums of the shifted values; backward the
// means of g = du gamma' and g x_hat.
template <typename T, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gs_group(const __grid_constant__ GnParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t ng = static_cast<int64_t>(blockIdx.x) * kGsWarps + (threadIdx.x >> 5);
  if (ng >= p.n * p.groups) return;
  const int64_t n = ng / p.groups, c0 = (ng % p.groups) * p.cg;
  double2 s;
  if (!BWD && p.sgeo.ncc == 1) {  // channels-last forward: the first pass's group sums
    s = gs_lane_sum(p.sgeo.bps, [&](int64_t b) {
      const float2 v = p.part[(n * p.sgeo.bps + b) * p.groups + ng % p.groups];
      return make_double2(v.x, v.y);
    });
  } else {
    s = gs_lane_sum(p.cg, [&](int64_t i) {
      const double2 v = p.chan[n * p.c + c0 + i];
      const double wgt = BWD ? GnChannel<T>(p, n, c0 + i).gp : 1.0;
      return make_double2(wgt * v.x, wgt * v.y);
    });
  }
  double s1 = s.x, s2 = s.y;
  s1 = gs_warp_sum(s1);
  s2 = gs_warp_sum(s2);
  if (lane != 0) return;
  const double m = static_cast<double>(p.cg) * static_cast<double>(p.s);
  if constexpr (BWD) {
    p.gstat[ng] = make_float2(static_cast<float>(s1 / m), static_cast<float>(s2 / m));
  } else {
    const T *x = static_cast<const T *>(p.x);
    const float K = Convert<T>::to_float(x[n * p.s * p.c + c0]);
    const float2 st = gs_stats(s1, s2, m, K, p.eps);
    p.gstat[ng] = st;
    if (p.mean) p.mean[ng] = st.x;
    if (p.rstd) p.rstd[ng] = st.y;
  }
}

// Channels-last last pass (forward: y; backward: dx): block (k, cc) of grid
// (grid3, ncc) takes row chunks in the reverse of pass 1's order; per thread
// its P channels' coefficients (recomputed when the sample changes).
template <typename T, int P, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gs_last_cl(const __grid_constant__ GnParams p) {
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  T *out = static_cast<T *>(p.y);
  if constexpr (BWD) gs_weight_grads<T>(p);
  const int tid = threadIdx.x, cols = static_cast<int>(g.cols), rps = static_cast<int>(g.rps);
  const int r = tid / cols, jc = tid % cols;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.y) * cols + jc) * P;
  if (r >= rps || c0 >= p.c) return;
  const int64_t chunks = (p.s + g.tp - 1) / g.tp, tasks = p.n * chunks;
  float ca[P], cb[P], c1[P], c2[P], c3[P], mean[P], rs[P];
  int64_t cur = -1;
  for (int64_t k = blockIdx.x; k < tasks; k += gridDim.x) {
    const int64_t t = tasks - 1 - k, n = t / chunks, ch = t % chunks;
    if (n != cur) {
      cur = n;
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const int64_t c = c0 + e, ng = n * p.groups + c / p.cg;
        const GnChannel<T> chn(p, n, c);
        if constexpr (BWD) {
          mean[e] = p.mean_in[ng];
          rs[e] = p.rstd_in[ng];
          ca[e] = chn.gp;
          cb[e] = chn.bp;
          const float2 gt = p.gstat[ng];
          c1[e] = rs[e] * chn.gp;
          c2[e] = -rs[e] * gt.x;
          c3[e] = -rs[e] * gt.y;
        } else {
          const float2 st = p.gstat[ng];
          ca[e] = st.y * chn.gp;
          cb[e] = chn.bp - st.x * ca[e];
        }
      }
    }
    const int64_t hi = min(p.s, (ch + 1) * g.tp);
    for (int64_t row = ch * g.tp + r; row < hi; row += rps) {
      const int64_t o = (n * p.s + row) * p.c + c0;
      float f[P];
      gs_load<T, P>(x + o, true, f);
      if constexpr (BWD) {
        float d[P];
        gs_load<T, P>(dy + o, true, d);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const float xh = (f[e] - mean[e]) * rs[e];
          const float du = gs_du<T>(d[e], xh, ca[e], cb[e], p.silu);
          f[e] = fmaf(c1[e], du, fmaf(c3[e], xh, c2[e]));
        }
      } else {
#pragma unroll
        for (int e = 0; e < P; ++e) {
          float v = fmaf(f[e], ca[e], cb[e]);
          if (p.silu) v *= gn_sigmoid<T>(v);
          f[e] = v;
        }
      }
      gs_store<T, P>(out + o, f);
    }
  }
}

// The schedule's kernels in order, each on the planned grid.
template <typename T, int P, bool CL, bool BWD>
cudaError_t gs_launch(const GnParams &p, cudaStream_t stream) {
  const GnStreamGeo &g = p.sgeo;
  const dim3 blk(kGnThreads);
  const unsigned ncc = static_cast<unsigned>(g.ncc);
  if constexpr (CL) {
    gs_sums_cl<T, P, BWD><<<dim3(static_cast<unsigned>(p.n * g.bps), ncc), blk, 0, stream>>>(p);
    if (BWD || g.ncc != 1)  // the forward's group sums come from the first pass when ncc == 1
      gs_chan<T, BWD><<<static_cast<unsigned>(p.n * ((p.c + 31) / 32)), blk, 0, stream>>>(p, 1);
    gs_group<T, BWD><<<static_cast<unsigned>((p.n * p.groups + kGsWarps - 1) / kGsWarps), blk, 0, stream>>>(p);
    gs_last_cl<T, P, BWD><<<dim3(static_cast<unsigned>(g.grid3), ncc), blk, 0, stream>>>(p);
  } else if constexpr (BWD) {
    gs_bwd_sums_cf<T, P><<<static_cast<unsigned>(g.grid1), blk, 0, stream>>>(p);
    gs_chan<T, true><<<static_cast<unsigned>(p.n * ((p.c + 31) / 32)), blk, 0, stream>>>(p, 0);
    gs_group<T, true><<<static_cast<unsigned>((p.n * p.groups + kGsWarps - 1) / kGsWarps), blk, 0, stream>>>(p);
    gs_last_cf<T, P, true><<<static_cast<unsigned>(g.grid3), blk, 0, stream>>>(p);
  } else {
    gs_fwd_sums_cf<T, P><<<static_cast<unsigned>(g.grid1), blk, 0, stream>>>(p);
    gs_last_cf<T, P, false><<<static_cast<unsigned>(g.grid3), blk, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace fnorm
