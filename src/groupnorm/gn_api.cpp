/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm entry points: describe (gn_validate.cpp), plan (gn_plan.cpp,
// cached per thread), check every argument, then enqueue the counters'
// reset and the planned kernel (gn_kernels.cuh).
#include "core/validate.hpp"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {
namespace {

// The counters start at zero in every launch (CUDA-graph replays too):
// the reset is enqueued with the kernel.
void launch(const GnPlan &plan, GnParams &p, cudaStream_t stream) {
  check_cuda(cudaMemsetAsync(p.counters, 0, plan.ws.counter_bytes, stream), "cudaMemsetAsync (GroupNorm counters)");
  check_cuda(plan.instance->launch(p, plan.shape, stream), "GroupNorm kernel");
}

// The backward over no values: the gradients that are sums are zeros.
void zero_grads(const GnProblem &pb, const GnBwdArgs &a, cudaStream_t stream) {
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

}  // namespace
}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_groupnorm_fwd_workspace_size(fnorm_handle_t handle, fnorm_groupnorm_desc_t gn,
                                                            fnorm_tensor_desc_t x_desc, size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const GnProblem pb = describe_gn(GnPass::Fwd, gn, x_desc, nullptr, nullptr);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    *workspace_bytes = gn_workspace_bytes(handle, pb);
  });
}

FNORM_API fnorm_status_t fnorm_groupnorm_fwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_groupnorm_desc_t gn,
                                             fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                             const void *gamma, const void *beta, fnorm_tensor_desc_t ss_desc,
                                             const void *scale, const void *shift, fnorm_tensor_desc_t y_desc,
                                             void *y, float *mean, float *rstd, void *workspace,
                                             size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const GnProblem pb = describe_gn(GnPass::Fwd, gn, x_desc, w_desc, ss_desc);
    gn_require_like_x(pb, y_desc, x_desc, "y_desc");
    const GnFwdArgs a{x, gamma, beta, scale, shift, y, mean, rstd, workspace, workspace_bytes};
    check_gn_fwd_args(handle, pb, a);
    if (pb.elements() == 0) return;  // nothing is written, nothing enqueued
    DeviceGuard guard(handle->device);
    const GnPlan &plan = gn_plan(handle, pb, gn_pack(pb, {x, y}));
    check_gn_workspace(handle, plan, workspace, workspace_bytes, "fnorm_groupnorm_fwd_workspace_size");
    GnParams p = gn_params(pb, plan, workspace);
    p.x = x;
    p.y = y;
    p.gamma = gamma;
    p.beta = beta;
    p.scale = scale;
    p.shift = shift;
    p.mean = mean;
    p.rstd = rstd;
    launch(plan, p, cuda_stream(stream));
  });
}

FNORM_API fnorm_status_t fnorm_groupnorm_bwd_workspace_size(fnorm_handle_t handle, fnorm_groupnorm_desc_t gn,
                                                            fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                                            fnorm_tensor_desc_t ss_desc, size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const GnProblem pb = describe_gn(GnPass::Bwd, gn, x_desc, w_desc, ss_desc);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    *workspace_bytes = gn_workspace_bytes(handle, pb);
  });
}

FNORM_API fnorm_status_t fnorm_groupnorm_bwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_groupnorm_desc_t gn,
                                             fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t dy_desc,
                                             const void *dy, const float *mean, const float *rstd,
                                             fnorm_tensor_desc_t w_desc, const void *gamma, const void *beta,
                                             fnorm_tensor_desc_t ss_desc, const void *scale, const void *shift,
                                             fnorm_tensor_desc_t dx_desc, void *dx, void *dgamma, void *dbeta,
                                             void *dscale, void *dshift, void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const GnProblem pb = describe_gn(GnPass::Bwd, gn, x_desc, w_desc, ss_desc);
    gn_require_like_x(pb, dy_desc, x_desc, "dy_desc");
    gn_require_like_x(pb, dx_desc, x_desc, "dx_desc");
    const GnBwdArgs a{x,     dy,     mean,   rstd,   gamma,  beta,      scale,          shift,
                      dx,    dgamma, dbeta,  dscale, dshift, workspace, workspace_bytes};
    const cudaStream_t st = cuda_stream(stream);
    check_gn_bwd_args(handle, pb, a);
    if (pb.elements() == 0) {
      DeviceGuard guard(handle->device);
      zero_grads(pb, a, st);
      return;
    }
    DeviceGuard guard(handle->device);
    const GnPlan &plan = gn_plan(handle, pb, gn_pack(pb, {x, dy, dx}));
    check_gn_workspace(handle, plan, workspace, workspace_bytes, "fnorm_groupnorm_bwd_workspace_size");
    GnParams p = gn_params(pb, plan, workspace);
    p.x = x;
    p.dy = dy;
    p.y = dx;
    p.mean_in = mean;
    p.rstd_in = rstd;
    p.gamma = gamma;
    p.beta = beta;
    p.scale = scale;
    p.shift = shift;
    p.dgamma = dgamma;
    p.dbeta = dbeta;
    p.dscale = dscale;
    p.dshift = dshift;
    launch(plan, p, st);
  });
}

}  // extern "C"
