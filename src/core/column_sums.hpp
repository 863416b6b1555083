/* SPDX-License-Identifier: Apache-2.0 */
// Column sums of fp32 partial rows: one pass that turns [partials][cols]
// per-block sums into a vector (core/column_sums.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fusednorm.h"

namespace fnorm {

// out_a / out_b = column sums of part_a / part_b ([partials][cols] fp32 each;
// either pair may be NULL), in a fixed order, written in `out_dtype`.
cudaError_t launch_column_sums(const float *part_a, const float *part_b, int partials, int64_t cols,
                               fnorm_dtype_t out_dtype, void *out_a, void *out_b,
                               cudaStream_t stream);

}  // namespace fnorm
