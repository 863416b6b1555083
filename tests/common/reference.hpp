// Double-precision host references, independent of the library's code.
#pragma once

#include <cmath>
#include <cstdint>

namespace fnorm_test {

// LayerNorm of one row of n values: exact two-pass mean/variance in double.
// gamma/beta may be null. mean_out/rstd_out may be null.
inline void layernorm_row_reference(const double *x, int64_t n, const double *gamma,
                                    const double *beta, double eps, double *y,
                                    double *mean_out, double *rstd_out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    double v = (x[i] - mean) * rstd;
    if (gamma != nullptr) v *= gamma[i];
    if (beta != nullptr) v += beta[i];
    y[i] = v;
  }
  if (mean_out != nullptr) *mean_out = mean;
  if (rstd_out != nullptr) *rstd_out = rstd;
}

// Per-dtype tolerance: |got - ref| <= atol + rtol * |ref|. NaN never passes.
struct Tolerance {
  double atol;
  double rtol;
};

inline bool within(double got, double ref, Tolerance t) {
  if (!std::isfinite(got)) return false;
  return std::fabs(got - ref) <= t.atol + t.rtol * std::fabs(ref);
}

}  // namespace fnorm_test
