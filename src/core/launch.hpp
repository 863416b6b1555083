// What a launcher needs besides its parameters: the device's properties, the
// stream, and the per-handle occupancy cache. Shared by the host runtime and
// the device code of every op (no device code here).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace fnorm {

class KernelCache;  // per-handle occupancy cache (core/handle.hpp)

// Immutable properties of the handle's device that planners and launchers
// size grids with.
struct DeviceInfo {
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
  int max_threads_per_sm = 0;
  int cc_major = 0;  // compute capability (thread block clusters from 9)
};

struct LaunchContext {
  DeviceInfo dev;
  KernelCache *cache = nullptr;  // null: no device (host tests); planners skip occupancy
  cudaStream_t stream = nullptr;
};

// Occupancy (blocks per SM) of `func` at `block` threads and `smem` dynamic
// bytes, cached per handle (core/occupancy.cpp). Raises the kernel's dynamic
// shared memory limit first when smem exceeds the 48 KiB default.
cudaError_t cached_occupancy(KernelCache *cache, const void *func, int block, size_t smem,
                             int *blocks_per_sm);

}  // namespace fnorm
