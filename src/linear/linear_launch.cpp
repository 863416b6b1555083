/* SPDX-License-Identifier: Apache-2.0 */
// Fully-connected launch: the planned GEMMs and our passes beside them,
// with the call's pointers. Decides nothing: the plan (linear_plan.cpp)
// chose every GEMM, its algorithm, the passes and their launches.
#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {
namespace {

LinearBuffers fwd_buffers(const LinearFwdArgs &a) {
  LinearBuffers buf;
  buf.x = a.x;
  buf.w = a.w;
  buf.bias = const_cast<void *>(a.bias);
  buf.y = a.y;
  buf.aux = a.aux;
  return buf;
}

// dz (with an activation) in one pass over dy and aux; db's column sums
// here too when the plan's db_pass (no fused bias gradient).
void run_dz_and_db(const LinearBwdPlan &plan, const LinearBwdDesc &c, const LinearBwdArgs &a, unsigned char *ws,
                   cudaStream_t st) {
  const LinearProblem &p = c.p;
  const BwdLayout &layout = plan.layout;
  float *partial = reinterpret_cast<float *>(ws + layout.partial_offset);
  if (c.act != LinearAct::None) {
    void *dz_out = plan.dz_written ? ws + layout.dz_offset : nullptr;
    check_cuda(launch_linear_bwd_act(plan.dz_pass, plan.dz_flat, p.dtype, c.act, a.dy, p.y.row_stride, a.aux, dz_out,
                                     p.n, p.m, p.n, plan.db_pass ? partial : nullptr, st),
               "linear backward activation kernel");
  } else if (plan.db_pass) {
    check_cuda(launch_linear_bwd_act(plan.dz_pass, false, p.dtype, LinearAct::None, a.dy, p.y.row_stride, nullptr,
                                     nullptr, 0, p.m, p.n, partial, st),
               "linear bias-gradient kernel");
  }
  if (plan.db_pass)
    check_cuda(launch_column_sums(partial, nullptr, layout.splits_n, p.n, p.dtype, a.db, nullptr, st),
               "bias-gradient reduction");
}

// The producer's derivative (and bias gradient) over dx in place, where the
// dgrad GEMM could not fuse it.
void run_producer_epilogue(const LinearBwdPlan &plan, const LinearBwdDesc &c, const LinearBwdArgs &a, unsigned char *ws,
                           cudaStream_t st) {
  const LinearProblem &p = c.p;
  float *partial = reinterpret_cast<float *>(ws + plan.layout.partial_offset);
  check_cuda(launch_linear_bwd_act(plan.producer_pass, plan.producer_flat, p.dtype, c.prod_act, a.dx, c.dxm.row_stride,
                                   a.x_aux, a.dx, c.dxm.row_stride, p.m, p.k, a.x_db ? partial : nullptr, st),
             "linear backward activation kernel (x_producer)");
  if (a.x_db != nullptr)
    check_cuda(launch_column_sums(partial, nullptr, plan.layout.splits_k, p.k, p.dtype, a.x_db, nullptr, st),
               "bias-gradient reduction (x_producer)");
}

void run_n1(const LinearBwdPlan &plan, const LinearBwdDesc &c, const LinearBwdArgs &a, unsigned char *ws,
            cudaStream_t st) {
  LinearN1Args n1;
  n1.act = c.act;
  n1.dy = a.dy, n1.lddy = c.p.y.row_stride, n1.aux = a.aux;
  n1.x = a.x, n1.ldx = c.p.x.row_stride;
  n1.w = a.w, n1.w_stride = c.p.layout == FNORM_LINEAR_WEIGHT_KN ? c.p.w.row_stride : 1;
  n1.dw_stride = n1.w_stride;
  n1.dx = a.dx, n1.lddx = c.dxm.row_stride, n1.dw = a.dw, n1.db = a.db;
  n1.rows = c.p.m, n1.cols = c.p.k;
  if (plan.n1_sums) n1.partial = reinterpret_cast<float *>(ws + plan.layout.partial_offset);
  check_cuda(launch_linear_bwd_n1(plan.n1_pass, plan.n1_finish, c.p.dtype, n1, st), "linear backward kernel (n = 1)");
}

// Outputs of a problem with a zero size that still have elements: sums over
// no values (0), or (k = 0) db, the column sums of dz.
void run_degenerate(const LinearBwdPlan &plan, const LinearBwdDesc &c, const LinearBwdArgs &a, unsigned char *ws,
                    cudaStream_t st) {
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
    zero(a.dx, c.dxm, "cudaMemset2DAsync (dx)");
    zero(a.x_db, vec_k, "cudaMemset2DAsync (x_db)");
  } else if (p.m == 0) {  // sums over no rows
    zero(a.dw, p.w, "cudaMemset2DAsync (dw)");
    zero(a.db, vec_n, "cudaMemset2DAsync (db)");
    zero(a.x_db, vec_k, "cudaMemset2DAsync (x_db)");
  } else if (plan.db_pass) {  // k = 0: dx and dw are empty; db needs dz
    run_dz_and_db(plan, c, a, ws, st);
  }
}

}  // namespace

