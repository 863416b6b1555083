/* SPDX-License-Identifier: Apache-2.0 */
// Fully-connected planning. Forward: cuBLASLt's fused epilogue, or its GEMM
// without the activation (or without aux) and our pass beside it where
// that is faster (own_pass), or the plain GEMM and our epilogue kernel where
// cuBLASLt has no fused kernel. Backward: the workspace layout
// [align slack][cuBLASLt][dz][partial column sums] (for n = 1 the partial
// region also holds launch_linear_bwd_n1's sums), then the wgrad GEMM (dw and
// maybe db) and the dgrad GEMM (dx and maybe the producer's derivative).
// Every cuBLASLt heuristic answer comes here, before the first launch, so a
// refused call writes nothing. Our kernels' launches (grid, block, and
// whether they move whole packs) are made here too, from the problem and
// the pointer class.
#include <algorithm>

#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {
namespace {

// A pointer standing in for one of a call's in a GEMM's description: as
// aligned as the call's (alignment_of), never dereferenced. Null when absent.
void *stand_in(uint32_t alignment) { return reinterpret_cast<void *>(static_cast<uintptr_t>(alignment)); }
uint32_t class_of(const void *p) { return p != nullptr ? alignment_of(p) : 0; }
// The class of the workspace's dz region: the workspace aligned to 256
// bytes (aligned_workspace) plus dz_offset (0, or cuBLASLt's 32 MiB).
constexpr uint32_t kDzClass = 256;

// ---- our kernels' launches (linear_kernels.cu's geometry) ----
using namespace linear_geometry;

// Whether a pointer of class `cls` is a multiple of `bytes` (a power of two
// of at most 256): its alignment (alignment_of, capped at 256) reaches it,
// or it is NULL (0, a multiple of anything).
bool aligned(uint32_t cls, size_t bytes) { return cls == 0 || cls >= bytes; }
// The pointer and every row (ld elements of es bytes apart) 16-byte aligned.
bool rows_aligned16(uint32_t cls, int64_t ld, size_t es) { return aligned(cls, 16) && (ld * es) % 16 == 0; }

// The element-wise passes: a block of kColLanes x kRowLanes per kEwTile
// columns of kRowLanes rows; grid.y at most 65535 (the kernels stride over
// more rows).
LinearLaunch ew_launch(int64_t rows, int64_t cols) {
  const int64_t gx = cols / kEwTile + (cols % kEwTile != 0);
  const int64_t gy = std::min<int64_t>(rows / kRowLanes + (rows % kRowLanes != 0), 65535);
  LinearLaunch l;
  l.grid_x = static_cast<uint32_t>(std::max<int64_t>(gx, 1));
  l.grid_y = static_cast<uint32_t>(std::max<int64_t>(gy, 1));
  l.block_x = kColLanes;
  l.block_y = kRowLanes;
  return l;
}

// The forward epilogue: a grid-stride loop; 8192 blocks of 256 threads
// cover the largest device several times over.
LinearLaunch epilogue_launch(int64_t rows, int64_t cols) {
  const int64_t work = rows * ((cols + kFwdGroup - 1) / kFwdGroup);
  LinearLaunch l;
  l.grid_x = static_cast<uint32_t>(std::min<int64_t>((work + 255) / 256, 8192));
  l.block_x = 256;
  return l;
}

// The ReLU mask from y: a thread per mask byte, grid.x over a row's bytes
// in kColLanes; packed: y and its rows 16-byte aligned.
LinearLaunch relu_mask_launch(const LinearProblem &p, uint32_t y) {
  const int64_t row_bytes = linear_aux_ld(LinearAct::Relu, p.n) / 8;
  LinearLaunch l = ew_launch(p.m, 1);
  l.grid_x = static_cast<uint32_t>(row_bytes / kColLanes + (row_bytes % kColLanes != 0));
  l.packed = rows_aligned16(y, p.y.row_stride, dtype_size(p.dtype));
  return l;
}

// y = gelu(z): packed when z, y and their rows are 16-byte aligned.
LinearLaunch gelu_launch(const LinearProblem &p, uint32_t z, int64_t ldz, uint32_t y) {
  const size_t es = dtype_size(p.dtype);
  LinearLaunch l = ew_launch(p.m, p.n);
  l.packed = rows_aligned16(z, ldz, es) && rows_aligned16(y, p.y.row_stride, es);
  return l;
}

// launch_linear_bwd_act over [rows, cols]: the element-wise form (`flat`;
// packed: dy, dz and GELU's aux with 16-byte aligned rows; GELU's aux rows
// are ld = 8k elements apart) or the row-slice tiles (`splits` slices;
// packed: every thread's 4 columns one access: dy, dz (when written) and
// GELU's aux 4-element aligned, their row strides multiples of 4).
LinearLaunch act_launch(fnorm_dtype_t dtype, LinearAct act, bool flat, int64_t rows, int64_t cols, uint32_t dy,
                        int64_t lddy, uint32_t aux, uint32_t dz, int64_t lddz, int splits) {
  const size_t es = dtype_size(dtype);
  if (flat) {
    LinearLaunch l = ew_launch(rows, cols);
    l.packed = rows_aligned16(dy, lddy, es) && rows_aligned16(dz, lddz, es) &&
               (act != LinearAct::Gelu || rows_aligned16(aux, linear_aux_ld(act, cols), es));
    return l;
  }
  LinearLaunch l;
  l.grid_x = static_cast<uint32_t>(cols / kTileCols + (cols % kTileCols != 0));
  l.grid_y = static_cast<uint32_t>(splits);
  l.block_x = kColLanes;
  l.block_y = kRowLanes;
  l.rows_per_split = (rows + splits - 1) / splits;
  const size_t vec = es * kVec;
  l.packed = aligned(dy, vec) && lddy % kVec == 0 && (dz == 0 || (aligned(dz, vec) && lddz % kVec == 0)) &&
             (act != LinearAct::Gelu || aligned(aux, vec));
  return l;
}

// Whether the activation comes from our pass beside a GEMM without it (or
// without aux) rather than from cuBLASLt's epilogue. Measured in one
// process (bench/ab_linear.py, H200, CUDA 13.0, 2026-11-22) at m = 8192,
// (n, k) in (1024, 784), (1024, 1024), (512, 1024), (256, 512), (1, 256),
// us, ours against cuBLASLt's epilogue:
//  - ReLU training, fp32: RELU_AUX_BIAS costs 6-29% over RELU_BIAS, our mask
//    pass 1-3% (271 against 340 at 1024 x 784; 59 against 68 at 256 x 512):
//    ours at every n.
//  - ReLU training, fp16/bf16: RELU_AUX_BIAS is 15-40% slower at n = 1024
//    and n = 1 (30.4 against 34.2 at 1024 x 784), but within 12% at n = 256
//    and 512, where our pass costs more (17.8 against 19.8 at 512 x 1024):
//    ours outside 128 <= n <= 512.
//  - GELU training: our BIAS GEMM into aux and a GELU pass win at n = 1024
//    (fp16 33.5 against 36.2, fp32 287 against 291 at 1024 x 784) and in
//    fp32 at n = 256; GELU_AUX_BIAS wins at fp16 n <= 512 (21.1 against 21.5
//    at 512 x 1024) and at n = 1 (6.5 against 8.0): ours for n > 512, and
//    for fp32 from n = 128.
//  - GELU inference: GELU_BIAS beats BIAS and a pass (fp16 26.9 against
//    32.9, fp32 280 against 285 at 1024 x 784): cuBLASLt's.
bool own_pass(const Tuning &t, const LinearProblem &p, LinearAct act, bool training) {
  if (act == LinearAct::None || (act == LinearAct::Relu && !training)) return false;
  switch (t.linear_fwd_aux) {
    case Tuning::LinearFwdAux::Lt: return false;
    case Tuning::LinearFwdAux::Own: return true;
    case Tuning::LinearFwdAux::Rule: break;
  }
  if (!training) return false;
  const bool fp32 = p.dtype == FNORM_DTYPE_FLOAT32;
  if (act == LinearAct::Relu) return fp32 || p.n < 128 || p.n > 512;
  return p.n > 512 || (fp32 && p.n >= 128);
}

// y^T (n x m) = op(W) (n x k) * x^T (k x m), with cuBLASLt's epilogue for
// the desc's when it has a kernel for it (or with our pass beside it).
LinearFwdPlan plan_fwd(LinearState &s, const Tuning &t, const LinearProblem &p, const LinearBuffers &buf) {
  const fnorm_linear_epilogue_t epi = p.epilogue;
  const LinearAct act = act_of(epi);
  GemmKey k = key_base(p);
  k.transa = p.layout == FNORM_LINEAR_WEIGHT_KN ? CUBLAS_OP_N : CUBLAS_OP_T;
  k.transb = CUBLAS_OP_N;
  k.rows = static_cast<uint64_t>(p.n);
  k.cols = static_cast<uint64_t>(p.m);
  k.inner = static_cast<uint64_t>(p.k);
  k.lda = p.w.row_stride;
  k.ldb = p.x.row_stride;
  k.ldd = p.y.row_stride;
  k.budget = kFwdHeuristicBudget;
  GemmRoles roles;
  roles.a = Operand::W;
  roles.b = Operand::X;
  roles.d = Operand::Y;
  const bool aux = buf.aux != nullptr;
  const bool try_fused = epi == FNORM_LINEAR_EPILOGUE_NONE || (!t.linear_unfused && epilogue_vector_ok(buf.bias));
  LinearFwdPlan plan;
  if (try_fused && own_pass(t, p, act, aux)) {
    // ReLU (training): the inference GEMM, then the mask from y. GELU: z
    // (with the bias) into aux (training) or y (inference), then gelu.
    GemmPlan own;
    own.key = k;
    own.roles = roles;
    own.roles.bias = Operand::Bias;
    if (act == LinearAct::Relu) {
      own.key.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
      plan.post = FwdPost::ReluMask;
    } else {
      own.key.epilogue = CUBLASLT_EPILOGUE_BIAS;
      plan.post = FwdPost::GeluInPlace;
      if (aux) {
        own.key.ldd = linear_aux_ld(act, p.n);
        own.roles.d = Operand::Aux;
        plan.post = FwdPost::GeluFromAux;
      }
    }
    const GemmPointers ptrs = own.roles.bind(buf);
    set_alignments(own.key, ptrs);
    own.algo = find_algo(s, t, own.key, ptrs);
    if (own.algo.found) {
      own.fused = true;
      plan.gemm = own;
      return plan;
    }
  }
  GemmPlan fused;
  fused.key = k;
  fused.roles = roles;
  switch (epi) {
    case FNORM_LINEAR_EPILOGUE_NONE: fused.key.epilogue = CUBLASLT_EPILOGUE_DEFAULT; break;
    case FNORM_LINEAR_EPILOGUE_BIAS: fused.key.epilogue = CUBLASLT_EPILOGUE_BIAS; break;
    case FNORM_LINEAR_EPILOGUE_BIAS_RELU:
      fused.key.epilogue = aux ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS;
      break;
    case FNORM_LINEAR_EPILOGUE_BIAS_GELU:
      fused.key.epilogue = aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
      break;
  }
  if (buf.bias != nullptr) fused.roles.bias = Operand::Bias;
  if (aux) {
    fused.roles.aux = Operand::Aux;
    fused.key.aux_ld = linear_aux_ld(act, p.n);
  }
  plan.gemm = choose_gemm(s, t, fused, try_fused, k, roles, buf, "forward");
  // No fused kernel for this epilogue here (or the test hook asked for
  // none): our epilogue kernel over y in place after the plain GEMM.
  plan.post = plan.gemm.fused ? FwdPost::None : FwdPost::Epilogue;
  return plan;
}

}  // namespace

