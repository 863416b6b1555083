/* SPDX-License-Identifier: Apache-2.0 */
// Errors on their way to the ABI: the API guard that turns them into a
// status and the thread's last-error message, the argument-check macros and
// the dtype names. Nothing here is exported.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include "fusednorm.h"

namespace fnorm {

// An error on its way to the API boundary. Thrown only on failure paths;
// api_guard() turns it into a status and the thread's last-error message.
struct Error {
  fnorm_status_t status;
  std::string message;
};

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fail(fnorm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Record `message` as the calling thread's last error.
void set_last_error(const std::string &message);

// Turn a failed CUDA call into an Error naming what was being done.
[[noreturn]] void fail_cuda(cudaError_t err, const char *what);
inline void check_cuda(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail_cuda(err, what);
}

// Runs `body` (which returns nothing and throws Error on failure) and turns
// every failure into a status, prefixing the message with the function name.
// Nothing but a status crosses the ABI.
template <class Body>
fnorm_status_t api_guard(const char *func, Body &&body) noexcept {
  try {
    body();
    return FNORM_STATUS_SUCCESS;
  } catch (const Error &e) {
    set_last_error(std::string(func) + ": " + e.message);
    return e.status;
  } catch (const std::bad_alloc &) {
    set_last_error(std::string(func) + ": host memory allocation failed");
    return FNORM_STATUS_ALLOC_FAILED;
  } catch (...) {
    set_last_error(std::string(func) + ": unexpected internal exception");
    return FNORM_STATUS_INTERNAL_ERROR;
  }
}

// The create / destroy pair of every opaque descriptor: a default object
// into *desc (NULL_POINTER when desc is NULL); destroy accepts NULL.
template <class T>
fnorm_status_t create_object(const char *func, T **desc) noexcept {
  return api_guard(func, [&] {
    if (desc == nullptr) fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'desc' is NULL");
    *desc = new T();
  });
}
template <class T>
fnorm_status_t destroy_object(T *desc) noexcept {
  delete desc;
  return FNORM_STATUS_SUCCESS;
}

// Argument checks: the message names the argument and the failed condition.
#define FNORM_REQUIRE_NOT_NULL(arg)                                                     \
  do {                                                                                  \
    if ((arg) == nullptr)                                                               \
      ::fnorm::fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", #arg); \
  } while (0)

// The pointer `arg` names (an argument, or a member of an argument struct).
inline void require_not_null(const void *p, const char *arg) {
  if (p == nullptr) fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
}

#define FNORM_REQUIRE(cond, status, ...) \
  do {                                   \
    if (!(cond)) ::fnorm::fail(status, __VA_ARGS__); \
  } while (0)

const char *dtype_name(fnorm_dtype_t dtype);
// Bytes per element, 0 for an unknown dtype.
size_t dtype_size(fnorm_dtype_t dtype);
// The one-byte output-only dtypes (FP8, INT8): fnorm_norm_fwd_quant's y only.
bool is_quantized_dtype(fnorm_dtype_t dtype);

}  // namespace fnorm
