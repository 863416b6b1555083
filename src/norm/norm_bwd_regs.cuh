/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm backward, the register tiers: Warp (a group of lanes
// per row) and BlockRegisters (a block, or a thread block cluster, per row).
#pragma once

#include "norm/norm_bwd_row.cuh"

namespace fnorm {

constexpr int kBwdWarpBlock = 128;

// Assumptions: blockDim.x == kBwdWarpBlock; dynamic shared memory holds
// norm_bwd_staging_bytes(kBwdWarpBlock, NPACK, PACK, sizeof(T)).
// RMS == p.rms.
template <typename T, int PACK, int NPACK, bool RMS>
__global__ void __launch_bounds__(kBwdWarpBlock) norm_bwd_warp_kernel(NormBwdParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const RowRing<T, PACK, NPACK> st(smem_raw, kBwdWarpBlock, kBwdStages);
  const int width = 1 << p.width_log2;
  const int lane = threadIdx.x & (width - 1);
  const int groups_per_block = kBwdWarpBlock >> p.width_log2;
  const int group = threadIdx.x >> p.width_log2;
  float dg[NPACK][PACK], db[RMS ? 1 : NPACK][PACK];
  zero_accumulators<RMS>(dg, db);
  norm_bwd_rows_staged<T, PACK, NPACK, RMS>(
      p, st, static_cast<int64_t>(blockIdx.x) * groups_per_block,
      static_cast<int64_t>(gridDim.x) * groups_per_block, group, lane, width,
      [width](float2 v) { return group_allreduce<Sum2Op>(v, width); }, dg, db);
  if (p.dgamma_partial == nullptr && p.dbeta_partial == nullptr) return;
  // The block's groups' partial sums, combined in group order, in the
  // staging ring's memory (free now: every copy landed, every thread is past
  // its last read after the barrier; launch_norm_bwd asserts that it fits).
  float *combine = reinterpret_cast<float *>(smem_raw);
  __syncthreads();
  const int64_t cols_covered = static_cast<int64_t>(width) * NPACK * PACK;
  for (int which = 0; which < (RMS ? 1 : 2); ++which) {
    float *out = which == 0 ? p.dgamma_partial : p.dbeta_partial;
    if (out == nullptr) continue;  // uniform
#pragma unroll
    for (int k = 0; k < NPACK; ++k)
#pragma unroll
      for (int i = 0; i < PACK; ++i)
        combine[group * cols_covered + (static_cast<int64_t>(k) * width + lane) * PACK + i] =
            which == 0 ? dg[k][i] : db[RMS ? 0 : k][i];
    __syncthreads();
    for (int64_t c = threadIdx.x; c < p.cols; c += kBwdWarpBlock) {
      float s = 0.f;
      for (int gi = 0; gi < groups_per_block; ++gi) s += combine[gi * cols_covered + c];
      out[static_cast<int64_t>(blockIdx.x) * p.cols + c] = s;
    }
    __syncthreads();
  }
}

// All-reduce of a float2 over a cluster of p.cluster blocks that share a row
// (thread block clusters, sm_90): each block's sum goes to a slot in its
// shared memory, one cluster barrier, then every thread adds the slots of
// all blocks in rank order (the same bits in every block). Two slots
// alternate by row, so a slot is rewritten only after the next row's barrier,
// which every block passes after reading it.
struct ClusterSum2 {
  float2 *scratch;  // 32 entries: block_allreduce's
  float2 *slots;    // 2 entries
  int cluster;
  __device__ __forceinline__ float2 operator()(float2 v, int parity) const {
    v = block_allreduce<Sum2Op>(v, scratch);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster > 1) {
      namespace cg = cooperative_groups;
      cg::cluster_group c = cg::this_cluster();
      if (threadIdx.x == 0) slots[parity] = v;
      c.sync();
      float2 t = make_float2(0.f, 0.f);
      for (int r = 0; r < cluster; ++r) {
        const float2 *peer = c.map_shared_rank(slots + parity, r);
        t.x += peer->x;
        t.y += peer->y;
      }
      v = t;
    }
#endif
    return v;
  }
};

// One row per block, or per cluster of p.cluster blocks (launched as a thread
// block cluster): block r of a cluster holds the lanes r * blockDim.x + tid
// of a row p.cluster * blockDim.x lanes wide, so its columns interleave with
// its peers' at pack granularity. Partial row of a cluster = its index.
// Assumptions: blockDim.x == p.block_threads, a multiple of 32, <= 512;
// p.cols <= p.cluster * blockDim.x * NPACK * PACK; gridDim.x is a multiple
// of p.cluster; dynamic shared memory holds norm_bwd_staging_bytes(blockDim.x, NPACK, PACK, sizeof(T)).
// CLUSTER = false: the plain one-block-per-row kernel (p.cluster == 1),
// compiled apart so that it carries none of the cluster's registers.
// RMS == p.rms.
template <typename T, int PACK, int NPACK, bool CLUSTER, bool RMS>
__global__ void __launch_bounds__(512) norm_bwd_block_kernel(NormBwdParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float2 scratch_storage[32];
  __shared__ float2 cluster_slots[CLUSTER ? 2 : 1];
  const RowRing<T, PACK, NPACK> st(smem_raw, static_cast<int>(blockDim.x), kBwdStages);
  float dg[NPACK][PACK], db[RMS ? 1 : NPACK][PACK];
  zero_accumulators<RMS>(dg, db);
  const int cluster = CLUSTER ? p.cluster : 1;
  const int rank = static_cast<int>(blockIdx.x) % cluster;
  const int64_t group_index = blockIdx.x / cluster;
  const int lane = rank * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
  const int width = cluster * static_cast<int>(blockDim.x);
  const ClusterSum2 reduce{scratch_storage, cluster_slots, cluster};
  int parity = 0;
  if constexpr (CLUSTER) {
    norm_bwd_rows_staged<T, PACK, NPACK, RMS>(
        p, st, group_index, gridDim.x / cluster, 0, lane, width,
        [&](float2 v) {
          v = reduce(v, parity);
          parity ^= 1;
          return v;
        },
        dg, db);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // No block may leave while a peer can still read its slots.
    cooperative_groups::this_cluster().sync();
#endif
  } else {
    norm_bwd_rows_staged<T, PACK, NPACK, RMS>(
        p, st, blockIdx.x, gridDim.x, 0, lane, width,
        [&](float2 v) { return block_allreduce<Sum2Op>(v, scratch_storage); }, dg, db);
  }
  const int64_t packs_per_row = p.cols / PACK;
#pragma unroll
  for (int k = 0; k < NPACK; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * width + lane;
    if (pk >= packs_per_row) continue;
    const int64_t off = group_index * p.cols + pk * PACK;
#pragma unroll
    for (int i = 0; i < PACK; ++i) {
      if (p.dgamma_partial != nullptr) p.dgamma_partial[off + i] = dg[k][i];
      if constexpr (!RMS) {
        if (p.dbeta_partial != nullptr) p.dbeta_partial[off + i] = db[k][i];
      }
    }
  }
}

}  // namespace fnorm
