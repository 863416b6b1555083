// Host access to device-dtype buffers for the GPU tests: element sizes and
// names, one element read as double / written from float (16-bit formats
// rounded to nearest even, as the device does), and a CUDA call that must
// succeed.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

}  // namespace fnorm_test
