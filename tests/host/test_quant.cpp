/* SPDX-License-Identifier: Apache-2.0 */
// Host tests of the quantized outputs' conversions (src/core/quant.hpp, the
// very functions the kernels run) against the float64 references
// (tests/common/quant_reference.hpp): every FP8 code, ties, subnormals,
// saturation, NaN and infinities, a structured sweep of fp32 bit patterns and
// random inputs; INT8 rounding and clamping; the per-token scale and its
// floor. The GPU test repeats the conversion check over every fp32 input,
// hardware conversion included.
#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <random>

#include "check.hpp"
#include "core/quant.hpp"
#include "quant_reference.hpp"

using namespace fnorm_test;
using fnorm::QuantKind;

namespace {

float from_bits(uint32_t u) { return fnorm::bits_float(u); }

// Checks one input against the reference; counts failures, prints the first few.
struct Tally {
  const char *what;
  long checked = 0, failed = 0;
  void fp8(float t, Fp8Format f) {
    const uint8_t code = f.mant == 3 ? fnorm::e4m3_from_float(t) : fnorm::e5m2_from_float(t);
    ++checked;
    bool ok = fp8_matches(code, static_cast<double>(t), f);
    if (t != t) ok = ok && code == 0x7f;  // the stated NaN code
    if (!ok && failed++ < 8)
      std::fprintf(stderr, "%s: t = %a (bits %08" PRIx32 ") gave code %02x, reference value %a\n", what,
                   static_cast<double>(t), fnorm::float_bits(t), code, fp8_round(t, f));
  }
  void int8(float t) {
    ++checked;
    const int got = fnorm::int8_from_float(t);
    const int want = int8_round(static_cast<double>(t));
    if (got != want && failed++ < 8)
      std::fprintf(stderr, "%s: t = %a gave %d, reference %d\n", what, static_cast<double>(t), got, want);
  }
  void done() {
    std::printf("%s: %ld inputs, %ld mismatches\n", what, checked, failed);
    CHECK_CMP(failed, ==, 0L);
    CHECK_CMP(checked, >, 0L);
  }
};

void every_code(Fp8Format f) {
  Tally t{f.mant == 3 ? "e4m3 every code and its midpoints" : "e5m2 every code and its midpoints"};
  for (int c = 0; c < 256; ++c) {
    const double v = fp8_value(static_cast<uint8_t>(c), f);
    const float fv = static_cast<float>(v);
    t.fp8(fv, f);
    if (v != v || std::isinf(v)) continue;
    const uint8_t back = f.mant == 3 ? fnorm::e4m3_from_float(fv) : fnorm::e5m2_from_float(fv);
    CHECK_EQ(static_cast<int>(back), c);  // every finite code round-trips, -0 included
    // The midpoint to the next code up in magnitude (exactly representable
    // in fp32), and one fp32 ulp either side of it.
    const int next = (c & 0x7f) + 1;
    if (next > ((f.mant == 3) ? 0x7e : 0x7b)) continue;
    const double w = fp8_value(static_cast<uint8_t>((c & 0x80) | next), f);
    const float mid = static_cast<float>((v + w) / 2);
    CHECK_EQ(static_cast<double>(mid), (v + w) / 2);
    t.fp8(mid, f);
    t.fp8(std::nextafter(mid, 0.f), f);
    t.fp8(std::nextafter(mid, mid > 0 ? INFINITY : -INFINITY), f);
  }
  t.done();
}

// Every sign and exponent, mantissas around each rounding boundary: the
// kept bits all 0 / all 1 / alternating, the dropped bits 0, 1, half - 1,
// half, half + 1, all ones.
void structured(Fp8Format f) {
  Tally t{f.mant == 3 ? "e4m3 structured sweep" : "e5m2 structured sweep"};
  Tally ti{"int8 structured sweep"};
  for (uint32_t s = 0; s < 2; ++s)
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t kept = 0; kept < 8; ++kept)
        for (int drop = 1; drop <= 23; ++drop) {
          const uint32_t half = 1u << (drop - 1);
          const uint32_t low[] = {0, 1, half - 1, half, half + 1, (half << 1) - 1};
          for (uint32_t l : low) {
            const uint32_t m = ((kept << drop) | l) & 0x7fffffu;
            const float v = from_bits((s << 31) | (e << 23) | m);
            t.fp8(v, f);
            if (f.mant == 3) ti.int8(v);
          }
        }
  t.done();
  if (f.mant == 3) ti.done();
}

