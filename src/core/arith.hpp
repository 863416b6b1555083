/* SPDX-License-Identifier: Apache-2.0 */
// Integer helpers shared by host and device code: rounding, alignment and
// overflow-checked size arithmetic. No CUDA headers needed.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define FNORM_HOST_DEVICE __host__ __device__
#else
#define FNORM_HOST_DEVICE
#endif

namespace fnorm {

// a >= 0, b > 0; no intermediate exceeds a (a + b - 1 overflowed for
// dimensions near INT64_MAX: UBSan under the BatchNorm fuzzer).
FNORM_HOST_DEVICE constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Every workspace region of every op starts at a multiple of this (cuBLASLt
// and cuDNN ask 256 of their scratch; vector loads need 16).
constexpr size_t kRegionAlign = 256;

// n rounded up to a multiple of `to` (callers keep n + to in range).
constexpr size_t align_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

inline bool is_aligned(const void *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace fnorm
