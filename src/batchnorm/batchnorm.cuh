/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm device code: the two elementwise passes (normalize + epilogue +
// ReLU bitmask, and dx) and the step they share with the one-launch kernels.
// The two reduction passes before them are bn_reduce.cuh; the per-channel
// combination in between is bn_finalize.cu. The generated instantiations
// pick T and PACK.
#pragma once

#include <algorithm>
#include <type_traits>

#include "batchnorm/bn_params.hpp"
#include "core/device.cuh"

namespace fnorm {

constexpr int kBnThreads = 256;

// Bits [e, e + P) of a 1-bit-per-element mask (bit e % 32 of word e / 32).
// Assumptions: e % P == 0 and P divides 32, so the bits share one word.
template <int P>
__device__ __forceinline__ uint32_t read_mask_bits(const uint32_t *mask, int64_t e) {
  const uint32_t w = __ldg(mask + (e >> 5));
  return (w >> static_cast<uint32_t>(e & 31)) & ((1u << P) - 1u);
}

// ---------------------------------------------------------------------------
// The elementwise step, written once for the three-launch kernels below and
// the one-launch kernel (bn_persistent.cuh): a pack's channel coefficients,
// the forward and backward operations on a pack, and the pack conversions.
// ---------------------------------------------------------------------------
// A pack's channel coefficients, indexed by the term they scale or add
// (BnApplyParams): c[kBnMean][k] is element k's channel mean, and so on.
enum BnCoef { kBnMean = 0, kBnXmuScale = 1, kBnShift = 2, kBnDyScale = 3 };
template <int PACK>
struct BnPackCoefs {
  float c[4][PACK];
};

// A pack of T moved and held as one unsigned vector (uint4 for 16 bytes),
// widened and narrowed 32 bits at a time. Held as Pack<bf16, 8>, each bf16
// element took a register of its own (the one-launch kernel's bf16 forward
// spilled 774 bytes where fp16 spilled 292), and converting one element at
// a time made 8 F2F.BF16.F32 (a quarter-rate instruction) per 16-byte pack
// where fp16 had 4 F2FP.
template <typename T, int PACK>
struct BnVec {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * PACK;
  static constexpr int kWords = kBytes >= 4 ? kBytes / 4 : 1;
  using Raw = typename VecOf<kBytes>::type;
  static_assert(kBytes <= 16, "a pack is one access");

  __device__ __forceinline__ static Raw load(const T *p) { return *reinterpret_cast<const Raw *>(p); }
  // Evict-first (ld.global.cs): read once more at most, by nobody soon.
  __device__ __forceinline__ static Raw load_cs(const T *p) { return __ldcs(reinterpret_cast<const Raw *>(p)); }
  __device__ __forceinline__ static void store(T *p, const Raw &r, bool evict_first = false) {
    if (evict_first) {
      __stcs(reinterpret_cast<Raw *>(p), r);
    } else {
      *reinterpret_cast<Raw *>(p) = r;
    }
  }
  __device__ __forceinline__ static void widen(const Raw &r, float (&out)[PACK]) {
    if constexpr (kBytes < 4) {  // one 16-bit element
      out[0] = Convert<T>::to_float(from_bits(r));
    } else {
      uint32_t w[kWords];
      memcpy(w, &r, sizeof(w));
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        if constexpr (std::is_same_v<T, float>) {
          out[i] = __uint_as_float(w[i]);
        } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
          out[2 * i] = __uint_as_float(w[i] << 16);
          out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        } else {
          __half2 h;
          memcpy(&h, &w[i], 4);
          const float2 f = __half22float2(h);
          out[2 * i] = f.x;
          out[2 * i + 1] = f.y;
        }
      }
    }
  }
  __device__ __forceinline__ static Raw narrow(const float (&v)[PACK]) {
    Raw r;
    if constexpr (kBytes < 4) {
      const T t = Convert<T>::from_float(v[0]);
      memcpy(&r, &t, sizeof(r));
    } else {
      uint32_t w[kWords];
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        if constexpr (std::is_same_v<T, float>) {
          w[i] = __float_as_uint(v[i]);
        } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
          const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
          memcpy(&w[i], &h, 4);
        } else {
          const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);
          memcpy(&w[i], &h, 4);
        }
      }
      memcpy(&r, w, sizeof(r));
    }
    return r;
  }

 private:
  __device__ __forceinline__ static T from_bits(unsigned short u) {
    T t;
    memcpy(&t, &u, sizeof(t));
    return t;
  }
};

