/* SPDX-License-Identifier: Apache-2.0 */
// fnorm_create / fnorm_destroy / fnorm_get_device, the device guard, and
// the handles' ids and op slots.
#include <atomic>
#include <memory>

#include "core/handle.hpp"

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

int next_op_state_slot() {
  static std::atomic<int> next{0};
  const int slot = next.fetch_add(1);
  if (slot >= OpStates::kSlots) fail(FNORM_STATUS_INTERNAL_ERROR, "more op states than OpStates::kSlots");
  return slot;
}

}  // namespace fnorm

fnorm_handle::fnorm_handle() {
  static std::atomic<uint64_t> next_id{1};
  id = next_id.fetch_add(1);
}

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
    h->info.l2_bytes = prop.l2CacheSize;
    int mem_khz = 0, sm_khz = 0;
    // Peak figures; a device that does not report them leaves 0 (unknown),
    // and the failed query's error is taken back (not sticky: a caller's own
    // pending error is left alone otherwise).
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device) == cudaSuccess) {
      if (sm_khz > 0 && prop.multiProcessorCount > 0) {
        const double dram_bytes_per_s = 2.0 * mem_khz * 1e3 * (prop.memoryBusWidth / 8.0);
        h->info.dram_bytes_per_sm_cycle = dram_bytes_per_s / (double(prop.multiProcessorCount) * sm_khz * 1e3);
      }
    } else {
      (void)cudaGetLastError();
    }
    h->tuning = fnorm::tuning_from_env();
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
