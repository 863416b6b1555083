/* SPDX-License-Identifier: Apache-2.0 */
// The row engine's load / store functors: what a row-wise kernel reads a
// row through (LoadRow: x, or x + residual written back as the sum), what
// it writes normalized values through (StoreAffine: gamma / beta then T;
// StoreQuant: one-byte codes with a per-tensor or per-token scale), and the
// reductions over the threads that share a row. Fusions live here: the
// kernels move packs of fp32 values between a Load and a Store.
#pragma once

#include "core/device.cuh"
#include "core/quant.hpp"

namespace fnorm {

// Reads packs of the normalized input s as fp32: s = x, or s = x + r rounded
// to T (what an unfused add would store), written to `sum` when asked.
template <typename T, int PACK>
struct LoadRow {
  const T *__restrict__ x;
  const T *__restrict__ residual;  // optional
  T *__restrict__ sum;             // optional (only with residual)
  int64_t row_stride;
  using P = Pack<T, PACK>;
  // v (x widened) += r, rounded to T, and written to sum when asked.
  __device__ __forceinline__ void add_residual(float (&v)[PACK], const P &r, int64_t off) const {
    float rv[PACK];
    widen_pack<T, PACK>(r, rv);
#pragma unroll
    for (int i = 0; i < PACK; ++i) v[i] = round_to<T>(v[i] + rv[i]);
    if (sum != nullptr) store_pack<T, PACK>(sum + off, v);
  }
  __device__ __forceinline__ void load(float (&v)[PACK], int64_t row, int64_t col) const {
    const int64_t off = row * row_stride + col;
    load_pack<T, PACK>(x + off, v);
    if (residual != nullptr) add_residual(v, ld_pack<T, PACK>(residual + off), off);
  }
  // s at (row, col) once more, after load() has been called for it by this
  // thread: read back from sum where the first read wrote it (sum holds
  // exactly the T-rounded s; it may be x or residual itself, in place, so
  // x + residual cannot be read again), else x (+ residual) again.
  __device__ __forceinline__ void reload(float (&v)[PACK], int64_t row, int64_t col) const {
    const int64_t off = row * row_stride + col;
    if (sum != nullptr) {
      load_pack<T, PACK>(sum + off, v);
      return;
    }
    load_pack<T, PACK>(x + off, v);
    if (residual != nullptr) add_residual(v, ld_pack<T, PACK>(residual + off), off);
  }
  // Starts copying the pack of x at (row, col) to shared memory (cp.async;
  // the caller waits for it). Only without a residual: s = x there.
  __device__ __forceinline__ void copy_x_async(T *dst, int64_t row, int64_t col) const {
    cp_async<sizeof(P)>(dst, x + row * row_stride + col);
  }
};

// The affine parameters (each optional; in T or fp32; gamma possibly
// zero-centred) applied to normalized values. round_xhat (kernel-uniform):
// the normalized values are rounded to T first (Hugging Face's Llama cast
// order; nothing for fp32 T).
template <typename T, int PACK>
struct Affine {
  const void *__restrict__ gamma;
  const void *__restrict__ beta;
  bool param_f32;
  bool zero_centered;
  bool round_xhat;
  __device__ __forceinline__ void apply(float (&v)[PACK], int64_t col) const {
    if (round_xhat) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[i] = round_to<T>(v[i]);
    }
    if (gamma != nullptr) {
      float g[PACK];
      load_param<T, PACK>(gamma, param_f32, col, g);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[i] *= zero_centered ? 1.f + g[i] : g[i];
    }
    if (beta != nullptr) {
      float b[PACK];
      load_param<T, PACK>(beta, param_f32, col, b);
#pragma unroll
      for (int i = 0; i < PACK; ++i) v[i] += b[i];
    }
  }
};

// Applies the affine parameters to normalized values and writes y in T.
template <typename T, int PACK>
struct StoreAffine {
  static constexpr bool kQuant = false;
  T *__restrict__ y;
  int64_t row_stride;
  Affine<T, PACK> affine;
  __device__ __forceinline__ void store(float (&v)[PACK], int64_t row, int64_t col) const {
    affine.apply(v, col);
    store_pack<T, PACK>(y + row * row_stride + col, v);
  }
};

// Writes y as one-byte codes of v / s (core/quant.hpp), v the affine output.
// The scale s comes from the caller (per tensor) or from the row's max |v|
// (per token), which the kernels reduce before the first code is written.
template <typename T, int PACK>
struct StoreQuant {
  static constexpr bool kQuant = true;
  uint8_t *__restrict__ y;
  int64_t row_stride;
  Affine<T, PACK> affine;
  float *scale;  // per tensor: read; per token: written, one per row
  float *amax;   // optional: max |v| over the tensor, zeroed before the launch
  QuantKind kind;
  bool per_token;

