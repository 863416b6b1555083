/* SPDX-License-Identifier: Apache-2.0 */
// Minimal assertion helpers: print the expression, both values, file and
// line; count passes and failures; finish with the closing line.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace fnorm_test {

struct Counters {
  long passed = 0;
  long failed = 0;
  long skipped = 0;
};
inline Counters &counters() {
  static Counters c;
  return c;
}

inline void record(bool ok, const char *file, int line, const std::string &what) {
  if (ok) {
    ++counters().passed;
  } else {
    ++counters().failed;
    std::fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what.c_str());
  }
}

template <class A, class B>
std::string describe(const char *ea, const char *op, const char *eb, const A &a, const B &b) {
  std::ostringstream s;
  s << ea << " " << op << " " << eb << " (" << a << " vs " << b << ")";
  return s.str();
}

// Prints "N passed, N failed, N skipped" and returns the exit code.
inline int finish(const char *name) {
  const Counters &c = counters();
  std::printf("%s: %ld passed, %ld failed, %ld skipped\n", name, c.passed, c.failed, c.skipped);
  return c.failed == 0 ? 0 : 1;
}

}  // namespace fnorm_test

#define CHECK(cond) ::fnorm_test::record((cond), __FILE__, __LINE__, #cond)
#define CHECK_CMP(a, op, b)                                                              \
  do {                                                                                   \
    const auto va_ = (a);                                                                \
    const auto vb_ = (b);                                                                \
    ::fnorm_test::record(va_ op vb_, __FILE__, __LINE__,                                 \
                         ::fnorm_test::describe(#a, #op, #b, va_, vb_));                 \
  } while (0)
#define CHECK_EQ(a, b) CHECK_CMP(a, ==, b)
// A call that must return `status`; on mismatch prints the last error text.
#define CHECK_STATUS(call, status)                                                     \
  do {                                                                                 \
    const fnorm_status_t st_ = (call);                                                 \
    if (st_ != (status)) {                                                             \
      char msg_[512];                                                                  \
      fnorm_get_last_error_message(msg_, sizeof msg_);                                 \
      ::fnorm_test::record(false, __FILE__, __LINE__,                                  \
                           ::fnorm_test::describe(#call, "==", #status, (int)st_,      \
                                                  (int)(status)) +                     \
                               " last error: " + msg_);                                \
    } else {                                                                           \
      ::fnorm_test::record(true, __FILE__, __LINE__, #call);                           \
    }                                                                                  \
  } while (0)
