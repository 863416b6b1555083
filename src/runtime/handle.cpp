#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "internal.hpp"

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

namespace {

// The limit is a property of the kernel on the device, shared by every
// handle in the process: it is recorded process-wide and only ever raised.
// (Kept per handle, a second handle asking for less lowered it under the
// first one's cached launches: cudaErrorInvalidValue at launch, H200,
// 2026-11-22.)
cudaError_t open_dynamic_smem(const void *func, size_t smem) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void *>, size_t> opened_to;
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mutex);
  size_t &opened = opened_to[{device, func}];
  if (smem <= opened) return cudaSuccess;
  err = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  opened = smem;
  return cudaSuccess;
}

}  // namespace

cudaError_t KernelCache::occupancy(const void *func, int block, size_t smem, int *blocks_per_sm) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_tuple(func, block, smem);
  auto it = occupancy_.find(key);
  if (it != occupancy_.end()) {
    *blocks_per_sm = it->second;
    return cudaSuccess;
  }
  // A block gets more than 48 KiB of shared memory (static + dynamic) only
  // after the kernel opts in; open each kernel to the largest size asked so
  // far. (A 48 KiB row plus the reduction scratch failed to launch without
  // it: cudaErrorInvalidConfiguration, H200, 2026-11-22.)
  constexpr size_t kDefaultSmem = 48 * 1024;
  cudaFuncAttributes attr{};
  if (smem > 0) {
    cudaError_t err = cudaFuncGetAttributes(&attr, func);
    if (err != cudaSuccess) return err;
  }
  if (smem + attr.sharedSizeBytes > kDefaultSmem) {
    cudaError_t err = open_dynamic_smem(func, smem);
    if (err != cudaSuccess) return err;
  }
  int occ = 0;
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, func, block, smem);
  if (err != cudaSuccess) return err;
  occupancy_.emplace(key, occ);
  *blocks_per_sm = occ;
  return cudaSuccess;
}

cudaError_t cached_occupancy(KernelCache *cache, const void *func, int block, size_t smem,
                             int *blocks_per_sm) {
  return cache->occupancy(func, block, smem, blocks_per_sm);
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
