// LayerNorm / RMSNorm entry points: validate (norm_validate.cpp), plan
// (norm_plan.cpp), launch the planned instance from the generated dispatch
// table.
#include <algorithm>

#include "core/column_sums.hpp"
#include "core/pointer_check.hpp"
#include "norm/norm.hpp"

extern "C" {

FNORM_API fnorm_status_t fnorm_norm_fwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t y_desc,
                                                       size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    (void)fnorm::check_norm_fwd_descs(norm, x_desc, y_desc);
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
    const RowView v = check_norm_fwd_descs(norm, x_desc, y_desc);
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(y);
    const bool rms = norm->mode == FNORM_NORM_RMSNORM;
    FNORM_REQUIRE(!(rms && beta != nullptr), FNORM_STATUS_BAD_PARAM,
                  "argument 'beta' must be NULL: RMSNorm has no shift");
    FNORM_REQUIRE(!(rms && mean != nullptr), FNORM_STATUS_BAD_PARAM,
                  "argument 'mean' must be NULL: RMSNorm saves only rrms (in 'rstd')");
    FNORM_REQUIRE(sum == nullptr || residual != nullptr, FNORM_STATUS_BAD_PARAM,
                  "argument 'sum' is given without 'residual'");
    const bool param_f32 = check_weight_desc(w_desc, x_desc, v, gamma != nullptr || beta != nullptr);
    const Span rx = row_span("x", x, v, v.x_row_stride), rr = row_span("residual", residual, v, v.x_row_stride),
               rs = row_span("sum", sum, v, v.x_row_stride), ry = row_span("y", y, v, v.y_row_stride);
    require_disjoint(ry, {rx, rr, rs}, {"x"});
    require_disjoint(rs, {rx, rr}, {"x", "residual"});
    (void)workspace;
    (void)workspace_bytes;  // the size query answers 0 for every forward
    const size_t param_bytes = param_vector_bytes(v, param_f32), stat_bytes = row_stat_bytes(v);
    require_device_memory(handle, {rx, rr, rs, ry, {"gamma", gamma, param_bytes}, {"beta", beta, param_bytes},
                                   {"mean", mean, stat_bytes}, {"rstd", rstd, stat_bytes}});

    DeviceGuard guard(handle->device);
    const LaunchContext ctx = launch_context(handle, stream);
    const int pack = choose_pack(v, {x, y, residual, sum}, {v.x_row_stride, v.y_row_stride},
                                 {gamma, beta}, param_f32);
    const NormFwdPlan plan = plan_norm_fwd(v, pack, ctx, rms, residual != nullptr);
    NormFwdParams p = norm_fwd_params(v, norm, plan);
    p.x = x;
    p.residual = residual;
    p.sum = sum;
    p.y = y;
    p.gamma = gamma;
    p.beta = beta;
    p.mean = mean;
    p.rstd = rstd;
    p.param_f32 = param_f32 || v.dtype == FNORM_DTYPE_FLOAT32;
    check_cuda(plan.instance->launch(p, ctx), plan.instance->name);
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
    const RowView v = check_norm_bwd_descs(norm, x_desc, nullptr, nullptr);
    const bool want_partials = w_desc != nullptr;
    if (want_partials) (void)check_weight_desc(w_desc, x_desc, v, true);
    DeviceGuard guard(handle->device);
    const LaunchContext ctx = launch_context(handle, nullptr);
    // The launch's pack follows the pointers' alignment: answer for the
    // largest need over every pack the row length allows.
    size_t most = 0;
    for (int pack = static_cast<int>(kMaxPackBytes / dtype_size(v.dtype)); pack >= 1; pack /= 2) {
      if (v.cols % pack != 0) continue;
      most = std::max(most, plan_norm_bwd(v, pack, ctx, norm, want_partials).workspace.bytes);
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
    const RowView v = check_norm_bwd_descs(norm, x_desc, dy_desc, dx_desc);
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(dy);
    FNORM_REQUIRE_NOT_NULL(dx);
    FNORM_REQUIRE_NOT_NULL(rstd);
    const bool rms = norm->mode == FNORM_NORM_RMSNORM;
    if (rms) {
      FNORM_REQUIRE(mean == nullptr, FNORM_STATUS_BAD_PARAM,
                    "argument 'mean' must be NULL for RMSNorm");
      FNORM_REQUIRE(dbeta == nullptr, FNORM_STATUS_BAD_PARAM,
                    "argument 'dbeta' must be NULL: RMSNorm has no shift");
    } else {
      FNORM_REQUIRE_NOT_NULL(mean);
    }
    const bool want_partials = dgamma != nullptr || dbeta != nullptr;
    const bool param_f32 = check_weight_desc(w_desc, x_desc, v, gamma != nullptr || want_partials);
    const Span rx = row_span("x", x, v, v.x_row_stride), rdy = row_span("dy", dy, v, v.y_row_stride),
               rds = row_span("dsum", dsum, v, v.y_row_stride), rdx = row_span("dx", dx, v, v.dx_row_stride);
    require_disjoint(rdx, {rx, rdy, rds}, {"dy", "dsum"});
    const size_t param_bytes = param_vector_bytes(v, param_f32), stat_bytes = row_stat_bytes(v);
    require_device_memory(handle, {rx, rdy, rds, rdx, {"gamma", gamma, param_bytes}, {"mean", mean, stat_bytes},
                                   {"rstd", rstd, stat_bytes}, {"dgamma", dgamma, param_bytes},
                                   {"dbeta", dbeta, param_bytes}, {"workspace", workspace, workspace_bytes}});

    DeviceGuard guard(handle->device);
    const int pack = choose_pack(v, {x, dy, dx, dsum}, {v.x_row_stride, v.y_row_stride, v.dx_row_stride},
                                 {gamma}, param_f32);
    const LaunchContext ctx = launch_context(handle, stream);
    const NormBwdPlan plan = plan_norm_bwd(v, pack, ctx, norm, want_partials);
    require_workspace(workspace, workspace_bytes, plan.workspace.bytes, "fnorm_norm_bwd_workspace_size", 16);
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    NormBwdParams p = norm_bwd_params(v, norm, plan);
    p.x = x;
    p.dy = dy;
    p.gamma = gamma;
    p.dsum = dsum;
    p.mean = mean;
    p.rstd = rstd;
    p.dx = dx;
    p.param_f32 = param_f32 || v.dtype == FNORM_DTYPE_FLOAT32;
    const BwdWorkspace &layout = plan.workspace;
    if (dgamma != nullptr) p.dgamma_partial = reinterpret_cast<float *>(ws + layout.dgamma_offset);
    if (dbeta != nullptr) p.dbeta_partial = reinterpret_cast<float *>(ws + layout.dbeta_offset);
    if (plan.tier == Tier::ColumnTiled) p.row_coef = reinterpret_cast<float *>(ws + layout.coef_offset);
    check_cuda(plan.instance->launch(p, ctx), plan.instance->name);
    if (want_partials) {
      check_cuda(launch_column_sums(p.dgamma_partial, p.dbeta_partial, plan.grid, v.cols,
                                    w_desc->dtype, dgamma, dbeta, ctx.stream),
                 "weight-gradient column sums");
    }
  });
}

}  // extern "C"
