/* SPDX-License-Identifier: Apache-2.0 */
// Fully-connected backward: describe and check (linear_validate.cpp), plan
// (BwdPlan: the workspace layout and the two GEMMs, plan_wgrad: dw and maybe
// db; plan_dgrad: dx and maybe the producer's derivative; cached per handle),
// then launch: dz and the unfused bias gradient, wgrad, dgrad. Every check
// and every cuBLASLt heuristic answer comes before the first launch, so a
// refused call writes nothing.
#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {
namespace {

// dw (+ db): KN: dw^T (n x k) = dz^T (n x m) * x (m x k), db from A (BGRADA);
//            NK: dw^T (k x n) = x^T (k x m) * dz (m x n), db from B (BGRADB).
GemmPlan plan_wgrad(LinearState &s, const Tuning &t, const LinearBwdArgs &c, const LinearBuffers &buf, int64_t lddz) {
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
  const bool try_fused = c.db != nullptr && !t.linear_unfused && epilogue_vector_ok(c.db) && bgrad_shape_ok(kw);
  return choose_gemm(s, t, fused, try_fused, kw, rw, buf, "dw");
}

// dx: dx^T (k x m) = op(W) (k x n) * dz^T (n x m); with a chained producer,
// its activation's derivative (and bias gradient) in the epilogue.
GemmPlan plan_dgrad(LinearState &s, const Tuning &t, const LinearBwdArgs &c, const LinearBuffers &buf, int64_t lddz) {
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
      c.chained() && !t.linear_unfused && epilogue_vector_ok(c.x_db) && (c.x_db == nullptr || bgrad_shape_ok(kx));
  if (try_fused) {
    fused.key = kx;
    fused.roles = rx;
    if (c.prod_act == LinearAct::Relu)
      fused.key.epilogue = c.x_db ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
    else
      fused.key.epilogue = c.x_db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    fused.key.aux_ld = linear_aux_ld(c.prod_act, p.k);
    fused.roles.aux = Operand::XAux;
    if (c.x_db != nullptr) fused.roles.bias = Operand::XDb;
  }
  return choose_gemm(s, t, fused, try_fused, kx, rx, buf, "dx");
}

// The plan of a backward call: where dz and the partial sums go, whether
// the n = 1 pass replaces the GEMMs, and the GEMMs.
struct BwdPlan {
  BwdLayout layout;
  bool n1 = false;
  bool wgrad_planned = false, dgrad_planned = false;
  GemmPlan wgrad, dgrad;
};

// Plans are cached per (handle, problem, the pointers' alignments and which
// outputs and optional inputs are given).
struct BwdKey {
  LinearProblem problem;
  MatrixView dxm;
  int32_t prod_act = 0;
  uint32_t align_x = 0, align_w = 0, align_dy = 0, align_aux = 0, align_x_aux = 0, align_dx = 0, align_dw = 0,
           align_db = 0, align_x_db = 0;
  uint32_t wanted = 0;  // bit 0 dx, 1 dw, 2 db, 3 x_db
  uint32_t unused = 0;
};

// dz is dy, or (with an activation) formed first in the workspace's
// 256-byte aligned dz region.
const void *dz_of(const LinearBwdArgs &c, const BwdLayout &layout, unsigned char *ws) {
  return c.act != LinearAct::None ? static_cast<const void *>(ws + layout.dz_offset) : c.dy;
}

BwdPlan plan_bwd(fnorm_handle *h, const LinearBwdArgs &c, const LinearBuffers &buf) {
  BwdPlan plan;
  plan.layout = bwd_layout(c.p, c.chained(), h->info.sm_count);
  // n = 1: dx is an outer product and dw a matrix-vector product; one pass
  // of ours (and a short one adding its partial sums) instead of the dz
  // pass, two GEMMs and the bias-gradient passes, which took 18.5 us against
  // autograd's 15.9 at fp16 8192 x 1 x 256 (H200, 2026-11-22).
  plan.n1 = plan.layout.splits_n1 > 0 && !c.chained() && !h->tuning.linear_no_n1;
  if (plan.n1) return plan;
  LinearState &s = state_of(h);
  const int64_t lddz = c.act != LinearAct::None ? c.p.n : c.p.y.row_stride;
  if (c.dw != nullptr) {
    plan.wgrad = plan_wgrad(s, h->tuning, c, buf, lddz);
    plan.wgrad_planned = true;
  }
  if (c.dx != nullptr) {
    plan.dgrad = plan_dgrad(s, h->tuning, c, buf, lddz);
    plan.dgrad_planned = true;
  }
  return plan;
}

// dz (with an activation) in one pass over dy and aux; db's column sums
// here too when `db_here` (no fused bias gradient).
void run_dz_and_db(const LinearBwdArgs &c, const BwdLayout &layout, unsigned char *ws, bool db_here, cudaStream_t st) {
  const LinearProblem &p = c.p;
  float *partial = reinterpret_cast<float *>(ws + layout.partial_offset);
  if (c.act != LinearAct::None) {
    void *dz_out = (c.dx != nullptr || c.dw != nullptr) && p.k != 0 ? ws + layout.dz_offset : nullptr;
    check_cuda(launch_linear_bwd_act(p.dtype, c.act, c.dy, p.y.row_stride, c.aux, dz_out, p.n, p.m, p.n,
                                     db_here ? partial : nullptr, layout.splits_n, st),
               "linear backward activation kernel");
  } else if (db_here) {
    check_cuda(launch_linear_bwd_act(p.dtype, LinearAct::None, c.dy, p.y.row_stride, nullptr, nullptr, 0, p.m, p.n,
                                     partial, layout.splits_n, st),
               "linear bias-gradient kernel");
  }
  if (db_here)
    check_cuda(launch_column_sums(partial, nullptr, layout.splits_n, p.n, p.dtype, c.db, nullptr, st),
               "bias-gradient reduction");
}

// The producer's derivative (and bias gradient) over dx in place, where the
// dgrad GEMM could not fuse it.
void run_producer_epilogue(const LinearBwdArgs &c, const BwdLayout &layout, unsigned char *ws, cudaStream_t st) {
  const LinearProblem &p = c.p;
  float *partial = reinterpret_cast<float *>(ws + layout.partial_offset);
  check_cuda(launch_linear_bwd_act(p.dtype, c.prod_act, c.dx, c.dxm.row_stride, c.x_aux, c.dx, c.dxm.row_stride, p.m,
                                   p.k, c.x_db ? partial : nullptr, layout.splits_k, st),
             "linear backward activation kernel (x_producer)");
  if (c.x_db != nullptr)
    check_cuda(launch_column_sums(partial, nullptr, layout.splits_k, p.k, p.dtype, c.x_db, nullptr, st),
               "bias-gradient reduction (x_producer)");
}

void run_n1(const LinearBwdArgs &c, const BwdLayout &layout, unsigned char *ws, cudaStream_t st) {
  LinearN1Args a;
  a.act = c.act;
  a.dy = c.dy, a.lddy = c.p.y.row_stride, a.aux = c.aux;
  a.x = c.x, a.ldx = c.p.x.row_stride;
  a.w = c.w, a.w_stride = c.p.layout == FNORM_LINEAR_WEIGHT_KN ? c.p.w.row_stride : 1;
  a.dw_stride = a.w_stride;
  a.dx = c.dx, a.lddx = c.dxm.row_stride, a.dw = c.dw, a.db = c.db;
  a.rows = c.p.m, a.cols = c.p.k;
  a.splits = layout.splits_n1;
  if (c.dw != nullptr || c.db != nullptr) a.partial = reinterpret_cast<float *>(ws + layout.partial_offset);
  check_cuda(launch_linear_bwd_n1(c.p.dtype, a, st), "linear backward kernel (n = 1)");
}

// Outputs of a problem with a zero size that still have elements: sums over
// no values (0), or (k = 0) db, the column sums of dz.
void run_degenerate(const LinearBwdArgs &c, const BwdLayout &layout, unsigned char *ws, cudaStream_t st) {
  const LinearProblem &p = c.p;
  const size_t es = dtype_size(p.dtype);
  auto zero = [&](void *out, const MatrixView &v, const char *what) {
    if (out == nullptr || v.rows * v.cols == 0) return;
    check_cuda(cudaMemset2DAsync(out, static_cast<size_t>(v.row_stride) * es, 0, static_cast<size_t>(v.cols) * es,
                                 static_cast<size_t>(v.rows), st),
               what);
  };
  const MatrixView vec_n{1, p.n, p.n}, vec_k{1, p.k, p.k};
  if (p.n == 0) {  // dx = dz W^T over no columns of dz; x_db its column sums
    zero(c.dx, c.dxm, "cudaMemset2DAsync (dx)");
    zero(c.x_db, vec_k, "cudaMemset2DAsync (x_db)");
  } else if (p.m == 0) {  // sums over no rows
    zero(c.dw, p.w, "cudaMemset2DAsync (dw)");
    zero(c.db, vec_n, "cudaMemset2DAsync (db)");
    zero(c.x_db, vec_k, "cudaMemset2DAsync (x_db)");
  } else if (c.db != nullptr) {  // k = 0: dx and dw are empty; db needs dz
    run_dz_and_db(c, layout, ws, true, st);
  }
}

}  // namespace
}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_linear_bwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                                         fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                                         fnorm_tensor_desc_t dy_desc, fnorm_linear_desc_t x_producer,
                                                         size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    const LinearProblem p = describe_linear(desc, x_desc, w_desc, dy_desc, "dy_desc", false);
    const bool chained = check_producer(x_producer) != LinearAct::None;
    *workspace_bytes = bwd_layout(p, chained, handle->info.sm_count).bytes;
  });
}

