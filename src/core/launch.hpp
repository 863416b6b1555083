/* SPDX-License-Identifier: Apache-2.0 */
// What plans are computed from besides the call's description (the
// device's properties and the occupancy of its kernels), and the shape a
// plan gives each launch. Shared by the host runtime and the launchers of
// every op (no device code here).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace fnorm {

class OccupancyCache;  // per-handle (core/handle.hpp)

// Immutable properties of the handle's device, read once at fnorm_create.
struct DeviceInfo {
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
  int max_threads_per_sm = 0;
  int cc_major = 0;        // compute capability (thread block clusters from 9)
  int64_t l2_bytes = 0;    // L2 cache size; 0: unknown (no device)
  // Peak DRAM bytes per SM per SM clock cycle (memory clock x 2 x bus width
  // over SM count x SM clock); 0: unknown (no device).
  double dram_bytes_per_sm_cycle = 0;
};

// What planning asks of the device: its properties and its kernels'
// occupancy (occupancy null: no device, as in the host tests; planners then
// stop before the steps that need it).
struct DeviceContext {
  DeviceInfo dev;
  OccupancyCache *occupancy = nullptr;
};

// One kernel launch as a plan fixes it: the launch uses these and decides
// nothing.
struct LaunchShape {
  int64_t grid = 0;        // blocks (x)
  int block = 0;           // threads per block
  size_t smem = 0;         // dynamic shared memory bytes
  int blocks_per_sm = 0;   // the kernel's occupancy at block and smem (what the planner chose from)
};

// Occupancy (blocks per SM) of `func` at `block` threads and `smem` dynamic
// bytes, cached per handle (core/occupancy.cpp). Raises the kernel's dynamic
// shared memory limit first when smem exceeds the 48 KiB default, so a
// launch planned with it may use that much.
cudaError_t cached_occupancy(OccupancyCache *cache, const void *func, int block, size_t smem,
                             int *blocks_per_sm);

}  // namespace fnorm
