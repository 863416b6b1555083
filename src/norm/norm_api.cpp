/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm entry points: describe and check (norm_validate.cpp),
// plan (norm_plan.cpp, cached per handle), launch the planned instance of
// the generated dispatch table.
#include <algorithm>

#include "core/column_sums.hpp"
#include "norm/norm.hpp"

namespace fnorm {
namespace {

void launch_fwd(const NormProblem &pb, const NormFwdPlan &plan, const NormFwdArgs &a, cudaStream_t stream) {
  NormFwdParams p = norm_fwd_params(pb, plan);
  p.x = a.x;
  p.residual = a.residual;
  p.sum = a.sum;
  p.y = a.y;
  p.gamma = a.gamma;
  p.beta = a.beta;
  p.mean = a.mean;
  p.rstd = a.rstd;
  if (!pb.quantized()) {
    check_cuda(plan.instance->launch(p, plan.shape, stream), plan.instance->name);
    return;
  }
  p.quant_scale = a.scale;
  p.amax = a.amax;
  // The blocks combine amax with atomicMax from zero.
  if (a.amax != nullptr) check_cuda(cudaMemsetAsync(a.amax, 0, sizeof(float), stream), "cudaMemsetAsync (amax)");
  check_cuda(plan.instance->launch_quant(p, plan.shape, stream), plan.instance->name);
}

void launch_bwd(const NormProblem &pb, const NormBwdPlan &plan, const NormBwdArgs &a, cudaStream_t stream) {
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
void zero_weight_grads(const NormProblem &pb, const NormBwdArgs &a, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(pb.cols) * dtype_size(static_cast<fnorm_dtype_t>(pb.param_dtype));
  for (void *g : {a.dgamma, a.dbeta})
    if (g != nullptr && bytes != 0) check_cuda(cudaMemsetAsync(g, 0, bytes, stream), "cudaMemsetAsync (dgamma/dbeta)");
}

int bwd_pack(const NormProblem &pb, const NormBwdArgs &a) {
  return choose_pack(pb, {a.x, a.dy, a.dx, a.dsum}, {pb.x_row_stride, pb.y_row_stride, pb.dx_row_stride},
                     {a.gamma}, pb.param_f32());
}

}  // namespace
}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_norm_fwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t y_desc,
                                                       size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    (void)fnorm::describe_norm_fwd(norm, x_desc, nullptr, y_desc, 0);
    *workspace_bytes = 0;
  });
}

FNORM_API fnorm_status_t fnorm_norm_fwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                        fnorm_norm_desc_t norm,
                                        fnorm_tensor_desc_t x_desc, const void *x,
                                        const void *residual, void *sum,
                                        fnorm_tensor_desc_t w_desc, const void *gamma,
                                        const void *beta,
                                        fnorm_tensor_desc_t y_desc, void *y,
                                        float *mean, float *rstd,
                                        void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const NormFwdArgs a{x, residual, sum, gamma, beta, y, mean, rstd};
    const NormProblem pb = describe_norm_fwd(norm, x_desc, w_desc, y_desc, a.present());
    check_norm_fwd_args(handle, pb, a);
    (void)workspace;
    (void)workspace_bytes;  // the size query answers 0 for every forward
    if (pb.elements() == 0) return;
    DeviceGuard guard(handle->device);
    const int pack = choose_pack(pb, {x, y, residual, sum}, {pb.x_row_stride, pb.y_row_stride}, {gamma, beta},
                                 pb.param_f32());
    launch_fwd(pb, norm_fwd_plan(handle, pb, pack), a, cuda_stream(stream));
  });
}

FNORM_API fnorm_status_t fnorm_norm_fwd_quant_workspace_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                                             fnorm_tensor_desc_t x_desc,
                                                             fnorm_tensor_desc_t y_desc,
                                                             fnorm_quant_scaling_t scaling,
                                                             size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    (void)fnorm::describe_norm_fwd_quant(norm, x_desc, nullptr, y_desc, scaling, 0);
    *workspace_bytes = 0;
  });
}

FNORM_API fnorm_status_t fnorm_norm_fwd_quant_scale_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                                         fnorm_tensor_desc_t x_desc,
                                                         fnorm_quant_scaling_t scaling, size_t *scale_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(scale_bytes);
    const NormTensor bit = quant_scaling_bit(scaling);
    // x's own layout stands in for y's: the answer depends on the rows only.
    const NormProblem pb = describe_norm_fwd(norm, x_desc, nullptr, x_desc, bit);
    *scale_bytes = quant_scale_bytes(pb);
  });
}

