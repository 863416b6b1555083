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
//        numbered from the least significant bit of byte 0), 1 where z > 0;
//        ld (in bits) a multiple of 128.
//  GELU: z in y's dtype, element c of row r at r * ld + c; ld a multiple of 8.
int64_t linear_aux_ld(LinearAct act, int64_t cols);

// Forward epilogue applied in place over y [rows, cols] (row stride ldy), as
// cuBLASLt's BIAS / RELU_AUX_BIAS / GELU_AUX_BIAS would: z = y + bias (bias
// may be null), aux (may be null) receives what backward needs, y = act(z).
// Assumptions: aux, when given, is 16-byte aligned and laid out as above.
cudaError_t launch_linear_fwd_epilogue(fnorm_dtype_t dtype, LinearAct act, void *y, int64_t rows,
                                       int64_t cols, int64_t ldy, const void *bias, void *aux,
                                       cudaStream_t stream);

// Backward of the activation over [rows, cols]: dz = dy * act'(aux) (dz = dy
// for LinearAct::None). dz may be null (not written) or the very same
// buffer as dy (in place); with partial non-null, the column sums of dz in
// fp32 of the `splits` row slices go to partial[s * cols + c] (reduce them
// with launch_column_sums, core/column_sums.hpp).
cudaError_t launch_linear_bwd_act(fnorm_dtype_t dtype, LinearAct act, const void *dy, int64_t lddy,
                                  const void *aux, void *dz, int64_t lddz, int64_t rows,
                                  int64_t cols, float *partial, int splits, cudaStream_t stream);

// Row slices of launch_linear_bwd_act's grid (and of its column sums):
// enough blocks to fill the device, at least 16 rows a slice, at most 512
// slices.
int linear_colsum_splits(int64_t rows, int64_t cols, int sm_count);

}  // namespace fnorm