void special(Fp8Format f) {
  Tally t{f.mant == 3 ? "e4m3 saturation, NaN, infinities" : "e5m2 saturation, NaN, infinities"};
  const float m = static_cast<float>(f.max);
  const float probes[] = {m, std::nextafter(m, INFINITY), m * 1.03125f, m * 1.0625f, m * 1.07f, m * 1.125f,
                          m * 1.5f, 2 * m, 1e30f, FLT_MAX, INFINITY, 0.f, FLT_MIN, FLT_TRUE_MIN, 1e-30f,
                          from_bits(0x7fc00000u), from_bits(0x7f800001u), from_bits(0x7fffffffu)};
  for (float p : probes) {
    t.fp8(p, f);
    t.fp8(-p, f);
  }
  t.done();
  const uint8_t maxcode = f.mant == 3 ? 0x7e : 0x7b;
  auto conv = [&](float v) { return f.mant == 3 ? fnorm::e4m3_from_float(v) : fnorm::e5m2_from_float(v); };
  CHECK_EQ(static_cast<int>(conv(INFINITY)), static_cast<int>(maxcode));
  CHECK_EQ(static_cast<int>(conv(-INFINITY)), static_cast<int>(0x80 | maxcode));
  CHECK_EQ(static_cast<int>(conv(from_bits(0xffc00000u))), 0x7f);  // negative NaN: the one NaN code
  CHECK_EQ(static_cast<int>(conv(-0.f)), 0x80);
  CHECK_EQ(static_cast<int>(conv(-FLT_TRUE_MIN)), 0x80);  // underflow keeps the sign
}

void random_inputs(Fp8Format f) {
  Tally t{f.mant == 3 ? "e4m3 random fp32 inputs" : "e5m2 random fp32 inputs"};
  Tally ti{"int8 random fp32 inputs"};
  std::mt19937 rng(28 + f.mant);
  std::uniform_int_distribution<uint32_t> bits;
  std::normal_distribution<float> normal(0.f, static_cast<float>(f.max) / 4);
  for (int i = 0; i < (1 << 21); ++i) {
    t.fp8(from_bits(bits(rng)), f);  // every exponent alike
    const float n = normal(rng);
    t.fp8(n, f);
    t.fp8(n * 1e-3f, f);  // the subnormal range of E4M3 / E5M2
    ti.int8(n * (127.f / static_cast<float>(f.max)));
  }
  t.done();
  ti.done();
}

void int8_rules() {
  const struct {
    float t;
    int q;
  } cases[] = {{0.5f, 0},     {1.5f, 2},       {2.5f, 2},     {-0.5f, 0},     {-1.5f, -2},  {-2.5f, -2},
               {126.5f, 126}, {127.49f, 127},  {127.5f, 127}, {128.f, 127},   {1e10f, 127}, {INFINITY, 127},
               {-126.5f, -126}, {-127.5f, -127}, {-128.f, -127}, {-1e10f, -127}, {-INFINITY, -127},
               {from_bits(0x7fc00000u), 0}, {from_bits(0xffc00000u), 0}, {-0.f, 0}, {0.49999997f, 0}};
  for (const auto &c : cases) {
    CHECK_EQ(static_cast<int>(fnorm::int8_from_float(c.t)), c.q);
    CHECK_EQ(int8_round(static_cast<double>(c.t)), c.q);
  }
}