void LinearFwd::launch(const LinearFwdPlan &plan, const LinearProblem &p, const LinearFwdArgs &a, cudaStream_t st) {
  void *y = a.y, *aux = a.aux;
  const LinearAct act = act_of(p.epilogue);
  if (plan.post == FwdPost::NoInner || plan.post == FwdPost::Zero) {
    const size_t es = dtype_size(p.dtype);
    check_cuda(cudaMemset2DAsync(y, static_cast<size_t>(p.y.row_stride) * es, 0, static_cast<size_t>(p.n) * es,
                                 static_cast<size_t>(p.m), st),
               "cudaMemset2DAsync (y)");
    if (plan.post == FwdPost::NoInner)
      check_cuda(launch_linear_fwd_epilogue(plan.pass, p.dtype, act, y, p.m, p.n, p.y.row_stride, a.bias, aux, st),
                 "linear forward epilogue kernel");
    return;
  }
  plan.gemm.launch(*plan.state, fwd_buffers(a), aligned_workspace(a.workspace), st);
  switch (plan.post) {
    case FwdPost::None:
    case FwdPost::NoInner:
    case FwdPost::Zero:
      break;
    case FwdPost::Epilogue:
      check_cuda(launch_linear_fwd_epilogue(plan.pass, p.dtype, act, y, p.m, p.n, p.y.row_stride, a.bias, aux, st),
                 "linear forward epilogue kernel");
      break;
    case FwdPost::ReluMask:
      check_cuda(launch_linear_relu_mask(plan.pass, p.dtype, y, p.y.row_stride, p.m, p.n, aux, st),
                 "linear ReLU mask kernel");
      break;
    case FwdPost::GeluFromAux:
      check_cuda(launch_linear_gelu_pass(plan.pass, p.dtype, aux, linear_aux_ld(LinearAct::Gelu, p.n), y,
                                         p.y.row_stride, p.m, p.n, st),
                 "linear GELU kernel");
      break;
    case FwdPost::GeluInPlace:
      check_cuda(launch_linear_gelu_pass(plan.pass, p.dtype, y, p.y.row_stride, y, p.y.row_stride, p.m, p.n, st),
                 "linear GELU kernel");
      break;
  }
}

void LinearBwd::launch(const LinearBwdPlan &plan, const LinearBwdDesc &c, const LinearBwdArgs &a, cudaStream_t st) {
  unsigned char *ws = aligned_workspace(a.workspace);
  if (plan.degenerate) {
    run_degenerate(plan, c, a, ws, st);
    return;
  }
  if (plan.n1) {
    run_n1(plan, c, a, ws, st);
    return;
  }
  LinearBuffers buf;
  buf.x = a.x, buf.w = a.w, buf.dy = a.dy, buf.aux = a.aux, buf.x_aux = a.x_aux;
  buf.dx = a.dx, buf.dw = a.dw, buf.db = a.db, buf.x_db = a.x_db;
  buf.dz = c.act != LinearAct::None ? static_cast<const void *>(ws + plan.layout.dz_offset) : a.dy;
  run_dz_and_db(plan, c, a, ws, st);
  if (plan.wgrad_planned) plan.wgrad.launch(*plan.state, buf, ws, st);
  if (plan.dgrad_planned) {
    plan.dgrad.launch(*plan.state, buf, ws, st);
    if (c.chained() && !plan.dgrad.fused) run_producer_epilogue(plan, c, a, ws, st);
  }
}

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
