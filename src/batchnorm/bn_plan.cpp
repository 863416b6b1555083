// BatchNorm planning: which engine runs a call, and for the native engine
// the reduction kind, splits and workspace layout (NativePlan). The size
// queries and the launches both ask here, so they cannot disagree.
#include <algorithm>
#include <string>

#include "batchnorm/batchnorm.hpp"

namespace fnorm {
namespace {

constexpr size_t kAlign = 256;  // every workspace region starts at a multiple of this

// Channels-first runs at least this long get one block per (channel, split);
// shorter runs are reduced as columns of the [N, C * S] matrix.
constexpr int64_t kSegmentMinGroup = 512;
constexpr int64_t kMaxGridY = 65535;

}  // namespace

// Depends on the shape and the device only (never on pointer alignment or
// occupancy), so the size query and the launch agree. The reductions run one
// wave of resident blocks (at most max_threads_per_sm / 256 per SM) split
// over the column tiles (Columns) or channels (Segments).
NativePlan plan_native(const BnView &v, const DeviceInfo &dev, BnPass pass, bool sync) {
  NativePlan p;
  const char *arg = "x_desc";  // every size here comes from x's dimensions
  const BnShape &s = v.shape;
  const int64_t most_blocks = static_cast<int64_t>(std::max(dev.sm_count, 1)) *
                              std::max(dev.max_threads_per_sm / 256, 1);
  size_t off = 0;
  if (pass != BnPass::FwdInfer) {
    int64_t splits = 0;
    if (s.group >= kSegmentMinGroup) {
      p.kind = BnReduceKind::Segments;
      p.domain = s.rows * s.group;
      p.part_width = s.channels;
      p.group_entries = 1;
      splits = std::min(ceil_div(most_blocks, s.channels), ceil_div(p.domain, 8));
    } else {
      p.kind = BnReduceKind::Columns;
      p.domain = s.rows;
      p.part_width = s.width;
      p.group_entries = s.group;
      // The fewest column tiles any pack gives: the widest pack's.
      const int64_t min_tiles = ceil_div(s.width, 32 * (kMaxPackBytes / static_cast<int64_t>(dtype_size(v.dtype))));
      splits = std::min(ceil_div(most_blocks, min_tiles), s.rows);
    }
    p.max_splits = static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxGridY));
    const size_t part = checked_align_up(
        checked_mul(checked_mul(static_cast<size_t>(p.max_splits), static_cast<size_t>(p.part_width), arg),
                    sizeof(float), arg),
        kAlign, arg);
    p.off_moment1 = off;
    p.off_moment2 = part;
    off = checked_mul(2, part, arg);
  }
  const size_t vec = checked_align_up(v.vec_bytes, kAlign, arg);
  p.off_mean = off;
  p.off_xmu_scale = checked_add(off, vec, arg);
  p.off_shift = checked_add(p.off_xmu_scale, vec, arg);
  p.off_dy_scale = checked_add(p.off_shift, vec, arg);
  p.total = pass == BnPass::Bwd ? checked_add(p.off_dy_scale, vec, arg) : p.off_dy_scale;
  if (sync && pass != BnPass::FwdInfer) {  // the all-reduced per-channel triples
    p.off_sync = p.total;
    const size_t triples = checked_mul(static_cast<size_t>(s.channels), 3 * sizeof(double), arg);
    p.total = checked_add(p.total, checked_align_up(triples, kAlign, arg), arg);
  }
  return p;
}

// The engine a call runs on. AUTO: see fnorm_batchnorm_desc_set_engine.
fnorm_bn_engine_t resolve_engine(fnorm_handle *h, const BnCall &c) {
  if (c.desc->engine != FNORM_BN_ENGINE_CUDNN) return FNORM_BN_ENGINE_NATIVE;
  FNORM_REQUIRE(c.desc->comm == nullptr || c.pass == BnPass::FwdInfer, FNORM_STATUS_NOT_SUPPORTED,
                "SyncBatchNorm (a communicator is attached) runs on the NATIVE engine only");
  FNORM_REQUIRE(cudnn_bn_built(), FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "the CUDNN engine was left out of this build (cuDNN not found; meson option 'cudnn')");
  std::string why;
  FNORM_REQUIRE(cudnn_bn_supports(h, c, &why), FNORM_STATUS_NOT_SUPPORTED,
                "the CUDNN engine does not take this case: %s", why.c_str());
  return FNORM_BN_ENGINE_CUDNN;
}

size_t workspace_for(fnorm_handle *h, const BnCall &c) {
  if (resolve_engine(h, c) == FNORM_BN_ENGINE_CUDNN) return cudnn_bn_workspace_size(h, c);
  return plan_native(c.view, h->info, c.pass, c.desc->comm != nullptr).total;
}

size_t reserve_for(fnorm_handle *h, const BnCall &c) {
  if (resolve_engine(h, c) == FNORM_BN_ENGINE_CUDNN) return cudnn_bn_reserve_size(h, c);
  if (c.desc->epilogue == FNORM_BN_EPILOGUE_NONE) return 0;
  // One bit per element: elements <= 2^63 keep this below 2^61 bytes.
  return static_cast<size_t>(ceil_div(c.view.elements(), 32)) * 4;
}

}  // namespace fnorm
