/* The C half of the Go binding: one wrapper per fallible fnorm_* function.
 *
 * Why wrappers at all:
 *  - the last-error message is per OS thread, and a goroutine may move to
 *    another thread between two cgo calls: each wrapper reads the message in
 *    the same C call as the failing function (gofn_ret) and hands it back
 *    malloc'ed through `msg` (the Go side frees it);
 *  - device pointers and streams travel as uintptr_t and become pointers
 *    here, so the Go side never converts a uintptr into an unsafe.Pointer
 *    (which `go vet` rightly flags).
 * Each wrapper is named gofn_<name> for fnorm_<name>; symbols_test.go checks
 * that every exported symbol is reached through one. */
#ifndef FUSEDNORM_GO_SHIM_H
#define FUSEDNORM_GO_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include <fusednorm.h>

fnorm_status_t gofn_create(fnorm_handle_t *handle, char **msg);
fnorm_status_t gofn_destroy(fnorm_handle_t handle, char **msg);
fnorm_status_t gofn_get_device(fnorm_handle_t handle, int *device, char **msg);

fnorm_status_t gofn_tensor_desc_create(fnorm_tensor_desc_t *desc, char **msg);
fnorm_status_t gofn_tensor_desc_destroy(fnorm_tensor_desc_t desc, char **msg);
fnorm_status_t gofn_tensor_desc_set(fnorm_tensor_desc_t desc, fnorm_dtype_t dtype, int32_t rank,
                                    const int64_t *dims, const int64_t *strides, char **msg);
fnorm_status_t gofn_tensor_desc_get(fnorm_tensor_desc_t desc, fnorm_dtype_t *dtype, int32_t *rank,
                                    int64_t *dims, int64_t *strides, int32_t max_rank, char **msg);
fnorm_status_t gofn_tensor_desc_get_elements(fnorm_tensor_desc_t desc, int64_t *elements,
                                             char **msg);

fnorm_status_t gofn_norm_desc_create(fnorm_norm_desc_t *desc, char **msg);
fnorm_status_t gofn_norm_desc_destroy(fnorm_norm_desc_t desc, char **msg);
fnorm_status_t gofn_norm_desc_set(fnorm_norm_desc_t desc, fnorm_norm_mode_t mode,
                                  int32_t begin_norm_axis, double epsilon, char **msg);
fnorm_status_t gofn_norm_desc_get(fnorm_norm_desc_t desc, fnorm_norm_mode_t *mode,
                                  int32_t *begin_norm_axis, double *epsilon, char **msg);
fnorm_status_t gofn_norm_desc_set_flags(fnorm_norm_desc_t desc, uint32_t flags, char **msg);
fnorm_status_t gofn_norm_desc_get_flags(fnorm_norm_desc_t desc, uint32_t *flags, char **msg);

fnorm_status_t gofn_norm_fwd_workspace_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                            fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t y_desc,
                                            size_t *bytes, char **msg);
fnorm_status_t gofn_norm_fwd(fnorm_handle_t handle, uintptr_t stream, fnorm_norm_desc_t norm,
                             fnorm_tensor_desc_t x_desc, uintptr_t x, uintptr_t residual,
                             uintptr_t sum, fnorm_tensor_desc_t w_desc, uintptr_t gamma,
                             uintptr_t beta, fnorm_tensor_desc_t y_desc, uintptr_t y,
                             uintptr_t mean, uintptr_t rstd, uintptr_t workspace,
                             size_t workspace_bytes, char **msg);
fnorm_status_t gofn_norm_bwd_workspace_size(fnorm_handle_t handle, fnorm_norm_desc_t norm,
                                            fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                            size_t *bytes, char **msg);
fnorm_status_t gofn_norm_bwd(fnorm_handle_t handle, uintptr_t stream, fnorm_norm_desc_t norm,
                             fnorm_tensor_desc_t x_desc, uintptr_t x, fnorm_tensor_desc_t dy_desc,
                             uintptr_t dy, uintptr_t mean, uintptr_t rstd,
                             fnorm_tensor_desc_t w_desc, uintptr_t gamma, uintptr_t dsum,
                             fnorm_tensor_desc_t dx_desc, uintptr_t dx, uintptr_t dgamma,
                             uintptr_t dbeta, uintptr_t workspace, size_t workspace_bytes,
                             char **msg);

fnorm_status_t gofn_batchnorm_desc_create(fnorm_batchnorm_desc_t *desc, char **msg);
fnorm_status_t gofn_batchnorm_desc_destroy(fnorm_batchnorm_desc_t desc, char **msg);
fnorm_status_t gofn_batchnorm_desc_set(fnorm_batchnorm_desc_t desc, fnorm_bn_epilogue_t epilogue,
                                       double epsilon, fnorm_bn_average_t average,
                                       double momentum, char **msg);
fnorm_status_t gofn_batchnorm_desc_get(fnorm_batchnorm_desc_t desc, fnorm_bn_epilogue_t *epilogue,
                                       double *epsilon, fnorm_bn_average_t *average,
                                       double *momentum, char **msg);
fnorm_status_t gofn_batchnorm_desc_set_engine(fnorm_batchnorm_desc_t desc,
                                              fnorm_bn_engine_t engine, char **msg);
fnorm_status_t gofn_batchnorm_desc_get_engine(fnorm_batchnorm_desc_t desc,
                                              fnorm_bn_engine_t *engine, char **msg);
fnorm_status_t gofn_batchnorm_desc_set_comm(fnorm_batchnorm_desc_t desc, struct ncclComm *comm,
                                            uint32_t flags, char **msg);
