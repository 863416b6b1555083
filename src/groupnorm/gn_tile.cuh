/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's device pieces below the kernel (gn_kernels.cuh): parameter
// loads, the per-channel affine terms, a thread's place in a tile (its
// channels, its packs, their loads into shared memory) and the fixed-order
// sums per line (channel) of a block.
#pragma once

#include "core/device.cuh"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {

template <typename T>
__device__ __forceinline__ float gn_ld(const void *p, int f32, int64_t i) {
  return f32 ? static_cast<const float *>(p)[i] : Convert<T>::to_float(static_cast<const T *>(p)[i]);
}
template <typename T>
__device__ __forceinline__ void gn_st(void *p, int f32, int64_t i, float v) {
  if (f32)
    static_cast<float *>(p)[i] = v;
  else
    static_cast<T *>(p)[i] = Convert<T>::from_float(v);
}

// sigmoid(v): for 16-bit outputs through one MUFU.TANH (tanh.approx,
// relative error ~2^-11, below their rounding); for fp32 through exp and a
// fast reciprocal. Two MUFU operations per element made the SiLU forward
// MUFU-bound on the H100 (+20% over plain at [1, 512, 256, 256] bf16).
template <typename T>
__device__ __forceinline__ float gn_sigmoid(float v) {
  if constexpr (sizeof(T) == 2) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * v));
    return fmaf(0.5f, t, 0.5f);
  } else {
    return __frcp_rn(1.f + __expf(-v));
  }
}

// The per-channel affine parameters of channel c of sample n: gamma' =
// gamma (1 + scale), beta' = beta (1 + scale) + shift, and 1 + scale.
template <typename T>
struct GnChannel {
  float gamma, beta, gp, bp, one_s;
  __device__ __forceinline__ GnChannel(const GnParams &p, int64_t n, int64_t c) {
    gamma = p.gamma ? gn_ld<T>(p.gamma, p.w_f32, c) : 1.f;
    beta = p.beta ? gn_ld<T>(p.beta, p.w_f32, c) : 0.f;
    const float s = p.scale ? gn_ld<T>(p.scale, p.ss_f32, n * p.ss_sn + c * p.ss_sc) : 0.f;
    const float h = p.shift ? gn_ld<T>(p.shift, p.ss_f32, n * p.ss_sn + c * p.ss_sc) : 0.f;
    one_s = 1.f + s;
    gp = gamma * one_s;
    bp = beta * one_s + h;
  }
};

template <typename T, int P, bool CL, bool BWD>
struct GnTile {
  static constexpr int KMAX = BWD ? kGnBwdK : kGnFwdK;
  static constexpr int NS = CL ? P : 1;  // distinct channels per thread
  using Raw = Pack<T, P>;

  const GnParams &p;
  const GnGeometry &g;
  int r, j;
  int64_t n, cbase, W, u, g0;  // g0: the unit's first (sample, group) index
  __device__ __forceinline__ GnTile(const GnParams &p_) : p(p_), g(p_.geo) {
    r = threadIdx.x / static_cast<int>(g.tpr);
    j = threadIdx.x % static_cast<int>(g.tpr);
  }
  __device__ __forceinline__ void set_unit(int64_t unit) {
    u = unit;
    const int64_t per_sample = p.groups / g.gb;
    n = u / per_sample;
    W = g.gb * p.cg;
    cbase = (u % per_sample) * W;
    g0 = n * p.groups + (u % per_sample) * g.gb;
  }
  // The thread's first channel (in the unit) in channel block rb, or -1.
  __device__ __forceinline__ int64_t chan0(int64_t rb) const {
    if (CL) {
      if (r >= g.rps) return -1;
      const int64_t c = rb * g.lines + static_cast<int64_t>(j) * P;
      return c < W ? c : -1;
    }
    const int64_t c = rb * g.lines + r;
    return c < W ? c : -1;
  }
  // Where the thread's packs of sub-tile sc lie: pack k at element
  // base + k * ostep, spatial value s0 + k * sstep (valid below s).
  struct Packs {
    int64_t base, ostep, s0, sstep;
    __device__ __forceinline__ bool valid(int k) const { return s0 + k * sstep < 0; }
    __device__ __forceinline__ int64_t at(int k) const { return base + k * ostep; }
  };
  __device__ __forceinline__ Packs packs(int64_t c0, int64_t sc) const {
    Packs q;
    if (CL) {
      const int64_t s = sc * g.span + r;
      q.base = (n * p.s + s) * p.c + cbase + c0;
      q.ostep = g.rps * p.c;
      q.s0 = s - p.s;  // negative while inside
      q.sstep = g.rps;
    } else {
      const int64_t s = sc * g.span + static_cast<int64_t>(j) * P;
      q.base = (n * p.c + cbase + c0) * p.s + s;
      q.ostep = g.tpr * P;
      q.s0 = s - p.s;
      q.sstep = g.tpr * P;
    }
    return q;
  }
  // Copies the thread's packs into its slots of the tile in shared memory
  // (v[k * kGnThreads + tid]: only the thread itself reads them back).
  __device__ __forceinline__ void load(const void *src, Raw *v, int64_t c0, const Packs &q) const {
    const T *x = static_cast<const T *>(src);
    if (c0 < 0) return;
#pragma unroll
    for (int k = 0; k < KMAX; ++k)
      if (k < g.k && q.s0 + k * q.sstep < 0) cp_async<sizeof(Raw)>(v + k * kGnThreads + threadIdx.x, x + q.at(k));
  }
  // The group (in the unit) of slot e.
  __device__ __forceinline__ int group_of(int64_t c0, int e) const {
    return static_cast<int>(c0 + (CL ? e : 0)) / static_cast<int>(p.cg);  // channels < 2^31
  }
  // The forward's shift of group q: its first value.
  __device__ __forceinline__ float shift_of(int q) const {
    const T *x = static_cast<const T *>(p.x);
    const int64_t c = cbase + q * p.cg;
    return Convert<T>::to_float(CL ? x[n * p.s * p.c + c] : x[(n * p.c + c) * p.s]);
  }
};