  __device__ __forceinline__ float tensor_scale() const { return __ldg(scale); }

  __device__ __forceinline__ void put(const float (&v)[PACK], int64_t row, int64_t col, float s) const {
    float t[PACK];
#pragma unroll
    for (int i = 0; i < PACK; ++i) t[i] = __fdiv_rn(v[i], s);
    Pack<uint8_t, PACK> q;
    if (kind == QuantKind::Int8) {
#pragma unroll
      for (int i = 0; i < PACK; ++i) q.v[i] = static_cast<uint8_t>(int8_from_float(t[i]));
    } else if constexpr (PACK == 1) {
      q.v[0] = kind == QuantKind::E4M3 ? e4m3_from_float(t[0]) : e5m2_from_float(t[0]);
    } else {
#pragma unroll
      for (int i = 0; i < PACK; i += 2) {
        const uint16_t two = kind == QuantKind::E4M3 ? quant_fp8x2<3>(t[i], t[i + 1]) : quant_fp8x2<2>(t[i], t[i + 1]);
        q.v[i] = static_cast<uint8_t>(two);
        q.v[i + 1] = static_cast<uint8_t>(two >> 8);
      }
    }
    st_pack<uint8_t, PACK>(y + row * row_stride + col, q);
  }
};

template <int PACK>
__device__ __forceinline__ unsigned pack_abs_max(const float (&v)[PACK]) {
  unsigned m = 0;
#pragma unroll
  for (int i = 0; i < PACK; ++i) m = max(m, abs_bits(v[i]));
  return m;
}

// The reductions over the threads that share a row: a group of `width`
// lanes, or the block (through 32 words of shared memory).
struct GroupReduce {
  int width;
  __device__ __forceinline__ float sum(float v) const { return group_allreduce<SumOp>(v, width); }
  __device__ __forceinline__ unsigned max(unsigned v) const { return group_allreduce<MaxBitsOp>(v, width); }
};
struct BlockReduce {
  float *scratch;
  __device__ __forceinline__ float sum(float v) const { return block_allreduce<SumOp>(v, scratch); }
  __device__ __forceinline__ unsigned max(unsigned v) const {
    return block_allreduce<MaxBitsOp>(v, reinterpret_cast<unsigned *>(scratch));
  }
};

// Quantized store of a row whose normalized packs `fetch(pk, v)` gives (the
// one-block-per-row tiers: from the shared-memory cache, or read again).
// Per token, a first pass over the row finds its max |v| (the affine output
// computed twice, the same way both times). Returns the max |v| (as bits)
// this thread saw, for the tensor's amax. Every thread of the block calls it.
template <int PACK, class Store, class Fetch>
__device__ __forceinline__ unsigned quant_row_block(const Store &store, Fetch fetch, int64_t packs_per_row,
                                                    int64_t row, float *scratch) {
  unsigned m = 0;
  float s;
  if (store.per_token) {
    for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
      float v[PACK];
      fetch(pk, v);
      store.affine.apply(v, pk * PACK);
      m = max(m, pack_abs_max<PACK>(v));
    }
    m = BlockReduce{scratch}.max(m);
    s = quant_row_scale(m, store.kind);
    if (threadIdx.x == 0) store.scale[row] = s;
  } else {
    s = store.tensor_scale();
  }
  for (int64_t pk = threadIdx.x; pk < packs_per_row; pk += blockDim.x) {
    float v[PACK];
    fetch(pk, v);
    store.affine.apply(v, pk * PACK);
    if (!store.per_token) m = max(m, pack_abs_max<PACK>(v));
    store.put(v, row, pk * PACK, s);
  }
  return m;
}

// The tensor's amax from each thread's max |v| (bits): the block's max, then
// one atomicMax per block where it exceeds what is there (amax was zeroed
// before the launch). Every thread of the block calls it, once, at the end.
template <class Store>
__device__ __forceinline__ void flush_amax(const Store &store, unsigned m) {
  if constexpr (Store::kQuant) {
    if (store.amax == nullptr) return;
    __shared__ unsigned scratch[32];
    m = block_allreduce<MaxBitsOp>(m, scratch);
    unsigned *a = reinterpret_cast<unsigned *>(store.amax);
    if (threadIdx.x == 0 && m > *reinterpret_cast<volatile unsigned *>(a)) atomicMax(a, m);
  }
}

}  // namespace fnorm