LinearFwdPtrs LinearFwd::pointer_class(fnorm_handle *, const LinearProblem &, const LinearFwdArgs &a) {
  return {class_of(a.x), class_of(a.w), class_of(a.y), class_of(a.bias), class_of(a.aux), 0};
}

LinearFwdPlan LinearFwd::plan(fnorm_handle *h, const LinearProblem &p, const LinearFwdPtrs &ptrs) {
  const LinearAct act = act_of(p.epilogue);
  if (p.k == 0) {  // y = act(0 + bias), and aux what the backward needs, without a GEMM
    LinearFwdPlan plan;
    plan.post = act != LinearAct::None || ptrs.bias != 0 ? FwdPost::NoInner : FwdPost::Zero;
    if (plan.post == FwdPost::NoInner) plan.pass = epilogue_launch(p.m, p.n);
    return plan;
  }
  LinearBuffers buf;
  buf.x = stand_in(ptrs.x);
  buf.w = stand_in(ptrs.w);
  buf.y = stand_in(ptrs.y);
  buf.bias = stand_in(ptrs.bias);
  buf.aux = stand_in(ptrs.aux);
  LinearState &s = state_of(h);
  LinearFwdPlan plan = plan_fwd(s, h->tuning, p, buf);
  plan.state = &s;
  plan.sizes = sizes(h, p, ptrs);
  switch (plan.post) {
    case FwdPost::None:
    case FwdPost::NoInner:
    case FwdPost::Zero:
      break;
    case FwdPost::Epilogue: plan.pass = epilogue_launch(p.m, p.n); break;
    case FwdPost::ReluMask: plan.pass = relu_mask_launch(p, ptrs.y); break;
    case FwdPost::GeluFromAux: plan.pass = gelu_launch(p, ptrs.aux, linear_aux_ld(LinearAct::Gelu, p.n), ptrs.y); break;
    case FwdPost::GeluInPlace: plan.pass = gelu_launch(p, ptrs.y, p.y.row_stride, ptrs.y); break;
  }
  return plan;
}

