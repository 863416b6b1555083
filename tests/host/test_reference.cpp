/* SPDX-License-Identifier: Apache-2.0 */
// Host tests of the test suite's own reference math and bit conversions, so
// that the GPU tests compare against something known to be right.
#include <cmath>
#include <vector>

#include "check.hpp"
#include "halfbits.hpp"
#include "reference.hpp"

using namespace fnorm_test;

int main() {
  // LayerNorm of [1, 2, 3, 4]: mean 2.5, biased variance 1.25.
  const double x[4] = {1, 2, 3, 4};
  double y[4], mean, rstd;
  layernorm_row_reference(x, 4, nullptr, nullptr, 0.0, y, &mean, &rstd);
  CHECK_EQ(mean, 2.5);
  CHECK(std::fabs(rstd - 1.0 / std::sqrt(1.25)) < 1e-15);
  CHECK(std::fabs(y[0] + 1.5 / std::sqrt(1.25)) < 1e-15);
  double s = 0, q = 0;
  for (double v : y) s += v, q += v * v;
  CHECK(std::fabs(s) < 1e-14);        // normalized: zero mean
  CHECK(std::fabs(q / 4 - 1) < 1e-14);  // unit variance
  // gamma/beta and epsilon.
  const double g[4] = {2, 2, 2, 2}, b[4] = {1, 1, 1, 1};
  double y2[4];
  layernorm_row_reference(x, 4, g, b, 2.75, y2, nullptr, &rstd);
  CHECK(std::fabs(rstd - 0.5) < 1e-15);  // 1/sqrt(1.25 + 2.75)
  CHECK(std::fabs(y2[3] - (1.5 * 0.5 * 2 + 1)) < 1e-15);
  // A constant row normalizes to beta; a large offset does not cancel.
  const double c[3] = {7, 7, 7};
  double yc[3];
  layernorm_row_reference(c, 3, nullptr, b, 1e-5, yc, &mean, nullptr);
  CHECK_EQ(yc[0], 1.0);
  std::vector<double> big(1000), yb(1000);
  for (int i = 0; i < 1000; ++i) big[i] = 1e4 + ((i % 2) ? 1.0 : -1.0);
  layernorm_row_reference(big.data(), 1000, nullptr, nullptr, 0.0, yb.data(), &mean, &rstd);
  CHECK(std::fabs(rstd - 1.0) < 1e-12);

  // RMSNorm of [1, 2, 3, 4]: mean square 7.5; zero-centred gamma scales by 1 + g.
  double ms;
  norm_row_reference(true, x, 4, nullptr, nullptr, false, 0.0, y, &mean, &ms);
  CHECK_EQ(mean, 0.0);
  CHECK(std::fabs(ms - 1.0 / std::sqrt(7.5)) < 1e-15);
  CHECK(std::fabs(y[3] - 4.0 / std::sqrt(7.5)) < 1e-15);
  const double g0[4] = {0, 0, 0, 0};
  double yz[4];
  norm_row_reference(false, x, 4, g0, nullptr, true, 0.0, yz, nullptr, nullptr);  // 1 + 0 = identity scale
  layernorm_row_reference(x, 4, nullptr, nullptr, 0.0, y, nullptr, nullptr);
  for (int i = 0; i < 4; ++i) CHECK(std::fabs(yz[i] - y[i]) < 1e-15);

  // Backward against central finite differences of the forward in double:
  // L = sum(dy * y), dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h.
  for (int rms = 0; rms < 2; ++rms) {
    const int n = 6;
    const double xs[n] = {0.3, -1.2, 2.5, 0.7, -0.4, 1.9};
    const double dys[n] = {0.5, -0.25, 1.0, 0.75, -1.5, 0.2};
    const double gm[n] = {1.1, 0.9, 1.3, 0.7, 1.0, 1.2};
    const double bt[n] = {0.1, -0.2, 0.3, 0.0, 0.5, -0.1};
    const double eps = 1e-3;
    auto loss = [&](const double *xx) {
      double yy[n], m, r;
      norm_row_reference(rms != 0, xx, n, gm, rms ? nullptr : bt, false, eps, yy, &m, &r);
      double l = 0;
      for (int i = 0; i < n; ++i) l += dys[i] * yy[i];
      return l;
    };
    double m, r, yy[n], dx[n], mag[n], dg[n] = {0}, db[n] = {0};
    norm_row_reference(rms != 0, xs, n, gm, nullptr, false, eps, yy, &m, &r);
    norm_row_backward_reference(rms != 0, xs, dys, n, m, r, gm, false, nullptr, dx, mag, dg, db);
    for (int i = 0; i < n; ++i) {
      double xp[n], xm[n];
      for (int j = 0; j < n; ++j) xp[j] = xm[j] = xs[j];
      const double h = 1e-6;
      xp[i] += h;
      xm[i] -= h;
      CHECK(std::fabs((loss(xp) - loss(xm)) / (2 * h) - dx[i]) < 1e-7);
      // dgamma_i = dy_i * x_hat_i; dbeta_i = dy_i
      CHECK(std::fabs(dg[i] - dys[i] * (xs[i] - m) * r) < 1e-14);
      CHECK_EQ(db[i], dys[i]);
    }
  }

  // Tolerance: NaN and inf never pass.
  CHECK(within(1.0005, 1.0, {0, 1e-3}));
  CHECK(!within(1.01, 1.0, {0, 1e-3}));
  CHECK(!within(NAN, 1.0, {1e9, 1e9}));
  CHECK(!within(INFINITY, 1.0, {1e9, 1e9}));

  // fp16 / bf16 conversions: exact values, rounding to nearest even, specials.
  CHECK_EQ(half_to_float(0x3c00), 1.0f);
  CHECK_EQ(half_to_float(0xc000), -2.0f);
  CHECK_EQ(half_to_float(0x0001), 5.9604644775390625e-8f);  // smallest subnormal
  CHECK_EQ(half_to_float(0x7bff), 65504.0f);
  CHECK(std::isinf(half_to_float(0x7c00)));
  CHECK(std::isnan(half_to_float(0xffff)));  // the tests' poison pattern
  CHECK_EQ(float_to_half(1.0f), 0x3c00);
  CHECK_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);       // tie -> even
  CHECK_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);       // tie -> even (up)
  CHECK_EQ(float_to_half(65520.0f), 0x7c00);                 // rounds to inf
  CHECK_EQ(float_to_half(5.9604644775390625e-8f), 0x0001);
  CHECK_EQ(float_to_half(-0.0f), 0x8000);
  int round_trip_errors = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h)
    round_trip_errors += float_to_half(half_to_float(static_cast<uint16_t>(h))) != h;
  CHECK_EQ(round_trip_errors, 0);
  CHECK_EQ(bf16_to_float(0x3f80), 1.0f);
  CHECK(std::isnan(bf16_to_float(0xffff)));
  CHECK_EQ(float_to_bf16(1.0f), 0x3f80);
  CHECK_EQ(float_to_bf16(bits_to_float(0x3f808000u)), 0x3f80);  // tie -> even
  CHECK_EQ(float_to_bf16(bits_to_float(0x3f818000u)), 0x3f82);  // tie -> even (up)
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  // BatchNorm: [outer=2, C=2, inner=2]; channel 0 holds 1,2,3,4 and channel 1
  // holds 10 four times. Known mean/var; dx sums to zero per channel and is
  // orthogonal to xhat (the two constraints batch statistics impose).
  {
    const double x[8] = {1, 2, 10, 10, 3, 4, 10, 10};
    double mean[2], var[2];
    batchnorm_stats_reference(x, 2, 2, 2, mean, var);
    CHECK_EQ(mean[0], 2.5);
    CHECK_EQ(var[0], 1.25);
    CHECK_EQ(mean[1], 10.0);
    CHECK_EQ(var[1], 0.0);
    const double g[8] = {0.5, -1, 2, 1, 0.25, 3, -2, 1};
    const double invstd[2] = {1 / std::sqrt(1.25), 1 / std::sqrt(1e-5)};  // eps 0 in channel 0
    const double gamma[2] = {2.0, 0.5};
    double dx[8], dg[2], db[2];
    batchnorm_backward_reference(x, g, 2, 2, 2, mean, invstd, gamma, dx, dg, db);
    CHECK_EQ(db[0], 2.75);
    CHECK_EQ(db[1], 2.0);
    const int idx0[4] = {0, 1, 4, 5};
    double sum_dx = 0, dot = 0;
    for (int k : idx0) {
      sum_dx += dx[k];
      dot += dx[k] * (x[k] - mean[0]);
    }
    CHECK(std::fabs(sum_dx) < 1e-12);
    CHECK(std::fabs(dot) < 1e-12);
    CHECK(std::fabs(dg[0] - (0.5 * -1.5 - 1 * -0.5 + 0.25 * 0.5 + 3 * 1.5) * invstd[0]) < 1e-12);
    CHECK_EQ(bn_epilogue_reference(-1.0, 1, 0.0), 0.0);
    CHECK_EQ(bn_epilogue_reference(-1.0, 2, 3.0), 2.0);
    CHECK_EQ(bn_epilogue_reference(-1.0, 0, 3.0), -1.0);
  }
  return finish("host reference");
}
