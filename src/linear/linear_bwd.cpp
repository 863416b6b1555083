// Fully-connected backward: validate (check_bwd_call), plan the two GEMMs
// (plan_wgrad: dw and maybe db; plan_dgrad: dx and maybe the producer's
// derivative), then launch: dz and the unfused bias gradient, wgrad, dgrad.
// Every check and every cuBLASLt heuristic answer comes before the first
// launch, so a refused call writes nothing.
#include "core/pointer_check.hpp"
#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {
namespace {

// The pointers of one backward call.
struct BwdCall {
  LinearProblem p;
  LinearAct act = LinearAct::None;       // desc's activation
  LinearAct prod_act = LinearAct::None;  // x_producer's activation (chained when set)
  Matrix dxm;                            // dx's view (when dx is wanted)
  const void *x = nullptr, *w = nullptr, *dy = nullptr, *aux = nullptr, *x_aux = nullptr;
  void *dx = nullptr, *dw = nullptr, *db = nullptr, *x_db = nullptr;
  bool chained() const { return prod_act != LinearAct::None; }
  bool wanted() const { return dx != nullptr || dw != nullptr || db != nullptr; }
};

// Pointer rules, aux sizes and overlaps of a backward call.
void check_bwd_call(const fnorm_handle *h, const BwdCall &c, size_t aux_bytes, size_t x_aux_bytes) {
  const LinearProblem &p = c.p;
  const fnorm_linear_epilogue_t epi = p.desc->epilogue;
  if (c.wanted()) FNORM_REQUIRE(c.dy != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'dy' is NULL");
  if (c.dw != nullptr) FNORM_REQUIRE(c.x != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'x' is NULL");
  if (c.dx != nullptr) FNORM_REQUIRE(c.w != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'w' is NULL");
  FNORM_REQUIRE(c.db == nullptr || has_bias(epi), FNORM_STATUS_BAD_PARAM,
                "argument 'db' must be NULL: epilogue NONE has no bias");
  const size_t aux_need = aux_bytes_for(c.act, p.dtype, p.m, p.n, "dy_desc");
  if (c.act != LinearAct::None) {
    if (c.wanted()) {
      FNORM_REQUIRE(c.aux != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                    "argument 'aux' is NULL; the backward of %s needs the forward's aux",
                    linear_epilogue_name(epi));
      require_aux(c.aux, aux_bytes, aux_need, "aux", "aux_bytes");
    }
  } else {
    FNORM_REQUIRE(c.aux == nullptr, FNORM_STATUS_BAD_PARAM, "argument 'aux' must be NULL: epilogue %s has no activation",
                  linear_epilogue_name(epi));
  }
  const size_t x_aux_need = aux_bytes_for(c.prod_act, p.dtype, p.m, p.k, "x_desc");
  if (c.chained()) {
    FNORM_REQUIRE(c.dx != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'dx' is NULL; with x_producer the call exists to compute dx");
    FNORM_REQUIRE(c.x_aux != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'x_aux' is NULL; x_producer's activation needs its aux");
    require_aux(c.x_aux, x_aux_bytes, x_aux_need, "x_aux", "x_aux_bytes");
  } else {
    FNORM_REQUIRE(c.x_aux == nullptr && x_aux_bytes == 0 && c.x_db == nullptr, FNORM_STATUS_BAD_PARAM,
                  "arguments 'x_aux', 'x_aux_bytes' and 'x_db' must be NULL / 0 without x_producer");
  }
  const size_t es = dtype_size(p.dtype);
  const size_t n_bytes = checked_mul(static_cast<size_t>(p.n), es, "w_desc"),
               k_bytes = checked_mul(static_cast<size_t>(p.k), es, "x_desc");
  const Span rx{"x", c.x, matrix_bytes(p.x, p.dtype, "x_desc")}, rw{"w", c.w, matrix_bytes(p.w, p.dtype, "w_desc")},
      rdy{"dy", c.dy, matrix_bytes(p.y, p.dtype, "dy_desc")}, raux{"aux", c.aux, aux_need},
      rxaux{"x_aux", c.x_aux, x_aux_need},
      rdx{"dx", c.dx, c.dx != nullptr ? matrix_bytes(c.dxm, p.dtype, "dx_desc") : 0},
      rdw{"dw", c.dw, matrix_bytes(p.w, p.dtype, "w_desc")}, rdb{"db", c.db, n_bytes}, rxdb{"x_db", c.x_db, k_bytes};
  for (const Span &out : {rdx, rdw, rdb, rxdb}) require_disjoint(out, {rx, rw, rdy, raux, rxaux});
  require_disjoint(rdx, {rdw, rdb, rxdb});
  require_disjoint(rdw, {rdb, rxdb});
  require_disjoint(rdb, {rxdb});
  require_device_memory(h, {rx, rw, rdy, raux, rxaux, rdx, rdw, rdb, rxdb});
}

// dw (+ db): KN: dw^T (n x k) = dz^T (n x m) * x (m x k), db from A (BGRADA);
//            NK: dw^T (k x n) = x^T (k x m) * dz (m x n), db from B (BGRADB).
GemmPlan plan_wgrad(LinearState &s, const BwdCall &c, const void *dz, int64_t lddz) {
  const LinearProblem &p = c.p;
  const bool kn = p.desc->layout == FNORM_LINEAR_WEIGHT_KN;
  GemmKey kw = key_base(p);
  GemmPointers pw;
  kw.transa = CUBLAS_OP_N;
  kw.transb = CUBLAS_OP_T;
  kw.rows = static_cast<uint64_t>(kn ? p.n : p.k);
  kw.cols = static_cast<uint64_t>(kn ? p.k : p.n);
  kw.lda = kn ? lddz : p.x.ld;
  kw.ldb = kn ? p.x.ld : lddz;
  pw.a = kn ? dz : c.x;
  pw.b = kn ? c.x : dz;
  kw.inner = static_cast<uint64_t>(p.m);
  kw.ldd = p.w.ld;
  pw.d = c.dw;
  GemmPlan fused;
  fused.key = kw;
  fused.key.epilogue = kn ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
  fused.ptrs = pw;
  fused.ptrs.bias = c.db;
  const bool try_fused = c.db != nullptr && !s.force_unfused && epilogue_vector_ok(c.db) && bgrad_shape_ok(kw);
  return choose_gemm(s, fused, try_fused, kw, pw, "dw");
}

// dx: dx^T (k x m) = op(W) (k x n) * dz^T (n x m); with a chained producer,
// its activation's derivative (and bias gradient) in the epilogue.
GemmPlan plan_dgrad(LinearState &s, const BwdCall &c, const void *dz, int64_t lddz) {
  const LinearProblem &p = c.p;
  const bool kn = p.desc->layout == FNORM_LINEAR_WEIGHT_KN;
  GemmKey kx = key_base(p);
  kx.transa = kn ? CUBLAS_OP_T : CUBLAS_OP_N;
  kx.transb = CUBLAS_OP_N;
  kx.rows = static_cast<uint64_t>(p.k);
  kx.cols = static_cast<uint64_t>(p.m);
  kx.inner = static_cast<uint64_t>(p.n);
  kx.lda = p.w.ld;
  kx.ldb = lddz;
  kx.ldd = c.dxm.ld;
  GemmPointers px;
  px.a = c.w;
  px.b = dz;
  px.d = c.dx;
  GemmPlan fused;
  const bool try_fused =
      c.chained() && !s.force_unfused && epilogue_vector_ok(c.x_db) && (c.x_db == nullptr || bgrad_shape_ok(kx));
  if (try_fused) {
    fused.key = kx;
    fused.ptrs = px;
    if (c.prod_act == LinearAct::Relu)
      fused.key.epilogue = c.x_db ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
    else
      fused.key.epilogue = c.x_db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    fused.key.aux_ld = linear_aux_ld(c.prod_act, p.k);
    fused.ptrs.aux = const_cast<void *>(c.x_aux);
    fused.ptrs.bias = c.x_db;
  }
  return choose_gemm(s, fused, try_fused, kx, px, "dx");
}

// dz (with an activation) in one pass over dy and aux; db's column sums
// here too when `db_here` (no fused bias gradient).
void run_dz_and_db(const LinearState &s, const BwdCall &c, const BwdLayout &layout, unsigned char *ws, bool db_here,
                   cudaStream_t st) {
  const LinearProblem &p = c.p;
  float *partial = reinterpret_cast<float *>(ws + layout.partial_offset);
  if (c.act != LinearAct::None) {
    void *dz_out = c.dx != nullptr || c.dw != nullptr ? ws + layout.dz_offset : nullptr;
    check_cuda(launch_linear_bwd_act(p.dtype, c.act, c.dy, p.y.ld, c.aux, dz_out, p.n, p.m, p.n,
                                     db_here ? partial : nullptr, layout.splits_n, st, s.legacy_bwd),
               "linear backward activation kernel");
  } else if (db_here) {
    check_cuda(launch_linear_bwd_act(p.dtype, LinearAct::None, c.dy, p.y.ld, nullptr, nullptr, 0, p.m, p.n, partial,
                                     layout.splits_n, st, s.legacy_bwd),
               "linear bias-gradient kernel");
  }
  if (db_here)
    check_cuda(launch_column_sums(partial, nullptr, layout.splits_n, p.n, p.dtype, c.db, nullptr, st),
               "bias-gradient reduction");
}

// The producer's derivative (and bias gradient) over dx in place, where the
// dgrad GEMM could not fuse it.
void run_producer_epilogue(const LinearState &s, const BwdCall &c, const BwdLayout &layout, unsigned char *ws, cudaStream_t st) {
  const LinearProblem &p = c.p;
  float *partial = reinterpret_cast<float *>(ws + layout.partial_offset);
  check_cuda(launch_linear_bwd_act(p.dtype, c.prod_act, c.dx, c.dxm.ld, c.x_aux, c.dx, c.dxm.ld, p.m, p.k,
                                   c.x_db ? partial : nullptr, layout.splits_k, st, s.legacy_bwd),
             "linear backward activation kernel (x_producer)");
  if (c.x_db != nullptr)
    check_cuda(launch_column_sums(partial, nullptr, layout.splits_k, p.k, p.dtype, c.x_db, nullptr, st),
               "bias-gradient reduction (x_producer)");
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
    const LinearProblem p = check_problem(desc, x_desc, w_desc, dy_desc, "dy_desc", false);
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
    BwdCall c;
    c.p = check_problem(desc, x_desc, w_desc, dy_desc, "dy_desc", false);
    c.act = act_of(desc->epilogue);
    c.prod_act = check_producer(x_producer);
    if (dx != nullptr) {
      const fnorm_tensor_desc &dxd = require_set(dx_desc, "dx_desc");
      require_same_sizes(dxd, "dx_desc", *x_desc, "x_desc", c.p.k);
      c.dxm = matrix_of(dxd, "dx_desc", true);
    }
    c.x = x, c.w = w, c.dy = dy, c.aux = aux, c.x_aux = x_aux;
    c.dx = dx, c.dw = dw, c.db = db, c.x_db = x_db;
    check_bwd_call(handle, c, aux_bytes, x_aux_bytes);
    const BwdLayout layout = bwd_layout(c.p, c.chained(), handle->info.sm_count);
    require_workspace(workspace, workspace_bytes, layout.bytes, "fnorm_linear_bwd_workspace_size", 1);
    require_device_memory(handle, {{"workspace", workspace, workspace_bytes}});
    if (!c.wanted()) return;

    DeviceGuard guard(handle->device);
    LinearState &s = state_of(handle);
    const cudaStream_t st = cuda_stream(stream);
    unsigned char *ws = aligned_workspace(workspace);
    // dz is dy, or (with an activation) formed first in the workspace's
    // 256-byte aligned dz region.
    if (layout.splits_n1 > 0 && !c.chained() && !s.no_n1) {
      // n = 1: dx is an outer product and dw a matrix-vector product; one
      // pass of ours (and a short one adding its partial sums) instead of
      // the dz pass, two GEMMs and the bias-gradient passes: 18.5 us against
      // autograd's 15.9 at fp16 8192 x 1 x 256 before (H200, 2026-11-22).
      LinearN1Args a;
      a.act = c.act;
      a.dy = dy, a.lddy = c.p.y.ld, a.aux = aux;
      a.x = x, a.ldx = c.p.x.ld;
      a.w = w, a.w_stride = desc->layout == FNORM_LINEAR_WEIGHT_KN ? c.p.w.ld : 1;
      a.dw_stride = a.w_stride;
      a.dx = dx, a.lddx = c.dxm.ld, a.dw = dw, a.db = db;
      a.rows = c.p.m, a.cols = c.p.k;
      a.splits = layout.splits_n1;
      if (dw != nullptr || db != nullptr) a.partial = reinterpret_cast<float *>(ws + layout.partial_offset);
      check_cuda(launch_linear_bwd_n1(c.p.dtype, a, st), "linear backward kernel (n = 1)");
      return;
    }
    const bool act = c.act != LinearAct::None;
    const void *dz = act ? static_cast<const void *>(ws + layout.dz_offset) : dy;
    const int64_t lddz = act ? c.p.n : c.p.y.ld;
    GemmPlan wgrad, dgrad;
    if (dw != nullptr) wgrad = plan_wgrad(s, c, dz, lddz);
    if (dx != nullptr) dgrad = plan_dgrad(s, c, dz, lddz);

    // Everything is planned and checked: only launches from here on.
    run_dz_and_db(s, c, layout, ws, db != nullptr && !(dw != nullptr && wgrad.fused), st);
    if (dw != nullptr) launch_gemm(s, wgrad.key, wgrad.algo, wgrad.ptrs, ws, st);
    if (dx != nullptr) {
      launch_gemm(s, dgrad.key, dgrad.algo, dgrad.ptrs, ws, st);
      if (c.chained() && !dgrad.fused) run_producer_epilogue(s, c, layout, ws, st);
    }
  });
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