size_t LinearFwd::workspace_size(fnorm_handle *, const LinearProblem &p) {
  return p.m == 0 || p.n == 0 || p.k == 0 ? 0 : kAlignSlack + kCublasWorkspace;
}

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

namespace {

// dw (+ db): KN: dw^T (n x k) = dz^T (n x m) * x (m x k), db from A (BGRADA);
//            NK: dw^T (k x n) = x^T (k x m) * dz (m x n), db from B (BGRADB).
GemmPlan plan_wgrad(LinearState &s, const Tuning &t, const LinearBwdDesc &c, const LinearBuffers &buf, int64_t lddz) {
  const LinearProblem &p = c.p;
  const bool kn = p.layout == FNORM_LINEAR_WEIGHT_KN;
  GemmKey kw = key_base(p);
  GemmRoles rw;
  kw.transa = CUBLAS_OP_N;
  kw.transb = CUBLAS_OP_T;
  kw.rows = static_cast<uint64_t>(kn ? p.n : p.k);
  kw.cols = static_cast<uint64_t>(kn ? p.k : p.n);
  kw.lda = kn ? lddz : p.x.row_stride;
  kw.ldb = kn ? p.x.row_stride : lddz;
  rw.a = kn ? Operand::Dz : Operand::X;
  rw.b = kn ? Operand::X : Operand::Dz;
  kw.inner = static_cast<uint64_t>(p.m);
  kw.ldd = p.w.row_stride;
  rw.d = Operand::Dw;
  GemmPlan fused;
  fused.key = kw;
  fused.key.epilogue = kn ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
  fused.roles = rw;
  fused.roles.bias = Operand::Db;
  const bool try_fused = buf.db != nullptr && !t.linear_unfused && epilogue_vector_ok(buf.db) && bgrad_shape_ok(kw);
  return choose_gemm(s, t, fused, try_fused, kw, rw, buf, "dw");
}

// dx: dx^T (k x m) = op(W) (k x n) * dz^T (n x m); with a chained producer,
// its activation's derivative (and bias gradient) in the epilogue.
GemmPlan plan_dgrad(LinearState &s, const Tuning &t, const LinearBwdDesc &c, const LinearBuffers &buf, int64_t lddz) {
  const LinearProblem &p = c.p;
  const bool kn = p.layout == FNORM_LINEAR_WEIGHT_KN;
  GemmKey kx = key_base(p);
  kx.transa = kn ? CUBLAS_OP_T : CUBLAS_OP_N;
  kx.transb = CUBLAS_OP_N;
  kx.rows = static_cast<uint64_t>(p.k);
  kx.cols = static_cast<uint64_t>(p.m);
  kx.inner = static_cast<uint64_t>(p.n);
  kx.lda = p.w.row_stride;
  kx.ldb = lddz;
  kx.ldd = c.dxm.row_stride;
  GemmRoles rx;
  rx.a = Operand::W;
  rx.b = Operand::Dz;
  rx.d = Operand::Dx;
  GemmPlan fused;
  const bool try_fused =
      c.chained() && !t.linear_unfused && epilogue_vector_ok(buf.x_db) && (buf.x_db == nullptr || bgrad_shape_ok(kx));
  if (try_fused) {
    fused.key = kx;
    fused.roles = rx;
    if (c.prod_act == LinearAct::Relu)
      fused.key.epilogue = buf.x_db ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
    else
      fused.key.epilogue = buf.x_db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    fused.key.aux_ld = linear_aux_ld(c.prod_act, p.k);
    fused.roles.aux = Operand::XAux;
    if (buf.x_db != nullptr) fused.roles.bias = Operand::XDb;
  }
  return choose_gemm(s, t, fused, try_fused, kx, rx, buf, "dx");
}

}  // namespace