// Forward: v = (x - mean) * xmu_scale + shift (+ z), then ReLU; the pack as
// stored, and its mask bits (bit k: stored element k > 0, what relu's
// backward tests; NaN stays NaN and gets 0).
template <typename T, int PACK>
struct BnForwardOp {
  using Vec = BnVec<T, PACK>;
  bool add;   // ADD_RELU: z is added before the ReLU
  bool relu;  // RELU or ADD_RELU
  __device__ __forceinline__ uint32_t operator()(const float (&x)[PACK], const float (&z)[PACK],
                                                 const BnPackCoefs<PACK> &q, typename Vec::Raw &out) const {
    float v[PACK];
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      v[k] = (x[k] - q.c[kBnMean][k]) * q.c[kBnXmuScale][k] + q.c[kBnShift][k];
      if (add) v[k] += z[k];
      if (relu) v[k] = v[k] <= 0.f ? 0.f : v[k];
    }
    out = Vec::narrow(v);
    uint32_t bits = 0;
    if (relu) {
      float stored[PACK];
      Vec::widen(out, stored);
#pragma unroll
      for (int k = 0; k < PACK; ++k) bits |= static_cast<uint32_t>(stored[k] > 0.f) << k;
    }
    return bits;
  }
};

// Backward: g = dy where the mask bit is set (all of dy without a mask),
// dx = g * dy_scale + (x - mean) * xmu_scale + shift. g is left in `g` (dz).
template <typename T, int PACK>
struct BnBackwardOp {
  using Vec = BnVec<T, PACK>;
  bool masked;
  __device__ __forceinline__ typename Vec::Raw operator()(const float (&x)[PACK], float (&g)[PACK], uint32_t bits,
                                                          const BnPackCoefs<PACK> &q) const {
    float v[PACK];
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      if (masked && !((bits >> k) & 1u)) g[k] = 0.f;
      v[k] = g[k] * q.c[kBnDyScale][k] + (x[k] - q.c[kBnMean][k]) * q.c[kBnXmuScale][k] + q.c[kBnShift][k];
    }
    return Vec::narrow(v);
  }
};

// ---------------------------------------------------------------------------
// Elementwise passes. Thread q handles pack q of [begin, end); a warp handles
// 32 consecutive packs, so the 32 / PACK lanes that cover one mask word are
// neighbours and build it with shuffles. The channel of the pack's first
// element is carried from iteration to iteration without divisions.
// ---------------------------------------------------------------------------
struct ChannelWalk {
  int64_t c = 0, s = 0;  // channel and position within the channel's run
  int64_t dc = 0, ds = 0;
  __device__ void init(int64_t e, int64_t step, const BnShape &sh) {
    const int64_t q = e / sh.group;
    s = e - q * sh.group;
    c = q % sh.channels;
    ds = step % sh.group;
    dc = (step / sh.group) % sh.channels;
  }
  __device__ __forceinline__ void advance(const BnShape &sh) {
    s += ds;
    c += dc;
    if (s >= sh.group) {
      s -= sh.group;
      ++c;
    }
    if (c >= sh.channels) c -= sh.channels;
  }
};

// Per-element channel coefficients c[0, NCOEF) of the pack starting at (c, s).
template <int PACK, int NCOEF>
__device__ __forceinline__ void load_coefs(const float *const (&arr)[NCOEF], const ChannelWalk &w,
                                           const BnShape &sh, BnPackCoefs<PACK> &out) {
  if (w.s + PACK <= sh.group) {  // one channel for the whole pack
#pragma unroll
    for (int j = 0; j < NCOEF; ++j) {
      const float v = __ldg(arr[j] + w.c);
#pragma unroll
      for (int k = 0; k < PACK; ++k) out.c[j][k] = v;
    }
  } else if (sh.group == 1 && sh.channels % PACK == 0) {  // PACK consecutive channels, aligned
#pragma unroll
    for (int j = 0; j < NCOEF; ++j) load_param<float, PACK>(arr[j], true, w.c, out.c[j]);
  } else {
    int64_t c = w.c, s = w.s;
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
#pragma unroll
      for (int j = 0; j < NCOEF; ++j) out.c[j][k] = __ldg(arr[j] + c);
      if (++s == sh.group) {
        s = 0;
        if (++c == sh.channels) c = 0;
      }
    }
  }
}

