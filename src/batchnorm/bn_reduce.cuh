/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm device code: the two reduction passes (forward Welford
// statistics, backward gradient sums) over the [rows, width] view, as
// Columns or Segments kernels, with their shape and launch functions.
#pragma once

#include "batchnorm/batchnorm.cuh"

namespace fnorm {

constexpr int kBnUnroll = 4;  // independent packs in flight per thread in the reductions
// Resident blocks per SM the columns reduction is compiled for (register
// cap). 3 (80 registers) spilled in the fp16/bf16 backward and ran 6% slower
// than 2 on the H200 (bench/NOTES.md).
constexpr int kBnReduceMinBlocks = 2;

// ---------------------------------------------------------------------------
// Columns reduction: thread (r, cp) of the block owns PACK columns
// [col, col + PACK) and walks rows r0 + r, r0 + r + rpi, ... of its split;
// the block then folds its rpi row slices per column (shuffles in a warp,
// then the warps in order through shared memory).
// ncp = 2^ncp_log2 column packs per block tile (<= 32, so a warp reads whole
// row segments: coalesced), rpi = kBnThreads / ncp row slices.
// Assumptions: PACK divides width; x (and dy) aligned to PACK elements.
// ---------------------------------------------------------------------------
template <typename T, int PACK, bool BWD>
__global__ void __launch_bounds__(kBnThreads, kBnReduceMinBlocks) bn_reduce_columns_kernel(BnReduceParams p,
                                                                       int ncp_log2) {
  __shared__ float sa[kBnThreads * PACK];
  __shared__ float sb[kBnThreads * PACK];
  __shared__ float sn[kBnThreads];
  const int ncp = 1 << ncp_log2;
  const int rpi = kBnThreads >> ncp_log2;
  const int cp = threadIdx.x & (ncp - 1);
  const int r = threadIdx.x >> ncp_log2;
  const int64_t width = p.shape.width;
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * ncp + cp) * PACK;
  const bool col_ok = col < width;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * p.split_len;
  const int64_t r1 = min(p.shape.rows, r0 + p.split_len);

  float a[PACK], b[PACK], mu[PACK];
  float n = 0.f;
#pragma unroll
  for (int k = 0; k < PACK; ++k) a[k] = b[k] = mu[k] = 0.f;
  const T *x = static_cast<const T *>(p.x) + col;
  const T *dy = BWD ? static_cast<const T *>(p.dy) + col : nullptr;
  if (BWD && col_ok) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) mu[k] = __ldg(p.mean + (col + k) / p.shape.group);
  }

  auto accumulate = [&](const float (&v)[PACK], const float (&g)[PACK]) {
    if constexpr (BWD) {
#pragma unroll
      for (int k = 0; k < PACK; ++k) {
        a[k] += g[k];
        b[k] += g[k] * (v[k] - mu[k]);
      }
    } else {
      n += 1.f;
      const float inv = 1.f / n;
#pragma unroll
      for (int k = 0; k < PACK; ++k) {
        const float d = v[k] - a[k];
        a[k] += d * inv;
        b[k] += d * (v[k] - a[k]);
      }
    }
  };
  // The loop keeps each pack in its stored form (a 16-byte fp16 pack is 4
  // registers, 8 once widened) until it is consumed, and walks pointers
  // instead of recomputing 64-bit row offsets: the fp16 backward instance
  // needed 112 registers (2 blocks per SM) before.
  using Raw = Pack<T, PACK>;
  auto widen = [](const Raw &raw, float (&out)[PACK]) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) out[k] = Convert<T>::to_float(raw.v[k]);
  };
  auto masked = [&](const Raw &raw, uint32_t bits, float (&g)[PACK]) {
    widen(raw, g);
    if (p.mask != nullptr) {
#pragma unroll
      for (int k = 0; k < PACK; ++k) g[k] = (bits >> k) & 1u ? g[k] : 0.f;
    }
  };

  if (col_ok) {
    const int64_t step = static_cast<int64_t>(rpi) * width;  // elements between a thread's rows
    int64_t m = r0 + r;
    int64_t off = m * width;  // element offset of (row m, col)
    for (; m + (kBnUnroll - 1) * rpi < r1; m += kBnUnroll * rpi, off += kBnUnroll * step) {
      Raw xr[kBnUnroll], gr[kBnUnroll];
      uint32_t bits[kBnUnroll];
#pragma unroll
      for (int u = 0; u < kBnUnroll; ++u) xr[u] = *reinterpret_cast<const Raw *>(x + off + u * step);
      if constexpr (BWD) {
#pragma unroll
        for (int u = 0; u < kBnUnroll; ++u) {
          gr[u] = *reinterpret_cast<const Raw *>(dy + off + u * step);
          bits[u] = p.mask != nullptr ? read_mask_bits<PACK>(p.mask, off + u * step + col) : 0u;
        }
      }
#pragma unroll
      for (int u = 0; u < kBnUnroll; ++u) {
        float v[PACK], g[PACK];
        widen(xr[u], v);
        if constexpr (BWD) masked(gr[u], bits[u], g);
        accumulate(v, g);
      }
    }
    for (; m < r1; m += rpi, off += step) {
      float v[PACK], g[PACK];
      widen(*reinterpret_cast<const Raw *>(x + off), v);
      if constexpr (BWD) {
        masked(*reinterpret_cast<const Raw *>(dy + off),
               p.mask != nullptr ? read_mask_bits<PACK>(p.mask, off + col) : 0u, g);
      }
      accumulate(v, g);
    }
  }

  // Fold the rpi row slices of each column: a warp's 32 / ncp slices with
  // shuffles, then the 8 warps' in order through shared memory after one
  // barrier. (A tree over r in shared memory took log2(rpi) barriers with
  // 8-way bank conflicts at 16-byte packs; the one-launch kernels' same
  // tree cost them 3-4 us, bench/NOTES.md session 21.)
  for (int off = ncp; off < 32; off <<= 1) {
    if constexpr (BWD) {
#pragma unroll
      for (int k = 0; k < PACK; ++k) {
        a[k] += __shfl_xor_sync(kFullMask, a[k], off);
        b[k] += __shfl_xor_sync(kFullMask, b[k], off);
      }
    } else {
      const float nb = __shfl_xor_sync(kFullMask, n, off);
#pragma unroll
      for (int k = 0; k < PACK; ++k) {
        const float ma = __shfl_xor_sync(kFullMask, a[k], off);
        const float mb = __shfl_xor_sync(kFullMask, b[k], off);
        const Welford w = WelfordOp::combine({a[k], b[k], n}, {ma, mb, nb});
        a[k] = w.mean;
        b[k] = w.m2;
      }
      n += nb;
    }
  }
  const int tile = ncp * PACK;
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if (static_cast<int>(threadIdx.x & 31) < ncp) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      sa[warp * tile + cp * PACK + k] = a[k];
      sb[warp * tile + cp * PACK + k] = b[k];
    }
    sn[warp * ncp + cp] = n;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < tile) {
    const int j = static_cast<int>(threadIdx.x);
    const int64_t cj = static_cast<int64_t>(blockIdx.x) * tile + j;
    if (cj < width) {
      float s1 = sa[j], s2 = sb[j], sc = sn[j / PACK];
      for (int w = 1; w < kBnThreads / 32; ++w) {
        if constexpr (BWD) {
          s1 += sa[w * tile + j];
          s2 += sb[w * tile + j];
        } else {
          const Welford m = WelfordOp::combine({s1, s2, sc}, {sa[w * tile + j], sb[w * tile + j], sn[w * ncp + j / PACK]});
          s1 = m.mean;
          s2 = m.m2;
          sc = m.n;
        }
      }
      p.part_moment1[static_cast<int64_t>(blockIdx.y) * width + cj] = s1;
      p.part_moment2[static_cast<int64_t>(blockIdx.y) * width + cj] = s2;
    }
  }
}

