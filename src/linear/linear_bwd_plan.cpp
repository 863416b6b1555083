/* SPDX-License-Identifier: Apache-2.0 */
// Fully-connected backward planning: the workspace layout
// [align slack][cuBLASLt][dz][partial column sums] (for n = 1 the partial
// region also holds launch_linear_bwd_n1's sums).
#include <algorithm>

#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {

BwdLayout bwd_layout(const LinearProblem &p, bool chained, int sm_count) {
  BwdLayout l;
  // No row or no column of dz: every output is empty or 0 (no scratch).
  if (p.m == 0 || p.n == 0) return l;
  const LinearAct act = act_of(p.epilogue);
  // k = 0: only db, the column sums of dz (no dz region, no GEMM).
  const bool inner = p.k != 0;
  // Every size here comes from dy's [m, n] (dz, bias partials) or x's k.
  auto bytes = [](size_t a, size_t b, size_t c, const char *arg) {
    return checked_align_up(checked_mul(checked_mul(a, b, arg), c, arg), kRegionAlign, arg);
  };
  l.dz_offset = inner ? kCublasWorkspace : 0;
  const size_t dz = act != LinearAct::None && inner
                        ? bytes(static_cast<size_t>(p.m), static_cast<size_t>(p.n), dtype_size(p.dtype), "dy_desc")
                        : 0;
  l.partial_offset = checked_add(l.dz_offset, dz, "dy_desc");
  size_t partial = 0;
  if (has_bias(p.epilogue)) {
    l.splits_n = linear_colsum_splits(p.m, p.n, sm_count);
    partial = std::max(partial, bytes(static_cast<size_t>(l.splits_n), static_cast<size_t>(p.n), sizeof(float), "dy_desc"));
  }
  if (chained && inner) {
    l.splits_k = linear_colsum_splits(p.m, p.k, sm_count);
    partial = std::max(partial, bytes(static_cast<size_t>(l.splits_k), static_cast<size_t>(p.k), sizeof(float), "x_desc"));
  }
  if (p.n == 1 && inner) {
    // launch_linear_bwd_n1's partial sums of dw and db (k + 1 columns).
    l.splits_n1 = linear_n1_splits(p.m, p.k, sm_count);
    const size_t cols = checked_add(static_cast<size_t>(p.k), 1, "x_desc");
    partial = std::max(partial, bytes(static_cast<size_t>(l.splits_n1), cols, sizeof(float), "x_desc"));
  }
  l.bytes = checked_add(checked_add(kAlignSlack, l.partial_offset, "dy_desc"), partial, "dy_desc");
  return l;
}

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
