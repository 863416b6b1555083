// BatchNorm in one launch for problems that fit in the registers of one wave
// of resident blocks (channels-last / [N, C] with C a power-of-two number of
// packs, up to a few million elements): each thread loads its K packs once,
// the block's per-column sums go to the workspace, a grid-wide barrier
// (cooperative launch), every block adds all blocks' sums in double, and the
// elementwise part runs on the values still in registers. For such sizes the
// three dependent launches of the general path (reduce, finalize, apply) cost
// more than the memory traffic; here x (and dy) are read once.
//
// Thread (r, cp) of a block owns PACK columns [cp * PACK, cp * PACK + PACK)
// and rows base + r + i * rpi, i < K (rpi = 256 / ncp row slices). A warp
// covers 32 / ncp whole consecutive rows = 32 * PACK consecutive elements
// starting on a multiple of 32, so the ReLU mask words are built with the
// same shuffles as in the elementwise kernels.
//
// Forward sums are shifted by the channel's value in row 0 (read by every
// block alike): S1 = sum (x - K), S2 = sum (x - K)^2, mean = K + S1 / n,
// M2 = S2 - S1^2 / n: no cancellation worth the name for |mean| >> std.
//
// The combine after the barrier, in one of two forms (the kernel's GATHER):
//   gather: every block adds all blocks' partials itself (grid * width
//     loads per block), then computes its coefficients; one barrier.
//   owner: column j's totals are added once, by block j % grid (its threads
//     over the blocks' partials, in a fixed order), which writes the
//     channel's outputs and coefficients (workspace); a second barrier, then
//     every block reads the coefficients of its columns.
// Gather costs grid^2 * width loads in all (314 MB of L2 reads at
// [128, 256, 14, 14] fp16, 392 blocks); owner costs a second barrier. H200
// (2026-11-22, bench/ab_batchnorm.py, forward / backward us, owner vs
// gather): [128, 256, 14, 14] fp16 23.8 / 26.7 vs 73.4 / 26.7 (the backward
// there takes the general path); [32, 64, 56, 56] 23.9 vs 33.9 forward;
// [16, 64, 56, 56] 17.8 / 18.2 vs 19.9 / 20.7; [64, 128, 14, 14] 15.2 / 14.4
// vs 14.8 / 14.5; [4, 64, 56, 56] 14.7 / 13.6 vs 11.8 / 11.1; fp16
// [126000, 16] 13.1 / 13.2 vs 11.9 / 11.9; fp32 [126000, 16] 13.3 / 14.8 vs
// 12.3 / 14.1. So gather where grid * width <= kBnGatherMax (3136, 1984 and
// 3952 above), owner from 12544 up. Outputs were bit-identical in every case
// (both add the float partials in double). FNORM_BN_PERSIST_GATHER_ALL=1
// forces gather (A/B runs).
#pragma once

#include <cooperative_groups.h>

#include <type_traits>

#include "batchnorm/batchnorm.cuh"
#include "batchnorm/bn_channel_end.cuh"

namespace fnorm {

// Packs per thread kept in registers.
#ifndef FNORM_BN_PERSIST_K
#define FNORM_BN_PERSIST_K 8
#endif
constexpr int kBnPersistK = FNORM_BN_PERSIST_K;
constexpr int64_t kBnGatherMax = 8192;  // grid * width (see above)

// Blocks per SM asked of the compiler (0: none asked): the grid must be
// co-resident, so occupancy bounds the problems this path takes. The fp16
// forward (8-element packs) kept 80 registers and 3 blocks per SM with the
// old combine; the new one took it to 104 registers and 2 blocks unless
// asked for 3 (then 80 registers and 16 bytes of stack). Asking the same of
// bf16 spilled 184 bytes; fp32 and the backwards keep their occupancy
// unasked (and asking 1 block let the backward grow to 155 registers).
template <typename T, bool BWD>
constexpr int bn_persistent_min_blocks() { return !BWD && std::is_same_v<T, __half> ? 3 : 0; }

// GATHER: the combine's form (see above), a kernel of its own so that each
// form gets its own registers and occupancy.
template <typename T, int PACK, bool BWD, bool GATHER>
__global__ void __launch_bounds__(kBnThreads, (bn_persistent_min_blocks<T, BWD>()))
    bn_persistent_kernel(BnPersistParams p, int ncp_log2) {
  using Raw = Pack<T, PACK>;
  constexpr int K = kBnPersistK;
  __shared__ float sa[kBnThreads * PACK];
  __shared__ float sb[kBnThreads * PACK];
  __shared__ double da[kBnThreads];
  __shared__ double db[kBnThreads];
  __shared__ BnCoefs coef[kBnThreads];  // per column (width <= 256)

  const int ncp = 1 << ncp_log2;
  const int rpi = kBnThreads >> ncp_log2;
  const int cp = threadIdx.x & (ncp - 1);
  const int r = threadIdx.x >> ncp_log2;
  const int64_t width = p.shape.width;  // == ncp * PACK
  const int64_t rows = p.shape.rows;
  const int col = cp * PACK;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * rpi * K + r;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);

