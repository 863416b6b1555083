/* SPDX-License-Identifier: Apache-2.0 */
// The size of the row engine's backward ring (core/row_ring.cuh), for the
// planners (host) and the launchers alike.
#pragma once

#include <cstddef>

namespace fnorm {

// One stage of the ring at `threads` per block: per thread, npack packs of x
// and of dy and the row's (mean, rstd).
constexpr size_t row_ring_stage_bytes(int threads, int npack, int pack, size_t elem_bytes) {
  return static_cast<size_t>(threads) *
         (2 * static_cast<size_t>(npack) * static_cast<size_t>(pack) * elem_bytes + 2 * sizeof(float));
}

}  // namespace fnorm
