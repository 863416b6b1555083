// BatchNorm per-channel combination of the reduction partials, in double
// precision and a fixed order (a warp per channel, lanes over the partials):
// forward statistics + running averages + the apply pass's coefficients,
// backward dgamma / dbeta + dx coefficients, and inference coefficients.
#include <cmath>

#include "bn_params.hpp"
#include "common.cuh"

namespace fnorm {
namespace {

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ double split_count(const BnFinalizeParams &p, int64_t j) {
  const int64_t left = p.domain - j * p.split_len;
  return static_cast<double>(left < p.split_len ? left : p.split_len);
}

__global__ void __launch_bounds__(32 * kWarpsPerBlock) bn_finalize_fwd_kernel(BnFinalizeParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (c >= p.channels) return;  // a whole warp
  double n = 0.0, mean = 0.0, m2 = 0.0;
  const int64_t entries = static_cast<int64_t>(p.splits) * p.group;
  for (int64_t t = lane; t < entries; t += 32) {
    const int64_t j = t / p.group, g = t - j * p.group;
    const int64_t idx = j * p.part_width + c * p.group + g;
    const double nb = split_count(p, j);
    const double mb = p.part_a[idx], m2b = p.part_b[idx];
    const double nn = n + nb;
    const double delta = mb - mean;
    mean += delta * (nb / nn);
    m2 += m2b + delta * delta * n * (nb / nn);
    n = nn;
  }
  for (int off = 16; off > 0; off >>= 1) {
    const double nb = __shfl_xor_sync(kFullMask, n, off);
    const double mb = __shfl_xor_sync(kFullMask, mean, off);
    const double m2b = __shfl_xor_sync(kFullMask, m2, off);
    const double nn = n + nb;
    if (nn > 0.0) {
      const double delta = mb - mean;
      mean += delta * (nb / nn);
      m2 += m2b + delta * delta * n * (nb / nn);
      n = nn;
    }
  }
  if (lane != 0) return;
  const double var = m2 / n;  // biased
  const double invstd = 1.0 / sqrt(var + p.eps);
  if (p.saved_mean != nullptr) p.saved_mean[c] = static_cast<float>(mean);
  if (p.saved_invstd != nullptr) p.saved_invstd[c] = static_cast<float>(invstd);
  if (p.running_mean != nullptr) {
    const double f = p.cumulative ? 1.0 / (static_cast<double>(*p.num_batches_tracked) + 1.0)
                                  : p.factor;
    const double unbiased = m2 / (n - 1.0);
    p.running_mean[c] = static_cast<float>((1.0 - f) * p.running_mean[c] + f * mean);
    p.running_var[c] = static_cast<float>((1.0 - f) * p.running_var[c] + f * unbiased);
  }
  const double gamma = p.gamma != nullptr ? p.gamma[c] : 1.0;
  p.mean[c] = static_cast<float>(mean);
  p.c1[c] = static_cast<float>(gamma * invstd);
  p.c2[c] = p.beta != nullptr ? p.beta[c] : 0.f;
}

__global__ void __launch_bounds__(32 * kWarpsPerBlock) bn_finalize_bwd_kernel(BnFinalizeParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (c >= p.channels) return;
  double sum_dy = 0.0, sum_dy_xmu = 0.0;
  const int64_t entries = static_cast<int64_t>(p.splits) * p.group;
  for (int64_t t = lane; t < entries; t += 32) {
    const int64_t j = t / p.group, g = t - j * p.group;
    const int64_t idx = j * p.part_width + c * p.group + g;
    sum_dy += p.part_a[idx];
    sum_dy_xmu += p.part_b[idx];
  }
  for (int off = 16; off > 0; off >>= 1) {
    sum_dy += __shfl_xor_sync(kFullMask, sum_dy, off);
    sum_dy_xmu += __shfl_xor_sync(kFullMask, sum_dy_xmu, off);
  }
  if (lane != 0) return;
  const double invstd = p.in_invstd[c];
  const double m = p.count;
  const double gamma = p.gamma != nullptr ? p.gamma[c] : 1.0;
  if (p.dbeta != nullptr) p.dbeta[c] = static_cast<float>(sum_dy);
  if (p.dgamma != nullptr) p.dgamma[c] = static_cast<float>(sum_dy_xmu * invstd);
  // dx = (g - sum_dy / m - (x - mean) * sum_dy_xmu * invstd^2 / m) * gamma * invstd
  const double a = gamma * invstd;
  p.mean[c] = p.in_mean[c];
  p.c1[c] = static_cast<float>(a);
  p.c2[c] = static_cast<float>(-sum_dy_xmu * invstd * invstd / m * a);
  p.c3[c] = static_cast<float>(-sum_dy / m * a);
}

__global__ void bn_infer_coef_kernel(BnFinalizeParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.channels) return;
  const double gamma = p.gamma != nullptr ? p.gamma[c] : 1.0;
  p.mean[c] = p.running_mean[c];
  p.c1[c] = static_cast<float>(gamma / sqrt(static_cast<double>(p.running_var[c]) + p.eps));
  p.c2[c] = p.beta != nullptr ? p.beta[c] : 0.f;
}

__global__ void bn_fill_kernel(float *p, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

__global__ void bn_count_kernel(int64_t *counter) { *counter += 1; }

unsigned warp_blocks(int64_t channels) {
  return static_cast<unsigned>(ceil_div(channels, kWarpsPerBlock));
}

}  // namespace

cudaError_t launch_bn_finalize_fwd(const BnFinalizeParams &p, cudaStream_t stream) {
  bn_finalize_fwd_kernel<<<warp_blocks(p.channels), 32 * kWarpsPerBlock, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_bn_finalize_bwd(const BnFinalizeParams &p, cudaStream_t stream) {
  bn_finalize_bwd_kernel<<<warp_blocks(p.channels), 32 * kWarpsPerBlock, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_bn_infer_coef(const BnFinalizeParams &p, cudaStream_t stream) {
  bn_infer_coef_kernel<<<static_cast<unsigned>(ceil_div(p.channels, 256)), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_bn_fill(float *p, int64_t n, float value, cudaStream_t stream) {
  bn_fill_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, stream>>>(p, n, value);
  return cudaGetLastError();
}

cudaError_t launch_bn_count(int64_t *counter, cudaStream_t stream) {
  bn_count_kernel<<<1, 1, 0, stream>>>(counter);
  return cudaGetLastError();
}

}  // namespace fnorm
