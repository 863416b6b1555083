/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm launch parameters and dispatch-table types, shared by
// the host runtime (plain C++) and the generated kernel instantiations
// (CUDA). No device code. Tier and the pack limits come from the generator
// (kernel_config.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/launch.hpp"
#include "core/quant.hpp"
#include "core/row_ring.hpp"
#include "fusednorm.h"
#include "kernel_config.hpp"

namespace fnorm {

// Assumptions: x/y/residual/sum are aligned to pack * sizeof(T), gamma/beta to
// pack * sizeof(T) (T parameters) or 4 * min(pack, 4) bytes (fp32
// parameters); cols and both row strides are multiples of the pack; rows,
// cols >= 1. The runtime checks all of it before choosing an instance.
struct NormFwdParams {
  const void *x = nullptr;
  const void *residual = nullptr;  // optional
  void *sum = nullptr;             // optional, with residual; x's row stride
  void *y = nullptr;
  const void *gamma = nullptr;  // optional
  const void *beta = nullptr;   // optional
  float *mean = nullptr;        // optional, rows elements (LayerNorm only)
  float *rstd = nullptr;        // optional, rows elements (rrms for RMSNorm)
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_row_stride = 0;  // elements (also residual's and sum's)
  int64_t y_row_stride = 0;  // elements
  float eps = 0.f;
  bool rms = false;            // RMSNorm: no centring, no beta
  bool param_f32 = false;      // gamma/beta are fp32 (else T)
  bool zero_centered = false;  // scale is 1 + gamma
  bool round_xhat = false;     // x_hat rounded to T before the scale (FNORM_NORM_FLAG_ROUND_XHAT)
  int width_log2 = 0;          // warp tier: log2 of the lanes that share a row
  int block_threads = 0;       // block-register tier: threads per block (a multiple of 32)
  // Grid (the launch shape's, set by the plan): false, one wave of resident
  // blocks striding over the rows; true, a block (warp tier: a block of row
  // groups) per row, the hardware starting the next block on an SM as soon
  // as one retires.
  bool grid_per_row = false;
  // Quantized output (the codes instances only): y holds one-byte
  // codes of `quant`, y_row_stride counts them. quant_scale: per tensor, the
  // scale read; per token, the rows scales written. amax: optional, one fp32
  // zeroed before the launch. The rules: api/fusednorm.h, fnorm_norm_fwd_quant.
  QuantKind quant = QuantKind::E4M3;
  bool quant_per_token = false;
  float *quant_scale = nullptr;
  float *amax = nullptr;
};

// Assumptions as NormFwdParams for x/dy/dsum/dx and gamma.
struct NormBwdParams {
  const void *x = nullptr;  // the normalized input s
  const void *dy = nullptr;
  const void *gamma = nullptr;  // optional
  const void *dsum = nullptr;   // optional: gradient reaching s from the residual path
  const float *mean = nullptr;  // LayerNorm only
  const float *rstd = nullptr;
  void *dx = nullptr;
  // Per-block partial sums over rows, [grid][cols] each (null: not wanted).
  float *dgamma_partial = nullptr;
  float *dbeta_partial = nullptr;
  float *row_coef = nullptr;  // column-tiled tier: [rows][2] row coefficients
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_row_stride = 0;
  int64_t dy_row_stride = 0;  // also dsum's
  int64_t dx_row_stride = 0;
  bool rms = false;
  bool param_f32 = false;
  bool zero_centered = false;
  bool round_xhat = false;  // dgamma sums dy * x_hat rounded to T (dx: the fp32 x_hat)
  int width_log2 = 0;
  int block_threads = 0;  // block tier: threads per block; rows tier: threads per row group
  int grid = 0;     // partial rows (clusters, or blocks); from the instance's shape function
  int cluster = 1;  // block-register tier: blocks that share a row (a thread block cluster)
};

// Backward register tiers: rows of x/dy a thread has in flight (cp.async into
// shared memory) while it works on the row before them, plus that row.
constexpr int kNormBwdStages = 2;
static_assert(kNormBwdStages >= 2, "the staging ring needs the row worked on and one in flight");

// Threads per block of a rows-tier instance holding `values` per thread: two
// fp32 accumulators (dgamma, dbeta) and the scale per value stay within 64
// registers at 8 values (1024 threads), 128 at 16 (512 threads).
constexpr int bwd_rows_max_threads(int values) { return values <= 8 ? kBwdRowsMaxThreads : kBwdRowsMaxThreads / 2; }

// Dynamic shared memory of the warp and block tiers' ring (core/row_ring.cuh;
// kNormBwdStages stages; the rows tier sizes its own ring, norm_bwd_rows.cuh).
constexpr size_t norm_bwd_staging_bytes(int threads, int npack, int pack, size_t elem_bytes) {
  return static_cast<size_t>(kNormBwdStages) * row_ring_stage_bytes(threads, npack, pack, elem_bytes);
}

// The backward's launch shape: its main kernel's grid (the number of
// partial rows) and, for the column-tiled tier, the row-coefficient
// kernel's grid.
struct NormBwdShape {
  int grid = 0;
  int64_t coef_grid = 0;
  int groups = 1;    // rows tier: row groups per block
  int stages = 2;    // rows tier: depth of the staging ring
  size_t smem = 0;   // rows tier: dynamic shared memory bytes
};

// Each instance: `shape` (at plan time: the launch shape of the parameters'
// rows, cols and tier fields on a device, from its kernel's occupancy) and
// `launch` (enqueues with that shape; decides nothing).
using NormFwdShapeFn = cudaError_t (*)(const NormFwdParams &, const DeviceContext &, LaunchShape *);
using NormFwdLaunchFn = cudaError_t (*)(const NormFwdParams &, const LaunchShape &, cudaStream_t);
using NormBwdShapeFn = cudaError_t (*)(const NormBwdParams &, const DeviceContext &, NormBwdShape *);
using NormBwdLaunchFn = cudaError_t (*)(const NormBwdParams &, const NormBwdShape &, cudaStream_t);

struct NormFwdInstance {
  fnorm_dtype_t dtype;
  int pack;
  Tier tier;
  int npack;
  NormFwdShapeFn shape;
  NormFwdLaunchFn launch;
  const char *name;
};

struct NormBwdInstance {
  fnorm_dtype_t dtype;
  int pack;
  Tier tier;
  int npack;
  NormBwdShapeFn shape;
  NormBwdLaunchFn launch;
  const char *name;
};

// The generated dispatch tables (build directory: dispatch_table.cpp).
// The forward's two tables, one per output (gen/instances.py NORM_FWD_OUTS):
// y in x's dtype, and y as quantized codes (their shape is the plain
// instance's: norm_fwd.cuh, shape_norm_fwd_quant).
extern const NormFwdInstance kNormFwdInstances[];
extern const size_t kNormFwdInstanceCount;
extern const NormFwdInstance kNormFwdCodesInstances[];
extern const size_t kNormFwdCodesInstanceCount;
extern const NormBwdInstance kNormBwdInstances[];
extern const size_t kNormBwdInstanceCount;

}  // namespace fnorm
