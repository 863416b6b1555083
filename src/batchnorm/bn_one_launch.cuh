/* SPDX-License-Identifier: Apache-2.0 */
// Device pieces of the streaming one-launch BatchNorm kernel
// (bn_stream.cuh): a block's partial sums per column before the grid
// barrier, and the gather form of the combine after it. (The one-wave
// kernel, bn_persistent.cuh, has its own forms of both over column tiles:
// bn_one_wave_partials, bn_one_wave_combine_tile.)
#pragma once

#include "batchnorm/batchnorm.cuh"
#include "batchnorm/bn_channel_end.cuh"

namespace fnorm {

// The block's sums per column, added in a fixed order (a tree over the rpi
// row slices: thread t holds columns [col, col + PACK) of slice r = t / ncp)
// and written by slice 0 as row prow of the partials.
template <int PACK>
__device__ __forceinline__ void bn_block_partials(const BnPersistParams &p, float (&a)[PACK], float (&b)[PACK],
                                                  int64_t col, int r, int ncp, int rpi, int64_t prow, float *sa,
                                                  float *sb) {
#pragma unroll
  for (int k = 0; k < PACK; ++k) {
    sa[threadIdx.x * PACK + k] = a[k];
    sb[threadIdx.x * PACK + k] = b[k];
  }
  for (int stride = rpi >> 1; stride > 0; stride >>= 1) {
    __syncthreads();
    if (r < stride) {
      const int o = threadIdx.x + stride * ncp;
#pragma unroll
      for (int k = 0; k < PACK; ++k) {
        a[k] += sa[o * PACK + k];
        b[k] += sb[o * PACK + k];
        sa[threadIdx.x * PACK + k] = a[k];
        sb[threadIdx.x * PACK + k] = b[k];
      }
    }
  }
  if (r == 0) {
    const int64_t base = prow * p.shape.width + col;
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      p.part_moment1[base + k] = a[k];
      p.part_moment2[base + k] = b[k];
    }
  }
}

// Gather combine (width <= 256, width divides 256): every block adds all
// blocks' partials per column in double; thread j < width computes column
// j's coefficients into coef[j]; block 0 writes the channels' outputs.
// shift (forward): column threadIdx.x's row-0 value, read before the grid
// barrier.
template <bool BWD>
__device__ __forceinline__ void bn_combine_gather(const BnPersistParams &p, float shift, double *da, double *db,
                                                  BnCoefs *coef) {
  const int64_t width = p.shape.width;
  const int j = threadIdx.x & static_cast<int>(width - 1);
  const int lanes = kBnThreads / static_cast<int>(width);  // threads per column
  // kU independent loads in flight per thread (a dependent chain of L2
  // round trips here cost more than the rest of the kernel).
  constexpr int kU = 8;
  double s1 = 0.0, s2 = 0.0;
  for (int g0 = threadIdx.x / static_cast<int>(width); g0 < static_cast<int>(gridDim.x); g0 += kU * lanes) {
    float va[kU], vb[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int g = g0 + u * lanes;
      const bool ok = g < static_cast<int>(gridDim.x);
      va[u] = ok ? __ldcg(p.part_moment1 + static_cast<int64_t>(g) * width + j) : 0.f;
      vb[u] = ok ? __ldcg(p.part_moment2 + static_cast<int64_t>(g) * width + j) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      s1 += va[u];
      s2 += vb[u];
    }
  }
  da[threadIdx.x] = s1;
  db[threadIdx.x] = s2;
  for (int stride = kBnThreads >> 1; stride >= static_cast<int>(width); stride >>= 1) {
    __syncthreads();
    if (threadIdx.x < stride) {
      da[threadIdx.x] += da[threadIdx.x + stride];
      db[threadIdx.x] += db[threadIdx.x + stride];
    }
  }
  __syncthreads();
  if (threadIdx.x < width) {
    const double n = static_cast<double>(p.shape.rows);
    const double S1 = da[threadIdx.x], S2 = db[threadIdx.x];
    if constexpr (BWD) {
      coef[threadIdx.x] = bwd_coefs(p.f, threadIdx.x, n, S1, S2);
      if (blockIdx.x == 0) finish_bwd(p.f, threadIdx.x, n, S1, S2, true);
    } else {
      const double mean = static_cast<double>(shift) + S1 / n;
      const double m2 = fmax(S2 - S1 * S1 / n, 0.0);
      coef[threadIdx.x] = fwd_coefs(p.f, threadIdx.x, mean, 1.0 / sqrt(m2 / n + p.f.eps));
      if (blockIdx.x == 0) finish_fwd(p.f, threadIdx.x, n, mean, m2);
    }
  }
  __syncthreads();
}

}  // namespace fnorm
