/* SPDX-License-Identifier: Apache-2.0 */
// The row engine's pack choice on the host: which generated instance of a
// register tier holds a row. A row-wise op's dispatch table lists instances
// by (dtype, pack, tier, npack: packs per thread); its planner picks the
// pack from the pointers (core/validate.hpp: widest_pack), then the
// instance here.
#pragma once

#include <cstddef>

#include "fusednorm.h"

namespace fnorm {

// The instance of `tier` for (dtype, pack) with the fewest packs per thread
// among those `fits` accepts, or null.
template <class Instance, class TierT, class Fits>
const Instance *fewest_npack(const Instance *table, size_t count, fnorm_dtype_t dtype, int pack, TierT tier,
                             Fits fits) {
  const Instance *best = nullptr;
  for (size_t i = 0; i < count; ++i) {
    const Instance &c = table[i];
    if (c.dtype == dtype && c.pack == pack && c.tier == tier && fits(c.npack) &&
        (best == nullptr || c.npack < best->npack))
      best = &c;
  }
  return best;
}

}  // namespace fnorm
