/* SPDX-License-Identifier: Apache-2.0 */
// Quantized outputs: fp32 -> FP8 (OCP E4M3 / E5M2) and INT8 codes, and the
// per-token scale, with the rules api/fusednorm.h states for
// fnorm_norm_fwd_quant. Host and device code alike (the host tests compile
// the very functions the kernels run); the device may take the hardware's
// conversion instead where it gives the same bits (quant_fp8x2).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/arith.hpp"

namespace fnorm {

// The output formats, by what the kernels do with them.
enum class QuantKind : int { E4M3 = 0, E5M2 = 1, Int8 = 2 };

// Largest finite magnitude of the format (M in the header's rules).
FNORM_HOST_DEVICE constexpr float quant_max(QuantKind k) {
  return k == QuantKind::E4M3 ? 448.f : k == QuantKind::E5M2 ? 57344.f : 127.f;
}

// The smallest per-token scale: 1 / (M * 512) for FP8, FLT_EPSILON for INT8
// (vLLM's floors). An all-zero row then gets this scale and zero codes.
FNORM_HOST_DEVICE inline float quant_min_scale(QuantKind k) {
  return k == QuantKind::Int8 ? FLT_EPSILON : 1.f / (quant_max(k) * 512.f);
}

FNORM_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

FNORM_HOST_DEVICE inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// |v| as bits: non-negative floats order as their bits, NaN above +inf, so
// an unsigned max over these is a max of |v| that NaN wins.
FNORM_HOST_DEVICE inline uint32_t abs_bits(float v) { return float_bits(v) & 0x7fffffffu; }

// The per-token scale from the row's abs_bits max: max(amax / M, floor),
// NaN when amax is NaN (the comparison keeps it).
FNORM_HOST_DEVICE inline float quant_row_scale(uint32_t amax_bits, QuantKind k) {
  const float s = bits_float(amax_bits) / quant_max(k);
  return s < quant_min_scale(k) ? quant_min_scale(k) : s;
}

// Round-to-nearest-even of fp32 t to an FP8 code, t clamped to [-M, M]
// first (infinities included); NaN gives 0x7F. MANT: 3 (E4M3) or 2 (E5M2).
template <int MANT>
FNORM_HOST_DEVICE inline uint8_t fp8_from_float(float t) {
  constexpr int kBias = MANT == 3 ? 7 : 15;
  // Bits of M and of the smallest normal, 2^(1 - bias).
  constexpr uint32_t kMaxBits = MANT == 3 ? 0x43e00000u : 0x47600000u;
  constexpr uint32_t kMinNormalBits = static_cast<uint32_t>(127 + 1 - kBias) << 23;
  const uint32_t u = float_bits(t);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;
  uint32_t code;
  if (a >= kMaxBits) {
    code = MANT == 3 ? 0x7eu : 0x7bu;
  } else if (a < kMinNormalBits) {
    // Subnormal codes are multiples of 2^(1 - bias - MANT): the code is the
    // multiple, rounded to nearest even; a carry into 2^MANT lands on the
    // smallest normal code, which is that very number.
    constexpr float kInvStep = static_cast<float>(1u << (kBias - 1 + MANT));
    code = static_cast<uint32_t>(rintf(bits_float(a) * kInvStep));
  } else {
    // Normal: drop 23 - MANT mantissa bits rounding to nearest even, then
    // rebias the exponent (a carry out of the mantissa bumps it: still right).
    constexpr int kDrop = 23 - MANT;
    const uint32_t r = a + ((1u << (kDrop - 1)) - 1u) + ((a >> kDrop) & 1u);
    code = (r >> kDrop) - (static_cast<uint32_t>(127 - kBias) << MANT);
  }
  return static_cast<uint8_t>(sign | code);
}

FNORM_HOST_DEVICE inline uint8_t e4m3_from_float(float t) { return fp8_from_float<3>(t); }
FNORM_HOST_DEVICE inline uint8_t e5m2_from_float(float t) { return fp8_from_float<2>(t); }

// Round to nearest even integer, clamp to [-127, 127]; NaN gives 0.
FNORM_HOST_DEVICE inline int8_t int8_from_float(float t) {
  float r = rintf(t);
  r = r > 127.f ? 127.f : r;
  r = r < -127.f ? -127.f : r;
  return r == r ? static_cast<int8_t>(r) : static_cast<int8_t>(0);
}

// The code of v / s in format k (the division correctly rounded, as torch's
// `y / scale`).
FNORM_HOST_DEVICE inline uint8_t quantize(float v, float s, QuantKind k) {
#if defined(__CUDA_ARCH__)
  const float t = __fdiv_rn(v, s);
#else
  const float t = v / s;
#endif
  if (k == QuantKind::E4M3) return e4m3_from_float(t);
  if (k == QuantKind::E5M2) return e5m2_from_float(t);
  return static_cast<uint8_t>(int8_from_float(t));
}

#if defined(__CUDACC__)
// Two FP8 codes (lo from a, hi from b), fp8_from_float's bits: the
// hardware's saturating conversion on sm_89 and later (verified against
// fp8_from_float over every fp32 input by tests/gpu/test_quant.cpp), the
// portable one elsewhere.
template <int MANT>
__device__ __forceinline__ uint16_t quant_fp8x2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  if constexpr (MANT == 3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  }
  return r;
#else
  return static_cast<uint16_t>(fp8_from_float<MANT>(a) | (fp8_from_float<MANT>(b) << 8));
#endif
}
#endif

}  // namespace fnorm
