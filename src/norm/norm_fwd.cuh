/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm forward (optionally "add & norm"): tiers over one
// load/store functor pair.
//
//   Warp      cols <= 32 * NPACK * PACK: a group of `width` lanes (1..32)
//             holds a row in registers; mean and variance are exact two-pass
//             sums over registers (no division per element, and no
//             E[x^2] - E[x]^2 cancellation).
//   BlockRegisters
//             cols <= 1024 * NPACK * PACK: one block per row, the row in
//             registers, the same two-pass statistics with block reductions.
//             (Where registers allow only one such block per SM, the planner
//             picks BlockSmem instead when that keeps two or more.)
//   BlockSmem one block per row; the row is cached in shared memory as T,
//             so x is read from device memory once; exact two-pass stats.
//   BlockUncached
//             one block per row when the row does not fit in shared memory;
//             chunked Welford on the first read, normalize on the second.
//
// Fusions (residual add, casts, activations) go into the functors
// (core/row_io.cuh): the kernels only move packs of fp32 values between them.
#pragma once

#include <algorithm>
#include <type_traits>

#include "core/device.cuh"
#include "core/row_io.cuh"
#include "norm/norm_params.hpp"

namespace fnorm {

__device__ __forceinline__ void store_stats(const NormFwdParams &p, int64_t row, float mean,
                                            float rstd) {
  if (p.mean != nullptr) p.mean[row] = mean;  // always NULL for RMSNorm
  if (p.rstd != nullptr) p.rstd[row] = rstd;
}

constexpr int kWarpTierBlock = 128;

// One row held in registers by `width` threads (lane 0..width-1), NPACK packs
// each, pack k of lane l at column (k * width + l) * PACK (coalesced).
// `reduce` (GroupReduce / BlockReduce) reduces over the threads sharing the
// row. Exact two-pass statistics over the registers. Returns the max |v|
// (bits) this thread stored (quantized stores; 0 otherwise).
template <typename T, int PACK, int NPACK, class Load, class Store, class Reduce>
__device__ __forceinline__ unsigned norm_row_registers(const NormFwdParams &p, const Load &load,
                                                       const Store &store, int64_t row, bool active,
                                                       int lane, int width, const Reduce &reduce) {
  const int64_t packs_per_row = p.cols / PACK;
  const float inv_cols = 1.f / static_cast<float>(p.cols);
  float v[NPACK][PACK];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < NPACK; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * width + lane;
    if (active && pk < packs_per_row) {
      load.load(v[k], row, pk * PACK);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[k][i] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < PACK; ++i) sum += v[k][i];
  }
  // RMSNorm: no centring, so the sum of squares about zero (p.rms is uniform
  // across the kernel: every lane skips the same reduction).
  const float mean = p.rms ? 0.f : reduce.sum(sum) * inv_cols;
  float sq = 0.f;
#pragma unroll
  for (int k = 0; k < NPACK; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * width + lane;
    if (pk < packs_per_row) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) sq += (v[k][i] - mean) * (v[k][i] - mean);
    }
  }
  const float rstd = rsqrtf(reduce.sum(sq) * inv_cols + p.eps);
  if constexpr (Store::kQuant) {
    // Per token, every lane takes part in the row's max (inactive groups
    // with 0) before any code is written; store.per_token is kernel-uniform.
    unsigned m = 0;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
      const int64_t pk = static_cast<int64_t>(k) * width + lane;
      if (active && pk < packs_per_row) {
#pragma unroll
        for (int i = 0; i < PACK; ++i) v[k][i] = (v[k][i] - mean) * rstd;
        store.affine.apply(v[k], pk * PACK);
        m = max(m, pack_abs_max<PACK>(v[k]));
      }
    }
    const float s = store.per_token ? quant_row_scale(reduce.max(m), store.kind) : store.tensor_scale();
    if (!active) return 0u;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
      const int64_t pk = static_cast<int64_t>(k) * width + lane;
      if (pk < packs_per_row) store.put(v[k], row, pk * PACK, s);
    }
    if (lane == 0) {
      store_stats(p, row, mean, rstd);
      if (store.per_token) store.scale[row] = s;
    }
    return m;
  } else {
    if (!active) return 0u;
#pragma unroll
    for (int k = 0; k < NPACK; ++k) {
      const int64_t pk = static_cast<int64_t>(k) * width + lane;
      if (pk < packs_per_row) {
#pragma unroll
        for (int i = 0; i < PACK; ++i) v[k][i] = (v[k][i] - mean) * rstd;
        store.store(v[k], row, pk * PACK);
      }
    }
    if (lane == 0) store_stats(p, row, mean, rstd);
    return 0u;
  }
}

