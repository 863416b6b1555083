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

#include "groupnorm/gn_stream_cl.cuh"
#include "groupnorm/gn_stream_common.cuh"

namespace fnorm {

// ---------------------------------------------------------------------------
// Channels-first forward, pass 1: task t = (group ng, span j of tp packs);
// shifted sums (the group's first value) -> part[t].
template <typename T, int P>
__device__ __forceinline__ void gn_s_sum_task_cf(const GnParams &p, int64_t t, float2 *red) {
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const int64_t per_group = p.cg * p.s / P;
  const int64_t ng = t / g.tg, lo = (t % g.tg) * g.tp, hi = min(per_group, lo + g.tp);
  const T *xg = x + ng * p.cg * p.s;
  const float K = Convert<T>::to_float(xg[0]);
  float a = 0.f, b = 0.f;
  int64_t i = lo + threadIdx.x;
  for (; i + (kGsU - 1) * kGnThreads < hi; i += kGsU * kGnThreads) {
    float f[kGsU][P];
#pragma unroll
    for (int u = 0; u < kGsU; ++u) gn_s_load<T, P>(xg + (i + u * kGnThreads) * P, false, f[u]);
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
    gn_s_load<T, P>(xg + i * P, false, f);
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float d = f[e] - K;
      a += d;
      b = fmaf(d, d, b);
    }
  }
  const float2 r = gn_s_block_sum(make_float2(a, b), red);
  if (threadIdx.x == 0) p.part[t] = r;
}

template <typename T, int P>
__global__ void __launch_bounds__(kGnThreads) gn_s_fwd_sums_cf(const __grid_constant__ GnParams p) {
  __shared__ float2 red[kGsWarps];
  const int64_t tasks = p.n * p.groups * p.sgeo.tg;
  for (int64_t t = blockIdx.x; t < tasks; t += gridDim.x) gn_s_sum_task_cf<T, P>(p, t, red);
}