// OR the PACK bits of each lane into the mask word its lane group covers and
// have the group's first lane store it. Every lane of the warp must call it.
template <int PACK>
__device__ __forceinline__ void store_mask_word(uint32_t *mask, int64_t e, uint32_t bits,
                                                bool active) {
  constexpr int kLanes = 32 / PACK;
  const int lane = threadIdx.x & 31;
  uint32_t word = bits << ((lane % kLanes) * PACK);
#pragma unroll
  for (int off = 1; off < kLanes; off <<= 1) word |= __shfl_xor_sync(kFullMask, word, off);
  if (active && lane % kLanes == 0) mask[e >> 5] = word;
}

// Channels-last with a grid whose stride is a multiple of C (the launcher
// rounds the grid so): every pack a thread visits has the same channels, so
// their coefficients stay in registers (loading them per pack made the
// fp16 NHWC passes L1-bound: 6 float4 loads per 16 bytes of x).
template <typename T, int PACK>
__global__ void __launch_bounds__(kBnThreads) bn_forward_kernel(BnApplyParams p) {
  const int64_t packs = (p.end - p.begin) / PACK;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBnThreads;
  const int lane = threadIdx.x & 31;
  int64_t q = static_cast<int64_t>(blockIdx.x) * kBnThreads + threadIdx.x;
  ChannelWalk w;
  w.init(p.begin + q * PACK, step * PACK, p.shape);
  const bool fixed = w.dc == 0 && w.ds == 0;
  const float *const coef[3] = {p.mean, p.xmu_scale, p.shift};
  const T *x = static_cast<const T *>(p.x);
  const T *z = static_cast<const T *>(p.z);
  T *y = static_cast<T *>(p.y);
  const BnForwardOp<T, PACK> op{p.epilogue == FNORM_BN_EPILOGUE_ADD_RELU, p.epilogue != FNORM_BN_EPILOGUE_NONE};
  if (p.num_batches_tracked != nullptr && blockIdx.x == 0 && threadIdx.x == 0)
    *p.num_batches_tracked += 1;
  BnPackCoefs<PACK> cf;
  if (fixed && q < packs) load_coefs<PACK, 3>(coef, w, p.shape, cf);
  for (; q - lane < packs; q += step, w.advance(p.shape)) {
    const bool active = q < packs;
    const int64_t e = p.begin + q * PACK;
    uint32_t bits = 0;
    if (active) {
      float v[PACK], zv[PACK];
      load_pack<T, PACK>(x + e, v);
      if (op.add) load_pack<T, PACK>(z + e, zv);
      if (!fixed) load_coefs<PACK, 3>(coef, w, p.shape, cf);
      typename BnVec<T, PACK>::Raw out;
      bits = op(v, zv, cf, out);
      BnVec<T, PACK>::store(y + e, out);
    }
    if (p.mask_out != nullptr) store_mask_word<PACK>(p.mask_out, e, bits, active);
  }
}

template <typename T, int PACK>
__global__ void __launch_bounds__(kBnThreads) bn_backward_kernel(BnApplyParams p) {
  const int64_t packs = (p.end - p.begin) / PACK;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBnThreads;
  int64_t q = static_cast<int64_t>(blockIdx.x) * kBnThreads + threadIdx.x;
  ChannelWalk w;
  w.init(p.begin + q * PACK, step * PACK, p.shape);
  const bool fixed = w.dc == 0 && w.ds == 0;
  const float *const coef[4] = {p.mean, p.xmu_scale, p.shift, p.dy_scale};
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  T *dx = static_cast<T *>(p.dx);
  T *dz = static_cast<T *>(p.dz);
  const BnBackwardOp<T, PACK> op{p.mask_in != nullptr};
  BnPackCoefs<PACK> cf;
  if (fixed && q < packs) load_coefs<PACK, 4>(coef, w, p.shape, cf);
  for (; q < packs; q += step, w.advance(p.shape)) {
    const int64_t e = p.begin + q * PACK;
    float v[PACK], g[PACK];
    load_pack<T, PACK>(x + e, v);
    load_pack<T, PACK>(dy + e, g);
    const uint32_t bits = op.masked ? read_mask_bits<PACK>(p.mask_in, e) : 0u;
    if (!fixed) load_coefs<PACK, 4>(coef, w, p.shape, cf);
    BnVec<T, PACK>::store(dx + e, op(v, g, bits, cf));
    if (dz != nullptr && op.masked) BnVec<T, PACK>::store(dz + e, BnVec<T, PACK>::narrow(g));
  }
}

