/* SPDX-License-Identifier: Apache-2.0 */
// What every fuzz target shares: a reader that turns libFuzzer's bytes into
// arguments (integers, chosen values, tensor descriptors, fake device
// pointers), and the handle that needs no GPU.
//
// The targets call the C entry points with tests/common/fake_handle.hpp's
// handle and with pointers that point at no memory: they exercise argument
// validation and size arithmetic only. A call that passes validation goes on
// to the CUDA runtime, which (there being no GPU: the test sets
// CUDA_VISIBLE_DEVICES to nothing) returns an error status. Neither outcome
// is a finding; a crash, a hang or a sanitizer report is.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "fake_handle.hpp"
#include "fusednorm.h"

namespace fuzz {

class Input {
 public:
  Input(const uint8_t *data, size_t size) : p_(data), n_(size) {}
  bool empty() const { return n_ == 0; }

  template <class T>
  T raw() {
    T v{};
    const size_t k = n_ < sizeof(T) ? n_ : sizeof(T);
    std::memcpy(&v, p_, k);
    p_ += k;
    n_ -= k;
    return v;
  }
  uint8_t byte() { return raw<uint8_t>(); }
  bool flag() { return byte() & 1; }
  // One of `n` choices (0 when the input is exhausted).
  unsigned pick(unsigned n) { return n ? byte() % n : 0; }
  template <class T>
  T one_of(std::initializer_list<T> values) {
    return values.begin()[pick(static_cast<unsigned>(values.size()))];
  }

  // A size: mostly small, sometimes a boundary value (1, primes, powers of
  // two and their neighbours, values near INT32/INT64 limits, 0, negative).
  int64_t dim() {
    switch (pick(8)) {
      case 0: return 1 + pick(8);
      case 1: return one_of<int64_t>({1, 2, 3, 7, 13, 31, 32, 33, 64, 127, 1000, 1024, 4096, 65535, 65536,
                                      65537, 131072, 1 << 20});
      case 2: return one_of<int64_t>({0, -1, INT64_MIN, INT64_MAX, int64_t{1} << 31, (int64_t{1} << 31) - 1,
                                      int64_t{1} << 32, int64_t{1} << 40, int64_t{1} << 61, int64_t{1} << 62});
      case 3: return static_cast<int64_t>(raw<uint16_t>());
      case 4: return static_cast<int64_t>(raw<uint32_t>());
      case 5: return raw<int64_t>();
      default: return 1 + pick(300);
    }
  }
  double real() {
    switch (pick(4)) {
      case 0: return one_of<double>({0.0, 1e-5, 1e-12, 0.1, 1.0, -1.0, 1e300, -0.0, 1e-45, 3.5e38, 3.4e38,
                                     NAN, INFINITY, -INFINITY, 2.0});
      case 1: return raw<double>();
      default: return static_cast<double>(byte()) / 100.0;
    }
  }
  template <class E>
  E enum_value(int valid_count) {
    // Mostly valid values, sometimes out of range either side.
    switch (pick(6)) {
      case 0: return static_cast<E>(raw<int32_t>());
      case 1: return static_cast<E>(valid_count);
      default: return static_cast<E>(pick(static_cast<unsigned>(valid_count)));
    }
  }

  // A device pointer that is never dereferenced on the host: NULL, or a fake
  // address with a chosen misalignment. Several calls may return the same
  // address, which exercises the aliasing rules.
  void *ptr() {
    switch (pick(10)) {
      case 0: return nullptr;
      case 1: return reinterpret_cast<void *>(base(pick(4)) + pick(16));
      default: return reinterpret_cast<void *>(base(pick(6)));
    }
  }
  static uintptr_t base(unsigned i) { return uintptr_t{0x7f0000000000} + uintptr_t{i} * (uintptr_t{1} << 36); }

  size_t bytes() {
    switch (pick(4)) {
      case 0: return 0;
      case 1: return one_of<size_t>({1, 15, 16, 256, 4096, size_t{1} << 20, size_t{1} << 30, SIZE_MAX});
      default: return static_cast<size_t>(raw<uint32_t>());
    }
  }

 private:
  const uint8_t *p_;
  size_t n_;
};

// A tensor descriptor built from the input: mostly packed, sometimes with
// fuzzed strides; sometimes left unset. Owns the descriptor.
struct Tensor {
  fnorm_tensor_desc_t d = nullptr;
  Tensor() { fnorm_tensor_desc_create(&d); }
  ~Tensor() { fnorm_tensor_desc_destroy(d); }
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;

  void fill(Input &in) {
    if (in.pick(16) == 0) return;  // never set
    const fnorm_dtype_t dt = in.enum_value<fnorm_dtype_t>(6);  // the one-byte output dtypes too
    int32_t rank = 1 + static_cast<int32_t>(in.pick(5));
    if (in.pick(20) == 0) rank = static_cast<int32_t>(in.raw<int8_t>());
    int64_t dims[FNORM_MAX_RANK + 2] = {};
    int64_t strides[FNORM_MAX_RANK + 2] = {};
    const int32_t n = rank < 0 ? 0 : (rank > FNORM_MAX_RANK + 2 ? FNORM_MAX_RANK + 2 : rank);
    for (int32_t i = 0; i < n; ++i) dims[i] = in.dim();
    const unsigned how = in.pick(4);
    if (how == 1) {
      // Packed, with padded rows or a channels-last permutation.
      int64_t s = 1;
      for (int32_t i = n - 1; i >= 0; --i) {
        strides[i] = s;
        int64_t extent = dims[i];
        if (i == n - 1 && in.flag() && extent > 0 && extent < INT64_MAX - 8) extent += in.pick(9);
        s = (extent > 0 && s <= INT64_MAX / extent) ? s * extent : 1;
      }
      if (n >= 3 && in.flag()) {  // NHWC-like strides for [N, C, spatial...]
        int64_t t = 1;
        strides[1] = t;
        t *= dims[1] > 0 ? dims[1] : 1;
        for (int32_t i = n - 1; i >= 2; --i) {
          strides[i] = t;
          t = (dims[i] > 0 && t <= INT64_MAX / dims[i]) ? t * dims[i] : 1;
        }
        strides[0] = t;
      }
    } else if (how >= 2) {
      for (int32_t i = 0; i < n; ++i) strides[i] = in.dim();
    }
    fnorm_tensor_desc_set(d, dt, rank, in.pick(40) == 0 ? nullptr : dims, how == 0 ? nullptr : strides);
  }
  // NULL sometimes, to reach the null-descriptor checks.
  fnorm_tensor_desc_t maybe(Input &in) { return in.pick(12) == 0 ? nullptr : d; }
};

// The handle: the fake one, sometimes NULL.
inline fnorm_handle_t handle(Input &in) { return in.pick(16) == 0 ? nullptr : fake_handle(); }

// The message of a failed call must be readable and NUL-terminated.
inline void read_last_error() {
  char buf[64];
  const size_t n = fnorm_get_last_error_message(buf, sizeof buf);
  if (std::strlen(buf) >= sizeof buf || (n < sizeof buf && std::strlen(buf) != n)) std::abort();
}

// Where a size query and its launch must agree: a query that refused the
// arguments means the launch must refuse them too (never SUCCESS).
inline void expect_refused(fnorm_status_t query, fnorm_status_t launch, const char *what) {
  if (query != FNORM_STATUS_SUCCESS && fnorm_status_category(query) == FNORM_STATUS_BAD_PARAM &&
      launch == FNORM_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: the size query refused (%d) what the launch accepted\n", what, (int)query);
    std::abort();
  }
}

}  // namespace fuzz