// Channels-first last pass (forward: y; backward: dx), tasks as pass 1's
// forward tasks, in reverse. Per task: the group's statistics (forward:
// from the task sums; backward: the saved mean / rstd and the group terms),
// each channel's coefficients in shared memory, then the span. One task:
// group ng = t / tg, span t % tg (the task sums are read from L2: the fused
// kernel's other blocks write them during the launch).
template <typename T, int P, bool BWD>
__device__ __forceinline__ void gn_s_out_task_cf(const GnParams &p, int64_t t, float4 *coef, float2 &st) {
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  T *out = static_cast<T *>(p.y);
  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t per_group = p.cg * p.s / P, ppc = p.s / P;
  const int64_t ng = t / g.tg, j = t % g.tg, n = ng / p.groups, q = ng % p.groups;
  const int64_t lo = j * g.tp, hi = min(per_group, lo + g.tp);
  __syncthreads();  // the previous task's readers of coef, st
  if (tid < 32) {
    if constexpr (BWD) {
      if (lane == 0) st = p.gstat[ng];
    } else {
      const double2 s = gn_s_lane_sum(g.tg, [&](int64_t i) {
        const float2 v = __ldcg(p.part + ng * g.tg + i);
        return make_double2(v.x, v.y);
      });
      double s1 = s.x, s2 = s.y;
      s1 = gn_s_warp_sum(s1);
      s2 = gn_s_warp_sum(s2);
      if (lane == 0) {
        const float K = Convert<T>::to_float(x[ng * p.cg * p.s]);
        st = gn_s_stats(s1, s2, static_cast<double>(p.cg) * static_cast<double>(p.s), K, p.eps);
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
    gn_s_load<T, P>(x + base + i * P, true, f);
    if constexpr (BWD) {
      float d[P];
      gn_s_load<T, P>(dy + base + i * P, true, d);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float xh = (f[e] - mean) * rs;
        const float du = gn_s_du<T>(d[e], xh, cf.x, cf.y, p.silu);
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
    gn_s_store<T, P>(out + base + i * P, f);
  }
}

template <typename T, int P, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gn_s_last_cf(const __grid_constant__ GnParams p) {
  __shared__ float4 coef[kGsTable];
  __shared__ float2 st;
  if constexpr (BWD) gn_s_weight_grads<T>(p);
  const int64_t tasks = p.n * p.groups * p.sgeo.tg;
  for (int64_t k = blockIdx.x; k < tasks; k += gridDim.x) gn_s_out_task_cf<T, P, BWD>(p, tasks - 1 - k, coef, st);
}

// Channels-first forward in one launch (gn_plan.cpp says where). Blocks
// take tickets in order from p.ticket; rounds of tg tickets run the sums of
// units 0 .. lag - 1, then alternate the outputs of unit u and the sums of
// unit u + lag, then the last lag units' outputs. An output task waits until
// its unit's tg sums are in (done[u]); those tickets were taken earlier by
// running blocks whose tasks never wait, so every wait ends. The lag and the
// grid bound the x read between a unit's sums and its outputs, so that most
// of the outputs' x comes from L2.
template <typename T, int P>
__global__ void __launch_bounds__(kGnThreads) gn_s_fused_cf(const __grid_constant__ GnParams p) {
  __shared__ float4 coef[kGsTable];
  __shared__ float2 st, red[kGsWarps];
  __shared__ unsigned long long s_k;
  const GnStreamGeo &g = p.sgeo;
  const int64_t units = p.n * p.groups, lag = g.lag, mid = 2 * (units - lag), total = 2 * units * g.tg;
  unsigned *done = p.counters;
  for (;;) {
    __syncthreads();  // s_k's readers of the previous ticket are done
    if (threadIdx.x == 0) s_k = atomicAdd(p.ticket, 1ull);
    __syncthreads();
    const int64_t k = static_cast<int64_t>(s_k);
    if (k >= total) return;
    const int64_t r = k / g.tg, j = k % g.tg;
    int64_t u;
    bool out;
    if (r < lag) {
      u = r, out = false;
    } else if (r < lag + mid) {
      const int64_t m = r - lag;
      out = m % 2 == 0;
      u = out ? m / 2 : lag + m / 2;
    } else {
      u = units - lag + (r - lag - mid), out = true;
    }
    if (!out) {
      gn_s_sum_task_cf<T, P>(p, u * g.tg + j, red);
      if (threadIdx.x == 0) {  // thread 0 wrote the task's sums
        __threadfence();
        atomicAdd(done + u, 1u);
      }
    } else {
      if (threadIdx.x == 0) {
        while (*reinterpret_cast<volatile unsigned *>(done + u) < static_cast<unsigned>(g.tg)) __nanosleep(64);
        __threadfence();
      }
      __syncthreads();
      gn_s_out_task_cf<T, P, false>(p, u * g.tg + j, coef, st);
    }
  }
}

// Channels-first backward, pass 1: warp task t = (channel nc, span j of
// tpc packs): sums of du and du x_hat -> part[t].
template <typename T, int P>
__global__ void __launch_bounds__(kGnThreads) gn_s_bwd_sums_cf(const __grid_constant__ GnParams p) {
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
        gn_s_load<T, P>(xc + (i + u * 32) * P, false, f[u]);
        gn_s_load<T, P>(dc + (i + u * 32) * P, false, d[u]);
      }
#pragma unroll
      for (int u = 0; u < kGsU; ++u)
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const float xh = (f[u][e] - mean) * rs, du = gn_s_du<T>(d[u][e], xh, a, b, p.silu);
          sa += du;
          sb = fmaf(du, xh, sb);
        }
    }
    for (; i < hi; i += 32) {
      float f[P], d[P];
      gn_s_load<T, P>(xc + i * P, false, f);
      gn_s_load<T, P>(dc + i * P, false, d);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        const float xh = (f[e] - mean) * rs, du = gn_s_du<T>(d[e], xh, a, b, p.silu);
        sa += du;
        sb = fmaf(du, xh, sb);
      }
    }
    const float2 r = group_allreduce<Sum2Op>(make_float2(sa, sb), 32);
    if (lane == 0) p.part[t] = r;
  }
}

