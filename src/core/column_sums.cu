/* SPDX-License-Identifier: Apache-2.0 */
// Column sums of per-block partial rows, in a fixed order (the same bits run
// to run for a given grid): the norm backward's dgamma / dbeta and the
// fully-connected layer's bias gradients.
#include "core/column_sums.hpp"
#include "core/device.cuh"

namespace fnorm {
namespace {

constexpr int kSlices = 32;  // blockDim = (32 columns, 32 slices of partial rows)

template <typename W>
__global__ void __launch_bounds__(32 * kSlices)
    column_sums_kernel(const float *__restrict__ a_part, const float *__restrict__ b_part,
                           int partials, int64_t cols, W *__restrict__ out_a, W *__restrict__ out_b) {
  __shared__ float tile[kSlices][33];
  const float *part = blockIdx.y == 0 ? a_part : b_part;
  W *out = blockIdx.y == 0 ? out_a : out_b;
  if (part == nullptr || out == nullptr) return;  // uniform over the block
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (col < cols) {
    for (int b = threadIdx.y; b < partials; b += kSlices) s += part[static_cast<int64_t>(b) * cols + col];
  }
  tile[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float t = 0.f;
    for (int r = 0; r < kSlices; ++r) t += tile[r][threadIdx.x];
    out[col] = Convert<W>::from_float(t);
  }
}

template <typename W>
cudaError_t launch(const float *dg, const float *db, int partials, int64_t cols, void *out_a,
                   void *out_b, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 32)), 2);
  column_sums_kernel<W><<<grid, dim3(32, kSlices), 0, stream>>>(
      dg, db, partials, cols, static_cast<W *>(out_a), static_cast<W *>(out_b));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_column_sums(const float *part_a, const float *part_b,
                               int partials, int64_t cols, fnorm_dtype_t out_dtype, void *out_a,
                               void *out_b, cudaStream_t stream) {
  return with_data_type(out_dtype, [&](auto t) {
    return launch<decltype(t)>(part_a, part_b, partials, cols, out_a, out_b, stream);
  });
}

}  // namespace fnorm
