/* SPDX-License-Identifier: Apache-2.0 */
// Device building blocks shared by every op: dtype conversion, vector packs,
// the one warp/block all-reduce (sum or Welford), the cooperative launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/arith.hpp"
#include "fusednorm.h"

namespace fnorm {

constexpr unsigned kFullMask = 0xffffffffu;

// fp32 is the compute type of every op.
template <typename T>
struct Convert;
template <>
struct Convert<float> {
  __device__ __forceinline__ static float to_float(float v) { return v; }
  __device__ __forceinline__ static float from_float(float v) { return v; }
};
template <>
struct Convert<__half> {
  __device__ __forceinline__ static float to_float(__half v) { return __half2float(v); }
  __device__ __forceinline__ static __half from_float(float v) { return __float2half_rn(v); }
};
template <>
struct Convert<__nv_bfloat16> {
  __device__ __forceinline__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ __forceinline__ static __nv_bfloat16 from_float(float v) {
    return __float2bfloat16_rn(v);
  }
};

// Calls f with a value of the data type `dtype` names (float, __half,
// __nv_bfloat16) and returns its status; cudaErrorInvalidValue for any other
// dtype (the one-byte output dtypes, refused before a launch). The one
// dtype switch of the host launchers: f is a generic lambda,
// `[&](auto t) { return kernel_launch<decltype(t)>(...); }`.
template <class F>
cudaError_t with_data_type(fnorm_dtype_t dtype, F &&f) {
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32: return f(float{});
    case FNORM_DTYPE_FLOAT16: return f(__half{});
    case FNORM_DTYPE_BFLOAT16: return f(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}

// N elements moved as one access (16 bytes at most: LDG.128 / STG.128).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// A pack moved as one access of an unsigned vector type of its size: a
// Pack of 16-bit types read through a reference is not always one load (the
// backward's shared-memory ring became one LDS.U16 per bf16 element, and the
// L1/shared-memory pipe the bottleneck of that kernel).
template <int BYTES>
struct VecOf;
template <>
struct VecOf<16> {
  using type = uint4;
};
template <>
struct VecOf<8> {
  using type = uint2;
};
template <>
struct VecOf<4> {
  using type = unsigned;
};
template <>
struct VecOf<2> {
  using type = unsigned short;
};
template <>
struct VecOf<1> {
  using type = unsigned char;
};

// Packs wider than 16 bytes move as several 16-byte accesses.
// Assumptions (both): p is aligned to min(sizeof(T) * N, 16).
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> ld_pack(const T *p) {
  constexpr int kBytes = sizeof(T) * N < 16 ? sizeof(T) * N : 16;
  using V = typename VecOf<kBytes>::type;
  V w[sizeof(T) * N / kBytes];
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(w) / kBytes); ++i) w[i] = reinterpret_cast<const V *>(p)[i];
  Pack<T, N> pk;
  memcpy(&pk, w, sizeof(pk));
  return pk;
}

template <typename T, int N>
__device__ __forceinline__ void st_pack(T *p, const Pack<T, N> &pk) {
  constexpr int kBytes = sizeof(T) * N < 16 ? sizeof(T) * N : 16;
  using V = typename VecOf<kBytes>::type;
  V w[sizeof(T) * N / kBytes];
  memcpy(w, &pk, sizeof(w));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(w) / kBytes); ++i) reinterpret_cast<V *>(p)[i] = w[i];
}

template <typename T, int N>
__device__ __forceinline__ void widen_pack(const Pack<T, N> &pk, float (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = Convert<T>::to_float(pk.v[i]);
}

template <typename T, int N>
__device__ __forceinline__ void load_pack(const T *p, float (&out)[N]) {
  widen_pack<T, N>(ld_pack<T, N>(p), out);
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T *p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; ++i) pk.v[i] = Convert<T>::from_float(in[i]);
  st_pack<T, N>(p, pk);
}

// The value v takes when stored as T (what an unfused op would store).
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return Convert<T>::to_float(Convert<T>::from_float(v));
}

// PACK affine parameters at element `col`, stored as T or as fp32. fp32
// parameters are read in chunks of at most 4 (16 bytes).
// Assumptions: p + col is aligned to PACK * sizeof(T) (T) or to
// 4 * min(PACK, 4) bytes (fp32).
template <typename T, int PACK>
__device__ __forceinline__ void load_param(const void *p, bool f32, int64_t col, float (&out)[PACK]) {
  if (f32) {
    constexpr int C = PACK < 4 ? PACK : 4;
    const float *f = static_cast<const float *>(p) + col;
#pragma unroll
    for (int c = 0; c < PACK / C; ++c) {
      float tmp[C];
      load_pack<float, C>(f + c * C, tmp);
#pragma unroll
      for (int i = 0; i < C; ++i) out[c * C + i] = tmp[i];
    }
  } else {
    load_pack<T, PACK>(static_cast<const T *>(p) + col, out);
  }
}

// Welford state: count, mean and sum of squared deviations (M2).
// The count is fp32: exact up to 2^24 elements per row, and beyond that the
// relative error it adds (< 2^-24 per merge) is below fp32 rounding anyway.
struct Welford {
  float mean;
  float m2;
  float n;
};

