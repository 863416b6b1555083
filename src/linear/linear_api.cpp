/* SPDX-License-Identifier: Apache-2.0 */
// Fully-connected entry points: each one call of the op contract's driver
// (core/run_op.hpp) over LinearFwd or LinearBwd (linear.hpp).
#include "core/run_op.hpp"
#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

using fnorm::LinearBwd;
using fnorm::LinearFwd;

extern "C" {

FNORM_API fnorm_status_t fnorm_linear_fwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                                         fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                                         fnorm_tensor_desc_t y_desc, size_t *workspace_bytes) {
  return fnorm::query_op<LinearFwd>(__func__, handle, {desc, x_desc, w_desc, y_desc}, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_linear_fwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                          const void *w, const void *bias, fnorm_tensor_desc_t y_desc, void *y,
                                          void *aux, size_t aux_bytes, void *workspace, size_t workspace_bytes) {
  return fnorm::run_op<LinearFwd>(__func__, handle, stream, {desc, x_desc, w_desc, y_desc},
                                  {x, w, bias, y, aux, aux_bytes, workspace, workspace_bytes});
}


FNORM_API fnorm_status_t fnorm_linear_bwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                                         fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                                         fnorm_tensor_desc_t dy_desc, fnorm_linear_desc_t x_producer,
                                                         size_t *workspace_bytes) {
  return fnorm::query_op<LinearBwd>(__func__, handle, {desc, x_desc, w_desc, dy_desc, x_producer},
                                    workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_linear_bwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                          const void *w, fnorm_tensor_desc_t dy_desc, const void *dy,
                                          const void *aux, size_t aux_bytes, fnorm_linear_desc_t x_producer,
                                          const void *x_aux, size_t x_aux_bytes, fnorm_tensor_desc_t dx_desc,
                                          void *dx, void *dw, void *db, void *x_db, void *workspace,
                                          size_t workspace_bytes) {
  return fnorm::run_op<LinearBwd>(
      __func__, handle, stream, {desc, x_desc, w_desc, dy_desc, x_producer, dx_desc},
      {x, w, dy, aux, x_aux, dx, dw, db, x_db, aux_bytes, x_aux_bytes, workspace, workspace_bytes});
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
