/* SPDX-License-Identifier: Apache-2.0 */
// Device pieces of the one-launch BatchNorm kernels (bn_persistent.cuh's
// one-wave kernel, bn_stream.cuh's streaming kernel): a block's partial
// sums per column before the grid barrier, and the gather form of the
// combine after it (over a column tile: the streaming kernel's one tile is
// the whole width).
#pragma once

#include "batchnorm/batchnorm.cuh"
#include "batchnorm/bn_channel_end.cuh"

namespace fnorm {

// The block's sums per column of its tile (ncp packs from column col0, ncp
// a power of two <= kBnThreads; thread t holds pack t % ncp, at lcol within
// the tile, of row slice t / ncp), added in a fixed order and written as row
// prow of the partials: a warp's row slices (32 / ncp of them) with
// shuffles, then the slices left (the warps', or kBnThreads / ncp where a
// row spans warps) through shared memory after one block barrier. (A tree
// over the slices in shared memory took log2(slices) barriers and 8-way
// bank conflicts at 16-byte packs: 3-4 us of the one-wave kernel, H100.)
template <int PACK>
__device__ __forceinline__ void bn_block_partials(const BnPersistParams &p, float (&a)[PACK], float (&b)[PACK],
                                                  int ncp, int lcol, int64_t col0, int64_t prow, float *sa,
                                                  float *sb) {
  for (int off = ncp; off < 32; off <<= 1) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      a[k] += __shfl_xor_sync(kFullMask, a[k], off);
      b[k] += __shfl_xor_sync(kFullMask, b[k], off);
    }
  }
  const int tile_cols = ncp * PACK;
  const int slices = ncp < 32 ? kBnThreads / 32 : kBnThreads / ncp;
  const int slice = ncp < 32 ? static_cast<int>(threadIdx.x >> 5) : static_cast<int>(threadIdx.x) / ncp;
  if (ncp >= 32 || static_cast<int>(threadIdx.x & 31) < ncp) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      sa[slice * tile_cols + lcol + k] = a[k];
      sb[slice * tile_cols + lcol + k] = b[k];
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < tile_cols; j += kBnThreads) {
    float s1 = 0.f, s2 = 0.f;
    for (int w = 0; w < slices; ++w) {
      s1 += sa[w * tile_cols + j];
      s2 += sb[w * tile_cols + j];
    }
    const int64_t e = prow * p.shape.width + col0 + j;
    p.part_moment1[e] = s1;
    p.part_moment2[e] = s2;
  }
}

// Gather combine over one column tile (tile_cols columns from col0, a power
// of two <= kBnThreads): the block adds, per column of its tile, the
// partials of the tile's `tile_blocks` blocks (rows 0 .. tile_blocks - 1 of
// the partials) in double, and thread j < tile_cols computes column col0 + j's
// coefficients into coef[j]; the tile's first block (bx == 0) writes the
// channels' outputs. shift (forward): column
// col0 + threadIdx.x's row-0 value; rf: the running averages' factor; both
// read before the grid barrier (y may be x, and block 0 counts the batch
// after its combine while other tiles' first blocks may still be in theirs).
template <bool BWD>
__device__ __forceinline__ void bn_combine_gather(const BnPersistParams &p, int tile_cols, int64_t col0,
                                                  int tile_blocks, int64_t bx, float shift, double rf, double *da,
                                                  double *db, BnCoefs *coef) {
  const int64_t width = p.shape.width;
  const int j = threadIdx.x & (tile_cols - 1);
  const int lanes = kBnThreads / tile_cols;  // threads per column
  constexpr int kU = 8;  // independent loads in flight per thread
  const float *m1 = p.part_moment1 + col0 + j;
  const float *m2 = p.part_moment2 + col0 + j;
  double s1 = 0.0, s2 = 0.0;
  for (int g0 = threadIdx.x / tile_cols; g0 < tile_blocks; g0 += kU * lanes) {
    float va[kU], vb[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int g = g0 + u * lanes;
      const bool ok = g < tile_blocks;
      va[u] = ok ? __ldcg(m1 + static_cast<int64_t>(g) * width) : 0.f;
      vb[u] = ok ? __ldcg(m2 + static_cast<int64_t>(g) * width) : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      s1 += va[u];
      s2 += vb[u];
    }
  }
  da[threadIdx.x] = s1;
  db[threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.x < tile_cols) {
    const int64_t c = col0 + threadIdx.x;
    const double n = static_cast<double>(p.shape.rows);
    double S1 = 0.0, S2 = 0.0;
    for (int l = 0; l < lanes; ++l) {  // the lanes' sums of the column, in order
      S1 += da[l * tile_cols + threadIdx.x];
      S2 += db[l * tile_cols + threadIdx.x];
    }
    if constexpr (BWD) {
      coef[threadIdx.x] = bwd_coefs(p.f, c, n, S1, S2);
      if (bx == 0) finish_bwd(p.f, c, n, S1, S2, true);
    } else {
      const double mean = static_cast<double>(shift) + S1 / n;
      const double m2v = fmax(S2 - S1 * S1 / n, 0.0);
      coef[threadIdx.x] = fwd_coefs(p.f, c, mean, 1.0 / sqrt(m2v / n + p.f.eps));
      if (bx == 0) finish_fwd_at(p.f, c, n, mean, m2v, rf);
    }
  }
  __syncthreads();
}

}  // namespace fnorm