fnorm_status_t gofn_batchnorm_desc_get_comm(fnorm_batchnorm_desc_t desc, struct ncclComm **comm,
                                            uint32_t *flags, char **msg);
fnorm_status_t gofn_batchnorm_fwd_train_workspace_size(fnorm_handle_t handle,
                                                       fnorm_batchnorm_desc_t bn,
                                                       fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                       char **msg);
fnorm_status_t gofn_batchnorm_reserve_space_size(fnorm_handle_t handle, fnorm_batchnorm_desc_t bn,
                                                 fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                 char **msg);
fnorm_status_t gofn_batchnorm_fwd_train(fnorm_handle_t handle, uintptr_t stream,
                                        fnorm_batchnorm_desc_t bn, fnorm_tensor_desc_t x_desc,
                                        uintptr_t x, uintptr_t z, uintptr_t gamma, uintptr_t beta,
                                        uintptr_t running_mean, uintptr_t running_var,
                                        uintptr_t num_batches_tracked, fnorm_tensor_desc_t y_desc,
                                        uintptr_t y, uintptr_t saved_mean, uintptr_t saved_invstd,
                                        uintptr_t workspace, size_t workspace_bytes,
                                        uintptr_t reserve, size_t reserve_bytes, char **msg);
fnorm_status_t gofn_batchnorm_fwd_infer_workspace_size(fnorm_handle_t handle,
                                                       fnorm_batchnorm_desc_t bn,
                                                       fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                       char **msg);
fnorm_status_t gofn_batchnorm_fwd_infer(fnorm_handle_t handle, uintptr_t stream,
                                        fnorm_batchnorm_desc_t bn, fnorm_tensor_desc_t x_desc,
                                        uintptr_t x, uintptr_t z, uintptr_t gamma, uintptr_t beta,
                                        uintptr_t running_mean, uintptr_t running_var,
                                        fnorm_tensor_desc_t y_desc, uintptr_t y,
                                        uintptr_t workspace, size_t workspace_bytes, char **msg);
fnorm_status_t gofn_batchnorm_bwd_workspace_size(fnorm_handle_t handle, fnorm_batchnorm_desc_t bn,
                                                 fnorm_tensor_desc_t x_desc, size_t *bytes,
                                                 char **msg);
fnorm_status_t gofn_batchnorm_bwd(fnorm_handle_t handle, uintptr_t stream,
                                  fnorm_batchnorm_desc_t bn, fnorm_tensor_desc_t x_desc,
                                  uintptr_t x, fnorm_tensor_desc_t dy_desc, uintptr_t dy,
                                  uintptr_t y, uintptr_t gamma, uintptr_t beta,
                                  uintptr_t saved_mean, uintptr_t saved_invstd, uintptr_t reserve,
                                  size_t reserve_bytes, fnorm_tensor_desc_t dx_desc, uintptr_t dx,
                                  uintptr_t dz, uintptr_t dgamma, uintptr_t dbeta,
                                  uintptr_t workspace, size_t workspace_bytes, char **msg);

fnorm_status_t gofn_linear_desc_create(fnorm_linear_desc_t *desc, char **msg);
fnorm_status_t gofn_linear_desc_destroy(fnorm_linear_desc_t desc, char **msg);
fnorm_status_t gofn_linear_desc_set(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t epilogue,
                                    fnorm_linear_weight_layout_t weight_layout, uint32_t flags,
                                    char **msg);
fnorm_status_t gofn_linear_desc_get(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t *epilogue,
                                    fnorm_linear_weight_layout_t *weight_layout, uint32_t *flags,
                                    char **msg);
fnorm_status_t gofn_linear_aux_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                    fnorm_tensor_desc_t y_desc, size_t *bytes, char **msg);
fnorm_status_t gofn_linear_fwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                              fnorm_tensor_desc_t x_desc,
                                              fnorm_tensor_desc_t w_desc,
                                              fnorm_tensor_desc_t y_desc, size_t *bytes,
                                              char **msg);
fnorm_status_t gofn_linear_fwd(fnorm_handle_t handle, uintptr_t stream, fnorm_linear_desc_t desc,
                               fnorm_tensor_desc_t x_desc, uintptr_t x, fnorm_tensor_desc_t w_desc,
                               uintptr_t w, uintptr_t bias, fnorm_tensor_desc_t y_desc,
                               uintptr_t y, uintptr_t aux, size_t aux_bytes, uintptr_t workspace,
                               size_t workspace_bytes, char **msg);
fnorm_status_t gofn_linear_bwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                              fnorm_tensor_desc_t x_desc,
                                              fnorm_tensor_desc_t w_desc,
                                              fnorm_tensor_desc_t dy_desc,
                                              fnorm_linear_desc_t x_producer, size_t *bytes,
                                              char **msg);
fnorm_status_t gofn_linear_bwd(fnorm_handle_t handle, uintptr_t stream, fnorm_linear_desc_t desc,
                               fnorm_tensor_desc_t x_desc, uintptr_t x, fnorm_tensor_desc_t w_desc,
                               uintptr_t w, fnorm_tensor_desc_t dy_desc, uintptr_t dy,
                               uintptr_t aux, size_t aux_bytes, fnorm_linear_desc_t x_producer,
                               uintptr_t x_aux, size_t x_aux_bytes, fnorm_tensor_desc_t dx_desc,
                               uintptr_t dx, uintptr_t dw, uintptr_t db, uintptr_t x_db,
                               uintptr_t workspace, size_t workspace_bytes, char **msg);

#endif