FNORM_API fnorm_status_t fnorm_norm_fwd_quant(fnorm_handle_t handle, fnorm_stream_t stream,
                                              fnorm_norm_desc_t norm, fnorm_tensor_desc_t x_desc,
                                              const void *x, const void *residual, void *sum,
                                              fnorm_tensor_desc_t w_desc, const void *gamma, const void *beta,
                                              fnorm_tensor_desc_t y_desc, void *y,
                                              fnorm_quant_scaling_t scaling, float *scale, float *amax,
                                              float *mean, float *rstd, void *workspace,
                                              size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const NormFwdArgs a{x, residual, sum, gamma, beta, y, mean, rstd, scale, amax};
    const NormProblem pb = describe_norm_fwd_quant(norm, x_desc, w_desc, y_desc, scaling, a.present());
    check_norm_fwd_args(handle, pb, a);
    (void)workspace;
    (void)workspace_bytes;  // the size query answers 0
    const cudaStream_t st = cuda_stream(stream);
    if (pb.elements() == 0) {
      // The largest magnitude of no values: 0.
      if (amax != nullptr) {
        DeviceGuard guard(handle->device);
        check_cuda(cudaMemsetAsync(amax, 0, sizeof(float), st), "cudaMemsetAsync (amax)");
      }
      return;
    }
    DeviceGuard guard(handle->device);
    // x, residual and sum as the plain forward; y's codes take one byte each.
    int pack = choose_pack(pb, {x, residual, sum}, {pb.x_row_stride}, {gamma, beta}, pb.param_f32());
    while (pack > 1 && (!is_aligned(y, static_cast<size_t>(pack)) || (pb.rows > 1 && pb.y_row_stride % pack != 0)))
      pack /= 2;
    launch_fwd(pb, norm_fwd_plan(handle, pb, pack), a, st);
  });
}

FNORM_API fnorm_status_t fnorm_norm_bwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t w_desc,
                                                       size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    // w_desc given: the launch may ask for dgamma / dbeta.
    const NormProblem pb =
        describe_norm_bwd(norm, x_desc, nullptr, nullptr, w_desc, w_desc != nullptr ? kNormDgamma : 0);
    size_t most = 0;
    if (pb.elements() != 0) {
      DeviceGuard guard(handle->device);
      // The launch's pack follows the pointers' alignment: answer for the
      // largest need over every pack the row length allows.
      for (int pack = static_cast<int>(kMaxPackBytes / dtype_size(pb.dtype)); pack >= 1; pack /= 2) {
        if (pb.cols % pack != 0) continue;
        most = std::max(most, norm_bwd_plan(handle, pb, pack).workspace.bytes);
      }
    }
    *workspace_bytes = most;
  });
}

FNORM_API fnorm_status_t fnorm_norm_bwd(fnorm_handle_t handle, fnorm_stream_t stream,
                                        fnorm_norm_desc_t norm,
                                        fnorm_tensor_desc_t x_desc, const void *x,
                                        fnorm_tensor_desc_t dy_desc, const void *dy,
                                        const float *mean, const float *rstd,
                                        fnorm_tensor_desc_t w_desc, const void *gamma,
                                        const void *dsum,
                                        fnorm_tensor_desc_t dx_desc, void *dx,
                                        void *dgamma, void *dbeta,
                                        void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(dy_desc);
    FNORM_REQUIRE_NOT_NULL(dx_desc);
    const NormBwdArgs a{x, dy, mean, rstd, gamma, dsum, dx, dgamma, dbeta, workspace, workspace_bytes};
    const NormProblem pb = describe_norm_bwd(norm, x_desc, dy_desc, dx_desc, w_desc, a.present());
    check_norm_bwd_args(handle, pb, a);
    const cudaStream_t st = cuda_stream(stream);
    if (pb.elements() == 0) {
      if (pb.cols != 0 && (dgamma != nullptr || dbeta != nullptr)) {
        DeviceGuard guard(handle->device);
        zero_weight_grads(pb, a, st);
      }
      return;
    }
    DeviceGuard guard(handle->device);
    const NormBwdPlan &plan = norm_bwd_plan(handle, pb, bwd_pack(pb, a));
    require_workspace(workspace, workspace_bytes, plan.workspace.bytes, "fnorm_norm_bwd_workspace_size", 16);
    launch_bwd(pb, plan, a, st);
  });
}

}  // extern "C"
