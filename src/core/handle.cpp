// fnorm_create / fnorm_destroy / fnorm_get_device, and the device guard.
#include <memory>

#include "core/handle.hpp"
#include "core/pointer_check.hpp"

namespace fnorm {

DeviceGuard::DeviceGuard(int device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice(handle's device)");
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) (void)cudaSetDevice(previous_);
}

}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_create(fnorm_handle_t *handle) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(handle);
    int device = -1;
    fnorm::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop{};
    fnorm::check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    auto h = std::make_unique<fnorm_handle>();
    h->device = device;
    h->info.sm_count = prop.multiProcessorCount;
    h->info.max_smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    h->info.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    h->info.cc_major = prop.major;
    h->check_pointers = fnorm::checked_mode_from_env();
    *handle = h.release();
  });
}

FNORM_API fnorm_status_t fnorm_destroy(fnorm_handle_t handle) {
  delete handle;
  return FNORM_STATUS_SUCCESS;
}

FNORM_API fnorm_status_t fnorm_get_device(fnorm_handle_t handle, int *device) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(device);
    *device = handle->device;
  });
}

}  // extern "C"
