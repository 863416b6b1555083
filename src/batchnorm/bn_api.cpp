/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm / SyncBatchNorm entry points: each one call of the op
// contract's driver (core/run_op.hpp) over BnOp<pass> (batchnorm.hpp).
#include "batchnorm/batchnorm.hpp"
#include "core/run_op.hpp"

using fnorm::BnBwd;
using fnorm::BnFwdInfer;
using fnorm::BnFwdTrain;

namespace {
struct ncclComm *comm_of(const fnorm_batchnorm_desc *bn) { return bn != nullptr ? bn->comm : nullptr; }
}  // namespace

extern "C" {

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes) {
  return fnorm::query_op<BnFwdTrain>(__func__, handle, {handle, bn, x_desc}, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes) {
  return fnorm::query_op<BnFwdInfer>(__func__, handle, {handle, bn, x_desc}, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_bwd_workspace_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *workspace_bytes) {
  return fnorm::query_op<BnBwd>(__func__, handle, {handle, bn, x_desc}, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_reserve_space_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *reserve_bytes) {
  return fnorm::query_op<BnFwdTrain>(__func__, handle, {handle, bn, x_desc}, reserve_bytes, "reserve_bytes",
                                     BnFwdTrain::reserve_size);
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, float *running_mean, float *running_var, int64_t *num_batches_tracked,
    fnorm_tensor_desc_t y_desc, void *y, float *saved_mean, float *saved_invstd, void *workspace,
    size_t workspace_bytes, void *reserve, size_t reserve_bytes) {
  fnorm::BnArgs a;
  a.x = x, a.z = z, a.y = y, a.gamma = gamma, a.beta = beta;
  a.running_mean = running_mean, a.running_var = running_var, a.num_batches_tracked = num_batches_tracked;
  a.saved_mean = saved_mean, a.saved_invstd = saved_invstd;
  a.workspace = workspace, a.workspace_bytes = workspace_bytes, a.reserve = reserve, a.reserve_bytes = reserve_bytes;
  a.comm = comm_of(bn), a.stream = fnorm::cuda_stream(stream);
  return fnorm::run_op<BnFwdTrain>(__func__, handle, stream, {handle, bn, x_desc, y_desc}, a);
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, const float *running_mean, const float *running_var,
    fnorm_tensor_desc_t y_desc, void *y, void *workspace, size_t workspace_bytes) {
  fnorm::BnArgs a;
  a.x = x, a.z = z, a.y = y, a.gamma = gamma, a.beta = beta;
  a.running_mean_in = running_mean, a.running_var_in = running_var;
  a.workspace = workspace, a.workspace_bytes = workspace_bytes;
  a.stream = fnorm::cuda_stream(stream);
  return fnorm::run_op<BnFwdInfer>(__func__, handle, stream, {handle, bn, x_desc, y_desc}, a);
}

FNORM_API fnorm_status_t fnorm_batchnorm_bwd(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t dy_desc, const void *dy,
    const void *y, const float *gamma, const float *beta, const float *saved_mean,
    const float *saved_invstd, const void *reserve,
    size_t reserve_bytes, fnorm_tensor_desc_t dx_desc, void *dx, void *dz, float *dgamma,
    float *dbeta, void *workspace, size_t workspace_bytes) {
  fnorm::BnArgs a;
  a.x = x, a.dy = dy, a.dx = dx, a.dz = dz, a.y_in = y, a.gamma = gamma, a.beta = beta;
  a.saved_mean_in = saved_mean, a.saved_invstd_in = saved_invstd, a.dgamma = dgamma, a.dbeta = dbeta;
  a.reserve = const_cast<void *>(reserve), a.reserve_bytes = reserve_bytes;
  a.workspace = workspace, a.workspace_bytes = workspace_bytes;
  a.comm = comm_of(bn), a.stream = fnorm::cuda_stream(stream);
  return fnorm::run_op<BnBwd>(__func__, handle, stream, {handle, bn, x_desc, dy_desc, dx_desc}, a);
}

}  // extern "C"