LinearBwdPtrs LinearBwd::pointer_class(fnorm_handle *, const LinearBwdDesc &, const LinearBwdArgs &a) {
  return {class_of(a.x),  class_of(a.w),  class_of(a.dy), class_of(a.aux), class_of(a.x_aux),
          class_of(a.dx), class_of(a.dw), class_of(a.db), class_of(a.x_db), 0};
}

namespace {

// Whether the activation's backward pass writes dz element-wise rather than
// in row-slice tiles (which also sum columns), where no column sums are
// needed. The element-wise pass took 7 us off the dz step of fp16 ReLU /
// GELU at 8192 x 1024 (backward 69.2 against 76.2 us at 1024 x 784) but
// added 7-18 us to fp32 ReLU (707 against 689), where the tiles stay (fp32
// GELU: equal) (H200, bench/ab_linear.py, 2026-11-22).
bool flat_wins(fnorm_dtype_t dtype, LinearAct act) { return !(dtype == FNORM_DTYPE_FLOAT32 && act == LinearAct::Relu); }

// The dz pass over dy [m, n] (row stride dy's), into the workspace's dz
// region (row stride n) where dz is written.
LinearLaunch dz_launch(const LinearBwdPlan &plan, const LinearBwdDesc &c, const LinearBwdPtrs &ptrs) {
  const LinearProblem &p = c.p;
  return act_launch(p.dtype, c.act, plan.dz_flat, p.m, p.n, ptrs.dy, p.y.row_stride, ptrs.aux,
                    plan.dz_written ? kDzClass : 0, p.n, plan.layout.splits_n);
}

// launch_linear_bwd_n1: a block per (kN1Tile columns of k, row slice);
// packed: x (when the sums read it) and dx with 16-byte aligned rows. The
// finish: a warp per entry of dw and db (k + 1 entries), 256-thread blocks.
void plan_n1(LinearBwdPlan &plan, const LinearBwdDesc &c, const LinearBwdPtrs &ptrs) {
  const LinearProblem &p = c.p;
  const int splits = plan.layout.splits_n1;
  const size_t es = dtype_size(p.dtype);
  plan.n1_sums = ptrs.dw != 0 || ptrs.db != 0;
  LinearLaunch &l = plan.n1_pass;
  l.grid_x = static_cast<uint32_t>(p.k / kN1Tile + (p.k % kN1Tile != 0));
  l.grid_y = static_cast<uint32_t>(splits);
  l.block_x = kColLanes;
  l.block_y = kRowLanes;
  l.rows_per_split = (p.m + splits - 1) / splits;
  l.packed = (!plan.n1_sums || rows_aligned16(ptrs.x, p.x.row_stride, es)) &&
             (ptrs.dx == 0 || rows_aligned16(ptrs.dx, c.dxm.row_stride, es));
  const int64_t warps = p.k + 1;
  plan.n1_finish.grid_x = static_cast<uint32_t>((warps * 32 + 255) / 256);
  plan.n1_finish.block_x = 256;
}

}  // namespace

