// Launch parameters and the dispatch-table types shared by the host runtime
// (plain C++) and the generated kernel instantiations (CUDA). No device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "fusednorm.h"

namespace fnorm {

class KernelCache;  // per-handle occupancy / attribute cache (runtime/handle.cpp)

// Immutable properties of the handle's device that launchers size grids with.
struct DeviceInfo {
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of dynamic shared memory a block may opt in to
  int max_threads_per_sm = 0;
};

struct LaunchContext {
  DeviceInfo dev;
  KernelCache *cache = nullptr;
  cudaStream_t stream = nullptr;
};

// Occupancy (blocks per SM) of `func` at `block` threads and `smem` dynamic
// bytes, cached per handle. Raises the kernel's dynamic shared memory limit
// first when smem exceeds the 48 KiB default.
cudaError_t cached_occupancy(KernelCache *cache, const void *func, int block, size_t smem,
                             int *blocks_per_sm);

enum class Tier : int {
  Warp = 0,           // a group of 1..32 lanes per row, the row in registers
  BlockSmem = 1,      // one block per row, the row cached in shared memory
  BlockUncached = 2,  // one block per row, x read twice (second time mostly from L2)
  BlockRegisters = 3, // one block per row, the row in registers
};

// Assumptions: x/y/gamma/beta are aligned to pack * sizeof(T); cols and both
// row strides are multiples of the pack; rows, cols >= 1. The runtime checks
// all of it before choosing an instance.
struct LayerNormFwdParams {
  const void *x = nullptr;
  void *y = nullptr;
  const void *gamma = nullptr;  // optional
  const void *beta = nullptr;   // optional
  float *mean = nullptr;        // optional, rows elements
  float *rstd = nullptr;        // optional, rows elements
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_row_stride = 0;  // elements
  int64_t y_row_stride = 0;  // elements
  float eps = 0.f;
  int width_log2 = 0;     // warp tier: log2 of the lanes that share a row
  int block_threads = 0;  // block-register tier: threads per block (a multiple of 32)
};

using LayerNormFwdLaunchFn = cudaError_t (*)(const LayerNormFwdParams &, const LaunchContext &);

struct LayerNormFwdInstance {
  fnorm_dtype_t dtype;
  int pack;
  Tier tier;
  int npack;
  LayerNormFwdLaunchFn launch;
  const char *name;
};

// The generated dispatch table (build directory: dispatch_table.cpp).
extern const LayerNormFwdInstance kLayerNormFwdInstances[];
extern const size_t kLayerNormFwdInstanceCount;

}  // namespace fnorm