// Assumptions: blockDim.x == kWarpTierBlock; 1 << p.width_log2 lanes per row;
// p.cols <= (1 << p.width_log2) * NPACK * PACK.
template <typename T, int PACK, int NPACK, class Load, class Store>
__global__ void __launch_bounds__(kWarpTierBlock)
    norm_fwd_warp_kernel(NormFwdParams p, Load load, Store store) {
  const int width = 1 << p.width_log2;
  const int lane = threadIdx.x & (width - 1);
  const int groups_per_block = kWarpTierBlock >> p.width_log2;
  const int group = threadIdx.x >> p.width_log2;
  // The loop bound is block-uniform, so every lane reaches every shuffle;
  // groups past the last row compute on zeros and store nothing.
  unsigned amax = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups_per_block; base < p.rows;
       base += static_cast<int64_t>(gridDim.x) * groups_per_block) {
    const int64_t row = base + group;
    amax = max(amax, norm_row_registers<T, PACK, NPACK>(p, load, store, row, row < p.rows, lane, width,
                                                        GroupReduce{width}));
  }
  flush_amax(store, amax);
}

// One block per row, the row in registers. Blocks of up to 1024 threads at
// NPACK * PACK <= 32 values per thread stay within 64 registers.
// Assumptions: blockDim.x is a multiple of 32; p.cols <= blockDim.x * NPACK * PACK.
template <typename T, int PACK, int NPACK, class Load, class Store>
__device__ __forceinline__ void norm_fwd_block_rows(const NormFwdParams &p, const Load &load, const Store &store) {
  __shared__ float scratch[32];
  unsigned amax = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    amax = max(amax, norm_row_registers<T, PACK, NPACK>(p, load, store, row, true, static_cast<int>(threadIdx.x),
                                                        static_cast<int>(blockDim.x), BlockReduce{scratch}));
  }
  flush_amax(store, amax);
}

template <typename T, int PACK, int NPACK, class Load, class Store>
__global__ void __launch_bounds__(1024)
    norm_fwd_block_kernel(NormFwdParams p, Load load, Store store) {
  norm_fwd_block_rows<T, PACK, NPACK>(p, load, store);
}

// The same for blocks of at most kCappedBlock threads, whose launch bounds
// (2 such blocks an SM) hold two 16-byte packs a thread to 40 registers
// without spilling (ptxas, sm_90, bf16: 50 -> 40): an SM then holds 6 blocks
// of 256 threads instead of 4, 3 of 512 instead of 2, more rows' loads in
// flight (bench/NOTES.md session 20).
constexpr int kCappedBlock = 768;
template <typename T, int PACK, int NPACK, class Load, class Store>
__global__ void __launch_bounds__(kCappedBlock, 2)
    norm_fwd_block_kernel_capped(NormFwdParams p, Load load, Store store) {
  norm_fwd_block_rows<T, PACK, NPACK>(p, load, store);
}

// The block-register kernel an instance runs at `threads` a block: the
// capped one for two 16-byte packs a thread where the block fits its bounds
// (not the quantized twin: its stores need more registers, 12 bytes spilled).
template <typename T, int PACK, int NPACK, class Load, class Store>
auto block_kernel_for(int threads) {
  if constexpr (!Store::kQuant && NPACK == 2 && PACK * sizeof(T) == 16) {
    if (threads <= kCappedBlock) return norm_fwd_block_kernel_capped<T, PACK, NPACK, Load, Store>;
  }
  return norm_fwd_block_kernel<T, PACK, NPACK, Load, Store>;
}

