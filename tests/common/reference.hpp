/* SPDX-License-Identifier: Apache-2.0 */
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

namespace fnorm_test {

// The scale the forward applies at column i: 1, gamma, or 1 + gamma.
inline double scale_at(const double *gamma, bool zero_centered, int64_t i) {
  if (gamma == nullptr) return 1.0;
  return zero_centered ? 1.0 + gamma[i] : gamma[i];
}

// LayerNorm (rms = false) or RMSNorm (rms = true) of one row in double.
// Returns mean (0 for RMSNorm) and rstd (rrms for RMSNorm).
inline void norm_row_reference(bool rms, const double *x, int64_t n, const double *gamma,
                               const double *beta, bool zero_centered, double eps, double *y,
                               double *mean_out, double *rstd_out) {
  double mean = 0.0;
  if (!rms) {
    for (int64_t i = 0; i < n; ++i) mean += x[i];
    mean /= static_cast<double>(n);
  }
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    double v = (x[i] - mean) * rstd * scale_at(gamma, zero_centered, i);
    if (beta != nullptr) v += beta[i];
    y[i] = v;
  }
  if (mean_out != nullptr) *mean_out = mean;
  if (rstd_out != nullptr) *rstd_out = rstd;
}

// Backward of one row in double, from the given (saved) mean and rstd.
// dx[i] = rstd * (g - c1 - xh * c2) (+ dsum); dgamma/dbeta accumulate
// (+=) dy * xh and dy; mag[i] receives the magnitude of the terms of dx
// (for a rounding-error bound).
inline void norm_row_backward_reference(bool rms, const double *x, const double *dy, int64_t n,
                                        double mean, double rstd, const double *gamma,
                                        bool zero_centered, const double *dsum, double *dx,
                                        double *mag, double *dgamma, double *dbeta) {
  double c1 = 0.0, c2 = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double xh = (x[i] - (rms ? 0.0 : mean)) * rstd;
    const double g = dy[i] * scale_at(gamma, zero_centered, i);
    c1 += g;
    c2 += g * xh;
  }
  c1 = rms ? 0.0 : c1 / static_cast<double>(n);
  c2 /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    const double xh = (x[i] - (rms ? 0.0 : mean)) * rstd;
    const double g = dy[i] * scale_at(gamma, zero_centered, i);
    dx[i] = rstd * (g - c1 - xh * c2) + (dsum != nullptr ? dsum[i] : 0.0);
    mag[i] = rstd * (std::fabs(g) + std::fabs(c1) + std::fabs(xh * c2));
    if (dgamma != nullptr) dgamma[i] += dy[i] * xh;
    if (dbeta != nullptr) dbeta[i] += dy[i];
  }
}

// BatchNorm in double over a tensor viewed as [outer, C, inner]: element
// (o, c, i) at (o * C + c) * inner + i (NCHW: outer = N, inner = spatial;
// channels-last: outer = N * spatial, inner = 1). Two passes per channel.
inline void batchnorm_stats_reference(const double *x, int64_t outer, int64_t C, int64_t inner,
                                      double *mean, double *var_biased) {
  const double m = static_cast<double>(outer * inner);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0.0, q = 0.0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) s += x[(o * C + c) * inner + i];
    const double mu = s / m;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const double d = x[(o * C + c) * inner + i] - mu;
        q += d * d;
      }
    mean[c] = mu;
    var_biased[c] = q / m;
  }
}

// The epilogue on one value: 0 none, 1 relu, 2 add (z) then relu.
inline double bn_epilogue_reference(double v, int epilogue, double z) {
  if (epilogue == 2) v += z;
  if (epilogue != 0 && v <= 0.0) v = 0.0;
  return v;
}

// Backward per channel from g (dy already masked by the ReLU) and the
// statistics the forward saved: dbeta = sum g, dgamma = sum g * xhat,
// dx = (g - dbeta / m - xhat * dgamma / m) * gamma * invstd.
inline void batchnorm_backward_reference(const double *x, const double *g, int64_t outer, int64_t C,
                                         int64_t inner, const double *mean, const double *invstd,
                                         const double *gamma, double *dx, double *dgamma,
                                         double *dbeta) {
  const double m = static_cast<double>(outer * inner);
  for (int64_t c = 0; c < C; ++c) {
    double sg = 0.0, sgx = 0.0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t k = (o * C + c) * inner + i;
        sg += g[k];
        sgx += g[k] * (x[k] - mean[c]) * invstd[c];
      }
    dbeta[c] = sg;
    dgamma[c] = sgx;
    const double a = (gamma != nullptr ? gamma[c] : 1.0) * invstd[c];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t k = (o * C + c) * inner + i;
        const double xh = (x[k] - mean[c]) * invstd[c];
        dx[k] = (g[k] - sg / m - xh * sgx / m) * a;
      }
  }
}

}  // namespace fnorm_test