  // ---- load and per-thread sums -------------------------------------------
  Raw xr[K], gr[K];
  uint32_t bits[K];
  float a[PACK], b[PACK], ref[PACK];
#pragma unroll
  for (int k = 0; k < PACK; ++k) a[k] = b[k] = 0.f;
  if constexpr (BWD) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) ref[k] = p.f.in_mean[col + k];
  } else {
    load_pack<T, PACK>(x + col, ref);  // row 0: the shift
  }
  // Channel threadIdx.x's shift for the combine below, read before the grid
  // barrier: y may be x itself, and row 0 is overwritten after it.
  const float shift = !BWD && threadIdx.x < width ? Convert<T>::to_float(x[threadIdx.x]) : 0.f;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t m = row0 + static_cast<int64_t>(i) * rpi;
    bits[i] = 0u;
    if (m < rows) {
      xr[i] = *reinterpret_cast<const Raw *>(x + m * width + col);
      if constexpr (BWD) {
        gr[i] = *reinterpret_cast<const Raw *>(dy + m * width + col);
        if (p.mask_in != nullptr) bits[i] = read_mask_bits<PACK>(p.mask_in, m * width + col);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (row0 + static_cast<int64_t>(i) * rpi >= rows) continue;
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      const float d = Convert<T>::to_float(xr[i].v[k]) - ref[k];
      if constexpr (BWD) {
        float g = Convert<T>::to_float(gr[i].v[k]);
        if (p.mask_in != nullptr && !((bits[i] >> k) & 1u)) g = 0.f;
        a[k] += g;
        b[k] += g * d;
      } else {
        a[k] += d;
        b[k] += d * d;
      }
    }
  }

  // ---- block fold (fixed order) and this block's partials ------------------
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
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      p.part_moment1[static_cast<int64_t>(blockIdx.x) * width + col + k] = a[k];
      p.part_moment2[static_cast<int64_t>(blockIdx.x) * width + col + k] = b[k];
    }
  }
  cooperative_groups::this_grid().sync();

  if constexpr (!GATHER) {
    // ---- column j's totals once, by block j % grid ----------------------------
    const int G = static_cast<int>(gridDim.x);
    for (int j = static_cast<int>(blockIdx.x); j < width; j += G) {
      double s1 = 0.0, s2 = 0.0;
      for (int g = threadIdx.x; g < G; g += kBnThreads) {
        s1 += __ldcg(p.part_moment1 + static_cast<int64_t>(g) * width + j);
        s2 += __ldcg(p.part_moment2 + static_cast<int64_t>(g) * width + j);
      }
      da[threadIdx.x] = s1;
      db[threadIdx.x] = s2;
      for (int stride = kBnThreads >> 1; stride > 0; stride >>= 1) {
        __syncthreads();
        if (threadIdx.x < stride) {
          da[threadIdx.x] += da[threadIdx.x + stride];
          db[threadIdx.x] += db[threadIdx.x + stride];
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        const double n = static_cast<double>(rows);
        const double S1 = da[0], S2 = db[0];
        if constexpr (BWD) {
          finish_bwd(p.f, j, n, S1, S2, true);
        } else {
          // Row 0 is still x here (y, possibly x itself, is written after
          // the second barrier).
          const double mean = static_cast<double>(Convert<T>::to_float(x[j])) + S1 / n;
          finish_fwd(p.f, j, n, mean, fmax(S2 - S1 * S1 / n, 0.0));
        }
      }
      __syncthreads();  // da / db are reused for the next column
    }
    cooperative_groups::this_grid().sync();
    if (threadIdx.x < width) {
      BnCoefs q;
      q.mean = __ldcg(p.f.mean + threadIdx.x);
      q.xmu_scale = __ldcg(p.f.xmu_scale + threadIdx.x);
      q.shift = __ldcg(p.f.shift + threadIdx.x);
      q.dy_scale = BWD ? __ldcg(p.f.dy_scale + threadIdx.x) : 0.f;
      coef[threadIdx.x] = q;
    }
    __syncthreads();
    // (every finish_fwd read the counter for the cumulative average before
    // the barrier.)
    if (!BWD && p.num_batches_tracked != nullptr && blockIdx.x == 0 && threadIdx.x == 0)
      *p.num_batches_tracked += 1;
  } else {
    // ---- every block: all blocks' sums per column, in double ---------------
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
      const double n = static_cast<double>(rows);
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
    // (finish_fwd reads the counter for the cumulative average first.)
    if (!BWD && p.num_batches_tracked != nullptr && blockIdx.x == 0 && threadIdx.x == 0)
      *p.num_batches_tracked += 1;
  }

  // ---- elementwise on the values in registers ------------------------------
  float cm[PACK], xmu_scale[PACK], cshift[PACK], dy_scale[PACK];
#pragma unroll
  for (int k = 0; k < PACK; ++k) {
    const BnCoefs q = coef[col + k];
    cm[k] = q.mean;
    xmu_scale[k] = q.xmu_scale;
    cshift[k] = q.shift;
    dy_scale[k] = q.dy_scale;
  }
  const bool add = p.epilogue == FNORM_BN_EPILOGUE_ADD_RELU;
  const bool relu = p.epilogue != FNORM_BN_EPILOGUE_NONE;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t m = row0 + static_cast<int64_t>(i) * rpi;
    const bool active = m < rows;
    const int64_t e = m * width + col;
    if constexpr (BWD) {
      if (active) {
        float v[PACK], g[PACK];
#pragma unroll
        for (int k = 0; k < PACK; ++k) {
          g[k] = Convert<T>::to_float(gr[i].v[k]);
          if (p.mask_in != nullptr && !((bits[i] >> k) & 1u)) g[k] = 0.f;
          v[k] = g[k] * dy_scale[k] + (Convert<T>::to_float(xr[i].v[k]) - cm[k]) * xmu_scale[k] + cshift[k];
        }
        store_pack<T, PACK>(static_cast<T *>(p.dx) + e, v);
        if (p.dz != nullptr && p.mask_in != nullptr) store_pack<T, PACK>(static_cast<T *>(p.dz) + e, g);
      }
    } else {
      uint32_t mbits = 0;
      if (active) {
        float v[PACK], zv[PACK];
        if (add) load_pack<T, PACK>(static_cast<const T *>(p.z) + e, zv);
#pragma unroll
        for (int k = 0; k < PACK; ++k) {
          v[k] = (Convert<T>::to_float(xr[i].v[k]) - cm[k]) * xmu_scale[k] + cshift[k];
          if (add) v[k] += zv[k];
          if (relu) {
            v[k] = v[k] <= 0.f ? 0.f : v[k];  // NaN stays NaN
            mbits |= static_cast<uint32_t>(round_to<T>(v[k]) > 0.f) << k;
          }
        }
        store_pack<T, PACK>(static_cast<T *>(p.y) + e, v);
      }
      if (p.mask_out != nullptr) store_mask_word<PACK>(p.mask_out, e, mbits, active);
    }
  }
}

