/* SPDX-License-Identifier: Apache-2.0 */
// The fully-connected layer's own kernels: what cuBLASLt's epilogues do when
// cuBLASLt has no fused kernel for a case, and the activation's derivative
// applied to an input (cuBLASLt applies it only to a GEMM's output).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fusednorm.h"

namespace fnorm {

enum class LinearAct { None = 0, Relu = 1, Gelu = 2 };

// The aux formats are cuBLASLt's (RELU_AUX / GELU_AUX), for a column-major
// D of `cols` rows (n) and `rows` columns (m), i.e. y's row r is D's column r:
//  RELU: a bit per element, bit c of row r at bit index r * ld + c (bits
//        numbered from the least significant bit of byte 0), 1 where y > 0
//        (our passes; cuBLASLt's RELU_AUX: z > 0 before rounding, and z == 0);
//        ld (in bits) a multiple of 128.
//  GELU: z in y's dtype, element c of row r at r * ld + c; ld a multiple of 8.
int64_t linear_aux_ld(LinearAct act, int64_t cols);

// The kernels' geometry (linear_kernels.cu), which the plan sizes their
// grids by (linear_plan.cpp).
namespace linear_geometry {
// The forward epilogue: a thread per 8 consecutive columns of a row (one
// byte of the ReLU mask), in a grid-stride loop of 256-thread blocks.
constexpr int kFwdGroup = 8;
// The element-wise passes (ReLU mask, GELU, the flat dz pass): blocks of
// kColLanes x kRowLanes threads, a thread per kEwVec consecutive columns of
// a row; grid.x over a row's kEwTile-column tiles, grid.y over groups of
// kRowLanes rows.
constexpr int kColLanes = 32;
constexpr int kRowLanes = 8;
constexpr int kEwVec = 8;
constexpr int kEwTile = kColLanes * kEwVec;
// The backward's row-slice tiles: kColLanes lanes x kVec consecutive
// columns by kRowLanes row lanes, each block one row slice of one column
// tile.
constexpr int kVec = 4;
constexpr int kTileCols = kVec * kColLanes;
constexpr int kColsPerSplitTile = kTileCols;  // linear_colsum_splits's column tile
// n = 1: a block per (kN1Tile-column tile of k, row slice).
constexpr int kN1Vec = 8;
constexpr int kN1Tile = kN1Vec * kColLanes;
}  // namespace linear_geometry

// One launch of a kernel below as the plan made it (linear_plan.cpp, from
// the problem and the pointer class): the launchers launch exactly this and
// decide nothing.
struct LinearLaunch {
  uint32_t grid_x = 0, grid_y = 1;    // blocks
  uint32_t block_x = 0, block_y = 1;  // threads
  int64_t rows_per_split = 0;         // the row-slice kernels: a block's rows (grid_y slices)
  bool packed = false;                // the kernel's `packed`: its pointers and rows allow whole packs
};

// Forward epilogue applied in place over y [rows, cols] (row stride ldy), as
// cuBLASLt's BIAS / RELU_AUX_BIAS / GELU_AUX_BIAS would: z = y + bias (bias
// may be null), aux (may be null) receives what backward needs, y = act(z).
// Assumptions: aux, when given, is 16-byte aligned and laid out as above.
cudaError_t launch_linear_fwd_epilogue(const LinearLaunch &l, fnorm_dtype_t dtype, LinearAct act, void *y,
                                       int64_t rows, int64_t cols, int64_t ldy, const void *bias, void *aux,
                                       cudaStream_t stream);

// Backward of the activation over [rows, cols]: dz = dy * act'(aux) (dz = dy
// for LinearAct::None). dz may be null (not written) or the very same
// buffer as dy (in place); with partial non-null, the column sums of dz in
// fp32 of the l.grid_y row slices go to partial[s * cols + c] (reduce them
// with launch_column_sums, core/column_sums.hpp). `flat` (the plan's
// choice: linear_plan.cpp; partial null, dz given): a plain element-wise pass
// (a thread per 8 columns of a row) instead of the row-slice tiles; `l` is
// that form's launch.
cudaError_t launch_linear_bwd_act(const LinearLaunch &l, bool flat, fnorm_dtype_t dtype, LinearAct act,
                                  const void *dy, int64_t lddy, const void *aux, void *dz, int64_t lddz,
                                  int64_t rows, int64_t cols, float *partial, cudaStream_t stream);

// Training forward after cuBLASLt's RELU_BIAS GEMM (no aux): the ReLU mask
// of y [rows, cols] (row stride ldy) into aux in the RELU format above, bit
// = y > 0 (pad bits 0). Assumptions: aux is laid out as above.
cudaError_t launch_linear_relu_mask(const LinearLaunch &l, fnorm_dtype_t dtype, const void *y, int64_t ldy,
                                    int64_t rows, int64_t cols, void *aux, cudaStream_t stream);

// After a BIAS GEMM that wrote z into the GELU aux (training) or into y
// (inference, z == y and ldz == ldy): y = gelu(z as stored), rows x cols.
cudaError_t launch_linear_gelu_pass(const LinearLaunch &l, fnorm_dtype_t dtype, const void *z, int64_t ldz, void *y,
                                    int64_t ldy, int64_t rows, int64_t cols, cudaStream_t stream);

// Backward of a layer with n = 1 without GEMMs (see launch_linear_bwd_n1).
struct LinearN1Args {
  LinearAct act = LinearAct::None;
  const void *dy = nullptr;  // [rows, 1], row stride lddy
  const void *aux = nullptr;  // act's aux for n = 1
  const void *x = nullptr;    // [rows, cols], row stride ldx (needed with dw)
  const void *w = nullptr;    // element c at w[c * w_stride] (needed with dx)
  void *dx = nullptr, *dw = nullptr, *db = nullptr;  // each optional
  int64_t lddy = 1, ldx = 1, w_stride = 1, lddx = 1, dw_stride = 1;
  int64_t rows = 0, cols = 0;  // m and k
  float *partial = nullptr;    // pass.grid_y x (cols + 1) fp32; needed with dw or db
};

// dz = dy * act'(aux) (a column, rounded to the dtype), dx = dz w^T, dw =
// x^T dz, db = sum(dz): one pass over x and dx (`pass`: its row slices
// are linear_n1_splits's), then (with dw or db) a short pass adding the row
// slices' partial sums in a fixed order (`finish`).
// Assumptions: 1 <= pass.grid_y <= linear_n1_splits's answer for rows
// (each slice non-empty is not required); partial non-null iff dw or db is
// wanted.
cudaError_t launch_linear_bwd_n1(const LinearLaunch &pass, const LinearLaunch &finish, fnorm_dtype_t dtype,
                                 const LinearN1Args &args, cudaStream_t stream);

// Row slices of launch_linear_bwd_n1.
int linear_n1_splits(int64_t rows, int64_t cols, int sm_count);

// Row slices of launch_linear_bwd_act's grid (and of its column sums):
// enough blocks to fill the device, at least 16 rows a slice, at most 512
// slices.
int linear_colsum_splits(int64_t rows, int64_t cols, int sm_count);

}  // namespace fnorm
