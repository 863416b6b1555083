/* SPDX-License-Identifier: Apache-2.0 */
#include <cstdio>
#include <cstring>

#include "core/build_config.hpp"
#include "core/error.hpp"

namespace fnorm {

namespace {
thread_local std::string t_last_error;

std::string vformat(const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(&out[0], out.size(), fmt, ap);
  out.resize(static_cast<size_t>(n));
  return out;
}
}  // namespace

std::string format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

void fail(fnorm_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  throw Error{status, std::move(s)};
}

void set_last_error(const std::string &message) { t_last_error = message; }

void fail_cuda(cudaError_t err, const char *what) {
  // Clear the error so the caller's next CUDA call does not see it again
  // (sticky errors, e.g. after a device fault, stay sticky regardless).
  (void)cudaGetLastError();
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorUnsupportedPtxVersion) {
    // The build has no code this GPU (or its driver) can run: say which GPU
    // and what the build has, as this is a build choice (meson gpu_archs).
    int device = -1, major = 0, minor = 0;
    (void)cudaGetDevice(&device);
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    (void)cudaGetLastError();
    throw Error{FNORM_STATUS_NOT_SUPPORTED_BUILD,
                format("%s failed: %s (%s): device %d is compute capability %d.%d, and this build of "
                       "libfusednorm has %s%s; rebuild with meson option gpu_archs including %d%d",
                       what, cudaGetErrorString(err), cudaGetErrorName(err), device, major, minor,
                       FNORM_BUILT_ARCHS,
                       err == cudaErrorUnsupportedPtxVersion ? " (the driver is older than that PTX)" : "",
                       major, minor)};
  }
  const fnorm_status_t status =
      (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
       err == cudaErrorInvalidDevice)
          ? FNORM_STATUS_NO_DEVICE
          : FNORM_STATUS_CUDA_ERROR;
  throw Error{status, format("%s failed: %s (%s, cudaError %d)", what, cudaGetErrorString(err),
                             cudaGetErrorName(err), static_cast<int>(err))};
}

const char *dtype_name(fnorm_dtype_t dtype) {
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32: return "FLOAT32";
    case FNORM_DTYPE_FLOAT16: return "FLOAT16";
    case FNORM_DTYPE_BFLOAT16: return "BFLOAT16";
    case FNORM_DTYPE_FLOAT8_E4M3: return "FLOAT8_E4M3";
    case FNORM_DTYPE_FLOAT8_E5M2: return "FLOAT8_E5M2";
    case FNORM_DTYPE_INT8: return "INT8";
  }
  return "unknown";
}

size_t dtype_size(fnorm_dtype_t dtype) {
  switch (dtype) {
    case FNORM_DTYPE_FLOAT32: return 4;
    case FNORM_DTYPE_FLOAT16: return 2;
    case FNORM_DTYPE_BFLOAT16: return 2;
    case FNORM_DTYPE_FLOAT8_E4M3:
    case FNORM_DTYPE_FLOAT8_E5M2:
    case FNORM_DTYPE_INT8: return 1;
  }
  return 0;
}

bool is_quantized_dtype(fnorm_dtype_t dtype) {
  return dtype == FNORM_DTYPE_FLOAT8_E4M3 || dtype == FNORM_DTYPE_FLOAT8_E5M2 || dtype == FNORM_DTYPE_INT8;
}

}  // namespace fnorm

extern "C" {

FNORM_API uint32_t fnorm_get_version(void) { return FNORM_VERSION; }

FNORM_API const char *fnorm_get_error_string(fnorm_status_t status) {
  switch (status) {
    case FNORM_STATUS_SUCCESS: return "FNORM_STATUS_SUCCESS: success";
    case FNORM_STATUS_BAD_PARAM: return "FNORM_STATUS_BAD_PARAM: an argument is invalid";
    case FNORM_STATUS_BAD_PARAM_NULL_POINTER:
      return "FNORM_STATUS_BAD_PARAM_NULL_POINTER: a required pointer is NULL";
    case FNORM_STATUS_BAD_PARAM_SHAPE:
      return "FNORM_STATUS_BAD_PARAM_SHAPE: tensor shapes, strides or dtypes disagree";
    case FNORM_STATUS_INSUFFICIENT_WORKSPACE:
      return "FNORM_STATUS_INSUFFICIENT_WORKSPACE: the workspace is smaller than the size query";
    case FNORM_STATUS_NOT_SUPPORTED:
      return "FNORM_STATUS_NOT_SUPPORTED: a valid case this library does not implement";
    case FNORM_STATUS_NOT_SUPPORTED_BUILD:
      return "FNORM_STATUS_NOT_SUPPORTED_BUILD: left out of this build, no code for this GPU, or a library it needs "
             "is missing";
    case FNORM_STATUS_INTERNAL_ERROR:
      return "FNORM_STATUS_INTERNAL_ERROR: internal library error";
    case FNORM_STATUS_ALLOC_FAILED:
      return "FNORM_STATUS_ALLOC_FAILED: host memory allocation failed";
    case FNORM_STATUS_NO_DEVICE:
      return "FNORM_STATUS_NO_DEVICE: no usable CUDA device or driver";
    case FNORM_STATUS_CUDA_ERROR: return "FNORM_STATUS_CUDA_ERROR: a CUDA call failed";
    case FNORM_STATUS_CUBLAS_ERROR: return "FNORM_STATUS_CUBLAS_ERROR: a cuBLAS call failed";
    case FNORM_STATUS_CUDNN_ERROR: return "FNORM_STATUS_CUDNN_ERROR: a cuDNN call failed";
    case FNORM_STATUS_NCCL_ERROR: return "FNORM_STATUS_NCCL_ERROR: an NCCL call failed";
  }
  return "FNORM_STATUS_UNKNOWN";
}

FNORM_API fnorm_status_t fnorm_status_category(fnorm_status_t status) {
  return static_cast<fnorm_status_t>((static_cast<int>(status) / 1000) * 1000);
}

FNORM_API size_t fnorm_get_last_error_message(char *buf, size_t size) {
  const std::string &msg = fnorm::t_last_error;
  if (buf != nullptr && size > 0) {
    const size_t n = msg.size() < size - 1 ? msg.size() : size - 1;
    std::memcpy(buf, msg.data(), n);
    buf[n] = '\0';
  }
  return msg.size();
}

}  // extern "C"
