/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm backward.
//
//   x_hat = (s - mean) * rstd   (RMSNorm: s * rrms)      g = dy * scale
//   dx    = rstd * (g - c1 - x_hat * c2) [+ dsum]         c1 = mean(g) (RMSNorm: 0)
//                                                         c2 = mean(g * x_hat)
//   dgamma = sum_rows dy * x_hat,  dbeta = sum_rows dy
//   (FNORM_NORM_FLAG_ROUND_XHAT: dgamma sums dy * round_T(x_hat), the value
//   the forward scaled; dx keeps the fp32 x_hat.)
//
// Tiers:
//   BlockRows  rows of 16-byte packs that one group holds at one or two
//            packs per thread (8 values in blocks of up to 1024 threads, 16
//            of a 16-bit type in up to 512; the planner chooses): a
//            persistent grid (one block of up to 8 such groups per SM,
//            sized to the GPU, not the rows);
//            each group works on its own row, each thread owns fixed columns
//            (gamma and the dgamma/dbeta accumulators stay in registers), x
//            and dy come through a thread-private cp.async ring 2-4 rows
//            deep. One partial row per block: the partial sums' traffic
//            grows with the SM count, not the rows.
//   Warp / BlockRegisters  a group of lanes / a block per row; each thread
//            owns fixed columns for all the rows it visits, so it accumulates
//            dgamma/dbeta in registers. Its x and dy come through a
//            thread-private ring in shared memory, filled by cp.async one row
//            ahead: the next row's loads are in flight while this row's
//            reduction (c1, c2) and dx run. One partial row per block goes to
//            the workspace. Rows longer than a block holds take a thread
//            block cluster of blocks per row (one partial row per cluster;
//            the runtime plans clusters of 2).
//   ColumnTiled  any row length, for few rows, rows longer than a cluster
//            of 2 holds, or GPUs without clusters: a
//            first kernel reduces (c1, c2) per row, a second walks column
//            tiles over a slice of rows, writes dx and accumulates its
//            columns' partial sums.
// The partial rows are then summed per column in a fixed order
// (core/column_sums.cu), so dgamma/dbeta are the same bits run to run.
#pragma once

#include <algorithm>

#include "norm/norm_bwd_regs.cuh"
#include "norm/norm_bwd_rows.cuh"
#include "norm/norm_bwd_tiled.cuh"

namespace fnorm {

template <typename T, int PACK, Tier TIER, int NPACK>
const void *norm_bwd_kernel(bool rms, bool cluster) {
  if constexpr (TIER == Tier::BlockRows) {
    return rms ? reinterpret_cast<const void *>(norm_bwd_rows_kernel<T, PACK, NPACK, true>)
               : reinterpret_cast<const void *>(norm_bwd_rows_kernel<T, PACK, NPACK, false>);
  } else if constexpr (TIER == Tier::Warp) {
    return rms ? reinterpret_cast<const void *>(norm_bwd_warp_kernel<T, PACK, NPACK, true>)
               : reinterpret_cast<const void *>(norm_bwd_warp_kernel<T, PACK, NPACK, false>);
  } else if constexpr (TIER == Tier::BlockRegisters) {
    if (cluster)
      return rms ? reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, true, true>)
                 : reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, true, false>);
    return rms ? reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, false, true>)
               : reinterpret_cast<const void *>(norm_bwd_block_kernel<T, PACK, NPACK, false, false>);
  } else {
    return reinterpret_cast<const void *>(norm_bwd_tile_kernel<T, PACK>);
  }
}

// Dynamic shared memory of the main kernel at `threads` per block.
template <typename T, int PACK, Tier TIER, int NPACK>
constexpr size_t norm_bwd_smem(int threads) {
  if constexpr (TIER == Tier::ColumnTiled || TIER == Tier::BlockRows) {  // rows: bwd_rows_shape
    return 0;
  } else {
    return norm_bwd_staging_bytes(threads, NPACK, PACK, sizeof(T));
  }
}