FNORM_API fnorm_status_t fnorm_linear_bwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                          const void *w, fnorm_tensor_desc_t dy_desc, const void *dy,
                                          const void *aux, size_t aux_bytes, fnorm_linear_desc_t x_producer,
                                          const void *x_aux, size_t x_aux_bytes, fnorm_tensor_desc_t dx_desc,
                                          void *dx, void *dw, void *db, void *x_db, void *workspace,
                                          size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    LinearBwdArgs c;
    c.p = describe_linear(desc, x_desc, w_desc, dy_desc, "dy_desc", false);
    c.act = act_of(desc->epilogue);
    c.prod_act = check_producer(x_producer);
    if (dx != nullptr) {
      const fnorm_tensor_desc &dxd = require_set(dx_desc, "dx_desc");
      require_same_sizes(dxd, "dx_desc", *x_desc, "x_desc", c.p.k);
      c.dxm = matrix_of(dxd, "dx_desc", true);
    }
    c.x = x, c.w = w, c.dy = dy, c.aux = aux, c.x_aux = x_aux;
    c.dx = dx, c.dw = dw, c.db = db, c.x_db = x_db;
    c.aux_bytes = aux_bytes, c.x_aux_bytes = x_aux_bytes;
    c.workspace = workspace, c.workspace_bytes = workspace_bytes;
    check_linear_bwd_args(handle, c);
    const LinearProblem &p = c.p;
    using Cache = PlanCache<BwdKey, BwdPlan>;
    BwdKey key;
    key.problem = p;
    key.dxm = c.dxm;
    key.prod_act = static_cast<int32_t>(c.prod_act);
    key.align_x = alignment_of(x), key.align_w = alignment_of(w), key.align_dy = alignment_of(dy);
    key.align_aux = alignment_of(aux), key.align_x_aux = alignment_of(x_aux), key.align_dx = alignment_of(dx);
    key.align_dw = alignment_of(dw), key.align_db = alignment_of(db), key.align_x_db = alignment_of(x_db);
    key.wanted = (dx ? 1u : 0u) | (dw ? 2u : 0u) | (db ? 4u : 0u) | (x_db ? 8u : 0u);
    const uint64_t hash = Cache::hash_bytes(&key, sizeof key);
    const BwdPlan *cached = Cache::find(handle->id, key, hash);
    const BwdLayout layout = cached != nullptr ? cached->layout : bwd_layout(p, c.chained(), handle->info.sm_count);
    require_workspace(workspace, workspace_bytes, layout.bytes, "fnorm_linear_bwd_workspace_size", 1);
    if (!c.wanted()) return;
    const cudaStream_t st = cuda_stream(stream);
    unsigned char *ws = aligned_workspace(workspace);
    DeviceGuard guard(handle->device);
    if (p.m == 0 || p.n == 0 || p.k == 0) {
      run_degenerate(c, layout, ws, st);
      return;
    }
    LinearBuffers buf;
    buf.x = x, buf.w = w, buf.dy = dy, buf.aux = aux, buf.x_aux = x_aux;
    buf.dx = dx, buf.dw = dw, buf.db = db, buf.x_db = x_db;
    buf.dz = dz_of(c, layout, ws);
    const BwdPlan &plan = cached != nullptr ? *cached : Cache::insert(handle->id, key, hash, plan_bwd(handle, c, buf));
    if (plan.n1) {
      run_n1(c, plan.layout, ws, st);
      return;
    }
    // Everything is planned and checked: only launches from here on.
    const LinearState &s = state_of(handle);
    run_dz_and_db(c, plan.layout, ws, db != nullptr && !(plan.wgrad_planned && plan.wgrad.fused), st);
    if (plan.wgrad_planned) plan.wgrad.launch(s, buf, ws, st);
    if (plan.dgrad_planned) {
      plan.dgrad.launch(s, buf, ws, st);
      if (c.chained() && !plan.dgrad.fused) run_producer_epilogue(c, plan.layout, ws, st);
    }
  });
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
