// The object behind fnorm_handle_t: the device it is bound to, that device's
// properties, the occupancy cache, and the states ops create on first use.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <tuple>

#include "core/error.hpp"
#include "core/launch.hpp"

namespace fnorm {

// Makes the handle's device current for its lifetime, then restores the
// caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

class KernelCache {
 public:
  cudaError_t occupancy(const void *func, int block, size_t smem, int *blocks_per_sm);

 private:
  std::mutex mutex_;
  std::map<std::tuple<const void *, int, size_t>, int> occupancy_;
};

// States an op creates on a handle on first use. Each op defines its state
// and the destroy function (NULL-safe); core only holds the pointers.
struct LinearState;  // cuBLASLt handle + algorithm cache (src/linear/)
void linear_state_destroy(LinearState *state) noexcept;
struct CudnnState;  // cuDNN handle of the BatchNorm cuDNN engine (src/batchnorm/)
void cudnn_state_destroy(CudnnState *state) noexcept;

}  // namespace fnorm

struct fnorm_handle {
  int device = 0;
  fnorm::DeviceInfo info;
  fnorm::KernelCache cache;
  std::mutex lazy_mutex;                  // guards creation of the states below
  fnorm::LinearState *linear = nullptr;   // owned; see linear_state_destroy
  fnorm::CudnnState *cudnn = nullptr;     // owned; see cudnn_state_destroy
  bool check_pointers = false;            // checked mode (core/pointer_check.hpp)
  ~fnorm_handle() {
    fnorm::linear_state_destroy(linear);
    fnorm::cudnn_state_destroy(cudnn);
  }
};

namespace fnorm {

// The caller's stream as CUDA's type (fnorm.h forward-declares CUstream_st).
inline cudaStream_t cuda_stream(fnorm_stream_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

// Everything a launch needs from the handle, on `stream`: the one place a
// launch context is made.
inline LaunchContext launch_context(fnorm_handle *h, fnorm_stream_t stream) {
  LaunchContext ctx;
  ctx.dev = h->info;
  ctx.cache = &h->cache;
  ctx.stream = cuda_stream(stream);
  return ctx;
}

}  // namespace fnorm
