/* SPDX-License-Identifier: Apache-2.0 */
// Device helpers for the GPU tests (test code, not the library): random
// fills on the device and a count of non-finite values.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fusednorm.h"

namespace fnorm_test {

// Fill n elements of `dtype` at p with lo + (hi - lo) * u, u uniform in [0,1)
// from a counter-based hash of (seed, i); plus a shift drawn per row of
// `cols` elements from [-row_shift, row_shift] (rows with different means).
cudaError_t fill_uniform(fnorm_dtype_t dtype, void *p, int64_t n, uint64_t seed, float lo, float hi,
                         int64_t cols, float row_shift, cudaStream_t stream);

// Number of non-finite values among n elements of `dtype` at p (blocking).
cudaError_t count_nonfinite(fnorm_dtype_t dtype, const void *p, int64_t n, int64_t *count);

}  // namespace fnorm_test
