/* SPDX-License-Identifier: Apache-2.0 */
// Helpers of the GPU tests: the skip when there is no GPU, a CUDA call that
// must succeed, a device buffer that frees itself, a host parallel loop for
// the references, element sizes and names, the random seed,
// and one element of a device-dtype buffer read as double / written from
// float on the host (16-bit formats rounded to nearest even, as the device
// does).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "fusednorm.h"
#include "halfbits.hpp"

#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    const cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, \
                   __LINE__, #call);                                                        \
      std::exit(99);                                                                        \
    }                                                                                       \
  } while (0)

namespace fnorm_test {

// True (after printing the SKIP line) when there is no usable CUDA device:
// the test's main then returns 77.
inline bool skip_without_gpu() {
  int ndev = 0;
  const cudaError_t err = cudaGetDeviceCount(&ndev);
  if (err == cudaSuccess && ndev > 0) return false;
  std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices); GPU tests need one\n",
              cudaGetErrorString(err), ndev);
  return true;
}

// cudaMalloc'd bytes (at least 16), freed with the object.
struct DeviceBuffer {
  void *p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n < 16 ? 16 : n) { CUDA_OK(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  unsigned char *at(size_t off) { return static_cast<unsigned char *>(p) + off; }
  void poison() { CUDA_OK(cudaMemset(p, 0xFF, bytes)); }  // NaN in every dtype
};

// `bytes` of device memory at d copied to the host.
inline std::vector<unsigned char> to_host(const void *d, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  CUDA_OK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

// Runs fn(i) for i in [0, n) on all host cores (the references are heavy).
template <class Fn>
void parallel_for(int64_t n, Fn fn) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> ts;
  for (int64_t t = 0; t < nt; ++t)
    ts.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += nt) fn(i);
    });
  for (auto &th : ts) th.join();
}

inline size_t elem_size(fnorm_dtype_t t) { return t == FNORM_DTYPE_FLOAT32 ? 4 : 2; }

inline const char *dtype_str(fnorm_dtype_t t) {
  return t == FNORM_DTYPE_FLOAT32 ? "fp32" : t == FNORM_DTYPE_FLOAT16 ? "fp16" : "bf16";
}

inline double load_host(const unsigned char *base, fnorm_dtype_t t, int64_t i) {
  if (t == FNORM_DTYPE_FLOAT32) {
    float f;
    std::memcpy(&f, base + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, base + 2 * i, 2);
  return t == FNORM_DTYPE_FLOAT16 ? half_to_float(h) : bf16_to_float(h);
}

inline void store_host(unsigned char *base, fnorm_dtype_t t, int64_t i, float v) {
  if (t == FNORM_DTYPE_FLOAT32) {
    std::memcpy(base + 4 * i, &v, 4);
  } else {
    const uint16_t h = t == FNORM_DTYPE_FLOAT16 ? float_to_half(v) : float_to_bf16(v);
    std::memcpy(base + 2 * i, &h, 2);
  }
}

// The test's random seed: FNORM_TEST_SEED if set, else the clock; printed
// so that a failing run can be repeated.
inline uint64_t test_seed() {
  const char *env = std::getenv("FNORM_TEST_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 0)
                            : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu (set FNORM_TEST_SEED to repeat)\n", static_cast<unsigned long long>(seed));
  return seed;
}

}  // namespace fnorm_test
