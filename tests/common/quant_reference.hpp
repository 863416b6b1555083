/* SPDX-License-Identifier: Apache-2.0 */
// Float64 references of the quantized outputs (fnorm_norm_fwd_quant's rules
// in api/fusednorm.h), written from the formats' definitions, independent of
// the library's conversion code. Host and device alike (the GPU test runs
// them over every fp32 input).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FNORM_REF_HD __host__ __device__
#else
#define FNORM_REF_HD
#endif

namespace fnorm_test {

// Formats: mantissa bits, exponent bias, largest finite value.
struct Fp8Format {
  int mant;
  int bias;
  double max;
};
constexpr Fp8Format kE4M3{3, 7, 448.0};
constexpr Fp8Format kE5M2{2, 15, 57344.0};

// The value of an FP8 code by definition (OCP): sign, biased exponent,
// mantissa; exponent 0 is subnormal. E4M3 has no infinities and one NaN
// pattern per sign (S.1111.111); E5M2 is IEEE-like (exponent all ones: inf
// or NaN). NaN is returned as NAN.
FNORM_REF_HD inline double fp8_value(uint8_t code, Fp8Format f) {
  const int ebits = 7 - f.mant;
  const int e = (code >> f.mant) & ((1 << ebits) - 1);
  const int m = code & ((1 << f.mant) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (f.mant == 3 && e == 15 && m == 7) return NAN;
  if (f.mant == 2 && e == 31) return m == 0 ? sign * INFINITY : NAN;
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - f.bias - f.mant);
  return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mant), e - f.bias);
}

FNORM_REF_HD inline bool fp8_is_nan(uint8_t code, Fp8Format f) {
  const double v = fp8_value(code, f);
  return v != v;
}

// t clamped to [-max, max] and rounded to the nearest FP8 value, ties to
// the even mantissa (within a binade a code's parity is the parity of its
// multiple of the binade's step); subnormals kept; NaN stays NaN. Returns
// the value (a signed zero keeps t's sign).
FNORM_REF_HD inline double fp8_round(double t, Fp8Format f) {
  if (t != t) return NAN;
  const double a = std::fmin(std::fabs(t), f.max);
  const int min_exp = 1 - f.bias;  // exponent of the smallest normal
  int e = 0;
  (void)std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  e = a == 0.0 || e - 1 < min_exp ? min_exp : e - 1;  // the binade of a, or the subnormal range
  const double step = std::ldexp(1.0, e - f.mant);
  const double k = a / step;  // exact: a is a float and step a power of two
  double n = std::floor(k);
  const double frac = k - n;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0.0)) n += 1.0;
  const double r = n * step;
  return std::signbit(t) ? -r : r;
}

// INT8: nearest integer, ties to even, clamped to [-127, 127]; NaN -> 0.
FNORM_REF_HD inline int int8_round(double t) {
  if (t != t) return 0;
  double n = std::floor(t);
  const double frac = t - n;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0.0)) n += 1.0;
  return static_cast<int>(std::fmax(-127.0, std::fmin(127.0, n)));
}

// Whether `code` is what the rules give for t: the same value (signed zero
// included), or any NaN code for a NaN t.
FNORM_REF_HD inline bool fp8_matches(uint8_t code, double t, Fp8Format f) {
  const double want = fp8_round(t, f);
  const double got = fp8_value(code, f);
  if (want != want) return got != got;
  return got == want && std::signbit(got) == std::signbit(want);
}

}  // namespace fnorm_test