// The plan's launch shape (norm/norm_plan.cpp): the main kernel's grid,
// which is also the number of partial rows, and the column-tiled tier's
// row-coefficient grid. Asking the occupancy also opens each kernel's
// shared memory limit before its launch.
template <typename T, int PACK, Tier TIER, int NPACK>
cudaError_t shape_norm_bwd(const NormBwdParams &p, const DeviceContext &ctx, NormBwdShape *s) {
  const void *kernel = norm_bwd_kernel<T, PACK, TIER, NPACK>(p.rms, p.cluster > 1);
  const int64_t sms = ctx.dev.sm_count;
  *s = NormBwdShape{};
  int occ = 0;
  if constexpr (TIER == Tier::BlockRows) {
    const BwdRowsShape shape = bwd_rows_shape<T, PACK, NPACK>(p, ctx.dev);
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, shape.groups * p.block_threads, shape.smem, &occ);
    if (err != cudaSuccess) return err;
    if (occ == 0) return cudaErrorInvalidConfiguration;
    s->grid = static_cast<int>(std::min(ceil_div(p.rows, int64_t{shape.groups}), sms * occ));
    s->groups = shape.groups;
    s->stages = shape.stages;
    s->smem = shape.smem;
  } else if constexpr (TIER == Tier::Warp) {
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, kBwdWarpBlock,
                                       norm_bwd_smem<T, PACK, TIER, NPACK>(kBwdWarpBlock), &occ);
    if (err != cudaSuccess) return err;
    if (occ == 0) return cudaErrorInvalidConfiguration;
    const int64_t groups_per_block = kBwdWarpBlock >> p.width_log2;
    s->grid = static_cast<int>(std::min(ceil_div(p.rows, groups_per_block), sms * occ));
  } else if constexpr (TIER == Tier::BlockRegisters) {
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, p.block_threads,
                                       norm_bwd_smem<T, PACK, TIER, NPACK>(p.block_threads), &occ);
    if (err != cudaSuccess) return err;
    if (occ == 0) return cudaErrorInvalidConfiguration;
    // Clusters (a row each): as many as the resident blocks make, at least one.
    s->grid = static_cast<int>(std::min(p.rows, std::max<int64_t>(1, sms * occ / p.cluster)));
  } else {
    cudaError_t err = cached_occupancy(ctx.occupancy, kernel, 32 * kTileRowsPerBlock, 0, &occ);
    if (err != cudaSuccess) return err;
    // Enough row slices that all column tiles together fill the device.
    const int64_t tiles = ceil_div(p.cols / PACK, 32);
    const int64_t want = ceil_div(sms * std::max(occ, 1), tiles);
    s->grid = static_cast<int>(std::max<int64_t>(
        1, std::min({want, ceil_div(p.rows, kTileRowsPerBlock), int64_t{65535}})));
    int coef_occ = 0;
    err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(norm_bwd_row_coef_kernel<T, PACK>), 512,
                           0, &coef_occ);
    if (err != cudaSuccess) return err;
    s->coef_grid = std::min<int64_t>(p.rows, sms * std::max(coef_occ, 1));
  }
  return cudaSuccess;
}

// The register tiers' main kernel, compiled apart for RMSNorm (RMS == p.rms).
template <typename T, int PACK, Tier TIER, int NPACK, bool RMS>
cudaError_t launch_norm_bwd_staged(const NormBwdParams &p, const NormBwdShape &s, cudaStream_t stream) {
  if constexpr (TIER == Tier::Warp) {
    static_assert(kBwdWarpBlock * NPACK * PACK * sizeof(float) <= norm_bwd_smem<T, PACK, TIER, NPACK>(kBwdWarpBlock),
                  "the group combine buffer fits in the staging ring");
    norm_bwd_warp_kernel<T, PACK, NPACK, RMS>
        <<<s.grid, kBwdWarpBlock, norm_bwd_smem<T, PACK, TIER, NPACK>(kBwdWarpBlock), stream>>>(p);
  } else {
    static_assert(NPACK * PACK <= 32, "registers: two fp32 accumulators per value at 512 threads");
    const size_t smem = norm_bwd_smem<T, PACK, TIER, NPACK>(p.block_threads);
    if (p.cluster == 1) {
      norm_bwd_block_kernel<T, PACK, NPACK, false, RMS><<<s.grid, p.block_threads, smem, stream>>>(p);
    } else {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(static_cast<unsigned>(s.grid) * static_cast<unsigned>(p.cluster));
      config.blockDim = dim3(static_cast<unsigned>(p.block_threads));
      config.dynamicSmemBytes = smem;
      config.stream = stream;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = static_cast<unsigned>(p.cluster);
      attr[0].val.clusterDim.y = 1;
      attr[0].val.clusterDim.z = 1;
      config.attrs = attr;
      config.numAttrs = 1;
      cudaError_t err = cudaLaunchKernelEx(&config, norm_bwd_block_kernel<T, PACK, NPACK, true, RMS>, p);
      if (err != cudaSuccess) return err;
    }
  }
  return cudaGetLastError();
}

// Executes the plan with its launch shape.
template <typename T, int PACK, Tier TIER, int NPACK>
cudaError_t launch_norm_bwd(const NormBwdParams &p, const NormBwdShape &s, cudaStream_t stream) {
  if constexpr (TIER == Tier::BlockRows) {
    const unsigned block = static_cast<unsigned>(s.groups * p.block_threads);
    if (p.rms)
      norm_bwd_rows_kernel<T, PACK, NPACK, true><<<s.grid, block, s.smem, stream>>>(p, s.groups, s.stages);
    else
      norm_bwd_rows_kernel<T, PACK, NPACK, false><<<s.grid, block, s.smem, stream>>>(p, s.groups, s.stages);
  } else if constexpr (TIER == Tier::Warp || TIER == Tier::BlockRegisters) {
    return p.rms ? launch_norm_bwd_staged<T, PACK, TIER, NPACK, true>(p, s, stream)
                 : launch_norm_bwd_staged<T, PACK, TIER, NPACK, false>(p, s, stream);
  } else {
    static_assert(NPACK == 0, "the column-tiled tier takes no NPACK");
    norm_bwd_row_coef_kernel<T, PACK><<<static_cast<unsigned>(s.coef_grid), 512, 0, stream>>>(p);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    const dim3 grid(static_cast<unsigned>(ceil_div(p.cols / PACK, 32)), static_cast<unsigned>(s.grid));
    norm_bwd_tile_kernel<T, PACK><<<grid, dim3(32, kTileRowsPerBlock), 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace fnorm
