/* See shim.h: call, then (on failure) read the calling thread's message in
 * the same C call. */
#include "shim.h"

#include <stdlib.h>

/* A failing status brings its message with it, read on this very thread. */
static fnorm_status_t gofn_ret(fnorm_status_t status, char **msg) {
  if (status != FNORM_STATUS_SUCCESS && msg != NULL) {
    size_t n = fnorm_get_last_error_message(NULL, 0);
    char *buf = malloc(n + 1);
    if (buf != NULL) {
      fnorm_get_last_error_message(buf, n + 1);
      *msg = buf;
    }
  }
  return status;
}

#define VP(p) ((void *)(p))
#define CVP(p) ((const void *)(p))
#define FP(p) ((float *)(p))
#define CFP(p) ((const float *)(p))
#define STREAM(s) ((fnorm_stream_t)(s))

fnorm_status_t gofn_create(fnorm_handle_t *handle, char **msg) {
  return gofn_ret(fnorm_create(handle), msg);
}
fnorm_status_t gofn_destroy(fnorm_handle_t handle, char **msg) {
  return gofn_ret(fnorm_destroy(handle), msg);
}
fnorm_status_t gofn_get_device(fnorm_handle_t handle, int *device, char **msg) {
  return gofn_ret(fnorm_get_device(handle, device), msg);
}

fnorm_status_t gofn_tensor_desc_create(fnorm_tensor_desc_t *desc, char **msg) {
  return gofn_ret(fnorm_tensor_desc_create(desc), msg);
}
fnorm_status_t gofn_tensor_desc_destroy(fnorm_tensor_desc_t desc, char **msg) {
  return gofn_ret(fnorm_tensor_desc_destroy(desc), msg);
}
fnorm_status_t gofn_tensor_desc_set(fnorm_tensor_desc_t desc, fnorm_dtype_t dtype, int32_t rank,
                                    const int64_t *dims, const int64_t *strides, char **msg) {
  return gofn_ret(fnorm_tensor_desc_set(desc, dtype, rank, dims, strides), msg);
}
fnorm_status_t gofn_tensor_desc_get(fnorm_tensor_desc_t desc, fnorm_dtype_t *dtype, int32_t *rank,
                                    int64_t *dims, int64_t *strides, int32_t max_rank, char **msg) {
  return gofn_ret(fnorm_tensor_desc_get(desc, dtype, rank, dims, strides, max_rank), msg);
}
fnorm_status_t gofn_tensor_desc_get_elements(fnorm_tensor_desc_t desc, int64_t *elements,
                                             char **msg) {
  return gofn_ret(fnorm_tensor_desc_get_elements(desc, elements), msg);
}

fnorm_status_t gofn_norm_desc_create(fnorm_norm_desc_t *desc, char **msg) {
  return gofn_ret(fnorm_norm_desc_create(desc), msg);
}
fnorm_status_t gofn_norm_desc_destroy(fnorm_norm_desc_t desc, char **msg) {
  return gofn_ret(fnorm_norm_desc_destroy(desc), msg);
}
fnorm_status_t gofn_norm_desc_set(fnorm_norm_desc_t desc, fnorm_norm_mode_t mode,
                                  int32_t begin_norm_axis, double epsilon, char **msg) {
  return gofn_ret(fnorm_norm_desc_set(desc, mode, begin_norm_axis, epsilon), msg);
}
fnorm_status_t gofn_norm_desc_get(fnorm_norm_desc_t desc, fnorm_norm_mode_t *mode,
                                  int32_t *begin_norm_axis, double *epsilon, char **msg) {
  return gofn_ret(fnorm_norm_desc_get(desc, mode, begin_norm_axis, epsilon), msg);
}
fnorm_status_t gofn_norm_desc_set_flags(fnorm_norm_desc_t desc, uint32_t flags, char **msg) {
  return gofn_ret(fnorm_norm_desc_set_flags(desc, flags), msg);
}
fnorm_status_t gofn_norm_desc_get_flags(fnorm_norm_desc_t desc, uint32_t *flags, char **msg) {
  return gofn_ret(fnorm_norm_desc_get_flags(desc, flags), msg);
}

