/* SPDX-License-Identifier: Apache-2.0 */
// The row engine's backward ring: each thread copies its columns of the
// rows ahead (cp.async) into dynamic shared memory while it works on the row
// before them, so a row-wise backward keeps its per-column partial sums in
// registers and its loads in flight.
#pragma once

#include "core/device.cuh"
#include "core/row_ring.hpp"

namespace fnorm {

// A thread-private ring of rows in dynamic shared memory: for each of its
// `stages` stages, this thread's NPACK packs of x and of dy (as stored) and
// the row's (mean, rstd) (row_ring_stage_bytes per stage). Layout [stage][x, dy][k][thread] of packs, then
// [stage][thread] of float2: consecutive threads touch consecutive slots (no
// bank conflicts). Each thread reads only what it copied, so the ring needs
// no barriers.
template <typename T, int PACK, int NPACK>
struct RowRing {
  using P = Pack<T, PACK>;
  static_assert(sizeof(P) == PACK * sizeof(T), "packs are dense");
  P *packs;
  float2 *stats;
  int threads;
  __device__ RowRing(unsigned char *smem, int threads_, int stages)
      : packs(reinterpret_cast<P *>(smem)),
        stats(reinterpret_cast<float2 *>(smem + static_cast<size_t>(stages) * threads_ * 2 * NPACK * sizeof(P))),
        threads(threads_) {}
  __device__ __forceinline__ P &slot(int s, int j, int k) const {
    return packs[((s * 2 + j) * NPACK + k) * threads + static_cast<int>(threadIdx.x)];
  }
  __device__ __forceinline__ float2 &stat(int s) const { return stats[s * threads + static_cast<int>(threadIdx.x)]; }

  // Starts copying this thread's share of `row` (pack k at column
  // (k * width + lane) * PACK) into stage s, then commits one group (empty
  // when the row is not active: one group per step keeps the counts uniform).
  // Params: cols, x / x_row_stride, dy / dy_row_stride, mean (read unless
  // rms), rstd.
  template <class Params>
  __device__ __forceinline__ void issue(const Params &p, int64_t row, bool active, int lane, int width,
                                        int s) const {
    if (active) {
      const int64_t packs_per_row = p.cols / PACK;
      const T *x = static_cast<const T *>(p.x) + row * p.x_row_stride;
      const T *dy = static_cast<const T *>(p.dy) + row * p.dy_row_stride;
#pragma unroll
      for (int k = 0; k < NPACK; ++k) {
        const int64_t pk = static_cast<int64_t>(k) * width + lane;
        if (pk < packs_per_row) {
          cp_async<sizeof(P)>(&slot(s, 0, k), x + pk * PACK);
          cp_async<sizeof(P)>(&slot(s, 1, k), dy + pk * PACK);
        }
      }
      if (!p.rms) cp_async<4>(&stat(s).x, p.mean + row);
      cp_async<4>(&stat(s).y, p.rstd + row);
    }
    cp_async_commit();
  }
};

}  // namespace fnorm
