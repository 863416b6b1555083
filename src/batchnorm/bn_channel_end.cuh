/* SPDX-License-Identifier: Apache-2.0 */
// The per-channel end of a BatchNorm reduction, shared by the finalize
// kernels (bn_finalize.cu) and the one-launch kernels (bn_persistent.cuh,
// bn_stream.cuh): from a channel's totals in double to the saved
// statistics, running averages, weight gradients and the coefficients of
// the elementwise pass.
#pragma once

#include <cmath>

#include "batchnorm/bn_params.hpp"

namespace fnorm {

// The elementwise pass's coefficients of channel c, named by the term they
// scale or add: forward v = (x - mean) * xmu_scale + shift; backward
// dx = g * dy_scale + (x - mean) * xmu_scale + shift (g: the masked dy).
struct BnCoefs {
  float mean, xmu_scale, shift, dy_scale;
};

__device__ inline BnCoefs fwd_coefs(const BnFinalizeParams &p, int64_t c, double mean, double invstd) {
  const double gamma = p.gamma != nullptr ? p.gamma[c] : 1.0;
  BnCoefs k;
  k.mean = static_cast<float>(mean);
  k.xmu_scale = static_cast<float>(gamma * invstd);
  k.shift = p.beta != nullptr ? p.beta[c] : 0.f;
  k.dy_scale = 0.f;
  return k;
}

// dx = (g - sum_dy / m - (x - mean) * sum_dy_xmu * invstd^2 / m) * gamma * invstd
__device__ inline BnCoefs bwd_coefs(const BnFinalizeParams &p, int64_t c, double m, double sum_dy,
                                    double sum_dy_xmu) {
  const double invstd = p.in_invstd[c];
  const double a = (p.gamma != nullptr ? p.gamma[c] : 1.0) * invstd;
  BnCoefs k;
  k.mean = p.in_mean[c];
  k.dy_scale = static_cast<float>(a);
  k.xmu_scale = static_cast<float>(-sum_dy_xmu * invstd * invstd / m * a);
  k.shift = static_cast<float>(-sum_dy / m * a);
  return k;
}

// The running averages' factor of this pass (reads the batch counter of
// the cumulative average: before the counter's increment).
__device__ inline double running_factor(const BnFinalizeParams &p) {
  return p.cumulative && p.running_mean != nullptr ? 1.0 / (static_cast<double>(*p.num_batches_tracked) + 1.0)
                                                   : p.factor;
}

// The forward's outputs from a channel's count, mean and M2; f: the
// running averages' factor (running_factor).
__device__ inline void finish_fwd_at(const BnFinalizeParams &p, int64_t c, double n, double mean, double m2,
                                     double f) {
  const double var = m2 / n;  // biased
  const double invstd = 1.0 / sqrt(var + p.eps);
  if (p.saved_mean != nullptr) p.saved_mean[c] = static_cast<float>(mean);
  if (p.saved_invstd != nullptr) p.saved_invstd[c] = static_cast<float>(invstd);
  if (p.running_mean != nullptr) {
    const double unbiased = m2 / (n - 1.0);
    p.running_mean[c] = static_cast<float>((1.0 - f) * p.running_mean[c] + f * mean);
    p.running_var[c] = static_cast<float>((1.0 - f) * p.running_var[c] + f * unbiased);
  }
  if (p.mean != nullptr) {
    const BnCoefs k = fwd_coefs(p, c, mean, invstd);
    p.mean[c] = k.mean;
    p.xmu_scale[c] = k.xmu_scale;
    p.shift[c] = k.shift;
  }
}

__device__ inline void finish_fwd(const BnFinalizeParams &p, int64_t c, double n, double mean, double m2) {
  finish_fwd_at(p, c, n, mean, m2, running_factor(p));
}

// The backward's weight gradients (when asked) and coefficients from a
// channel's count and sums.
__device__ inline void finish_bwd(const BnFinalizeParams &p, int64_t c, double m, double sum_dy,
                                  double sum_dy_xmu, bool weight_grads) {
  if (weight_grads && p.dbeta != nullptr) p.dbeta[c] = static_cast<float>(sum_dy);
  if (weight_grads && p.dgamma != nullptr) p.dgamma[c] = static_cast<float>(sum_dy_xmu * p.in_invstd[c]);
  if (p.mean != nullptr) {
    const BnCoefs k = bwd_coefs(p, c, m, sum_dy, sum_dy_xmu);
    p.mean[c] = k.mean;
    p.xmu_scale[c] = k.xmu_scale;
    p.shift[c] = k.shift;
    p.dy_scale[c] = k.dy_scale;
  }
}

}  // namespace fnorm