// ---------------------------------------------------------------------------
// Segments reduction (channels-first with long spatial runs): block
// (c, split) reduces elements [i0, i1) of channel c's rows * group values,
// element i being x[(i / group) * width + c * group + i % group].
// Assumptions: PACK divides group; split_len is a multiple of PACK.
// ---------------------------------------------------------------------------
template <typename T, int PACK, bool BWD>
__global__ void __launch_bounds__(kBnThreads) bn_reduce_segments_kernel(BnReduceParams p) {
  using Acc = typename std::conditional<BWD, Sum2Op, WelfordOp>::type;
  __shared__ typename Acc::Value scratch[32];
  const int64_t c = blockIdx.x;
  const int64_t S = p.shape.group, width = p.shape.width;
  const int64_t domain = p.shape.rows * S;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * p.split_len;
  const int64_t i1 = min(domain, i0 + p.split_len);
  constexpr int64_t kStep = static_cast<int64_t>(kBnThreads) * PACK;
  const int64_t dn = kStep / S, ds = kStep % S;
  int64_t i = i0 + static_cast<int64_t>(threadIdx.x) * PACK;
  int64_t n = i / S, s = i - (i / S) * S;
  const T *x = static_cast<const T *>(p.x) + c * S;
  const T *dy = BWD ? static_cast<const T *>(p.dy) + c * S : nullptr;
  const float mu = BWD ? __ldg(p.mean + c) : 0.f;
  Welford w{0.f, 0.f, 0.f};
  float2 sums = make_float2(0.f, 0.f);

  auto next = [&]() -> int64_t {  // offset of the current pack, then step
    const int64_t off = n * width + s;
    s += ds;
    n += dn;
    if (s >= S) {
      s -= S;
      ++n;
    }
    return off;
  };
  auto accumulate = [&](int64_t off, const float (&v)[PACK], float (&g)[PACK]) {
    if constexpr (BWD) {
      if (p.mask != nullptr) {
        const uint32_t bits = read_mask_bits<PACK>(p.mask, off + c * S);
#pragma unroll
        for (int k = 0; k < PACK; ++k) g[k] = (bits >> k) & 1u ? g[k] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < PACK; ++k) {
        sums.x += g[k];
        sums.y += g[k] * (v[k] - mu);
      }
    } else {
      w = welford_chunk<PACK>(w, v);
    }
  };

  for (; i + (kBnUnroll - 1) * kStep < i1; i += kBnUnroll * kStep) {
    int64_t off[kBnUnroll];
    float v[kBnUnroll][PACK], g[kBnUnroll][PACK];
#pragma unroll
    for (int u = 0; u < kBnUnroll; ++u) off[u] = next();
#pragma unroll
    for (int u = 0; u < kBnUnroll; ++u) load_pack<T, PACK>(x + off[u], v[u]);
    if constexpr (BWD) {
#pragma unroll
      for (int u = 0; u < kBnUnroll; ++u) load_pack<T, PACK>(dy + off[u], g[u]);
    }
#pragma unroll
    for (int u = 0; u < kBnUnroll; ++u) accumulate(off[u], v[u], g[u]);
  }
  for (; i < i1; i += kStep) {
    const int64_t off = next();
    float v[PACK], g[PACK];
    load_pack<T, PACK>(x + off, v);
    if constexpr (BWD) load_pack<T, PACK>(dy + off, g);
    accumulate(off, v, g);
  }

  const int64_t out = static_cast<int64_t>(blockIdx.y) * p.shape.channels + c;
  if constexpr (BWD) {
    sums = block_allreduce<Sum2Op>(sums, scratch);
    if (threadIdx.x == 0) {
      p.part_moment1[out] = sums.x;
      p.part_moment2[out] = sums.y;
    }
  } else {
    w = block_allreduce<WelfordOp>(w, scratch);
    if (threadIdx.x == 0) {
      p.part_moment1[out] = w.mean;
      p.part_moment2[out] = w.m2;
    }
  }
}