fnorm_status_t gofn_norm_fwd_workspace_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                            fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t y_desc,
                                            size_t *bytes, char **msg) {
  return gofn_ret(fnorm_norm_fwd_workspace_size(handle, norm, x_desc, y_desc, bytes), msg);
}
fnorm_status_t gofn_norm_fwd(fnorm_handle_t handle, uintptr_t stream, fnorm_norm_desc_t norm,
                             fnorm_tensor_desc_t x_desc, uintptr_t x, uintptr_t residual,
                             uintptr_t sum, fnorm_tensor_desc_t w_desc, uintptr_t gamma,
                             uintptr_t beta, fnorm_tensor_desc_t y_desc, uintptr_t y,
                             uintptr_t mean, uintptr_t rstd, uintptr_t workspace,
                             size_t workspace_bytes, char **msg) {
  return gofn_ret(fnorm_norm_fwd(handle, STREAM(stream), norm, x_desc, CVP(x), CVP(residual),
                                 VP(sum), w_desc, CVP(gamma), CVP(beta), y_desc, VP(y), FP(mean),
                                 FP(rstd), VP(workspace), workspace_bytes),
                  msg);
}
fnorm_status_t gofn_norm_bwd_workspace_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                            fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                            size_t *bytes, char **msg) {
  return gofn_ret(fnorm_norm_bwd_workspace_size(handle, norm, x_desc, w_desc, bytes), msg);
}
fnorm_status_t gofn_norm_bwd(fnorm_handle_t handle, uintptr_t stream, fnorm_norm_desc_t norm,
                             fnorm_tensor_desc_t x_desc, uintptr_t x, fnorm_tensor_desc_t dy_desc,
                             uintptr_t dy, uintptr_t mean, uintptr_t rstd,
                             fnorm_tensor_desc_t w_desc, uintptr_t gamma, uintptr_t dsum,
                             fnorm_tensor_desc_t dx_desc, uintptr_t dx, uintptr_t dgamma,
                             uintptr_t dbeta, uintptr_t workspace, size_t workspace_bytes,
                             char **msg) {
  return gofn_ret(fnorm_norm_bwd(handle, STREAM(stream), norm, x_desc, CVP(x), dy_desc, CVP(dy),
                                 CFP(mean), CFP(rstd), w_desc, CVP(gamma), CVP(dsum), dx_desc,
                                 VP(dx), VP(dgamma), VP(dbeta), VP(workspace), workspace_bytes),
                  msg);
}

