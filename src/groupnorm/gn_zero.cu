/* SPDX-License-Identifier: Apache-2.0 */
// Zeros of a strided [n, c] tensor: the backward's gradients over no values
// (dscale / dshift may be strided views such as temb.chunk(2, 1) halves).
#include <algorithm>

#include "core/device.cuh"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {
namespace {

template <typename T>
__global__ void gn_zero_kernel(T *p, int64_t n, int64_t c, int64_t sn, int64_t sc) {
  const int64_t total = n * c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[(i / c) * sn + (i % c) * sc] = T(0.f);
}

}  // namespace

cudaError_t gn_zero_strided(void *p, fnorm_dtype_t dtype, int64_t n, int64_t c, int64_t sn, int64_t sc,
                            cudaStream_t stream) {
  const int64_t total = n * c;
  if (total == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 1024));
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32: gn_zero_kernel<<<grid, 256, 0, stream>>>(static_cast<float *>(p), n, c, sn, sc); break;
    case FNORM_DTYPE_FLOAT16: gn_zero_kernel<<<grid, 256, 0, stream>>>(static_cast<__half *>(p), n, c, sn, sc); break;
    default: gn_zero_kernel<<<grid, 256, 0, stream>>>(static_cast<__nv_bfloat16 *>(p), n, c, sn, sc); break;
  }
  return cudaPeekAtLastError();
}

}  // namespace fnorm