// ---------------------------------------------------------------------------
// Launchers (instantiated per dtype and pack by the generated files): a
// shape function each, which the plan (batchnorm/bn_native.cpp) asks once,
// and a launch that enqueues with that shape.
// ---------------------------------------------------------------------------
// The elementwise passes over `elements` elements in packs of `pack`.
template <class Kernel>
cudaError_t shape_bn_apply(Kernel kernel, const BnShape &sh, int64_t elements, int pack, const DeviceContext &ctx,
                           LaunchShape *s) {
  int occ = 0;
  cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel), kBnThreads,
                                     0, &occ);
  if (err != cudaSuccess) return err;
  const int64_t packs = elements / pack;
  int64_t grid = std::max<int64_t>(
      1, std::min<int64_t>(ceil_div(packs, kBnThreads),
                           static_cast<int64_t>(ctx.dev.sm_count) * std::max(occ, 1)));
  if (sh.group == 1) {
    // Channels-last: a grid stride (grid * kBnThreads * pack elements) that is
    // a multiple of C keeps each thread on the same channels (see the kernels).
    const int64_t C = sh.channels, stride = int64_t{kBnThreads} * pack;
    int64_t a = C, b = stride;
    while (b != 0) {
      const int64_t t = a % b;
      a = b;
      b = t;
    }
    const int64_t m = C / a;  // the grid must be a multiple of m
    if (m <= 65536) grid = std::max(m, grid / m * m);
  }
  s->grid = grid;
  s->block = kBnThreads;
  s->blocks_per_sm = occ;
  return cudaSuccess;
}

template <typename T, int PACK>
cudaError_t shape_bn_forward(const BnShape &sh, int64_t elements, const DeviceContext &ctx, LaunchShape *s) {
  return shape_bn_apply(bn_forward_kernel<T, PACK>, sh, elements, PACK, ctx, s);
}

template <typename T, int PACK>
cudaError_t shape_bn_backward(const BnShape &sh, int64_t elements, const DeviceContext &ctx, LaunchShape *s) {
  return shape_bn_apply(bn_backward_kernel<T, PACK>, sh, elements, PACK, ctx, s);
}

template <typename T, int PACK>
cudaError_t launch_bn_forward(const BnApplyParams &p, const LaunchShape &s, cudaStream_t stream) {
  bn_forward_kernel<T, PACK><<<static_cast<unsigned>(s.grid), kBnThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int PACK>
cudaError_t launch_bn_backward(const BnApplyParams &p, const LaunchShape &s, cudaStream_t stream) {
  bn_backward_kernel<T, PACK><<<static_cast<unsigned>(s.grid), kBnThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// A one-launch kernel (bn_persistent.cuh, bn_stream.cuh) as its plan shaped
// it: a cooperative launch of s.blocks co-resident blocks; *launched says
// whether it ran. A device with fewer SMs free than it reports (MPS limits,
// green contexts) refuses the grid: the caller then runs the three launches.
template <class Kernel, class... Args>
cudaError_t launch_bn_cooperative(Kernel kernel, const BnPersistShape &s, cudaStream_t stream, bool *launched,
                                  Args... args) {
  *launched = false;
  const cudaError_t err = launch_cooperative(kernel, s.blocks, kBnThreads, s.smem, stream, args...);
  if (err == cudaErrorCooperativeLaunchTooLarge) {
    (void)cudaGetLastError();
    return cudaSuccess;
  }
  *launched = err == cudaSuccess;
  return err;
}

}  // namespace fnorm