struct Sum2Op {
  using Value = float2;
  __device__ __forceinline__ static float2 identity() { return make_float2(0.f, 0.f); }
  __device__ __forceinline__ static float2 combine(float2 a, float2 b) {
    return make_float2(a.x + b.x, a.y + b.y);
  }
  __device__ __forceinline__ static float2 shfl_xor(float2 v, int mask) {
    return make_float2(__shfl_xor_sync(kFullMask, v.x, mask), __shfl_xor_sync(kFullMask, v.y, mask));
  }
};

struct SumOp {
  using Value = float;
  __device__ __forceinline__ static float identity() { return 0.f; }
  __device__ __forceinline__ static float combine(float a, float b) { return a + b; }
  __device__ __forceinline__ static float shfl_xor(float v, int mask) {
    return __shfl_xor_sync(kFullMask, v, mask);
  }
};

// Max of unsigned values: of |v| as bits (core/quant.hpp's abs_bits), a max
// of magnitudes that a NaN wins.
struct MaxBitsOp {
  using Value = unsigned;
  __device__ __forceinline__ static unsigned identity() { return 0u; }
  __device__ __forceinline__ static unsigned combine(unsigned a, unsigned b) { return a > b ? a : b; }
  __device__ __forceinline__ static unsigned shfl_xor(unsigned v, int mask) {
    return __shfl_xor_sync(kFullMask, v, mask);
  }
};

struct WelfordOp {
  using Value = Welford;
  __device__ __forceinline__ static Welford identity() { return {0.f, 0.f, 0.f}; }
  // Chan et al.'s pairwise merge; an empty side leaves the other unchanged.
  __device__ __forceinline__ static Welford combine(Welford a, Welford b) {
    const float n = a.n + b.n;
    if (n == 0.f) return a;
    const float delta = b.mean - a.mean;
    const float fb = b.n / n;
    return {a.mean + delta * fb, a.m2 + b.m2 + delta * delta * a.n * fb, n};
  }
  __device__ __forceinline__ static Welford shfl_xor(Welford v, int mask) {
    return {__shfl_xor_sync(kFullMask, v.mean, mask), __shfl_xor_sync(kFullMask, v.m2, mask),
            __shfl_xor_sync(kFullMask, v.n, mask)};
  }
};

// All-reduce within aligned groups of `width` lanes (a power of two <= 32).
// Every lane of the warp must call it (the shuffles use the full mask).
template <class Op>
__device__ __forceinline__ typename Op::Value group_allreduce(typename Op::Value v, int width) {
  for (int mask = width >> 1; mask > 0; mask >>= 1) v = Op::combine(v, Op::shfl_xor(v, mask));
  return v;
}

// All-reduce over the block; every thread gets the result. `scratch` holds 32
// values in shared memory; the call may be repeated with the same scratch.
// Every thread of the block must call it.
template <class Op>
__device__ __forceinline__ typename Op::Value block_allreduce(typename Op::Value v,
                                                              typename Op::Value *scratch) {
  v = group_allreduce<Op>(v, 32);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  __syncthreads();  // earlier readers of scratch are done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  // Each warp folds the per-warp partials itself: no broadcast round.
  typename Op::Value r = lane < nwarps ? scratch[lane] : Op::identity();
  return group_allreduce<Op>(r, 32);
}

// Fold N values held in registers into a Welford state (one division per
// call instead of one per element: the exact two-pass mean/M2 of the chunk,
// then one pairwise merge).
template <int N>
__device__ __forceinline__ Welford welford_chunk(Welford acc, const float (&v)[N]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) s += v[i];
  const float m = s * (1.f / N);
  float m2 = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) m2 += (v[i] - m) * (v[i] - m);
  return WelfordOp::combine(acc, Welford{m, m2, static_cast<float>(N)});
}

// Asynchronous global -> shared copies (cp.async, sm_80 and later): the
// loads stay in flight without holding registers. A thread sees its own
// copies after cp_async_wait<N>() returns for their group; other threads need
// a barrier as well. 16-byte copies bypass L1 (.cg); 4- and 8-byte copies
// take .ca (the only form PTX has for them). Two-byte copies, and every copy
// on older GPUs, are ordinary loads and stores (synchronous).
// Assumptions: smem and gmem are aligned to BYTES.
template <int BYTES>
__device__ __forceinline__ void cp_async(void *smem, const void *gmem) {
  static_assert(BYTES == 2 || BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (BYTES >= 4) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    if constexpr (BYTES == 16) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
    } else {
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(BYTES) : "memory");
    }
    return;
  }
#endif
  struct alignas(BYTES) Chunk {
    unsigned char b[BYTES];
  };
  *static_cast<Chunk *>(smem) = *static_cast<const Chunk *>(gmem);
}

// Closes the group of the cp_async calls issued since the last commit (an
// empty group is allowed, so every thread can commit once per step).
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// A barrier over `threads` threads (whole warps) with its own id, so that
// groups of a block wait only for each other.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Waits until at most n (0..3) of this thread's cp.async groups are pending.
__device__ __forceinline__ void cp_async_wait_upto(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    default: cp_async_wait<3>(); break;
  }
}

// A cooperative launch: every block of the grid co-resident, or the launch
// fails (cudaErrorCooperativeLaunchTooLarge) and nothing runs.
template <class Kernel, class... Args>
cudaError_t launch_cooperative(Kernel kernel, int64_t grid, int64_t block, size_t smem, cudaStream_t stream,
                               Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(block));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

}  // namespace fnorm
