/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm per-channel combination of the reduction partials, in double
// precision and a fixed order (a block per channel, threads over the partials):
// forward statistics + running averages + the apply pass's coefficients,
// backward dgamma / dbeta + dx coefficients, and inference coefficients.
#include <cmath>

#include "batchnorm/bn_channel_end.cuh"
#include "batchnorm/bn_params.hpp"
#include "core/device.cuh"

namespace fnorm {
namespace {

constexpr int kFinalizeThreads = 256;

__device__ __forceinline__ double split_count(const BnFinalizeParams &p, int64_t j) {
  const int64_t left = p.domain - j * p.split_len;
  return static_cast<double>(left < p.split_len ? left : p.split_len);
}

// Walks a channel's partial entries t = threadIdx.x, + blockDim.x, ... as
// (split j, column g) without divisions in the loop.
struct EntryWalk {
  int64_t j, g, dj, dg, group;
  __device__ EntryWalk(int64_t t0, int64_t step, int64_t group_) : group(group_) {
    j = t0 / group;
    g = t0 - j * group;
    dj = step / group;
    dg = step - dj * group;
  }
  __device__ __forceinline__ void next() {
    j += dj;
    g += dg;
    if (g >= group) {
      g -= group;
      ++j;
    }
  }
};

// Sums three doubles over the block; thread 0 gets the result.
__device__ __forceinline__ void block_sum3(double &a, double &b, double &c) {
  __shared__ double sh[3][kFinalizeThreads / 32];
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_xor_sync(kFullMask, a, off);
    b += __shfl_xor_sync(kFullMask, b, off);
    c += __shfl_xor_sync(kFullMask, c, off);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    sh[0][warp] = a;
    sh[1][warp] = b;
    sh[2][warp] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    a = b = c = 0.0;
    for (int w = 0; w < kFinalizeThreads / 32; ++w) {  // fixed order: deterministic
      a += sh[0][w];
      b += sh[1][w];
      c += sh[2][w];
    }
  }
}

// One block per channel. The partial (count n_j, mean_j, M2_j) combine as
// shifted sums in double around K, the channel's first partial mean:
// mean = K + S1 / n, M2 = S2 - S1^2 / n with S1 = sum n_j (mean_j - K),
// S2 = sum M2_j + n_j (mean_j - K)^2 (no division per entry; the shift keeps
// the cancellation small even for |mean| >> std).
// SyncBatchNorm (p.sync_local): writes this rank's (n, n * mean, M2 + n *
// mean^2) in double for the all-reduce instead (shift 0, common to all ranks:
// the variance then loses (mean / std)^2 * 1e-16 relative, 1e-8 at a mean of
// 1e4 standard deviations).
__global__ void __launch_bounds__(kFinalizeThreads) bn_finalize_fwd_kernel(BnFinalizeParams p) {
  const int64_t c = blockIdx.x;
  const int64_t entries = static_cast<int64_t>(p.splits) * p.group;
  const double K = entries > 0 ? p.part_moment1[c * p.group] : 0.0;
  double n = 0.0, s1 = 0.0, s2 = 0.0;
  EntryWalk w(threadIdx.x, blockDim.x, p.group);
  for (int64_t t = threadIdx.x; t < entries; t += blockDim.x, w.next()) {
    const int64_t idx = w.j * p.part_width + c * p.group + w.g;
    const double nb = split_count(p, w.j);
    const double d = static_cast<double>(p.part_moment1[idx]) - K;
    n += nb;
    s1 += nb * d;
    s2 += static_cast<double>(p.part_moment2[idx]) + nb * d * d;
  }
  block_sum3(n, s1, s2);
  if (threadIdx.x != 0) return;
  const double mean = n > 0.0 ? K + s1 / n : 0.0;
  const double m2 = n > 0.0 ? fmax(s2 - s1 * s1 / n, 0.0) : 0.0;
  if (p.sync_local != nullptr) {
    p.sync_local[3 * c] = n;
    p.sync_local[3 * c + 1] = n * mean;
    p.sync_local[3 * c + 2] = m2 + n * mean * mean;
    return;
  }
  finish_fwd(p, c, n, mean, m2);
}

// SyncBatchNorm: the all-reduced (n, S1, S2) of every channel.
__global__ void bn_finalize_fwd_sync_kernel(BnFinalizeParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.channels) return;
  const double n = p.sync_global[3 * c], s1 = p.sync_global[3 * c + 1], s2 = p.sync_global[3 * c + 2];
  finish_fwd(p, c, n, s1 / n, fmax(s2 - s1 * s1 / n, 0.0));
}

