// The fully-connected layer's elementwise kernels (see linear_kernels.hpp).
// They are memory-bound passes beside cuBLASLt's GEMMs; simple and exact
// matters more here than the last few percent.
#include <algorithm>

#include "core/device.cuh"
#include "linear/linear_kernels.hpp"

namespace fnorm {
namespace {

// GELU, tanh approximation (cuBLASLt's GELU epilogue; PyTorch's
// gelu(approximate="tanh")), and its derivative.
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

__device__ __forceinline__ float gelu(float z) {
  const float inner = kGeluBeta * (z + kGeluKappa * z * z * z);
  return 0.5f * z * (1.f + tanhf(inner));
}

__device__ __forceinline__ float gelu_grad(float z) {
  const float z2 = z * z;
  const float t = tanhf(kGeluBeta * (z + kGeluKappa * z2 * z));
  return 0.5f * (1.f + t) + 0.5f * z * (1.f - t * t) * kGeluBeta * (1.f + 3.f * kGeluKappa * z2);
}

constexpr int kFwdGroup = 8;  // columns per thread: one byte of the ReLU mask

template <typename T, LinearAct ACT>
__global__ void __launch_bounds__(256)
    linear_fwd_epilogue_kernel(T *y, int64_t rows, int64_t cols, int64_t ldy, const T *bias, void *aux,
                               int64_t aux_ld) {
  const int64_t groups = (cols + kFwdGroup - 1) / kFwdGroup;
  const int64_t total = rows * groups;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups;
    const int64_t c0 = (i - r * groups) * kFwdGroup;
    unsigned mask = 0;
#pragma unroll
    for (int j = 0; j < kFwdGroup; ++j) {
      const int64_t c = c0 + j;
      if (c >= cols) break;
      T &out = y[r * ldy + c];
      float z = Convert<T>::to_float(out);
      if (bias != nullptr) z += Convert<T>::to_float(bias[c]);
      float v = z;
      if (ACT == LinearAct::Relu) {
        mask |= (z > 0.f ? 1u : 0u) << j;
        v = z > 0.f ? z : 0.f;
      } else if (ACT == LinearAct::Gelu) {
        if (aux != nullptr) static_cast<T *>(aux)[r * aux_ld + c] = Convert<T>::from_float(z);
        v = gelu(z);
      }
      out = Convert<T>::from_float(v);
    }
    if (ACT == LinearAct::Relu && aux != nullptr)
      static_cast<unsigned char *>(aux)[(r * aux_ld + c0) / 8] = static_cast<unsigned char>(mask);
  }
}

// Backward tile: 32 lanes x 4 consecutive columns (a warp covers 128
// columns, 256 contiguous bytes of fp16 per row) by 8 row lanes.
constexpr int kVec = 4;
constexpr int kColLanes = 32;
constexpr int kRowLanes = 8;
constexpr int kTileCols = kVec * kColLanes;

// dy and dz may be the same buffer: no __restrict__ on them.
// packed: dy, dz (and GELU's aux) rows start 4-element aligned, so each
// thread moves its 4 columns as one access (8 bytes fp16/bf16, 16 fp32);
// otherwise element by element. Uniform over the grid.
template <typename T, LinearAct ACT>
__global__ void __launch_bounds__(kColLanes *kRowLanes)
    linear_bwd_act_kernel(const T *dy, int64_t lddy, const void *aux, int64_t aux_ld, T *dz, int64_t lddz,
                          int64_t rows, int64_t cols, float *partial, int64_t rows_per_split, bool packed) {
  __shared__ float red[kRowLanes][kTileCols];
  const int64_t c0 = int64_t(blockIdx.x) * kTileCols + threadIdx.x * kVec;
  const int64_t r_begin = int64_t(blockIdx.y) * rows_per_split;
  const int64_t r_end = min(rows, r_begin + rows_per_split);
  const bool full = packed && c0 + kVec <= cols;
  float sum[kVec] = {};
  for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kRowLanes) {
    float g[kVec];
    if (full) {
      load_pack<T, kVec>(dy + r * lddy + c0, g);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) g[i] = c0 + i < cols ? Convert<T>::to_float(dy[r * lddy + c0 + i]) : 0.f;
    }
    if (ACT == LinearAct::Relu) {
      // c0 is a multiple of 4 and ld of 128: the 4 bits share a byte.
      const int64_t bit = r * aux_ld + c0;
      const unsigned byte = static_cast<const unsigned char *>(aux)[bit >> 3] >> (bit & 7);
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        if (((byte >> i) & 1u) == 0) g[i] = 0.f;
    } else if (ACT == LinearAct::Gelu) {
      const T *za = static_cast<const T *>(aux) + r * aux_ld + c0;
      float z[kVec];
      if (full) {
        load_pack<T, kVec>(za, z);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) z[i] = c0 + i < cols ? Convert<T>::to_float(za[i]) : 0.f;
      }
#pragma unroll
      for (int i = 0; i < kVec; ++i) g[i] *= gelu_grad(z[i]);
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) g[i] = round_to<T>(g[i]);  // dz as stored
    if (dz != nullptr) {
      if (full) {
        store_pack<T, kVec>(dz + r * lddz + c0, g);
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          if (c0 + i < cols) dz[r * lddz + c0 + i] = Convert<T>::from_float(g[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum[i] += g[i];  // columns past cols add 0
  }
  if (partial == nullptr) return;  // uniform over the block
#pragma unroll
  for (int i = 0; i < kVec; ++i) red[threadIdx.y][threadIdx.x * kVec + i] = sum[i];
  __syncthreads();
  const int t = threadIdx.y * kColLanes + threadIdx.x;
  if (t < kTileCols) {
    const int64_t c = int64_t(blockIdx.x) * kTileCols + t;
    float s = 0.f;
#pragma unroll
    for (int y = 0; y < kRowLanes; ++y) s += red[y][t];
    if (c < cols) partial[int64_t(blockIdx.y) * cols + c] = s;
  }
}

template <typename T, LinearAct ACT>
cudaError_t fwd_epilogue(void *y, int64_t rows, int64_t cols, int64_t ldy, const void *bias, void *aux,
                         cudaStream_t stream) {
  const int64_t work = rows * ((cols + kFwdGroup - 1) / kFwdGroup);
  // A grid-stride loop: 8192 blocks of 256 threads cover the largest device
  // several times over.
  const int blocks = static_cast<int>(std::min<int64_t>((work + 255) / 256, 8192));
  linear_fwd_epilogue_kernel<T, ACT><<<blocks, 256, 0, stream>>>(
      static_cast<T *>(y), rows, cols, ldy, static_cast<const T *>(bias), aux, linear_aux_ld(ACT, cols));
  return cudaPeekAtLastError();
}

template <typename T>
cudaError_t fwd_epilogue_t(LinearAct act, void *y, int64_t rows, int64_t cols, int64_t ldy, const void *bias,
                           void *aux, cudaStream_t stream) {
  switch (act) {
    case LinearAct::None: return fwd_epilogue<T, LinearAct::None>(y, rows, cols, ldy, bias, aux, stream);
    case LinearAct::Relu: return fwd_epilogue<T, LinearAct::Relu>(y, rows, cols, ldy, bias, aux, stream);
    case LinearAct::Gelu: return fwd_epilogue<T, LinearAct::Gelu>(y, rows, cols, ldy, bias, aux, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T, LinearAct ACT>
cudaError_t bwd_act(const void *dy, int64_t lddy, const void *aux, void *dz, int64_t lddz, int64_t rows,
                    int64_t cols, float *partial, int splits, cudaStream_t stream) {
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>((cols + kTileCols - 1) / kTileCols), static_cast<unsigned>(splits));
  constexpr uintptr_t kAlign = sizeof(T) * kVec;
  // GELU's aux rows are ld = 8k elements apart from a 16-byte aligned base.
  const bool packed = reinterpret_cast<uintptr_t>(dy) % kAlign == 0 && lddy % kVec == 0 &&
                      (dz == nullptr || (reinterpret_cast<uintptr_t>(dz) % kAlign == 0 && lddz % kVec == 0)) &&
                      (ACT != LinearAct::Gelu || reinterpret_cast<uintptr_t>(aux) % kAlign == 0);
  linear_bwd_act_kernel<T, ACT><<<grid, dim3(kColLanes, kRowLanes), 0, stream>>>(
      static_cast<const T *>(dy), lddy, aux, linear_aux_ld(ACT, cols), static_cast<T *>(dz), lddz, rows, cols,
      partial, rows_per_split, packed);
  return cudaPeekAtLastError();
}

template <typename T>
cudaError_t bwd_act_t(LinearAct act, const void *dy, int64_t lddy, const void *aux, void *dz, int64_t lddz,
                      int64_t rows, int64_t cols, float *partial, int splits, cudaStream_t stream) {
  switch (act) {
    case LinearAct::None:
      return bwd_act<T, LinearAct::None>(dy, lddy, aux, dz, lddz, rows, cols, partial, splits, stream);
    case LinearAct::Relu:
      return bwd_act<T, LinearAct::Relu>(dy, lddy, aux, dz, lddz, rows, cols, partial, splits, stream);
    case LinearAct::Gelu:
      return bwd_act<T, LinearAct::Gelu>(dy, lddy, aux, dz, lddz, rows, cols, partial, splits, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int64_t linear_aux_ld(LinearAct act, int64_t cols) {
  switch (act) {
    case LinearAct::Relu: return (cols + 127) / 128 * 128;  // bits
    case LinearAct::Gelu: return (cols + 7) / 8 * 8;        // elements
    case LinearAct::None: return 0;
  }
  return 0;
}

int linear_colsum_splits(int64_t rows, int64_t cols, int sm_count) {
  // The pass is memory-bound: it needs many loads in flight, i.e. the device
  // full of threads. Two blocks per SM (a quarter of the H200's resident
  // threads) ran dy -> dz of 8192 x 1024 fp16 in ~25 us, a third of the
  // copy bandwidth (H200, 2026-11-22): aim at 8 blocks of 256 threads per
  // SM, each row slice at least 16 rows (two per row lane).
  const int64_t col_blocks = cols / kTileCols + (cols % kTileCols != 0);  // no cols + 31 overflow
  const int64_t want = (8 * int64_t{std::max(sm_count, 1)} + col_blocks - 1) / col_blocks;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(512, rows / 16));
  return static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
}

cudaError_t launch_linear_fwd_epilogue(fnorm_dtype_t dtype, LinearAct act, void *y, int64_t rows,
                                       int64_t cols, int64_t ldy, const void *bias, void *aux,
                                       cudaStream_t stream) {
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32: return fwd_epilogue_t<float>(act, y, rows, cols, ldy, bias, aux, stream);
    case FNORM_DTYPE_FLOAT16: return fwd_epilogue_t<__half>(act, y, rows, cols, ldy, bias, aux, stream);
    case FNORM_DTYPE_BFLOAT16:
      return fwd_epilogue_t<__nv_bfloat16>(act, y, rows, cols, ldy, bias, aux, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_linear_bwd_act(fnorm_dtype_t dtype, LinearAct act, const void *dy, int64_t lddy,
                                  const void *aux, void *dz, int64_t lddz, int64_t rows, int64_t cols,
                                  float *partial, int splits, cudaStream_t stream) {
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32:
      return bwd_act_t<float>(act, dy, lddy, aux, dz, lddz, rows, cols, partial, splits, stream);
    case FNORM_DTYPE_FLOAT16:
      return bwd_act_t<__half>(act, dy, lddy, aux, dz, lddz, rows, cols, partial, splits, stream);
    case FNORM_DTYPE_BFLOAT16:
      return bwd_act_t<__nv_bfloat16>(act, dy, lddy, aux, dz, lddz, rows, cols, partial, splits, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace fnorm