// ---------------------------------------------------------------------------
// Launchers of the reductions (batchnorm.cuh says how launchers are shaped).
// ---------------------------------------------------------------------------
// The reductions size their grid to one wave of resident blocks (their
// occupancy differs by pack and pass), at most max_splits splits (what the
// workspace holds), each thread getting >= kBnMinPacksPerThread packs; the
// shape carries the splits and split length the finalize reads.
constexpr int64_t kBnMinPacksPerThread = 8;

template <typename T, int PACK, bool BWD>
cudaError_t shape_bn_reduce_columns(const BnShape &sh, int max_splits, const DeviceContext &ctx, BnReduceShape *s) {
  auto kernel = bn_reduce_columns_kernel<T, PACK, BWD>;
  const int64_t packs = sh.width / PACK;
  int ncp_log2 = 0;
  while ((int64_t{1} << ncp_log2) < packs && ncp_log2 < 5) ++ncp_log2;
  const int64_t tiles = ceil_div(packs, int64_t{1} << ncp_log2);
  const int64_t rpi = kBnThreads >> ncp_log2;
  int occ = 0;
  cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel), kBnThreads, 0, &occ);
  if (err != cudaSuccess) return err;
  const int64_t want = std::max<int64_t>(1, static_cast<int64_t>(ctx.dev.sm_count) * std::max(occ, 1) / tiles);
  const int64_t by_rows = std::max<int64_t>(1, ceil_div(sh.rows, rpi * kBnMinPacksPerThread));
  const int64_t splits = std::min({want, by_rows, static_cast<int64_t>(max_splits)});
  s->split_len = ceil_div(sh.rows, splits);
  s->splits = static_cast<int>(ceil_div(sh.rows, s->split_len));
  s->grid_x = tiles;
  s->ncp_log2 = ncp_log2;
  return cudaSuccess;
}

