/* SPDX-License-Identifier: Apache-2.0 */
// The fully-connected layer's elementwise kernels (see linear_kernels.hpp).
// They are memory-bound passes beside cuBLASLt's GEMMs; simple and exact
// matters more here than the last few percent.
#include <algorithm>

#include "core/device.cuh"
#include "linear/linear_kernels.hpp"

namespace fnorm {
namespace {

using namespace linear_geometry;

// GELU, tanh approximation (cuBLASLt's GELU epilogue; PyTorch's
// gelu(approximate="tanh")), and its derivative.
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

// tanh from one exponential and one reciprocal (the hardware's ex2 / rcp
// approximations): absolute error ~1e-7, saturating to +-1 (1 - 2 / inf).
// tanhf's full-precision sequence made the GELU passes compute-bound: the
// forward pass over 8192 x 1024 fp16 took 12.3 us against 9 for
// PyTorch's (H200, 2026-11-22).
__device__ __forceinline__ float tanh_fast(float u) { return 1.f - __fdividef(2.f, __expf(2.f * u) + 1.f); }

__device__ __forceinline__ float gelu(float z) {
  const float inner = kGeluBeta * (z + kGeluKappa * z * z * z);
  return 0.5f * z * (1.f + tanh_fast(inner));
}

__device__ __forceinline__ float gelu_grad(float z) {
  const float z2 = z * z;
  const float t = tanh_fast(kGeluBeta * (z + kGeluKappa * z2 * z));
  return 0.5f * (1.f + t) + 0.5f * z * (1.f - t * t) * kGeluBeta * (1.f + 3.f * kGeluKappa * z2);
}

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

// The element-wise passes below: blocks of 32 x 8 threads, a thread per 8
// consecutive columns (16 bytes of fp16/bf16, 32 of fp32; one byte of the
// ReLU mask) of one row; grid.x over a row's 256-column tiles, grid.y over
// groups of 8 rows (striding when rows exceed 8 x 65535: the plan's grid,
// linear_plan.cpp). No 64-bit division per element (the first mask pass's
// 1-D indexing spent more on it than on memory).

// Forward after cuBLASLt's RELU_BIAS GEMM (no aux): the ReLU mask from y,
// in the aux format (linear_kernels.hpp). The bit is y > 0, as PyTorch's
// ReLU backward decides (a threshold on the output): where z rounds to 0
// in the dtype, z = +-0 or NaN, the bit is 0. cuBLASLt's RELU_AUX differs
// there (z within rounding of 0; its bit is 1 at z = 0 exactly, seen on the
// H200): only elements where y == 0. Row padding bits (cols up to ld) are
// written 0; mask_row_bytes = ld / 8.
// packed: y and its rows 16-byte aligned. Uniform over the grid.
template <typename T>
__global__ void __launch_bounds__(kColLanes *kRowLanes)
    linear_relu_mask_kernel(const T *__restrict__ y, int64_t ldy, int64_t rows, int64_t cols,
                            unsigned char *__restrict__ mask, int64_t mask_row_bytes, bool packed) {
  const int64_t byte = int64_t(blockIdx.x) * kColLanes + threadIdx.x;
  if (byte >= mask_row_bytes) return;
  const int64_t c0 = byte * 8;
  for (int64_t r = int64_t(blockIdx.y) * kRowLanes + threadIdx.y; r < rows; r += int64_t(gridDim.y) * kRowLanes) {
    unsigned bits = 0;
    if (packed && c0 + 8 <= cols) {
      float v[8];
      load_pack<T, 8>(y + r * ldy + c0, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) bits |= (v[j] > 0.f ? 1u : 0u) << j;
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (c0 + j < cols && Convert<T>::to_float(y[r * ldy + c0 + j]) > 0.f) bits |= 1u << j;
    }
    mask[r * mask_row_bytes + byte] = static_cast<unsigned char>(bits);
  }
}

// y = gelu(z) from z as stored (what F.linear then F.gelu computes): after
// a BIAS GEMM that wrote z into GELU's aux (training) or into y itself
// (inference; z == y, ldz == ldy: each thread reads its elements before it
// writes them, so no __restrict__).
// packed: z, y and their rows 16-byte aligned. Uniform.
template <typename T>
__global__ void __launch_bounds__(kColLanes *kRowLanes)
    linear_gelu_pass_kernel(const T *z, int64_t ldz, T *y, int64_t ldy, int64_t rows, int64_t cols, bool packed) {
  const int64_t c0 = (int64_t(blockIdx.x) * kColLanes + threadIdx.x) * kEwVec;
  if (c0 >= cols) return;
  for (int64_t r = int64_t(blockIdx.y) * kRowLanes + threadIdx.y; r < rows; r += int64_t(gridDim.y) * kRowLanes) {
    if (packed && c0 + kEwVec <= cols) {
      float v[kEwVec];
      load_pack<T, kEwVec>(z + r * ldz + c0, v);
#pragma unroll
      for (int j = 0; j < kEwVec; ++j) v[j] = gelu(v[j]);
      store_pack<T, kEwVec>(y + r * ldy + c0, v);
    } else {
      for (int j = 0; j < kEwVec && c0 + j < cols; ++j)
        y[r * ldy + c0 + j] = Convert<T>::from_float(gelu(Convert<T>::to_float(z[r * ldz + c0 + j])));
    }
  }
}

// Backward, no bias-gradient partials: dz = dy * act'(aux), a thread per
// 8 columns of a row (ReLU: exactly one mask byte, since ld is a multiple
// of 128 bits). dz may be dy (in place): each thread reads its elements
// before writing them. packed: dy, dz (and GELU's aux) 16-byte aligned rows.
template <typename T, LinearAct ACT>
__global__ void __launch_bounds__(kColLanes *kRowLanes)
    linear_dz_kernel(const T *dy, int64_t lddy, const void *aux, int64_t aux_ld, T *dz, int64_t lddz, int64_t rows,
                     int64_t cols, bool packed) {
  const int64_t c0 = (int64_t(blockIdx.x) * kColLanes + threadIdx.x) * kEwVec;
  if (c0 >= cols) return;
  const bool full = packed && c0 + kEwVec <= cols;
  for (int64_t r = int64_t(blockIdx.y) * kRowLanes + threadIdx.y; r < rows; r += int64_t(gridDim.y) * kRowLanes) {
    float g[kEwVec], a[kEwVec];
    if (full) {
      load_pack<T, kEwVec>(dy + r * lddy + c0, g);
    } else {
#pragma unroll
      for (int i = 0; i < kEwVec; ++i) g[i] = c0 + i < cols ? Convert<T>::to_float(dy[r * lddy + c0 + i]) : 0.f;
    }
    unsigned bits = 0;
    if (ACT == LinearAct::Relu) {
      bits = static_cast<const unsigned char *>(aux)[(r * aux_ld + c0) >> 3];
    } else if (ACT == LinearAct::Gelu) {
      const T *za = static_cast<const T *>(aux) + r * aux_ld + c0;
      if (full) {
        load_pack<T, kEwVec>(za, a);
      } else {
#pragma unroll
        for (int i = 0; i < kEwVec; ++i) a[i] = c0 + i < cols ? Convert<T>::to_float(za[i]) : 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < kEwVec; ++i) {
      if (ACT == LinearAct::Relu && ((bits >> i) & 1u) == 0) g[i] = 0.f;
      if (ACT == LinearAct::Gelu) g[i] *= gelu_grad(a[i]);
    }
    if (full) {
      store_pack<T, kEwVec>(dz + r * lddz + c0, g);
    } else {
#pragma unroll
      for (int i = 0; i < kEwVec; ++i)
        if (c0 + i < cols) dz[r * lddz + c0 + i] = Convert<T>::from_float(g[i]);
    }
  }
}

// Backward with the bias gradient's partial sums (where cuBLASLt's BGRAD
// epilogue is not used): 32 lanes x 4 consecutive columns (a warp covers
// 128 columns, 256 contiguous bytes of fp16 per row) by 8 row lanes, each
// block one row slice of one column tile.

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

// Backward of a layer with one output column (n = 1), without GEMMs: dz is
// a column (dz_r = dy_r * act'(z_r), rounded to the dtype as stored), dx =
// dz w^T an outer product, dw = x^T dz and db = sum(dz) reductions over the
// rows. One block per (256-column tile of k, row slice): it writes its rows
// of dx and the slice's fp32 sums of dw (cols entries) and db (entry cols)
// to partial[slice * (cols + 1) + ...] (null: dx only);
// linear_n1_finish_kernel adds the slices in a fixed order.
// w's element c is at w[c * w_stride] (W [1, k] or [k, 1] with its ld).
// packed: x and dx 16-byte aligned with 16-byte aligned rows. Uniform.
constexpr int kN1Unroll = 4;

template <typename T, LinearAct ACT>
__global__ void __launch_bounds__(kColLanes *kRowLanes)
    linear_bwd_n1_kernel(const T *__restrict__ dy, int64_t lddy, const void *__restrict__ aux, int64_t aux_ld,
                         const T *__restrict__ x, int64_t ldx, const T *__restrict__ w, int64_t w_stride,
                         T *__restrict__ dx, int64_t lddx, int64_t rows, int64_t cols, float *__restrict__ partial,
                         int64_t rows_per_split, bool packed) {
  __shared__ float red[kRowLanes][kN1Tile + 1];
  const int64_t c0 = int64_t(blockIdx.x) * kN1Tile + threadIdx.x * kN1Vec;
  const int64_t r_begin = int64_t(blockIdx.y) * rows_per_split;
  const int64_t r_end = min(rows, r_begin + rows_per_split);
  const bool full = packed && c0 + kN1Vec <= cols;
  float wv[kN1Vec];
#pragma unroll
  for (int i = 0; i < kN1Vec; ++i)
    wv[i] = dx != nullptr && c0 + i < cols ? Convert<T>::to_float(w[(c0 + i) * w_stride]) : 0.f;
  float acc[kN1Vec] = {};
  float dbacc = 0.f;
  for (int64_t rb = r_begin + threadIdx.y; rb < r_end; rb += kRowLanes * kN1Unroll) {
    float g[kN1Unroll];
    float xv[kN1Unroll][kN1Vec];
#pragma unroll
    for (int u = 0; u < kN1Unroll; ++u) {
      const int64_t r = rb + int64_t(u) * kRowLanes;
      g[u] = 0.f;
#pragma unroll
      for (int i = 0; i < kN1Vec; ++i) xv[u][i] = 0.f;
      if (r >= r_end) continue;
      float v = Convert<T>::to_float(dy[r * lddy]);
      if (ACT == LinearAct::Relu) {
        // ld is a multiple of 128 bits: row r's bit 0 is bit 0 of a byte.
        if ((static_cast<const unsigned char *>(aux)[(r * aux_ld) >> 3] & 1u) == 0) v = 0.f;
      } else if (ACT == LinearAct::Gelu) {
        v *= gelu_grad(Convert<T>::to_float(static_cast<const T *>(aux)[r * aux_ld]));
      }
      g[u] = round_to<T>(v);
      if (partial != nullptr) {
        if (full) {
          load_pack<T, kN1Vec>(x + r * ldx + c0, xv[u]);
        } else {
#pragma unroll
          for (int i = 0; i < kN1Vec; ++i) xv[u][i] = c0 + i < cols ? Convert<T>::to_float(x[r * ldx + c0 + i]) : 0.f;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kN1Unroll; ++u) {
      const int64_t r = rb + int64_t(u) * kRowLanes;
      if (r >= r_end) break;
      dbacc += g[u];
#pragma unroll
      for (int i = 0; i < kN1Vec; ++i) acc[i] = fmaf(g[u], xv[u][i], acc[i]);
      if (dx != nullptr) {
        float o[kN1Vec];
#pragma unroll
        for (int i = 0; i < kN1Vec; ++i) o[i] = g[u] * wv[i];
        if (full) {
          store_pack<T, kN1Vec>(dx + r * lddx + c0, o);
        } else {
#pragma unroll
          for (int i = 0; i < kN1Vec; ++i)
            if (c0 + i < cols) dx[r * lddx + c0 + i] = Convert<T>::from_float(o[i]);
        }
      }
    }
  }
  if (partial == nullptr) return;  // uniform over the block
#pragma unroll
  for (int i = 0; i < kN1Vec; ++i) red[threadIdx.y][threadIdx.x * kN1Vec + i] = acc[i];
  if (threadIdx.x == 0) red[threadIdx.y][kN1Tile] = dbacc;
  __syncthreads();
  float *out = partial + int64_t(blockIdx.y) * (cols + 1);
  for (int t = threadIdx.y * kColLanes + threadIdx.x; t <= kN1Tile; t += kColLanes * kRowLanes) {
    float s = 0.f;
#pragma unroll
    for (int y = 0; y < kRowLanes; ++y) s += red[y][t];
    if (t < kN1Tile) {
      const int64_t c = int64_t(blockIdx.x) * kN1Tile + t;
      if (c < cols) out[c] = s;
    } else if (blockIdx.x == 0) {
      out[cols] = s;  // db: every column tile has the same rows; the first writes it
    }
  }
}

// dw[c * dw_stride] (c < cols) and db[0] (c == cols) from the slices'
// partial sums: one warp per entry, lanes over slices, a fixed order.
template <typename T>
__global__ void __launch_bounds__(256)
    linear_n1_finish_kernel(const float *__restrict__ partial, int splits, int64_t cols, T *__restrict__ dw,
                            int64_t dw_stride, T *__restrict__ db) {
  const int64_t c = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (c > cols) return;  // uniform over the warp
  float s = 0.f;
  for (int i = lane; i < splits; i += 32) s += partial[int64_t(i) * (cols + 1) + c];
#pragma unroll
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane != 0) return;
  if (c < cols) {
    if (dw != nullptr) dw[c * dw_stride] = Convert<T>::from_float(s);
  } else if (db != nullptr) {
    db[0] = Convert<T>::from_float(s);
  }
}

// The launchers: each launches the plan's LinearLaunch (linear_plan.cpp
// sized the grid and chose `packed` from the problem and the pointer class).

dim3 grid_of(const LinearLaunch &l) { return dim3(l.grid_x, l.grid_y); }
dim3 block_of(const LinearLaunch &l) { return dim3(l.block_x, l.block_y); }

template <typename T, LinearAct ACT>
cudaError_t fwd_epilogue(const LinearLaunch &l, void *y, int64_t rows, int64_t cols, int64_t ldy, const void *bias,
                         void *aux, cudaStream_t stream) {
  linear_fwd_epilogue_kernel<T, ACT><<<grid_of(l), block_of(l), 0, stream>>>(
      static_cast<T *>(y), rows, cols, ldy, static_cast<const T *>(bias), aux, linear_aux_ld(ACT, cols));
  return cudaPeekAtLastError();
}

template <typename T>
cudaError_t fwd_epilogue_t(const LinearLaunch &l, LinearAct act, void *y, int64_t rows, int64_t cols, int64_t ldy,
                           const void *bias, void *aux, cudaStream_t stream) {
  switch (act) {
    case LinearAct::None: return fwd_epilogue<T, LinearAct::None>(l, y, rows, cols, ldy, bias, aux, stream);
    case LinearAct::Relu: return fwd_epilogue<T, LinearAct::Relu>(l, y, rows, cols, ldy, bias, aux, stream);
    case LinearAct::Gelu: return fwd_epilogue<T, LinearAct::Gelu>(l, y, rows, cols, ldy, bias, aux, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T, LinearAct ACT>
cudaError_t bwd_act(const LinearLaunch &l, bool flat, const void *dy, int64_t lddy, const void *aux, void *dz,
                    int64_t lddz, int64_t rows, int64_t cols, float *partial, cudaStream_t stream) {
  const int64_t aux_ld = linear_aux_ld(ACT, cols);
  if (flat) {
    linear_dz_kernel<T, ACT><<<grid_of(l), block_of(l), 0, stream>>>(
        static_cast<const T *>(dy), lddy, aux, aux_ld, static_cast<T *>(dz), lddz, rows, cols, l.packed);
    return cudaPeekAtLastError();
  }
  linear_bwd_act_kernel<T, ACT><<<grid_of(l), block_of(l), 0, stream>>>(
      static_cast<const T *>(dy), lddy, aux, aux_ld, static_cast<T *>(dz), lddz, rows, cols, partial,
      l.rows_per_split, l.packed);
  return cudaPeekAtLastError();
}

template <typename T>
cudaError_t bwd_act_t(const LinearLaunch &l, bool flat, LinearAct act, const void *dy, int64_t lddy, const void *aux,
                      void *dz, int64_t lddz, int64_t rows, int64_t cols, float *partial, cudaStream_t stream) {
  switch (act) {
    case LinearAct::None:
      return bwd_act<T, LinearAct::None>(l, flat, dy, lddy, aux, dz, lddz, rows, cols, partial, stream);
    case LinearAct::Relu:
      return bwd_act<T, LinearAct::Relu>(l, flat, dy, lddy, aux, dz, lddz, rows, cols, partial, stream);
    case LinearAct::Gelu:
      return bwd_act<T, LinearAct::Gelu>(l, flat, dy, lddy, aux, dz, lddz, rows, cols, partial, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t relu_mask(const LinearLaunch &l, const void *y, int64_t ldy, int64_t rows, int64_t cols, void *aux,
                      cudaStream_t stream) {
  const int64_t row_bytes = linear_aux_ld(LinearAct::Relu, cols) / 8;
  linear_relu_mask_kernel<T><<<grid_of(l), block_of(l), 0, stream>>>(
      static_cast<const T *>(y), ldy, rows, cols, static_cast<unsigned char *>(aux), row_bytes, l.packed);
  return cudaPeekAtLastError();
}

template <typename T>
cudaError_t gelu_pass(const LinearLaunch &l, const void *z, int64_t ldz, void *y, int64_t ldy, int64_t rows,
                      int64_t cols, cudaStream_t stream) {
  linear_gelu_pass_kernel<T><<<grid_of(l), block_of(l), 0, stream>>>(
      static_cast<const T *>(z), ldz, static_cast<T *>(y), ldy, rows, cols, l.packed);
  return cudaPeekAtLastError();
}

template <typename T, LinearAct ACT>
cudaError_t bwd_n1(const LinearLaunch &pass, const LinearLaunch &finish, const LinearN1Args &a, cudaStream_t stream) {
  linear_bwd_n1_kernel<T, ACT><<<grid_of(pass), block_of(pass), 0, stream>>>(
      static_cast<const T *>(a.dy), a.lddy, a.aux, linear_aux_ld(ACT, 1), static_cast<const T *>(a.x), a.ldx,
      static_cast<const T *>(a.w), a.w_stride, static_cast<T *>(a.dx), a.lddx, a.rows, a.cols, a.partial,
      pass.rows_per_split, pass.packed);
  cudaError_t e = cudaPeekAtLastError();
  if (e != cudaSuccess || a.partial == nullptr) return e;
  // The slices to add are the pass's row slices (its grid_y).
  linear_n1_finish_kernel<T><<<grid_of(finish), block_of(finish), 0, stream>>>(
      a.partial, static_cast<int>(pass.grid_y), a.cols, static_cast<T *>(a.dw), a.dw_stride, static_cast<T *>(a.db));
  return cudaPeekAtLastError();
}

template <typename T>
cudaError_t bwd_n1_t(const LinearLaunch &pass, const LinearLaunch &finish, const LinearN1Args &a,
                     cudaStream_t stream) {
  switch (a.act) {
    case LinearAct::None: return bwd_n1<T, LinearAct::None>(pass, finish, a, stream);
    case LinearAct::Relu: return bwd_n1<T, LinearAct::Relu>(pass, finish, a, stream);
    case LinearAct::Gelu: return bwd_n1<T, LinearAct::Gelu>(pass, finish, a, stream);
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
  const int64_t col_blocks = cols / kColsPerSplitTile + (cols % kColsPerSplitTile != 0);  // no cols + 31 overflow
  const int64_t want = (8 * int64_t{std::max(sm_count, 1)} + col_blocks - 1) / col_blocks;
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(512, rows / 16));
  return static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
}

cudaError_t launch_linear_fwd_epilogue(const LinearLaunch &l, fnorm_dtype_t dtype, LinearAct act, void *y,
                                       int64_t rows, int64_t cols, int64_t ldy, const void *bias, void *aux,
                                       cudaStream_t stream) {
  return with_data_type(dtype, [&](auto t) {
    return fwd_epilogue_t<decltype(t)>(l, act, y, rows, cols, ldy, bias, aux, stream);
  });
}

cudaError_t launch_linear_bwd_act(const LinearLaunch &l, bool flat, fnorm_dtype_t dtype, LinearAct act,
                                  const void *dy, int64_t lddy, const void *aux, void *dz, int64_t lddz,
                                  int64_t rows, int64_t cols, float *partial, cudaStream_t stream) {
  return with_data_type(dtype, [&](auto t) {
    return bwd_act_t<decltype(t)>(l, flat, act, dy, lddy, aux, dz, lddz, rows, cols, partial, stream);
  });
}

cudaError_t launch_linear_relu_mask(const LinearLaunch &l, fnorm_dtype_t dtype, const void *y, int64_t ldy,
                                    int64_t rows, int64_t cols, void *aux, cudaStream_t stream) {
  return with_data_type(dtype, [&](auto t) { return relu_mask<decltype(t)>(l, y, ldy, rows, cols, aux, stream); });
}

cudaError_t launch_linear_gelu_pass(const LinearLaunch &l, fnorm_dtype_t dtype, const void *z, int64_t ldz, void *y,
                                    int64_t ldy, int64_t rows, int64_t cols, cudaStream_t stream) {
  return with_data_type(dtype, [&](auto t) { return gelu_pass<decltype(t)>(l, z, ldz, y, ldy, rows, cols, stream); });
}

int linear_n1_splits(int64_t rows, int64_t cols, int sm_count) {
  // One 256-column tile of k per block and row slices of at least 32 rows
  // (one pass of 4 rows per row lane); two blocks per SM over the column
  // tiles keep the finishing pass short (at most 2 x SMs partials a column).
  const int64_t col_blocks = cols / kN1Tile + (cols % kN1Tile != 0);
  const int64_t want = (2 * int64_t{std::max(sm_count, 1)} + col_blocks - 1) / col_blocks;
  const int64_t most = std::max<int64_t>(1, rows / 32);
  return static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
}

cudaError_t launch_linear_bwd_n1(const LinearLaunch &pass, const LinearLaunch &finish, fnorm_dtype_t dtype,
                                 const LinearN1Args &args, cudaStream_t stream) {
  return with_data_type(dtype, [&](auto t) { return bwd_n1_t<decltype(t)>(pass, finish, args, stream); });
}

}  // namespace fnorm
