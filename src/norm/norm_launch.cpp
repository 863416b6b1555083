/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm launch: the planned instance of the generated
// dispatch table with the call's pointers, then (backward) the weight
// gradients' column sums; and what a call over no rows still enqueues.
#include "core/column_sums.hpp"
#include "norm/norm.hpp"

namespace fnorm {

void NormFwd::launch(const NormFwdPlan &plan, const NormProblem &pb, const NormFwdArgs &a, cudaStream_t stream) {
  NormFwdParams p = norm_fwd_params(pb, plan);
  p.x = a.x;
  p.residual = a.residual;
  p.sum = a.sum;
  p.y = a.y;
  p.gamma = a.gamma;
  p.beta = a.beta;
  p.mean = a.mean;
  p.rstd = a.rstd;
  if (pb.quantized()) {  // the plan's instance writes codes
    p.quant_scale = a.scale;
    p.amax = a.amax;
    // The blocks combine amax with atomicMax from zero.
    if (a.amax != nullptr) check_cuda(cudaMemsetAsync(a.amax, 0, sizeof(float), stream), "cudaMemsetAsync (amax)");
  }
  check_cuda(plan.instance->launch(p, plan.shape, stream), plan.instance->name);
}

// The largest magnitude of no values: 0.
Empty NormFwd::empty(const NormProblem &pb, const NormFwdArgs &a) {
  if (pb.elements() != 0) return Empty::No;
  return pb.quantized() && a.amax != nullptr ? Empty::Enqueue : Empty::Done;
}

void NormFwd::launch_empty(const NormProblem &, const NormFwdArgs &a, cudaStream_t stream) {
  check_cuda(cudaMemsetAsync(a.amax, 0, sizeof(float), stream), "cudaMemsetAsync (amax)");
}

void NormBwd::launch(const NormBwdPlan &plan, const NormProblem &pb, const NormBwdArgs &a, cudaStream_t stream) {
  NormBwdParams p = norm_bwd_params(pb, plan);
  p.x = a.x;
  p.dy = a.dy;
  p.gamma = a.gamma;
  p.dsum = a.dsum;
  p.mean = a.mean;
  p.rstd = a.rstd;
  p.dx = a.dx;
  unsigned char *ws = static_cast<unsigned char *>(a.workspace);
  const BwdWorkspace &layout = plan.workspace;
  if (a.dgamma != nullptr) p.dgamma_partial = reinterpret_cast<float *>(ws + layout.dgamma_offset);
  if (a.dbeta != nullptr) p.dbeta_partial = reinterpret_cast<float *>(ws + layout.dbeta_offset);
  if (plan.tier == Tier::ColumnTiled) p.row_coef = reinterpret_cast<float *>(ws + layout.coef_offset);
  check_cuda(plan.instance->launch(p, plan.shape, stream), plan.instance->name);
  if (a.dgamma != nullptr || a.dbeta != nullptr) {
    check_cuda(launch_column_sums(p.dgamma_partial, p.dbeta_partial, plan.grid, pb.cols,
                                  static_cast<fnorm_dtype_t>(pb.param_dtype), a.dgamma, a.dbeta, stream),
               "weight-gradient column sums");
  }
}

// dgamma / dbeta over no rows: the sums of nothing.
Empty NormBwd::empty(const NormProblem &pb, const NormBwdArgs &a) {
  if (pb.elements() != 0) return Empty::No;
  return pb.cols != 0 && (a.dgamma != nullptr || a.dbeta != nullptr) ? Empty::Enqueue : Empty::Done;
}

void NormBwd::launch_empty(const NormProblem &pb, const NormBwdArgs &a, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(pb.cols) * dtype_size(static_cast<fnorm_dtype_t>(pb.param_dtype));
  for (void *g : {a.dgamma, a.dbeta})
    if (g != nullptr && bytes != 0) check_cuda(cudaMemsetAsync(g, 0, bytes, stream), "cudaMemsetAsync (dgamma/dbeta)");
}

}  // namespace fnorm
