// dgamma / dbeta: column sums of the backward kernels' per-block partial rows,
// in a fixed order (the same bits run to run for a given grid).
#include "common.cuh"
#include "params.hpp"

namespace fnorm {
namespace {

constexpr int kSlices = 32;  // blockDim = (32 columns, 32 slices of partial rows)

template <typename W>
__global__ void __launch_bounds__(32 * kSlices)
    norm_bwd_reduce_kernel(const float *__restrict__ dg_part, const float *__restrict__ db_part,
                           int partials, int64_t cols, W *__restrict__ dgamma, W *__restrict__ dbeta) {
  __shared__ float tile[kSlices][33];
  const float *part = blockIdx.y == 0 ? dg_part : db_part;
  W *out = blockIdx.y == 0 ? dgamma : dbeta;
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
cudaError_t launch(const float *dg, const float *db, int partials, int64_t cols, void *dgamma,
                   void *dbeta, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 32)), 2);
  norm_bwd_reduce_kernel<W><<<grid, dim3(32, kSlices), 0, stream>>>(
      dg, db, partials, cols, static_cast<W *>(dgamma), static_cast<W *>(dbeta));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_norm_bwd_reduce(const float *dgamma_partial, const float *dbeta_partial,
                                   int partials, int64_t cols, fnorm_dtype_t out_dtype,
                                   void *dgamma, void *dbeta, cudaStream_t stream) {
  switch (out_dtype) {
    case FNORM_DTYPE_FLOAT32:
      return launch<float>(dgamma_partial, dbeta_partial, partials, cols, dgamma, dbeta, stream);
    case FNORM_DTYPE_FLOAT16:
      return launch<__half>(dgamma_partial, dbeta_partial, partials, cols, dgamma, dbeta, stream);
    case FNORM_DTYPE_BFLOAT16:
      return launch<__nv_bfloat16>(dgamma_partial, dbeta_partial, partials, cols, dgamma, dbeta, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fnorm
