/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm launch: the counters' reset and the planned kernel with the
// call's pointers (gn_kernels.cuh); and what a backward over no values
// still enqueues (the zeros of its sums).
#include "groupnorm/groupnorm.hpp"

namespace fnorm {
namespace {

// The counters start at zero in every launch (CUDA-graph replays too):
// the reset is enqueued with the kernel. The streaming schedule has none.
void enqueue(const GnPlan &plan, const GnParams &p, cudaStream_t stream) {
  if (plan.stream) {
    check_cuda(plan.instance->launch_stream(p, stream), "GroupNorm kernels (streaming)");
    return;
  }
  check_cuda(cudaMemsetAsync(p.counters, 0, plan.ws.counter_bytes, stream), "cudaMemsetAsync (GroupNorm counters)");
  check_cuda(plan.instance->launch(p, plan.shape, stream), "GroupNorm kernel");
}

}  // namespace

void GnFwd::launch(const GnPlan &plan, const GnProblem &pb, const GnFwdArgs &a, cudaStream_t stream) {
  GnParams p = gn_params(pb, plan, a.workspace);
  p.x = a.x;
  p.y = a.y;
  p.gamma = a.gamma;
  p.beta = a.beta;
  p.scale = a.scale;
  p.shift = a.shift;
  p.mean = a.mean;
  p.rstd = a.rstd;
  enqueue(plan, p, stream);
}

void GnBwd::launch(const GnPlan &plan, const GnProblem &pb, const GnBwdArgs &a, cudaStream_t stream) {
  GnParams p = gn_params(pb, plan, a.workspace);
  p.x = a.x;
  p.dy = a.dy;
  p.y = a.dx;
  p.mean_in = a.mean;
  p.rstd_in = a.rstd;
  p.gamma = a.gamma;
  p.beta = a.beta;
  p.scale = a.scale;
  p.shift = a.shift;
  p.dgamma = a.dgamma;
  p.dbeta = a.dbeta;
  p.dscale = a.dscale;
  p.dshift = a.dshift;
  enqueue(plan, p, stream);
}

Empty GnBwd::empty(const GnProblem &pb, const GnBwdArgs &a) {
  if (pb.elements() != 0) return Empty::No;
  const bool sums = a.dgamma != nullptr || a.dbeta != nullptr || a.dscale != nullptr || a.dshift != nullptr;
  return sums ? Empty::Enqueue : Empty::Done;
}

void GnBwd::launch_empty(const GnProblem &pb, const GnBwdArgs &a, cudaStream_t stream) {
  for (void *g : {a.dgamma, a.dbeta})
    if (g != nullptr)
      check_cuda(gn_zero_strided(g, static_cast<fnorm_dtype_t>(pb.w_dtype), 1, pb.c, 0, 1, stream),
                 "GroupNorm zero dgamma / dbeta");
  for (void *g : {a.dscale, a.dshift})
    if (g != nullptr)
      check_cuda(gn_zero_strided(g, static_cast<fnorm_dtype_t>(pb.ss_dtype), pb.n, pb.c, pb.ss_stride_n,
                                 pb.ss_stride_c, stream),
                 "GroupNorm zero dscale / dshift");
}

}  // namespace fnorm
