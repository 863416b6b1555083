/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm planning: the engine a call runs on (chosen here, once per
// description and pointer class, never in the launch) and that engine's
// plan; the native engine's workspace layout (NativeLayout); the size
// queries, which answer from the same functions.
#include <algorithm>
#include <string>

#include "batchnorm/batchnorm.hpp"

namespace fnorm {
namespace {


// Channels-first runs at least this long get one block per (channel, split);
// shorter runs are reduced as columns of the [N, C * S] matrix.
constexpr int64_t kSegmentMinGroup = 512;
constexpr int64_t kMaxGridY = 65535;

}  // namespace

BnReduceKind bn_reduce_kind(const BnShape &s) {
  return s.group >= kSegmentMinGroup ? BnReduceKind::Segments : BnReduceKind::Columns;
}

// Depends on the shape and the device only (never on pointer alignment or
// occupancy), so the size query and the launch agree. The reductions run one
// wave of resident blocks (at most max_threads_per_sm / 256 per SM) split
// over the column tiles (Columns) or channels (Segments).
NativeLayout native_layout(const BnProblem &v, const DeviceInfo &dev) {
  const BnPass pass = v.pass;
  const bool sync = v.sync != 0;
  NativeLayout p;
  const char *arg = "x_desc";  // every size here comes from x's dimensions
  const BnShape &s = v.shape;
  const int64_t most_blocks = static_cast<int64_t>(std::max(dev.sm_count, 1)) *
                              std::max(dev.max_threads_per_sm / 256, 1);
  size_t off = 0;
  if (pass != BnPass::FwdInfer) {
    int64_t splits = 0;
    if (bn_reduce_kind(s) == BnReduceKind::Segments) {
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
        kRegionAlign, arg);
    p.off_moment1 = off;
    p.off_moment2 = part;
    off = checked_mul(2, part, arg);
  }
  const size_t vec = checked_align_up(v.vec_bytes, kRegionAlign, arg);
  p.off_mean = off;
  p.off_xmu_scale = checked_add(off, vec, arg);
  p.off_shift = checked_add(p.off_xmu_scale, vec, arg);
  p.off_dy_scale = checked_add(p.off_shift, vec, arg);
  p.total = pass == BnPass::Bwd ? checked_add(p.off_dy_scale, vec, arg) : p.off_dy_scale;
  if (sync && pass != BnPass::FwdInfer) {  // the all-reduced per-channel triples
    p.off_sync = p.total;
    const size_t triples = checked_mul(static_cast<size_t>(s.channels), 3 * sizeof(double), arg);
    p.total = checked_add(p.total, checked_align_up(triples, kRegionAlign, arg), arg);
  }
  return p;
}

// ---- AUTO -------------------------------------------------------------------
// AUTO's rule: cuDNN's persistent NHWC kernels (fp16/bf16, training, no
// epilogue) for C = 64 with spatial dimensions, from 1 MiB to 2x the L2.
// Measured on the H200 (60 MiB L2, 132 SMs; 2026-11-22, cuDNN 9 as shipped
// with PyTorch 2.11, bench/ab_batchnorm.py, cuDNN / NATIVE time, forward and
// backward, medians of 3 interleaved rounds within 1%):
//   fp16 [N, 64, 56, 56], N = 4 .. 256 (1.6 .. 103 MB): 0.79 0.95, 0.88 1.01,
//     0.76 0.78, 0.60 0.84, 0.81 0.81, 0.78 0.87, 0.83 0.90 (N = 128),
//     0.83 0.92, 0.85 0.92, 0.83 0.93, 0.87 0.94 (N = 256); bf16 N = 16 .. 256
//     0.75 .. 0.84 forward, 0.82 .. 0.95 backward.
//   Other channel counts: [128, 32, 56, 56] 1.14 1.12; [128, 96, 56, 56]
//     1.16 1.21; [128, 128, 56, 56] 0.94 1.00; [128, 128, 28, 28] 1.06 0.92;
//     [128, 256, 56, 56] 1.02 1.05 (bf16 0.91 1.05); [128, 1024, 14, 14] 0.98
//     1.21; [128, 2048, 7, 7] 0.91 0.94; [32768, 256] 1.04 1.28;
//     [126000, 16] 1.83 1.91; fp32 (cuDNN's plain spatial mode) 23 .. 585.
// The H100 (50 MiB L2; bench/results/h100.md at 2122cfe) agrees where it was
// measured: [128, 64, 56, 56] fp16 0.83 / 0.91, [128, 256, 56, 56] 1.01 / 1.04.
// So the crossover is not one of size (nor of fitting the L2: C = 64 wins at
// 1.6x the L2 too): cuDNN's time per byte depends on C (C = 32 and 96 run as
// if channel tiles of 64 were padded), while NATIVE's is about the same for
// every C. Only C = 64
// wins at every size measured, forward and backward; elsewhere the two are
// within a few percent either way or NATIVE wins, so AUTO keeps NATIVE.
// Bounds: no size below 1.6 MB was measured (below 1 MiB launch and host
// overhead dominate, and cuDNN's path describes its tensors on every call);
// the largest measured was 103 MB = 1.6x the L2, still 0.87 / 0.94, and
// above 2x the L2 (of whatever GPU this is: the H100 has 50 MiB) AUTO keeps
// NATIVE rather than extrapolate.
bool bn_auto_prefers_cudnn(const BnProblem &v, BnPass pass, int64_t l2_bytes) {
  if (pass == BnPass::FwdInfer || !v.channels_last || v.dtype == FNORM_DTYPE_FLOAT32) return false;
  if (v.c != 64 || v.spatial == 1 || l2_bytes <= 0) return false;
  const int64_t bytes = static_cast<int64_t>(v.bytes);
  return bytes >= (int64_t{1} << 20) && bytes <= 2 * l2_bytes;
}

// The cases AUTO may send to cuDNN, from the shape and descriptor alone:
// training, no epilogue (cuDNN's fused ReLU backward reads y, which AUTO
// callers need not pass, and the reserve formats differ), no communicator,
// EXPONENTIAL averaging (cuDNN takes the factor on the host), and what the
// rule above picks.
bool bn_auto_candidate(const fnorm_handle *h, const BnProblem &pb) {
  return pb.engine == FNORM_BN_ENGINE_AUTO && pb.pass != BnPass::FwdInfer && pb.epilogue == FNORM_BN_EPILOGUE_NONE &&
         !pb.sync && pb.average == FNORM_BN_AVERAGE_EXPONENTIAL && cudnn_bn_built() &&
         bn_auto_prefers_cudnn(pb, pb.pass, h->info.l2_bytes);
}

size_t native_reserve_bytes(const BnProblem &v) {
  // Inference keeps nothing for a backward: it takes no reserve space.
  if (v.pass == BnPass::FwdInfer || !v.relu()) return 0;
  // One bit per element: elements <= 2^63 keep this below 2^61 bytes.
  return static_cast<size_t>(ceil_div(v.elements(), 32)) * 4;
}

namespace {

// The launch's pointers: cuDNN needs 16-byte aligned tensors (a misaligned
// one faulted, cuDNN 9.14) and AUTO asks the same of the per-channel vectors
// and the workspace; outputs over inputs (in place) stay NATIVE, whose
// kernels are written for it.
bool auto_pointers_ok(const BnProblem &pb, const BnArgs &a) {
  if (pb.local_empty || a.x == nullptr) return false;
  if (pb.pass == BnPass::FwdTrain) {
    if (a.y == nullptr || a.y == a.x) return false;
  } else if (a.dy == nullptr || a.dx == nullptr || a.dx == a.dy || a.dx == a.x) {
    return false;
  }
  return all_aligned({a.x, a.y, a.dy, a.dx, a.gamma, a.beta, a.running_mean, a.running_var, a.saved_mean,
                      a.saved_invstd, a.saved_mean_in, a.saved_invstd_in, a.dgamma, a.dbeta, a.workspace},
                     16);
}

// CUDNN asked for by name: refusals are NOT_SUPPORTED with the reason.
const CudnnBnPlan &require_cudnn(fnorm_handle *h, const BnProblem &pb) {
  FNORM_REQUIRE(!pb.sync, FNORM_STATUS_NOT_SUPPORTED,
                "SyncBatchNorm (a communicator is attached) runs on the NATIVE engine only");
  FNORM_REQUIRE(cudnn_bn_built(), FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "the CUDNN engine was left out of this build (cuDNN not found; meson option 'cudnn')");
  const CudnnBnPlan &p = cudnn_bn_plan(h, pb);
  std::string why;
  FNORM_REQUIRE(cudnn_bn_takes(p, &why), FNORM_STATUS_NOT_SUPPORTED, "the CUDNN engine does not take this case: %s",
                why.c_str());
  return p;
}

// The cuDNN plan AUTO may run: cuDNN takes the case with a 0-byte reserve
// (so the forward and the backward of a step may run on different engines).
// `create`: make the cuDNN state if it does not exist. A failure keeps
// NATIVE.
const CudnnBnPlan *auto_cudnn_plan(fnorm_handle *h, const BnProblem &pb, bool create) {
  try {
    const CudnnBnPlan *p = create ? &cudnn_bn_plan(h, pb) : cudnn_bn_plan_if_ready(h, pb);
    return p != nullptr && cudnn_bn_takes(*p, nullptr) && cudnn_bn_reserve(*p) == 0 ? p : nullptr;
  } catch (const Error &) {
    return nullptr;
  }
}

// The engine of a call and what it needs of the caller's memory: chosen
// from the description and pointer class, the same for sizes() and plan().
struct EngineChoice {
  fnorm_bn_engine_t engine = FNORM_BN_ENGINE_NATIVE;
  const CudnnBnPlan *cudnn = nullptr;
  Sizes sizes;
};

EngineChoice choose_engine(fnorm_handle *h, const BnProblem &pb, const BnPtrs &ptrs) {
  EngineChoice e;
  const CudnnBnPlan *cudnn = nullptr;
  if (pb.engine == FNORM_BN_ENGINE_CUDNN) {
    cudnn = &require_cudnn(h, pb);
  } else if (ptrs.auto_cudnn) {
    // AUTO (else NATIVE, silently: both compute the same function, and with
    // a 0-byte reserve either engine's backward reads the other's saved
    // statistics).
    cudnn = auto_cudnn_plan(h, pb, true);
    if (cudnn != nullptr && ptrs.workspace_bytes < cudnn_bn_workspace(*cudnn)) cudnn = nullptr;
  }
  if (cudnn != nullptr) {
    e.engine = FNORM_BN_ENGINE_CUDNN;
    e.cudnn = cudnn;
    e.sizes = {cudnn_bn_workspace(*cudnn), cudnn_bn_reserve(*cudnn)};
  } else {
    e.sizes = {native_layout(pb, h->info).total, native_reserve_bytes(pb)};
  }
  return e;
}

// A call with nothing to size: no channels, or (unless SyncBatchNorm's
// workspace, through which a rank without samples still takes part in the
// all-reduce) no elements.
bool nothing_to_size(const BnProblem &pb, bool reserve) {
  return pb.c == 0 || (pb.elements() == 0 && (!pb.sync || reserve));
}

}  // namespace

template <BnPass P>
BnPtrs BnOp<P>::pointer_class(fnorm_handle *h, const BnProblem &pb, const BnArgs &a) {
  BnPtrs p;
  p.packs = bn_packs(pb, a);
  // AUTO: cuDNN where the rule says it is faster, NATIVE's one-wave kernel
  // does not take the pass (it holds the tensor on chip and runs one launch:
  // H100, fp16 NATIVE vs cuDNN us, forward / backward: [4, 64, 56, 56] 9.3
  // vs 9.9 / 9.1 vs 11.3, [16, 64, 56, 56] 13.8 vs 16.9 / 16.3 vs 18.5,
  // [32, 64, 56, 56] forward 20.6 vs 22.1; its backward, three launches,
  // 32.0 vs 27.2 stays cuDNN's), and this call's pointers and stream let it
  // run (a capture that would have to create the cuDNN state keeps NATIVE:
  // that plan is keyed by auto_cudnn = 0).
  if (pb.engine == FNORM_BN_ENGINE_AUTO && bn_auto_candidate(h, pb) && auto_pointers_ok(pb, a) &&
      !bn_native_one_wave(h, pb, p.packs) && cudnn_bn_auto_state(h, a.stream)) {
    p.auto_cudnn = 1;
    p.workspace_bytes = a.workspace_bytes;
  }
  return p;
}

template <BnPass P>
Sizes BnOp<P>::sizes(fnorm_handle *h, const BnProblem &pb, const BnPtrs &ptrs) {
  return choose_engine(h, pb, ptrs).sizes;
}

template <BnPass P>
BnPlan BnOp<P>::plan(fnorm_handle *h, const BnProblem &pb, const BnPtrs &ptrs) {
  const EngineChoice e = choose_engine(h, pb, ptrs);
  BnPlan plan;
  plan.engine = e.engine;
  plan.sizes = e.sizes;
  plan.cudnn = e.cudnn;
  if (e.engine == FNORM_BN_ENGINE_NATIVE) plan.native = plan_native(h, pb, ptrs.packs);
  return plan;
}

// What the cuDNN engine asks of the call's pointers.
template <BnPass P>
void BnOp<P>::check_plan(const BnPlan &plan, const BnProblem &pb, const BnArgs &a) {
  if (plan.engine == FNORM_BN_ENGINE_CUDNN) cudnn_bn_check(*plan.cudnn, pb, a);
}

// The descriptor's engine; AUTO: the most either engine needs (cuDNN's part
// once its state exists; a launch given less runs NATIVE).
template <BnPass P>
size_t BnOp<P>::workspace_size(fnorm_handle *h, const BnProblem &pb) {
  if (nothing_to_size(pb, false)) return 0;
  if (pb.engine == FNORM_BN_ENGINE_CUDNN) return cudnn_bn_workspace(require_cudnn(h, pb));
  size_t ws = native_layout(pb, h->info).total;
  if (pb.engine == FNORM_BN_ENGINE_AUTO && bn_auto_candidate(h, pb))
    if (const CudnnBnPlan *p = auto_cudnn_plan(h, pb, false)) ws = std::max(ws, cudnn_bn_workspace(*p));
  return ws;
}

// (AUTO runs cuDNN only where cuDNN's reserve is 0 and the epilogue NONE.)
template <BnPass P>
size_t BnOp<P>::reserve_size(fnorm_handle *h, const BnProblem &pb) {
  if (nothing_to_size(pb, true) || pb.pass == BnPass::FwdInfer) return 0;
  if (pb.engine == FNORM_BN_ENGINE_CUDNN) return cudnn_bn_reserve(require_cudnn(h, pb));
  return native_reserve_bytes(pb);
}

#define FNORM_BN_PLAN_STEPS(P)                                                                  \
  template BnPtrs BnOp<P>::pointer_class(fnorm_handle *, const BnProblem &, const BnArgs &);     \
  template Sizes BnOp<P>::sizes(fnorm_handle *, const BnProblem &, const BnPtrs &);               \
  template BnPlan BnOp<P>::plan(fnorm_handle *, const BnProblem &, const BnPtrs &);               \
  template void BnOp<P>::check_plan(const BnPlan &, const BnProblem &, const BnArgs &);            \
  template size_t BnOp<P>::workspace_size(fnorm_handle *, const BnProblem &);                      \
  template size_t BnOp<P>::reserve_size(fnorm_handle *, const BnProblem &);
FNORM_BN_PLAN_STEPS(BnPass::FwdTrain)
FNORM_BN_PLAN_STEPS(BnPass::FwdInfer)
FNORM_BN_PLAN_STEPS(BnPass::Bwd)
#undef FNORM_BN_PLAN_STEPS

}  // namespace fnorm