// Whether the whole problem fits one co-resident grid of the one-launch
// kernel, and its grid and combine form (gather_all: the gather form at any
// size). Assumptions (of a shape that fits): group == 1, width == ncp * PACK
// with ncp a power of two <= 32, pointers aligned to PACK elements,
// p.part_moment1 / part_moment2 hold p.max_blocks rows of width floats.
template <typename T, int PACK, bool BWD>
cudaError_t shape_bn_persistent(const BnPersistParams &p, bool gather_all, const DeviceContext &ctx,
                                BnPersistShape *s) {
  *s = BnPersistShape{};
  const int64_t packs = p.shape.width / PACK;
  if (p.shape.group != 1 || p.shape.width % PACK != 0 || packs > 32 || (packs & (packs - 1)) != 0)
    return cudaSuccess;
  int ncp_log2 = 0;
  while ((int64_t{1} << ncp_log2) < packs) ++ncp_log2;
  const int64_t rows_per_block = (kBnThreads >> ncp_log2) * int64_t{kBnPersistK};
  const int64_t blocks = ceil_div(p.shape.rows, rows_per_block);
  if (blocks > p.max_blocks) return cudaSuccess;
  const bool gather = gather_all || blocks * p.shape.width <= kBnGatherMax;
  auto kernel = gather ? bn_persistent_kernel<T, PACK, BWD, true> : bn_persistent_kernel<T, PACK, BWD, false>;
  int occ = 0;
  cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel), kBnThreads, 0, &occ);
  if (err != cudaSuccess) return err;
  if (blocks > static_cast<int64_t>(occ) * ctx.dev.sm_count) return cudaSuccess;
  s->fits = true;
  s->blocks = blocks;
  s->ncp_log2 = ncp_log2;
  s->gather = gather;
  return cudaSuccess;
}

// Launches the one-launch kernel with a shape that fits; *launched says
// whether it did (if not, the caller runs the general path).
template <typename T, int PACK, bool BWD>
cudaError_t launch_bn_persistent(const BnPersistParams &p, const BnPersistShape &s, cudaStream_t stream,
                                 bool *launched) {
  *launched = false;
  auto kernel = s.gather ? bn_persistent_kernel<T, PACK, BWD, true> : bn_persistent_kernel<T, PACK, BWD, false>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(s.blocks));
  cfg.blockDim = dim3(kBnThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, p, s.ncp_log2);
  if (err == cudaErrorCooperativeLaunchTooLarge) {
    // Fewer SMs than the device reports (MPS limits, green contexts): the
    // caller runs the general path.
    (void)cudaGetLastError();
    return cudaSuccess;
  }
  *launched = err == cudaSuccess;
  return err;
}

}  // namespace fnorm