// Assumptions: dynamic shared memory holds p.cols elements of T (16-byte
// aligned); any blockDim.x that is a multiple of 32, up to 1024.
template <typename T, int PACK, class Load, class Store>
__global__ void __launch_bounds__(1024)
    norm_fwd_smem_kernel(NormFwdParams p, Load load, Store store) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T *cache = reinterpret_cast<T *>(smem_raw);
  __shared__ float scratch[32];
  const int64_t packs_per_row = p.cols / PACK;
  const float inv_cols = 1.f / static_cast<float>(p.cols);
  unsigned amax = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    // Each thread touches only its own packs of the cache, so the cache
    // needs no barrier of its own (block_allreduce has them). Without a
    // residual, x goes to the cache by cp.async: all of this thread's copies
    // in flight at once (a load-then-store loop has one).
    float acc = 0.f;  // LayerNorm: the sum; RMSNorm: the sum of squares
    if (p.residual == nullptr) {
      for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x)
        load.copy_x_async(cache + pk * PACK, row, pk * PACK);
      cp_async_commit();
      cp_async_wait<0>();
      for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
        float v[PACK];
        load_pack<T, PACK>(cache + pk * PACK, v);
#pragma unroll
        for (int i = 0; i < PACK; ++i) acc += p.rms ? v[i] * v[i] : v[i];
      }
    } else {
      for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
        float v[PACK];
        load.load(v, row, pk * PACK);  // writes sum, when asked, on this only read
        store_pack<T, PACK>(cache + pk * PACK, v);
#pragma unroll
        for (int i = 0; i < PACK; ++i) acc += p.rms ? v[i] * v[i] : v[i];
      }
    }
    // Stats come from the values as cached (rounded to T), i.e. exactly s's;
    // LayerNorm's variance is a second pass about the mean.
    float mean = 0.f, sq = acc;
    if (!p.rms) {
      mean = block_allreduce<SumOp>(acc, scratch) * inv_cols;
      sq = 0.f;
      for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
        float v[PACK];
        load_pack<T, PACK>(cache + pk * PACK, v);
#pragma unroll
        for (int i = 0; i < PACK; ++i) sq += (v[i] - mean) * (v[i] - mean);
      }
    }
    const float rstd = rsqrtf(block_allreduce<SumOp>(sq, scratch) * inv_cols + p.eps);
    if constexpr (Store::kQuant) {
      auto fetch = [&](int64_t pk, float(&v)[PACK]) {
        load_pack<T, PACK>(cache + pk * PACK, v);
#pragma unroll
        for (int i = 0; i < PACK; ++i) v[i] = (v[i] - mean) * rstd;
      };
      amax = max(amax, quant_row_block<PACK>(store, fetch, packs_per_row, row, scratch));
    } else {
      for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
        float v[PACK];
        load_pack<T, PACK>(cache + pk * PACK, v);
#pragma unroll
        for (int i = 0; i < PACK; ++i) v[i] = (v[i] - mean) * rstd;
        store.store(v, row, pk * PACK);
      }
    }
    if (threadIdx.x == 0) store_stats(p, row, mean, rstd);
  }
  flush_amax(store, amax);
}

// The second read of each row goes through Load::reload (s read back from
// sum where the first read wrote it: sum may be x or residual, in place).
// A quantized store per token reads the row a third time (its max |v| first).
template <typename T, int PACK, class Load, class Store>
__global__ void __launch_bounds__(1024)
    norm_fwd_uncached_kernel(NormFwdParams p, Load load, Store store) {
  __shared__ Welford scratch[32];
  const int64_t packs_per_row = p.cols / PACK;
  unsigned amax = 0;
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    Welford w = WelfordOp::identity();
    for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
      float v[PACK];
      load.load(v, row, pk * PACK);
      w = welford_chunk<PACK>(w, v);
    }
    w = block_allreduce<WelfordOp>(w, scratch);
    const float var = w.m2 / static_cast<float>(p.cols);
    // RMSNorm: mean square = variance + mean^2 (both terms >= 0: no cancellation).
    const float mean = p.rms ? 0.f : w.mean;
    const float rstd = rsqrtf((p.rms ? var + w.mean * w.mean : var) + p.eps);
    if constexpr (Store::kQuant) {
      auto fetch = [&](int64_t pk, float(&v)[PACK]) {
        load.reload(v, row, pk * PACK);
#pragma unroll
        for (int i = 0; i < PACK; ++i) v[i] = (v[i] - mean) * rstd;
      };
      amax = max(amax, quant_row_block<PACK>(store, fetch, packs_per_row, row, reinterpret_cast<float *>(scratch)));
    } else {
      for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
        float v[PACK];
        load.reload(v, row, pk * PACK);
#pragma unroll
        for (int i = 0; i < PACK; ++i) v[i] = (v[i] - mean) * rstd;
        store.store(v, row, pk * PACK);
      }
    }
    if (threadIdx.x == 0) store_stats(p, row, mean, rstd);
  }
  flush_amax(store, amax);
}