fnorm_status_t gofn_batchnorm_desc_create(fnorm_batchnorm_desc_t *desc, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_create(desc), msg);
}
fnorm_status_t gofn_batchnorm_desc_destroy(fnorm_batchnorm_desc_t desc, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_destroy(desc), msg);
}
fnorm_status_t gofn_batchnorm_desc_set(fnorm_batchnorm_desc_t desc, fnorm_bn_epilogue_t epilogue,
                                       double epsilon, fnorm_bn_average_t average,
                                       double momentum, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_set(desc, epilogue, epsilon, average, momentum), msg);
}
fnorm_status_t gofn_batchnorm_desc_get(fnorm_batchnorm_desc_t desc, fnorm_bn_epilogue_t *epilogue,
                                       double *epsilon, fnorm_bn_average_t *average,
                                       double *momentum, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_get(desc, epilogue, epsilon, average, momentum), msg);
}
fnorm_status_t gofn_batchnorm_desc_set_engine(fnorm_batchnorm_desc_t desc,
                                              fnorm_bn_engine_t engine, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_set_engine(desc, engine), msg);
}
fnorm_status_t gofn_batchnorm_desc_get_engine(fnorm_batchnorm_desc_t desc,
                                              fnorm_bn_engine_t *engine, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_get_engine(desc, engine), msg);
}
fnorm_status_t gofn_batchnorm_desc_set_comm(fnorm_batchnorm_desc_t desc, struct ncclComm *comm,
                                            uint32_t flags, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_set_comm(desc, comm, flags), msg);
}
fnorm_status_t gofn_batchnorm_desc_get_comm(fnorm_batchnorm_desc_t desc, struct ncclComm **comm,
                                            uint32_t *flags, char **msg) {
  return gofn_ret(fnorm_batchnorm_desc_get_comm(desc, comm, flags), msg);
}
fnorm_status_t gofn_batchnorm_fwd_train_workspace_size(fnorm_handle_t handle,
                                                       fnorm_batchnorm_desc_t bn,
                                                       fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                       char **msg) {
  return gofn_ret(fnorm_batchnorm_fwd_train_workspace_size(handle, bn, x_desc, bytes), msg);
}
fnorm_status_t gofn_batchnorm_reserve_space_size(fnorm_handle_t handle, fnorm_batchnorm_desc_t bn,
                                                 fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                 char **msg) {
  return gofn_ret(fnorm_batchnorm_reserve_space_size(handle, bn, x_desc, bytes), msg);
}
fnorm_status_t gofn_batchnorm_fwd_train(fnorm_handle_t handle, uintptr_t stream,
                                        fnorm_batchnorm_desc_t bn, fnorm_tensor_desc_t x_desc,
                                        uintptr_t x, uintptr_t z, uintptr_t gamma, uintptr_t beta,
                                        uintptr_t running_mean, uintptr_t running_var,
                                        uintptr_t num_batches_tracked, fnorm_tensor_desc_t y_desc,
                                        uintptr_t y, uintptr_t saved_mean, uintptr_t saved_invstd,
                                        uintptr_t workspace, size_t workspace_bytes,
                                        uintptr_t reserve, size_t reserve_bytes, char **msg) {
  return gofn_ret(
      fnorm_batchnorm_fwd_train(handle, STREAM(stream), bn, x_desc, CVP(x), CVP(z), CFP(gamma),
                                CFP(beta), FP(running_mean), FP(running_var),
                                (int64_t *)num_batches_tracked, y_desc, VP(y), FP(saved_mean),
                                FP(saved_invstd), VP(workspace), workspace_bytes, VP(reserve),
                                reserve_bytes),
      msg);
}
fnorm_status_t gofn_batchnorm_fwd_infer_workspace_size(fnorm_handle_t handle,
                                                       fnorm_batchnorm_desc_t bn,
                                                       fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                       char **msg) {
  return gofn_ret(fnorm_batchnorm_fwd_infer_workspace_size(handle, bn, x_desc, bytes), msg);
}
fnorm_status_t gofn_batchnorm_fwd_infer(fnorm_handle_t handle, uintptr_t stream,
                                        fnorm_batchnorm_desc_t bn, fnorm_tensor_desc_t x_desc,
                                        uintptr_t x, uintptr_t z, uintptr_t gamma, uintptr_t beta,
                                        uintptr_t running_mean, uintptr_t running_var,
                                        fnorm_tensor_desc_t y_desc, uintptr_t y,
                                        uintptr_t workspace, size_t workspace_bytes, char **msg) {
  return gofn_ret(fnorm_batchnorm_fwd_infer(handle, STREAM(stream), bn, x_desc, CVP(x), CVP(z),
                                            CFP(gamma), CFP(beta), CFP(running_mean),
                                            CFP(running_var), y_desc, VP(y), VP(workspace),
                                            workspace_bytes),
                  msg);
}
fnorm_status_t gofn_batchnorm_bwd_workspace_size(fnorm_handle_t handle, fnorm_batchnorm_desc_t bn,
                                                 fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                 char **msg) {
  return gofn_ret(fnorm_batchnorm_bwd_workspace_size(handle, bn, x_desc, bytes), msg);
}
fnorm_status_t gofn_batchnorm_bwd(fnorm_handle_t handle, uintptr_t stream,
                                  fnorm_batchnorm_desc_t bn, fnorm_tensor_desc_t x_desc,
                                  uintptr_t x, fnorm_tensor_desc_t dy_desc, uintptr_t dy,
                                  uintptr_t y, uintptr_t gamma, uintptr_t beta,
                                  uintptr_t saved_mean, uintptr_t saved_invstd, uintptr_t reserve,
                                  size_t reserve_bytes, fnorm_tensor_desc_t dx_desc, uintptr_t dx,
                                  uintptr_t dz, uintptr_t dgamma, uintptr_t dbeta,
                                  uintptr_t workspace, size_t workspace_bytes, char **msg) {
  return gofn_ret(fnorm_batchnorm_bwd(handle, STREAM(stream), bn, x_desc, CVP(x), dy_desc,
                                      CVP(dy), CVP(y), CFP(gamma), CFP(beta), CFP(saved_mean),
                                      CFP(saved_invstd), CVP(reserve), reserve_bytes, dx_desc,
                                      VP(dx), VP(dz), FP(dgamma), FP(dbeta), VP(workspace),
                                      workspace_bytes),
                  msg);
}