// SyncBatchNorm (p.sync_local): writes this rank's (count, sum_dy,
// sum_dy_xmu) for the all-reduce, and the local dgamma / dbeta unless the
// global ones are asked for.
__global__ void __launch_bounds__(kFinalizeThreads) bn_finalize_bwd_kernel(BnFinalizeParams p) {
  const int64_t c = blockIdx.x;
  const int64_t entries = static_cast<int64_t>(p.splits) * p.group;
  double sum_dy = 0.0, sum_dy_xmu = 0.0, unused = 0.0;
  EntryWalk w(threadIdx.x, blockDim.x, p.group);
  for (int64_t t = threadIdx.x; t < entries; t += blockDim.x, w.next()) {
    const int64_t idx = w.j * p.part_width + c * p.group + w.g;
    sum_dy += p.part_moment1[idx];
    sum_dy_xmu += p.part_moment2[idx];
  }
  block_sum3(sum_dy, sum_dy_xmu, unused);
  if (threadIdx.x != 0) return;
  if (p.sync_local != nullptr) {
    p.sync_local[3 * c] = p.count;
    p.sync_local[3 * c + 1] = sum_dy;
    p.sync_local[3 * c + 2] = sum_dy_xmu;
    if (!p.global_weight_grads) {
      if (p.dbeta != nullptr) p.dbeta[c] = static_cast<float>(sum_dy);
      if (p.dgamma != nullptr) p.dgamma[c] = static_cast<float>(sum_dy_xmu * p.in_invstd[c]);
    }
    return;
  }
  finish_bwd(p, c, p.count, sum_dy, sum_dy_xmu, true);
}

__global__ void bn_finalize_bwd_sync_kernel(BnFinalizeParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.channels) return;
  finish_bwd(p, c, p.sync_global[3 * c], p.sync_global[3 * c + 1], p.sync_global[3 * c + 2],
             p.global_weight_grads);
}

__global__ void bn_infer_coef_kernel(BnFinalizeParams p) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= p.channels) return;
  const double gamma = p.gamma != nullptr ? p.gamma[c] : 1.0;
  p.mean[c] = p.running_mean[c];
  p.xmu_scale[c] = static_cast<float>(gamma / sqrt(static_cast<double>(p.running_var[c]) + p.eps));
  p.shift[c] = p.beta != nullptr ? p.beta[c] : 0.f;
}

__global__ void bn_fill_kernel(float *p, int64_t n, float value) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

__global__ void bn_count_kernel(int64_t *counter) { *counter += 1; }


}  // namespace

cudaError_t launch_bn_finalize_fwd(const BnFinalizeParams &p, cudaStream_t stream) {
  bn_finalize_fwd_kernel<<<static_cast<unsigned>(p.channels), kFinalizeThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_bn_finalize_bwd(const BnFinalizeParams &p, cudaStream_t stream) {
  bn_finalize_bwd_kernel<<<static_cast<unsigned>(p.channels), kFinalizeThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_bn_finalize_fwd_sync(const BnFinalizeParams &p, cudaStream_t stream) {
  bn_finalize_fwd_sync_kernel<<<static_cast<unsigned>(ceil_div(p.channels, 256)), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_bn_finalize_bwd_sync(const BnFinalizeParams &p, cudaStream_t stream) {
  bn_finalize_bwd_sync_kernel<<<static_cast<unsigned>(ceil_div(p.channels, 256)), 256, 0, stream>>>(p);
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