// quantize(v, s) = the code of the correctly rounded fp32 v / s.
void division() {
  std::mt19937 rng(2028);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::uniform_real_distribution<float> scale(1e-3f, 1.f);
  long bad = 0;
  for (int i = 0; i < (1 << 18); ++i) {
    const float v = normal(rng), s = scale(rng);
    // Division through double then rounded to float is correctly rounded
    // (53 >= 2 * 24 + 2 bits).
    const float t = static_cast<float>(static_cast<double>(v) / static_cast<double>(s));
    bad += fnorm::quantize(v, s, QuantKind::E4M3) != fnorm::e4m3_from_float(t);
    bad += fnorm::quantize(v, s, QuantKind::E5M2) != fnorm::e5m2_from_float(t);
    bad += static_cast<int8_t>(fnorm::quantize(v, s, QuantKind::Int8)) != fnorm::int8_from_float(t);
  }
  CHECK_EQ(bad, 0L);
}

void row_scale() {
  for (QuantKind k : {QuantKind::E4M3, QuantKind::E5M2, QuantKind::Int8}) {
    const float m = fnorm::quant_max(k);
    const float floor_ = k == QuantKind::Int8 ? FLT_EPSILON : static_cast<float>(1.0 / (m * 512.0));
    CHECK_EQ(fnorm::quant_min_scale(k), floor_);
    CHECK_EQ(fnorm::quant_row_scale(0u, k), floor_);  // an all-zero row
    CHECK_EQ(fnorm::quant_row_scale(fnorm::abs_bits(3.5f), k), 3.5f / m);
    CHECK_EQ(fnorm::quant_row_scale(fnorm::abs_bits(-3.5f), k), 3.5f / m);
    const float nan_scale = fnorm::quant_row_scale(0x7fc00000u, k);
    CHECK(nan_scale != nan_scale);  // a NaN in the row reaches its scale
    CHECK_EQ(fnorm::quant_row_scale(0x7f800000u, k), INFINITY);
    // amax = M * floor exactly: the floor itself.
    CHECK_EQ(fnorm::quant_row_scale(fnorm::abs_bits(floor_ * m), k), floor_);
  }
  // abs_bits orders |v| with NaN on top.
  CHECK(fnorm::abs_bits(-2.f) > fnorm::abs_bits(1.f));
  CHECK(fnorm::abs_bits(from_bits(0xffc00000u)) > fnorm::abs_bits(INFINITY));
  CHECK_EQ(fnorm::abs_bits(-0.f), 0u);
}

// The reference itself, on values known by hand.
void reference_self_check() {
  CHECK_EQ(fp8_value(0x7e, kE4M3), 448.0);
  CHECK_EQ(fp8_value(0x01, kE4M3), std::ldexp(1.0, -9));
  CHECK_EQ(fp8_value(0x08, kE4M3), std::ldexp(1.0, -6));
  CHECK(fp8_is_nan(0x7f, kE4M3) && fp8_is_nan(0xff, kE4M3) && !fp8_is_nan(0x7e, kE4M3));
  CHECK_EQ(fp8_value(0x7b, kE5M2), 57344.0);
  CHECK_EQ(fp8_value(0x7c, kE5M2), static_cast<double>(INFINITY));
  CHECK_EQ(fp8_value(0x01, kE5M2), std::ldexp(1.0, -16));
  CHECK(fp8_is_nan(0x7d, kE5M2) && fp8_is_nan(0xfe, kE5M2));
  CHECK_EQ(fp8_round(464.0, kE4M3), 448.0);     // tie between 448 (even) and 480 (NaN code): down
  CHECK_EQ(fp8_round(1.0625, kE4M3), 1.0);      // tie: even mantissa 000
  CHECK_EQ(fp8_round(1.1875, kE4M3), 1.25);     // tie: even mantissa 010
  CHECK_EQ(fp8_round(std::ldexp(1.5, -10), kE4M3), std::ldexp(1.0, -9));  // 0.75 of the smallest subnormal: up to it
  CHECK_EQ(fp8_round(std::ldexp(1.0, -10), kE4M3), 0.0);  // half the smallest subnormal: ties to 0
  CHECK(std::signbit(fp8_round(-1e-30, kE4M3)));
  CHECK_EQ(int8_round(-2.5), -2);
}

}  // namespace

int main() {
  reference_self_check();
  for (Fp8Format f : {kE4M3, kE5M2}) {
    every_code(f);
    structured(f);
    special(f);
    random_inputs(f);
  }
  int8_rules();
  division();
  row_scale();
  return finish("host-quant");
}
