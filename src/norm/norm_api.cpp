/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm entry points: each one call of the op contract's
// driver (core/run_op.hpp) over NormFwd or NormBwd (norm.hpp).
#include "core/run_op.hpp"
#include "norm/norm.hpp"

using fnorm::NormBwd;
using fnorm::NormFwd;

extern "C" {

FNORM_API fnorm_status_t fnorm_norm_fwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t y_desc,
                                                       size_t *workspace_bytes) {
  return fnorm::query_op<NormFwd>(__func__, handle, {norm, x_desc, nullptr, y_desc}, workspace_bytes);
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
  return fnorm::run_op<NormFwd>(__func__, handle, stream, {norm, x_desc, w_desc, y_desc},
                                {x, residual, sum, gamma, beta, y, mean, rstd, nullptr, nullptr, workspace,
                                 workspace_bytes});
}

FNORM_API fnorm_status_t fnorm_norm_fwd_quant_workspace_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                                             fnorm_tensor_desc_t x_desc,
                                                             fnorm_tensor_desc_t y_desc,
                                                             fnorm_quant_scaling_t scaling,
                                                             size_t *workspace_bytes) {
  return fnorm::query_op<NormFwd>(__func__, handle, {norm, x_desc, nullptr, y_desc, true, scaling},
                                  workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_norm_fwd_quant_scale_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                                         fnorm_tensor_desc_t x_desc,
                                                         fnorm_quant_scaling_t scaling, size_t *scale_bytes) {
  // x's own layout stands in for y's: the answer depends on the rows only.
  return fnorm::query_op<NormFwd>(__func__, handle, {norm, x_desc, nullptr, x_desc}, scale_bytes, "scale_bytes",
                                  [scaling](fnorm_handle *, fnorm::NormProblem pb) {
                                    pb.present |= fnorm::quant_scaling_bit(scaling);
                                    return fnorm::quant_scale_bytes(pb);
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
  return fnorm::run_op<NormFwd>(__func__, handle, stream, {norm, x_desc, w_desc, y_desc, true, scaling},
                                {x, residual, sum, gamma, beta, y, mean, rstd, scale, amax, workspace,
                                 workspace_bytes});
}

FNORM_API fnorm_status_t fnorm_norm_bwd_workspace_size(fnorm_handle_t handle,
                                                       fnorm_norm_desc_t norm,
                                                       fnorm_tensor_desc_t x_desc,
                                                       fnorm_tensor_desc_t w_desc,
                                                       size_t *workspace_bytes) {
  return fnorm::query_op<NormBwd>(__func__, handle, {norm, x_desc, nullptr, nullptr, w_desc}, workspace_bytes);
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
  return fnorm::run_op<NormBwd>(__func__, handle, stream, {norm, x_desc, dy_desc, dx_desc, w_desc},
                                {x, dy, mean, rstd, gamma, dsum, dx, dgamma, dbeta, workspace, workspace_bytes});
}

}  // extern "C"
