/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's streaming schedule (gn_stream.cuh): the channels-last
// kernels, its first pass and its last.
#pragma once

#include "groupnorm/gn_stream_common.cuh"

namespace fnorm {

// ---------------------------------------------------------------------------
// Channels-last, pass 1 (forward: shifted sums; backward: du, du x_hat):
// block (n, b) of grid (n * bps, ncc) takes rows j * rt .. of sample n for
// j = b, b + bps, ...; thread (r, j) = (tid / cols, tid % cols) holds the P
// channels cc * cols * P + j * P + [0, P) (column chunk cc = blockIdx.y) and
// rows r, r + rps, ...; per channel its sums over the row slices, in a
// fixed tree -> part[(n * bps + b) * c + channel].
template <typename T, int P, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gn_s_sums_cl(const __grid_constant__ GnParams p) {
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
          gn_s_load<T, P>(x + o, false, f[u]);
          if constexpr (BWD) gn_s_load<T, P>(dy + o, false, d[u]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int e = 0; e < P; ++e) {
            if constexpr (BWD) {
              const float xh = (f[u][e] - co0[e]) * co1[e], du = gn_s_du<T>(d[u][e], xh, co2[e], co3[e], p.silu);
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
        gn_s_load<T, P>(x + o, false, f);
        if constexpr (BWD) gn_s_load<T, P>(dy + o, false, d);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          if constexpr (BWD) {
            const float xh = (f[e] - co0[e]) * co1[e], du = gn_s_du<T>(d[e], xh, co2[e], co3[e], p.silu);
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
  gn_slice_tree(r, rps, cols, [&](int i, int k) {
#pragma unroll
    for (int e = 0; e < P; ++e) {
      const float2 o = red[k * P + e];
      red[i * P + e].x += o.x;
      red[i * P + e].y += o.y;
    }
  });
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

// Channels-last last pass (forward: y; backward: dx): block (k, cc) of grid
// (grid3, ncc) takes row chunks in the reverse of pass 1's order; per thread
// its P channels' coefficients (recomputed when the sample changes).
template <typename T, int P, bool BWD>
__global__ void __launch_bounds__(kGnThreads) gn_s_last_cl(const __grid_constant__ GnParams p) {
  const GnStreamGeo &g = p.sgeo;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  T *out = static_cast<T *>(p.y);
  if constexpr (BWD) gn_s_weight_grads<T>(p);
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
      gn_s_load<T, P>(x + o, true, f);
      if constexpr (BWD) {
        float d[P];
        gn_s_load<T, P>(dy + o, true, d);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const float xh = (f[e] - mean[e]) * rs[e];
          const float du = gn_s_du<T>(d[e], xh, ca[e], cb[e], p.silu);
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
      gn_s_store<T, P>(out + o, f);
    }
  }
}

}  // namespace fnorm