LinearBwdPlan LinearBwd::plan(fnorm_handle *h, const LinearBwdDesc &c, const LinearBwdPtrs &ptrs) {
  LinearBwdPlan plan;
  plan.layout = bwd_layout(c.p, c.chained(), h->info.sm_count);
  plan.sizes.workspace = plan.layout.bytes;
  plan.degenerate = c.degenerate();
  if (plan.degenerate) {
    // k = 0 with rows and columns of dz: db, the column sums of dz, from
    // our pass (dz itself is not written).
    plan.db_pass = c.p.m != 0 && c.p.n != 0 && ptrs.db != 0;
    if (plan.db_pass) plan.dz_pass = dz_launch(plan, c, ptrs);
    return plan;
  }
  // n = 1: dx is an outer product and dw a matrix-vector product; one pass
  // of ours (and a short one adding its partial sums) instead of the dz
  // pass, two GEMMs and the bias-gradient passes, which took 18.5 us against
  // autograd's 15.9 at fp16 8192 x 1 x 256 (H200, 2026-11-22).
  plan.n1 = plan.layout.splits_n1 > 0 && !c.chained() && !h->tuning.linear_no_n1;
  if (plan.n1) {
    plan_n1(plan, c, ptrs);
    return plan;
  }
  LinearState &s = state_of(h);
  plan.state = &s;
  LinearBuffers buf;
  buf.x = stand_in(ptrs.x), buf.w = stand_in(ptrs.w), buf.dy = stand_in(ptrs.dy), buf.aux = stand_in(ptrs.aux);
  buf.x_aux = stand_in(ptrs.x_aux), buf.dx = stand_in(ptrs.dx), buf.dw = stand_in(ptrs.dw), buf.db = stand_in(ptrs.db);
  buf.x_db = stand_in(ptrs.x_db);
  // dz is dy, or (with an activation) formed first in the workspace's
  // 256-byte aligned dz region.
  buf.dz = c.act != LinearAct::None ? stand_in(kDzClass) : buf.dy;
  const int64_t lddz = c.act != LinearAct::None ? c.p.n : c.p.y.row_stride;
  if (buf.dw != nullptr) {
    plan.wgrad = plan_wgrad(s, h->tuning, c, buf, lddz);
    plan.wgrad_planned = true;
  }
  if (buf.dx != nullptr) {
    plan.dgrad = plan_dgrad(s, h->tuning, c, buf, lddz);
    plan.dgrad_planned = true;
  }
  plan.db_pass = buf.db != nullptr && !(plan.wgrad_planned && plan.wgrad.fused);
  plan.dz_flat = !plan.db_pass && (buf.dx != nullptr || buf.dw != nullptr) && flat_wins(c.p.dtype, c.act);
  plan.dz_written = c.act != LinearAct::None && (buf.dx != nullptr || buf.dw != nullptr);
  if (c.act != LinearAct::None || plan.db_pass) plan.dz_pass = dz_launch(plan, c, ptrs);
  plan.producer_flat = buf.x_db == nullptr && flat_wins(c.p.dtype, c.prod_act);
  if (c.chained() && plan.dgrad_planned && !plan.dgrad.fused)  // dx in place, with the producer's aux
    plan.producer_pass = act_launch(c.p.dtype, c.prod_act, plan.producer_flat, c.p.m, c.p.k, ptrs.dx,
                                    c.dxm.row_stride, ptrs.x_aux, ptrs.dx, c.dxm.row_stride, plan.layout.splits_k);
  return plan;
}

size_t LinearBwd::workspace_size(fnorm_handle *h, const LinearBwdDesc &c) {
  return bwd_layout(c.p, c.chained(), h->info.sm_count).bytes;
}

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