// Assumptions: p.split_len and p.splits are the shape's.
template <typename T, int PACK, bool BWD>
cudaError_t launch_bn_reduce_columns(const BnReduceParams &p, const BnReduceShape &s, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.grid_x), static_cast<unsigned>(s.splits));
  bn_reduce_columns_kernel<T, PACK, BWD><<<grid, kBnThreads, 0, stream>>>(p, s.ncp_log2);
  return cudaGetLastError();
}

template <typename T, int PACK, bool BWD>
cudaError_t shape_bn_reduce_segments(const BnShape &sh, int max_splits, const DeviceContext &ctx,
                                     BnReduceShape *s) {
  auto kernel = bn_reduce_segments_kernel<T, PACK, BWD>;
  int occ = 0;
  cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel), kBnThreads, 0, &occ);
  if (err != cudaSuccess) return err;
  const int64_t domain = sh.rows * sh.group;
  const int64_t want =
      std::max<int64_t>(1, static_cast<int64_t>(ctx.dev.sm_count) * std::max(occ, 1) / sh.channels);
  const int64_t by_len = std::max<int64_t>(1, ceil_div(domain, kBnThreads * PACK * kBnMinPacksPerThread));
  const int64_t splits = std::min({want, by_len, static_cast<int64_t>(max_splits)});
  s->split_len = ceil_div(ceil_div(domain, splits), 8) * 8;
  s->splits = static_cast<int>(ceil_div(domain, s->split_len));
  s->grid_x = sh.channels;
  s->ncp_log2 = 0;
  return cudaSuccess;
}

template <typename T, int PACK, bool BWD>
cudaError_t launch_bn_reduce_segments(const BnReduceParams &p, const BnReduceShape &s, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(s.grid_x), static_cast<unsigned>(s.splits));
  bn_reduce_segments_kernel<T, PACK, BWD><<<grid, kBnThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fnorm
