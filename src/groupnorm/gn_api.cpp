/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm entry points: each one call of the op contract's driver
// (core/run_op.hpp) over GnFwd or GnBwd (groupnorm.hpp).
#include "core/run_op.hpp"
#include "groupnorm/groupnorm.hpp"

using fnorm::GnBwd;
using fnorm::GnFwd;

extern "C" {

FNORM_API fnorm_status_t fnorm_groupnorm_fwd_workspace_size(fnorm_handle_t handle, fnorm_groupnorm_desc_t gn,
                                                            fnorm_tensor_desc_t x_desc, size_t *workspace_bytes) {
  return fnorm::query_op<GnFwd>(__func__, handle, {gn, x_desc, nullptr, nullptr, nullptr}, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_groupnorm_fwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_groupnorm_desc_t gn,
                                             fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                             const void *gamma, const void *beta, fnorm_tensor_desc_t ss_desc,
                                             const void *scale, const void *shift, fnorm_tensor_desc_t y_desc,
                                             void *y, float *mean, float *rstd, void *workspace,
                                             size_t workspace_bytes) {
  return fnorm::run_op<GnFwd>(__func__, handle, stream, {gn, x_desc, w_desc, ss_desc, y_desc},
                              {x, gamma, beta, scale, shift, y, mean, rstd, workspace, workspace_bytes});
}

FNORM_API fnorm_status_t fnorm_groupnorm_bwd_workspace_size(fnorm_handle_t handle, fnorm_groupnorm_desc_t gn,
                                                            fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                                            fnorm_tensor_desc_t ss_desc, size_t *workspace_bytes) {
  return fnorm::query_op<GnBwd>(__func__, handle, {gn, x_desc, nullptr, w_desc, ss_desc, nullptr}, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_groupnorm_bwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_groupnorm_desc_t gn,
                                             fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t dy_desc,
                                             const void *dy, const float *mean, const float *rstd,
                                             fnorm_tensor_desc_t w_desc, const void *gamma, const void *beta,
                                             fnorm_tensor_desc_t ss_desc, const void *scale, const void *shift,
                                             fnorm_tensor_desc_t dx_desc, void *dx, void *dgamma, void *dbeta,
                                             void *dscale, void *dshift, void *workspace, size_t workspace_bytes) {
  return fnorm::run_op<GnBwd>(__func__, handle, stream, {gn, x_desc, dy_desc, w_desc, ss_desc, dx_desc},
                              {x, dy, mean, rstd, gamma, beta, scale, shift, dx, dgamma, dbeta, dscale, dshift,
                               workspace, workspace_bytes});
}

}  // extern "C"