fnorm_status_t gofn_linear_desc_create(fnorm_linear_desc_t *desc, char **msg) {
  return gofn_ret(fnorm_linear_desc_create(desc), msg);
}
fnorm_status_t gofn_linear_desc_destroy(fnorm_linear_desc_t desc, char **msg) {
  return gofn_ret(fnorm_linear_desc_destroy(desc), msg);
}
fnorm_status_t gofn_linear_desc_set(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t epilogue,
                                    fnorm_linear_weight_layout_t weight_layout, uint32_t flags,
                                    char **msg) {
  return gofn_ret(fnorm_linear_desc_set(desc, epilogue, weight_layout, flags), msg);
}
fnorm_status_t gofn_linear_desc_get(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t *epilogue,
                                    fnorm_linear_weight_layout_t *weight_layout, uint32_t *flags,
                                    char **msg) {
  return gofn_ret(fnorm_linear_desc_get(desc, epilogue, weight_layout, flags), msg);
}
fnorm_status_t gofn_linear_aux_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                    fnorm_tensor_desc_t y_desc, size_t *bytes, char **msg) {
  return gofn_ret(fnorm_linear_aux_size(handle, desc, y_desc, bytes), msg);
}
fnorm_status_t gofn_linear_fwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                              fnorm_tensor_desc_t x_desc,
                                              fnorm_tensor_desc_t w_desc,
                                              fnorm_tensor_desc_t y_desc, size_t *bytes,
                                              char **msg) {
  return gofn_ret(fnorm_linear_fwd_workspace_size(handle, desc, x_desc, w_desc, y_desc, bytes),
                  msg);
}
fnorm_status_t gofn_linear_fwd(fnorm_handle_t handle, uintptr_t stream, fnorm_linear_desc_t desc,
                               fnorm_tensor_desc_t x_desc, uintptr_t x, fnorm_tensor_desc_t w_desc,
                               uintptr_t w, uintptr_t bias, fnorm_tensor_desc_t y_desc,
                               uintptr_t y, uintptr_t aux, size_t aux_bytes, uintptr_t workspace,
                               size_t workspace_bytes, char **msg) {
  return gofn_ret(fnorm_linear_fwd(handle, STREAM(stream), desc, x_desc, CVP(x), w_desc, CVP(w),
                                   CVP(bias), y_desc, VP(y), VP(aux), aux_bytes, VP(workspace),
                                   workspace_bytes),
                  msg);
}
fnorm_status_t gofn_linear_bwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                              fnorm_tensor_desc_t x_desc,
                                              fnorm_tensor_desc_t w_desc,
                                              fnorm_tensor_desc_t dy_desc,
                                              fnorm_linear_desc_t x_producer, size_t *bytes,
                                              char **msg) {
  return gofn_ret(
      fnorm_linear_bwd_workspace_size(handle, desc, x_desc, w_desc, dy_desc, x_producer, bytes),
      msg);
}
fnorm_status_t gofn_linear_bwd(fnorm_handle_t handle, uintptr_t stream, fnorm_linear_desc_t desc,
                               fnorm_tensor_desc_t x_desc, uintptr_t x, fnorm_tensor_desc_t w_desc,
                               uintptr_t w, fnorm_tensor_desc_t dy_desc, uintptr_t dy,
                               uintptr_t aux, size_t aux_bytes, fnorm_linear_desc_t x_producer,
                               uintptr_t x_aux, size_t x_aux_bytes, fnorm_tensor_desc_t dx_desc,
                               uintptr_t dx, uintptr_t dw, uintptr_t db, uintptr_t x_db,
                               uintptr_t workspace, size_t workspace_bytes, char **msg) {
  return gofn_ret(fnorm_linear_bwd(handle, STREAM(stream), desc, x_desc, CVP(x), w_desc, CVP(w),
                                   dy_desc, CVP(dy), CVP(aux), aux_bytes, x_producer, CVP(x_aux),
                                   x_aux_bytes, dx_desc, VP(dx), VP(dw), VP(db), VP(x_db),
                                   VP(workspace), workspace_bytes),
                  msg);
}
