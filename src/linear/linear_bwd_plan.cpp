// Fully-connected backward planning: the workspace layout
// [align slack][cuBLASLt][dz][partial column sums].
#include <algorithm>

#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {

BwdLayout bwd_layout(const LinearProblem &p, bool chained, int sm_count) {
  BwdLayout l;
  const LinearAct act = act_of(p.desc->epilogue);
  l.dz_offset = kCublasWorkspace;
  const size_t dz = act != LinearAct::None
                        ? align_up(static_cast<size_t>(p.m) * static_cast<size_t>(p.n) * dtype_size(p.dtype), 256)
                        : 0;
  l.partial_offset = l.dz_offset + dz;
  size_t partial = 0;
  if (has_bias(p.desc->epilogue)) {
    l.splits_n = linear_colsum_splits(p.m, p.n, sm_count);
    partial = std::max(partial, static_cast<size_t>(l.splits_n) * static_cast<size_t>(p.n) * sizeof(float));
  }
  if (chained) {
    l.splits_k = linear_colsum_splits(p.m, p.k, sm_count);
    partial = std::max(partial, static_cast<size_t>(l.splits_k) * static_cast<size_t>(p.k) * sizeof(float));
  }
  l.bytes = kAlignSlack + l.partial_offset + align_up(partial, 256);
  return l;
}

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
