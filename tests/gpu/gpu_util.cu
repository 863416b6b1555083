/* SPDX-License-Identifier: Apache-2.0 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu_util.hpp"

namespace fnorm_test {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t z) {  // splitmix64 finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float unit(uint64_t h) { return (h >> 40) * (1.0f / 16777216.0f); }

template <typename T>
__device__ __forceinline__ T cvt(float v);
template <>
__device__ __forceinline__ float cvt<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half cvt<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void fill_kernel(T *p, int64_t n, uint64_t seed, float lo, float hi, int64_t cols,
                            float row_shift) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / cols;
    const float shift = row_shift * (2.f * unit(mix(seed ^ 0x5851f42d4c957f2dull ^ mix(row))) - 1.f);
    p[i] = cvt<T>(lo + (hi - lo) * unit(mix(seed + mix(i))) + shift);
  }
}

template <typename T>
__device__ __forceinline__ float tof(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float tof<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float tof<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void nonfinite_kernel(const T *p, int64_t n, unsigned long long *count) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    c += !isfinite(tof(p[i]));
  if (c) atomicAdd(count, c);
}

}  // namespace

cudaError_t fill_uniform(fnorm_dtype_t dtype, void *p, int64_t n, uint64_t seed, float lo, float hi,
                         int64_t cols, float row_shift, cudaStream_t stream) {
  const int grid = 132 * 16, block = 256;
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32:
      fill_kernel<<<grid, block, 0, stream>>>(static_cast<float *>(p), n, seed, lo, hi, cols, row_shift);
      break;
    case FNORM_DTYPE_FLOAT16:
      fill_kernel<<<grid, block, 0, stream>>>(static_cast<__half *>(p), n, seed, lo, hi, cols, row_shift);
      break;
    case FNORM_DTYPE_BFLOAT16:
      fill_kernel<<<grid, block, 0, stream>>>(static_cast<__nv_bfloat16 *>(p), n, seed, lo, hi, cols, row_shift);
      break;
    default: return cudaErrorInvalidValue;  // the one-byte dtypes are outputs only
  }
  return cudaGetLastError();
}

cudaError_t count_nonfinite(fnorm_dtype_t dtype, const void *p, int64_t n, int64_t *count) {
  unsigned long long *d = nullptr;
  cudaError_t err = cudaMalloc(&d, sizeof *d);
  if (err != cudaSuccess) return err;
  cudaMemset(d, 0, sizeof *d);
  const int grid = 132 * 16, block = 256;
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32: nonfinite_kernel<<<grid, block>>>(static_cast<const float *>(p), n, d); break;
    case FNORM_DTYPE_FLOAT16: nonfinite_kernel<<<grid, block>>>(static_cast<const __half *>(p), n, d); break;
    case FNORM_DTYPE_BFLOAT16:
      nonfinite_kernel<<<grid, block>>>(static_cast<const __nv_bfloat16 *>(p), n, d);
      break;
    default: cudaFree(d); return cudaErrorInvalidValue;  // the one-byte dtypes are outputs only
  }
  unsigned long long h = 0;
  err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  *count = static_cast<int64_t>(h);
  return err;
}

}  // namespace fnorm_test
