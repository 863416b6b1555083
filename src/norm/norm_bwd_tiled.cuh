/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm backward, the ColumnTiled tier: (c1, c2) per row,
// then column tiles over slices of rows.
#pragma once

#include "norm/norm_bwd_row.cuh"

namespace fnorm {

// Column-tiled tier, kernel 1: (c1, c2) of each row, one block per row.
template <typename T, int PACK>
__global__ void __launch_bounds__(512) norm_bwd_row_coef_kernel(NormBwdParams p) {
  __shared__ float2 scratch[32];
  const BwdRowIo<T, PACK> io{p};
  const int64_t packs_per_row = p.cols / PACK;
  const float inv_cols = 1.f / static_cast<float>(p.cols);
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const float mean = p.rms ? 0.f : p.mean[row];
    const float rstd = p.rstd[row];
    float2 acc = make_float2(0.f, 0.f);
    for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
      float xh[PACK], g[PACK], dyv[PACK];
      io.load(row, pk * PACK, mean, rstd, xh, g, dyv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        acc.x += g[i];
        acc.y += g[i] * xh[i];
      }
    }
    acc = block_allreduce<Sum2Op>(acc, scratch);
    if (threadIdx.x == 0) {
      p.row_coef[2 * row] = p.rms ? 0.f : acc.x * inv_cols;
      p.row_coef[2 * row + 1] = acc.y * inv_cols;
    }
  }
}

constexpr int kTileRowsPerBlock = 8;  // blockDim = (32, 8)

// Column-tiled tier, kernel 2: blockIdx.x picks 32 packs of columns,
// blockIdx.y a strided slice of rows; dx per element, partial sums per column.
template <typename T, int PACK>
__global__ void __launch_bounds__(32 * kTileRowsPerBlock) norm_bwd_tile_kernel(NormBwdParams p) {
  __shared__ float combine[kTileRowsPerBlock][32 * PACK + 1];
  const BwdRowIo<T, PACK> io{p};
  const int64_t pk = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const bool in_cols = pk < p.cols / PACK;
  float dg[PACK], db[PACK];
#pragma unroll
  for (int i = 0; i < PACK; ++i) dg[i] = db[i] = 0.f;
  if (in_cols) {
    // Rows are walked from the last: kernel 1 read them first to last, so
    // the last rows' x and dy may still be in L2.
    for (int64_t k = static_cast<int64_t>(blockIdx.y) * kTileRowsPerBlock + threadIdx.y; k < p.rows;
         k += static_cast<int64_t>(gridDim.y) * kTileRowsPerBlock) {
      const int64_t row = p.rows - 1 - k;
      const float mean = p.rms ? 0.f : p.mean[row];
      const float rstd = p.rstd[row];
      float xh[PACK], g[PACK], dyv[PACK];
      io.load(row, pk * PACK, mean, rstd, xh, g, dyv);
#pragma unroll
      for (int i = 0; i < PACK; ++i) {
        dg[i] += dyv[i] * dgamma_xhat<T>(p, xh[i]);
        db[i] += dyv[i];
      }
      io.store_dx(row, pk * PACK, dx_coefs(p, rstd, p.row_coef[2 * row], p.row_coef[2 * row + 1]), xh, g);
    }
  }
  for (int which = 0; which < 2; ++which) {
    float *out = which == 0 ? p.dgamma_partial : p.dbeta_partial;
    if (out == nullptr) continue;  // uniform
#pragma unroll
    for (int i = 0; i < PACK; ++i) combine[threadIdx.y][threadIdx.x * PACK + i] = which == 0 ? dg[i] : db[i];
    __syncthreads();
    // Rows of the tile summed in order: threads of row 0..7 each finish a
    // share of the tile's columns.
    for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * PACK; c += 32 * kTileRowsPerBlock) {
      const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 * PACK + c;
      if (col >= p.cols) continue;
      float s = 0.f;
      for (int r = 0; r < kTileRowsPerBlock; ++r) s += combine[r][c];
      out[static_cast<int64_t>(blockIdx.y) * p.cols + col] = s;
    }
    __syncthreads();
  }
}

}  // namespace fnorm
