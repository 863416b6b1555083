/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm launch parameters and dispatch-table types, shared by the host
// runtime (plain C++) and the generated kernel instantiations. No device code.
//
// Every BatchNorm input is viewed as a packed row-major matrix [rows, width]
// whose column j belongs to channel (j / group):
//   channels-last ([N, C], NHWC, NDHWC): rows = N * spatial, width = C, group = 1
//   channels-first ([N, C, L], NCHW, NCDHW): rows = N, width = C * S, group = S
// so element e of the tensor (in memory order) has channel (e / group) % C.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "fusednorm.h"
#include "core/launch.hpp"

namespace fnorm {

struct BnShape {
  int64_t rows = 0;
  int64_t width = 0;
  int64_t group = 1;
  int64_t channels = 0;
  int64_t elements() const { return rows * width; }
};

// The two reduction passes (forward statistics, backward gradient sums) write
// per-split partials that bn_finalize_* combine per channel.
//   Columns kernel: each thread owns PACK columns and walks rows; partials are
//     [splits][width]; a channel combines `group` columns of every split.
//   Segments kernel (channels-first, long spatial runs): one block per
//     (channel, split of the channel's rows*group elements); partials are
//     [splits][channels].
enum class BnReduceKind : int { Columns = 0, Segments = 1 };

struct BnReduceParams {
  BnShape shape;
  const void *x = nullptr;
  const void *dy = nullptr;          // backward
  const uint32_t *mask = nullptr;    // backward with RELU / ADD_RELU: 1 bit per element
  const float *mean = nullptr;       // backward: saved mean per channel
  // The two per-channel moments a pass reduces (named for both passes):
  float *part_moment1 = nullptr;           // forward: mean; backward: sum of dy
  float *part_moment2 = nullptr;           // forward: M2;   backward: sum of dy * (x - mean)
  // The splits of the launch shape (BnReduceShape) and their length,
  // Columns: rows; Segments: elements (a multiple of 8).
  int64_t split_len = 0;
  int splits = 0;
};

// A reduction's launch shape: grid (grid_x, splits); Columns: column tiles
// of 2^ncp_log2 packs; Segments: one block column per channel.
struct BnReduceShape {
  int64_t grid_x = 0;
  int64_t split_len = 0;
  int splits = 0;
  int ncp_log2 = 0;
};

// Elementwise passes over elements [begin, end) in memory order.
// Assumptions: begin is a multiple of 32 * PACK (mask words are never shared
// between launches); end - begin is a multiple of PACK; pointers are aligned
// to PACK elements.
//   forward:  v = (x - mean[c]) * xmu_scale[c] + shift[c]  (+ z), relu, y; mask bit = (y > 0)
//   backward: g = mask ? dy : 0 (dz = g);
//             dx = g * dy_scale[c] + (x - mean[c]) * xmu_scale[c] + shift[c]
struct BnApplyParams {
  BnShape shape;
  const void *x = nullptr;
  const void *z = nullptr;       // forward ADD_RELU
  void *y = nullptr;             // forward
  const void *dy = nullptr;      // backward
  void *dx = nullptr;            // backward
  void *dz = nullptr;            // backward ADD_RELU (optional)
  uint32_t *mask_out = nullptr;  // forward, training with RELU / ADD_RELU
  const uint32_t *mask_in = nullptr;  // backward with RELU / ADD_RELU
  const float *mean = nullptr;
  const float *xmu_scale = nullptr;  // factor of (x - mean): gamma * invstd forward
  const float *shift = nullptr;      // added last: beta forward
  const float *dy_scale = nullptr;   // backward: factor of the masked dy
  int64_t begin = 0;
  int64_t end = 0;
  int epilogue = 0;  // fnorm_bn_epilogue_t
  int64_t *num_batches_tracked = nullptr;  // forward training: += 1 by one thread
};

struct BnPersistParams;
// The one-launch kernels: none (the three launches), the one-wave kernel
// (bn_persistent.cuh: the tensor in registers) or the streaming kernel
// (bn_stream.cuh).
enum class BnOneLaunch : int32_t { None = 0, OneWave = 1, Stream = 2 };

// The streaming kernel's layout (bn_stream.cuh says what each part is),
// fixed by the plan and passed to the kernel as is.
struct BnStreamGrid {
  int64_t slabs_per_block = 0;
  int keep_smem = 0;         // packs per thread and tensor kept in shared memory
  bool evict_first = false;  // there is a streamed part
};

// The one-launch shape of a training pass, fixed by the plan: which kernel
// (if any), its co-resident grid, its combine form and its layout.
struct BnPersistShape {
  BnOneLaunch kernel = BnOneLaunch::None;
  bool gather = false;     // the combine's form (bn_persistent.cuh)
  int64_t blocks = 0;      // all co-resident at blocks_per_sm
  size_t smem = 0;         // dynamic shared memory bytes (streaming: the kept packs)
  int blocks_per_sm = 0;   // the kernel's occupancy at that smem
  int ncp_log2 = 0;        // one-wave: column packs per block tile (log2)
  int tiles = 1;           // one-wave: column tiles (blocks = tiles * blocks per tile)
  int k = 0;               // one-wave: packs per thread (<= kBnPersistK)
  BnStreamGrid stream;     // streaming
};

// Each kernel of an instance: `shape` (what the plan asks once, from the
// kernel's occupancy) and `launch` (enqueues with that shape).
struct BnReduceFns {
  cudaError_t (*shape)(const BnShape &, int max_splits, const DeviceContext &, BnReduceShape *);
  cudaError_t (*launch)(const BnReduceParams &, const BnReduceShape &, cudaStream_t);
};
struct BnApplyFns {
  // The shape of a pass over `elements` elements in the instance's packs.
  cudaError_t (*shape)(const BnShape &, int64_t elements, const DeviceContext &, LaunchShape *);
  cudaError_t (*launch)(const BnApplyParams &, const LaunchShape &, cudaStream_t);
};
// The tuning knobs the one-launch shapes read (core/tuning.hpp).
struct BnPersistTuning {
  bool gather_all = false;  // FNORM_BN_PERSIST_GATHER_ALL
  int onewave_tile = 0;     // FNORM_BN_ONEWAVE_TILE (0: the planner's tile)
  int onewave_k = 0;        // FNORM_BN_ONEWAVE_K (0: the planner's packs per thread)
};
struct BnPersistFns {
  cudaError_t (*shape)(const BnPersistParams &, const BnPersistTuning &, const DeviceContext &, BnPersistShape *);
  // *launched: whether it ran (a cooperative launch the device refuses
  // leaves the general path to the caller).
  cudaError_t (*launch)(const BnPersistParams &, const BnPersistShape &, cudaStream_t, bool *launched);
};

struct BnInstance {
  fnorm_dtype_t dtype;
  int pack;
  BnReduceFns stats_columns;
  BnReduceFns stats_segments;
  BnReduceFns grads_columns;
  BnReduceFns grads_segments;
  BnApplyFns forward;
  BnApplyFns backward;
  BnPersistFns persist_forward;
  BnPersistFns persist_backward;
  const char *name;
};

extern const BnInstance kBnInstances[];
extern const size_t kBnInstanceCount;

// Per-channel combination of the partials (batchnorm/bn_finalize.cu).
struct BnFinalizeParams {
  int64_t channels = 0;
  int64_t group = 1;        // partial entries per channel per split
  int64_t part_width = 0;   // floats per partial row
  int64_t split_len = 0;
  // Values behind split j's partial entry: min(split_len, domain - j * split_len),
  // domain = rows (Columns) or rows * group (Segments).
  int64_t domain = 0;
  double count = 0;  // values per channel (rows * group)
  int splits = 0;
  const float *part_moment1 = nullptr;
  const float *part_moment2 = nullptr;
  // forward
  double eps = 1e-5;
  double factor = 0.1;       // running-average factor (EXPONENTIAL)
  bool cumulative = false;   // factor = 1 / (num_batches_tracked + 1)
  const int64_t *num_batches_tracked = nullptr;
  const float *gamma = nullptr;
  const float *beta = nullptr;
  float *running_mean = nullptr;
  float *running_var = nullptr;
  float *saved_mean = nullptr;
  float *saved_invstd = nullptr;
  float *mean = nullptr;   // workspace coefficients for the apply pass
  float *xmu_scale = nullptr;  // (BnApplyParams says what each scales or adds)
  float *shift = nullptr;
  float *dy_scale = nullptr;   // backward only
  // backward
  const float *in_mean = nullptr;
  const float *in_invstd = nullptr;
  float *dgamma = nullptr;
  float *dbeta = nullptr;
  // SyncBatchNorm: this rank's per-channel triple for the all-reduce
  // (forward: n, n * mean, M2 + n * mean^2; backward: n, sum_dy, sum_dy_xmu),
  // then the all-reduced triples.
  double *sync_local = nullptr;
  const double *sync_global = nullptr;
  bool global_weight_grads = false;
};

// The one-launch paths (batchnorm/bn_persistent.cuh, bn_stream.cuh) for
// channels-last problems: training forward (x, z -> y, mask_out) or backward
// (x, dy, mask_in -> dx, dz), with the per-channel end in f (its coefficients
// go through the workspace: f.mean, f.xmu_scale, f.shift, backward
// f.dy_scale).
struct BnPersistParams {
  BnShape shape;
  const void *x = nullptr;
  const void *z = nullptr;
  void *y = nullptr;
  const void *dy = nullptr;
  void *dx = nullptr;
  void *dz = nullptr;
  uint32_t *mask_out = nullptr;
  const uint32_t *mask_in = nullptr;
  float *part_moment1 = nullptr;  // [max_blocks][width] per-block sums
  float *part_moment2 = nullptr;
  int64_t max_blocks = 0;
  int epilogue = 0;
  int64_t *num_batches_tracked = nullptr;
  // The owner combine form (bn_persistent.cuh) passes the coefficients
  // through f's workspace arrays (f.mean ... f.dy_scale must be set).
  BnFinalizeParams f;
};

cudaError_t launch_bn_finalize_fwd(const BnFinalizeParams &p, cudaStream_t stream);
cudaError_t launch_bn_finalize_bwd(const BnFinalizeParams &p, cudaStream_t stream);
// SyncBatchNorm: the outputs from the all-reduced triples (p.sync_global).
cudaError_t launch_bn_finalize_fwd_sync(const BnFinalizeParams &p, cudaStream_t stream);
cudaError_t launch_bn_finalize_bwd_sync(const BnFinalizeParams &p, cudaStream_t stream);
// Inference: mean = running_mean, scale = gamma * rsqrt(running_var + eps), shift = beta.
cudaError_t launch_bn_infer_coef(const BnFinalizeParams &p, cudaStream_t stream);
// p[0..n) = value (the cuDNN engine's stand-in gamma / beta).
cudaError_t launch_bn_fill(float *p, int64_t n, float value, cudaStream_t stream);
// *counter += 1 (num_batches_tracked under the cuDNN engine).
cudaError_t launch_bn_count(int64_t *counter, cudaStream_t stream);

}  // namespace fnorm