// Channel sums: chan[n * c + c] = the sum of channel c's partials (blocks
// of 32 channels x 8 slices, a 1-D grid of n * ceil(c / 32); fixed order). Channels-first backward: the
// tc task sums of (n, c); channels-last: the bps block sums of sample n.
// Backward also writes dscale / dshift and keeps du's sums.
template <typename T, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gn_s_chan(const __grid_constant__ GnParams p, int cl) {
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
__global__ void __launch_bounds__(kGnThreads) gn_s_group(const __grid_constant__ GnParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t ng = static_cast<int64_t>(blockIdx.x) * kGsWarps + (threadIdx.x >> 5);
  if (ng >= p.n * p.groups) return;
  const int64_t n = ng / p.groups, c0 = (ng % p.groups) * p.cg;
  double2 s;
  if (!BWD && p.sgeo.ncc == 1) {  // channels-last forward: the first pass's group sums
    s = gn_s_lane_sum(p.sgeo.bps, [&](int64_t b) {
      const float2 v = p.part[(n * p.sgeo.bps + b) * p.groups + ng % p.groups];
      return make_double2(v.x, v.y);
    });
  } else {
    s = gn_s_lane_sum(p.cg, [&](int64_t i) {
      const double2 v = p.chan[n * p.c + c0 + i];
      const double wgt = BWD ? GnChannel<T>(p, n, c0 + i).gp : 1.0;
      return make_double2(wgt * v.x, wgt * v.y);
    });
  }
  double s1 = s.x, s2 = s.y;
  s1 = gn_s_warp_sum(s1);
  s2 = gn_s_warp_sum(s2);
  if (lane != 0) return;
  const double m = static_cast<double>(p.cg) * static_cast<double>(p.s);
  if constexpr (BWD) {
    p.gstat[ng] = make_float2(static_cast<float>(s1 / m), static_cast<float>(s2 / m));
  } else {
    const T *x = static_cast<const T *>(p.x);
    const float K = Convert<T>::to_float(x[n * p.s * p.c + c0]);
    const float2 st = gn_s_stats(s1, s2, m, K, p.eps);
    p.gstat[ng] = st;
    if (p.mean) p.mean[ng] = st.x;
    if (p.rstd) p.rstd[ng] = st.y;
  }
}

// The schedule's kernels in order, each on the planned grid.
template <typename T, int P, bool CL, bool BWD>
cudaError_t gn_s_launch(const GnParams &p, cudaStream_t stream) {
  const GnStreamGeo &g = p.sgeo;
  const dim3 blk(kGnThreads);
  const unsigned ncc = static_cast<unsigned>(g.ncc);
  if constexpr (CL) {
    gn_s_sums_cl<T, P, BWD><<<dim3(static_cast<unsigned>(p.n * g.bps), ncc), blk, 0, stream>>>(p);
    if (BWD || g.ncc != 1)  // the forward's group sums come from the first pass when ncc == 1
      gn_s_chan<T, BWD><<<static_cast<unsigned>(p.n * ((p.c + 31) / 32)), blk, 0, stream>>>(p, 1);
    gn_s_group<T, BWD><<<static_cast<unsigned>((p.n * p.groups + kGsWarps - 1) / kGsWarps), blk, 0, stream>>>(p);
    gn_s_last_cl<T, P, BWD><<<dim3(static_cast<unsigned>(g.grid3), ncc), blk, 0, stream>>>(p);
  } else if constexpr (BWD) {
    gn_s_bwd_sums_cf<T, P><<<static_cast<unsigned>(g.grid1), blk, 0, stream>>>(p);
    gn_s_chan<T, true><<<static_cast<unsigned>(p.n * ((p.c + 31) / 32)), blk, 0, stream>>>(p, 0);
    gn_s_group<T, true><<<static_cast<unsigned>((p.n * p.groups + kGsWarps - 1) / kGsWarps), blk, 0, stream>>>(p);
    gn_s_last_cf<T, P, true><<<static_cast<unsigned>(g.grid3), blk, 0, stream>>>(p);
  } else if (g.lag > 0) {
    const size_t sync = sizeof(unsigned long long) + sizeof(unsigned) * static_cast<size_t>(p.n * p.groups);
    const cudaError_t e = cudaMemsetAsync(p.ticket, 0, sync, stream);  // ticket, then done[units]
    if (e != cudaSuccess) return e;
    gn_s_fused_cf<T, P><<<static_cast<unsigned>(g.grid3), blk, 0, stream>>>(p);
  } else {
    gn_s_fwd_sums_cf<T, P><<<static_cast<unsigned>(g.grid1), blk, 0, stream>>>(p);
    gn_s_last_cf<T, P, false><<<static_cast<unsigned>(g.grid3), blk, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace fnorm
