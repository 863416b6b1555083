/* SPDX-License-Identifier: Apache-2.0 */
// Helpers of the API tests: the thread's last error message, whether it
// names what it should, and a tensor descriptor that frees itself.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "fusednorm.h"

namespace fnorm_test {

inline std::string last_error() {
  const size_t n = fnorm_get_last_error_message(nullptr, 0);
  std::string s(n + 1, '\0');
  fnorm_get_last_error_message(&s[0], s.size());
  s.resize(n);
  return s;
}

// Whether the last error message contains `needle` (prints both when not).
inline bool last_error_mentions(const char *needle) {
  const std::string e = last_error();
  const bool ok = e.find(needle) != std::string::npos;
  if (!ok) std::fprintf(stderr, "  last error was: %s\n  expected it to mention: %s\n", e.c_str(), needle);
  return ok;
}
inline bool mentions(const char *needle) { return last_error_mentions(needle); }

struct Desc {
  fnorm_tensor_desc_t d = nullptr;
  Desc() { fnorm_tensor_desc_create(&d); }
  ~Desc() { fnorm_tensor_desc_destroy(d); }
  Desc(const Desc &) = delete;
  Desc &operator=(const Desc &) = delete;
  fnorm_status_t set(fnorm_dtype_t t, std::vector<int64_t> dims, std::vector<int64_t> strides = {}) {
    return fnorm_tensor_desc_set(d, t, static_cast<int32_t>(dims.size()), dims.data(),
                                 strides.empty() ? nullptr : strides.data());
  }
};

}  // namespace fnorm_test