// Block size for the one-block-per-row tiers: the most resident threads that
// have a pack to work on, and the larger block at equal residency (fewer,
// longer-lived blocks amortize the per-row reductions). A block is never
// wider than the row's packs (rounded up to a warp), except 128 as a floor.
template <class Kernel>
cudaError_t pick_row_block(const DeviceContext &ctx, Kernel kernel, size_t smem,
                           int64_t packs_per_row, int *block, int *blocks_per_sm) {
  const int64_t useful = std::max<int64_t>(128, ceil_div(packs_per_row, 32) * 32);
  int64_t best_threads = 0;
  *block = 0;
  *blocks_per_sm = 0;
  for (int b : {128, 256, 512, 1024}) {
    if (b > useful) break;
    int occ = 0;
    cudaError_t err =
        cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel), b, smem, &occ);
    if (err != cudaSuccess) return err;
    const int64_t busy = static_cast<int64_t>(occ) * std::min<int64_t>(b, packs_per_row);
    if (occ > 0 && busy >= best_threads) {
      best_threads = busy;
      *block = b;
      *blocks_per_sm = occ;
    }
  }
  return *block > 0 ? cudaSuccess : cudaErrorInvalidConfiguration;
}

// A block per row: one wave of resident blocks striding over the rows, or
// (p.grid_per_row) a block for every row, the hardware starting the next
// one on an SM as soon as one retires.
inline void row_blocks_shape(const NormFwdParams &p, const DeviceContext &ctx, int block, int blocks_per_sm,
                             size_t smem, LaunchShape *s) {
  const int64_t wave = p.grid_per_row ? p.rows : static_cast<int64_t>(ctx.dev.sm_count) * blocks_per_sm;
  s->grid = std::min({p.rows, wave, int64_t{2147483647}});
  s->block = block;
  s->smem = smem;
  s->blocks_per_sm = blocks_per_sm;
}

// The plan's launch shape of an instance (norm/norm_plan.cpp): the grid and,
// for the one-block-per-row tiers, the block size by occupancy, from the
// parameters' rows, cols, tier fields and grid_per_row; blocks_per_sm is
// what the planner decides the grid from (0: no block fits an SM). The
// quantized twin (launch_norm_fwd<..., true>) launches with this shape too.
template <typename T, int PACK, Tier TIER, int NPACK>
cudaError_t shape_norm_fwd(const NormFwdParams &p, const DeviceContext &ctx, LaunchShape *s) {
  using Load = LoadRow<T, PACK>;
  using Store = StoreAffine<T, PACK>;
  *s = LaunchShape{};
  if constexpr (TIER == Tier::Warp) {
    auto kernel = norm_fwd_warp_kernel<T, PACK, NPACK, Load, Store>;
    int occ = 0;
    cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel),
                                       kWarpTierBlock, 0, &occ);
    if (err != cudaSuccess) return err;
    const int64_t groups_per_block = kWarpTierBlock >> p.width_log2;
    // A persistent grid (one wave of resident blocks strides over the
    // rows), or with p.grid_per_row a block for every groups_per_block rows.
    const int64_t wave = p.grid_per_row ? ceil_div(p.rows, groups_per_block)
                                        : static_cast<int64_t>(ctx.dev.sm_count) * std::max(occ, 1);
    s->grid = std::min({ceil_div(p.rows, groups_per_block), wave, int64_t{2147483647}});
    s->block = kWarpTierBlock;
    s->blocks_per_sm = occ;
  } else if constexpr (TIER == Tier::BlockRegisters) {
    static_assert(NPACK * PACK <= kWarpMaxElemsPerThread,
                  "more than 32 values per thread would spill at 1024 threads");
    auto kernel = block_kernel_for<T, PACK, NPACK, Load, Store>(p.block_threads);
    int occ = 0;
    cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel),
                                       p.block_threads, 0, &occ);
    if (err != cudaSuccess) return err;
    row_blocks_shape(p, ctx, p.block_threads, occ, 0, s);
  } else {
    static_assert(NPACK == 0, "block tiers take no NPACK");
    const size_t smem = TIER == Tier::BlockSmem ? static_cast<size_t>(p.cols) * sizeof(T) : 0;
    auto kernel = TIER == Tier::BlockSmem ? norm_fwd_smem_kernel<T, PACK, Load, Store>
                                          : norm_fwd_uncached_kernel<T, PACK, Load, Store>;
    int block = 0, occ = 0;
    cudaError_t err = pick_row_block(ctx, kernel, smem, p.cols / PACK, &block, &occ);
    if (err != cudaSuccess) return err;
    row_blocks_shape(p, ctx, block, occ, smem, s);
  }
  return cudaSuccess;
}