// A fixed tree over a block's `rps` row slices (thread tid in slice r; the
// same place in slice r + k is thread tid + k * stride): add(i, j) adds
// thread j's sums into thread i's; the barriers are included.
template <class Add>
__device__ __forceinline__ void gn_slice_tree(int r, int rps, int stride, Add add) {
  int st = 1;
  while (st < rps) st <<= 1;
  for (st >>= 1; st >= 1; st >>= 1) {
    __syncthreads();
    if (r < st && r + st < rps) add(static_cast<int>(threadIdx.x), static_cast<int>(threadIdx.x) + st * stride);
  }
}

// Reduces the threads' per-slot sums a, b to one value per line (channel)
// of the block: la, lb[line], line < lines. Fixed orders throughout.
//   channels-first: a team of tpr threads (a power of two, aligned) per
//     line: shuffles within the warp, then the team's warps in order.
//   channels-last with tpr a power of two <= 32: shuffles over the warp's
//     rows, then the 8 warps in order per column; other tpr: a tree over
//     the row slices in shared memory.
template <int P, bool CL>
__device__ __forceinline__ void gn_line_reduce(const GnGeometry &g, int r, int j, float (&a)[P], float (&b)[P],
                                               float *sa, float *sb, float *la, float *lb) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  constexpr int kWarps = kGnThreads / 32;
  const int tpr = static_cast<int>(g.tpr);
  __syncthreads();  // the last readers of sa, sb, la, lb are done
  if (CL && tpr <= 32 && (tpr & (tpr - 1)) == 0) {
    for (int mask = tpr; mask < 32; mask <<= 1) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        a[e] += __shfl_xor_sync(kFullMask, a[e], mask);
        b[e] += __shfl_xor_sync(kFullMask, b[e], mask);
      }
    }
    const int lines = static_cast<int>(g.lines);
    if (lane < tpr) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        sa[warp * lines + lane * P + e] = a[e];
        sb[warp * lines + lane * P + e] = b[e];
      }
    }
    __syncthreads();
    for (int l = tid; l < lines; l += kGnThreads) {
      float x = 0.f, y = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        x += sa[w * lines + l];
        y += sb[w * lines + l];
      }
      la[l] = x;
      lb[l] = y;
    }
  } else if (CL) {
#pragma unroll
    for (int e = 0; e < P; ++e) {
      sa[tid * P + e] = a[e];
      sb[tid * P + e] = b[e];
    }
    gn_slice_tree(r, static_cast<int>(g.rps), tpr, [&](int i, int k) {
#pragma unroll
      for (int e = 0; e < P; ++e) {
        sa[i * P + e] += sa[k * P + e];
        sb[i * P + e] += sb[k * P + e];
      }
    });
    __syncthreads();
    for (int l = tid; l < g.lines; l += kGnThreads) {
      la[l] = sa[l];
      lb[l] = sb[l];
    }
  } else {
    float2 v = make_float2(a[0], b[0]);
    v = group_allreduce<Sum2Op>(v, tpr < 32 ? tpr : 32);
    if (tpr <= 32) {
      if (j == 0) {
        la[r] = v.x;
        lb[r] = v.y;
      }
    } else {
      if (lane == 0) {
        sa[warp] = v.x;
        sb[warp] = v.y;
      }
      __syncthreads();
      if (j == 0) {
        const int nw = tpr >> 5;
        float x = 0.f, y = 0.f;
        for (int w = 0; w < nw; ++w) {
          x += sa[warp + w];
          y += sb[warp + w];
        }
        la[r] = x;
        lb[r] = y;
      }
    }
  }
  __syncthreads();
}

}  // namespace fnorm
