/* SPDX-License-Identifier: Apache-2.0 */
// Kernel occupancy, cached per handle: what the planners of every op size
// their launches with.
#include <map>
#include <mutex>
#include <utility>

#include "core/handle.hpp"

namespace fnorm {

namespace {

// The limit is a property of the kernel on the device, shared by every
// handle in the process: it is recorded process-wide and only ever raised,
// so that a handle asking for less never lowers it under another handle's
// planned launches (that gave cudaErrorInvalidValue at launch, H200,
// 2026-11-22).
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

cudaError_t OccupancyCache::occupancy(const void *func, int block, size_t smem, int *blocks_per_sm) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_tuple(func, block, smem);
  auto it = blocks_per_sm_.find(key);
  if (it != blocks_per_sm_.end()) {
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
  blocks_per_sm_.emplace(key, occ);
  *blocks_per_sm = occ;
  return cudaSuccess;
}

cudaError_t cached_occupancy(OccupancyCache *cache, const void *func, int block, size_t smem,
                             int *blocks_per_sm) {
  return cache->occupancy(func, block, smem, blocks_per_sm);
}

}  // namespace fnorm