// The quantized twin's launch shape: the plain kernel's, so that the same
// blocks reduce the rows in the same order and v is bit for bit what
// fnorm_norm_fwd computes (the twin has the same launch bounds: any block
// the plain kernel takes, it takes). Its own occupancy is asked at that
// shape, which also raises its dynamic shared memory limit as the plain
// kernel's was (the shared-memory tier).
template <typename T, int PACK, Tier TIER, int NPACK>
cudaError_t shape_norm_fwd_quant(const NormFwdParams &p, const DeviceContext &ctx, LaunchShape *s) {
  cudaError_t err = shape_norm_fwd<T, PACK, TIER, NPACK>(p, ctx, s);
  if (err != cudaSuccess) return err;
  using Load = LoadRow<T, PACK>;
  using Store = StoreQuant<T, PACK>;
  const void *kernel;
  if constexpr (TIER == Tier::Warp) {
    kernel = reinterpret_cast<const void *>(norm_fwd_warp_kernel<T, PACK, NPACK, Load, Store>);
  } else if constexpr (TIER == Tier::BlockRegisters) {
    kernel = reinterpret_cast<const void *>(block_kernel_for<T, PACK, NPACK, Load, Store>(s->block));
  } else {
    kernel = TIER == Tier::BlockSmem ? reinterpret_cast<const void *>(norm_fwd_smem_kernel<T, PACK, Load, Store>)
                                     : reinterpret_cast<const void *>(norm_fwd_uncached_kernel<T, PACK, Load, Store>);
  }
  int occ = 0;
  err = cached_occupancy(ctx.occupancy, kernel, s->block, s->smem, &occ);
  if (err != cudaSuccess) return err;
  if (occ == 0) s->blocks_per_sm = 0;  // the planner reports a block that fits no SM
  return cudaSuccess;
}

// Executes the plan (norm/norm_plan.cpp) with its launch shape. QUANT: y
// holds quantized codes (StoreQuant) instead of T.
template <typename T, int PACK, Tier TIER, int NPACK, bool QUANT>
cudaError_t launch_norm_fwd(const NormFwdParams &p, const LaunchShape &s, cudaStream_t stream) {
  using Load = LoadRow<T, PACK>;
  using Store = std::conditional_t<QUANT, StoreQuant<T, PACK>, StoreAffine<T, PACK>>;
  const Load load{static_cast<const T *>(p.x), static_cast<const T *>(p.residual),
                  static_cast<T *>(p.sum), p.x_row_stride};
  const Affine<T, PACK> affine{p.gamma, p.beta, p.param_f32, p.zero_centered, p.round_xhat};
  const Store store = [&] {
    if constexpr (QUANT) {
      return Store{static_cast<uint8_t *>(p.y), p.y_row_stride, affine, p.quant_scale, p.amax, p.quant,
                   p.quant_per_token};
    } else {
      return Store{static_cast<T *>(p.y), p.y_row_stride, affine};
    }
  }();
  const auto grid = static_cast<unsigned>(s.grid);
  if constexpr (TIER == Tier::Warp) {
    norm_fwd_warp_kernel<T, PACK, NPACK, Load, Store><<<grid, kWarpTierBlock, 0, stream>>>(p, load, store);
  } else if constexpr (TIER == Tier::BlockRegisters) {
    block_kernel_for<T, PACK, NPACK, Load, Store>(s.block)<<<grid, s.block, 0, stream>>>(p, load, store);
  } else {
    auto kernel = TIER == Tier::BlockSmem ? norm_fwd_smem_kernel<T, PACK, Load, Store>
                                          : norm_fwd_uncached_kernel<T, PACK, Load, Store>;
    kernel<<<grid, s.block, s.smem, stream>>>(p, load, store);
  }
  return cudaGetLastError();
}

}  // namespace fnorm
