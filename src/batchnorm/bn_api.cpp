/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm / SyncBatchNorm entry points: describe and check
// (bn_validate.cpp), choose the engine (bn_plan.cpp), plan and launch on it
// (bn_native.cpp, bn_cudnn_engine.cpp).
#include "batchnorm/batchnorm.hpp"

namespace fnorm {
namespace {

// Plans and runs a checked call on its engine, on the handle's device.
void launch(fnorm_handle *h, cudaStream_t stream, BnCall &c) {
  const bool candidate = c.desc->engine == FNORM_BN_ENGINE_AUTO && bn_auto_candidate(h, c.pb);
  c.engine = c.desc->engine == FNORM_BN_ENGINE_CUDNN || candidate ? choose_engine(h, c, candidate, stream)
                                                                  : FNORM_BN_ENGINE_NATIVE;
  if (c.engine == FNORM_BN_ENGINE_CUDNN) {
    check_workspace(h, c, workspace_for(h, c));
    if (!c.local_empty) check_reserve(h, c);
    DeviceGuard guard(h->device);
    cudnn_bn_run(h, stream, c);
    return;
  }
  const BnNativeLaunch &plan = bn_native_plan(h, c);
  DeviceGuard guard(h->device);
  launch_native(c, plan, stream);
}

// A call over no elements (and, with a communicator, no channels): nothing
// to normalize. Training still counts the batch, as torch.nn's modules do
// for an empty one; a backward's dgamma / dbeta are sums over no values.
// Returns whether the call was such a one (and is done).
bool run_empty(fnorm_handle *h, cudaStream_t stream, const BnCall &c) {
  if (c.pb.elements() != 0 || (c.local_empty && c.pb.c != 0)) return false;
  if (c.pb.pass == BnPass::FwdTrain && c.num_batches_tracked != nullptr) {
    DeviceGuard guard(h->device);
    check_cuda(launch_bn_count(c.num_batches_tracked, stream), "bn_count");
  }
  if (c.pb.pass == BnPass::Bwd && c.pb.vec_bytes != 0 && (c.dgamma != nullptr || c.dbeta != nullptr)) {
    DeviceGuard guard(h->device);
    for (float *g : {c.dgamma, c.dbeta})
      if (g != nullptr) check_cuda(cudaMemsetAsync(g, 0, c.pb.vec_bytes, stream), "cudaMemsetAsync (dgamma/dbeta)");
  }
  return true;
}

BnCall prepare(BnPass pass, fnorm_handle *handle, const fnorm_batchnorm_desc *bn, const fnorm_tensor_desc *x_desc) {
  FNORM_REQUIRE_NOT_NULL(handle);
  BnCall c;
  c.pb = describe_bn(pass, bn, x_desc);
  c.desc = bn;
  return c;
}

// One size query: the workspace of `pass`, or (reserve) the reserve space;
// 0 for a call with nothing to compute.
fnorm_status_t size_query(const char *func, BnPass pass, bool reserve, fnorm_handle *handle,
                          const fnorm_batchnorm_desc *bn, const fnorm_tensor_desc *x_desc,
                          size_t *out) noexcept {
  return api_guard(func, [&] {
    BnCall c = prepare(pass, handle, bn, x_desc);
    FNORM_REQUIRE(out != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL",
                  reserve ? "reserve_bytes" : "workspace_bytes");
    // SyncBatchNorm: a rank without samples still takes part (the
    // all-reduced triples go through the workspace).
    const bool nothing = c.pb.c == 0 || (c.pb.elements() == 0 && (!c.pb.sync || reserve));
    *out = nothing ? 0 : reserve ? reserve_for(handle, c) : workspace_for(handle, c);
  });
}

}  // namespace
}  // namespace fnorm

using fnorm::BnCall;
using fnorm::BnPass;

extern "C" {

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes) {
  return fnorm::size_query(__func__, BnPass::FwdTrain, false, handle, bn, x_desc, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes) {
  return fnorm::size_query(__func__, BnPass::FwdInfer, false, handle, bn, x_desc, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_bwd_workspace_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *workspace_bytes) {
  return fnorm::size_query(__func__, BnPass::Bwd, false, handle, bn, x_desc, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_reserve_space_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *reserve_bytes) {
  return fnorm::size_query(__func__, BnPass::FwdTrain, true, handle, bn, x_desc, reserve_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, float *running_mean, float *running_var, int64_t *num_batches_tracked,
    fnorm_tensor_desc_t y_desc, void *y, float *saved_mean, float *saved_invstd, void *workspace,
    size_t workspace_bytes, void *reserve, size_t reserve_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    BnCall c = prepare(BnPass::FwdTrain, handle, bn, x_desc);
    bn_require_same(c.pb, y_desc, "y_desc");
    if (bn->comm != nullptr) nccl_check_comm(handle, bn->comm);
    // SyncBatchNorm: a rank without samples passes x and y as NULL (x_desc
    // then describing [1, C, ...]) or an x_desc with no elements.
    c.local_empty =
        bn->comm != nullptr && ((x == nullptr && y == nullptr && z == nullptr) || c.pb.elements() == 0);
    c.x = x;
    c.z = z;
    c.y = y;
    c.gamma = gamma;
    c.beta = beta;
    c.running_mean = running_mean;
    c.running_var = running_var;
    c.num_batches_tracked = num_batches_tracked;
    c.saved_mean = saved_mean;
    c.saved_invstd = saved_invstd;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    c.reserve = reserve;
    c.reserve_bytes = reserve_bytes;
    check_bn_fwd_train_args(handle, c);
    const cudaStream_t st = cuda_stream(stream);
    if (!run_empty(handle, st, c)) launch(handle, st, c);
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, const float *running_mean, const float *running_var,
    fnorm_tensor_desc_t y_desc, void *y, void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    BnCall c = prepare(BnPass::FwdInfer, handle, bn, x_desc);
    bn_require_same(c.pb, y_desc, "y_desc");
    c.x = x;
    c.z = z;
    c.y = y;
    c.gamma = gamma;
    c.beta = beta;
    c.running_mean_in = running_mean;
    c.running_var_in = running_var;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    check_bn_fwd_infer_args(handle, c);
    const cudaStream_t st = cuda_stream(stream);
    if (!run_empty(handle, st, c)) launch(handle, st, c);
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_bwd(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t dy_desc, const void *dy,
    const void *y, const float *gamma, const float *beta, const float *saved_mean,
    const float *saved_invstd, const void *reserve,
    size_t reserve_bytes, fnorm_tensor_desc_t dx_desc, void *dx, void *dz, float *dgamma,
    float *dbeta, void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    BnCall c = prepare(BnPass::Bwd, handle, bn, x_desc);
    bn_require_same(c.pb, dy_desc, "dy_desc");
    bn_require_same(c.pb, dx_desc, "dx_desc");
    if (bn->comm != nullptr) nccl_check_comm(handle, bn->comm);
    // SyncBatchNorm: a rank without samples passes x, dy and dx as NULL, or
    // descriptors with no elements.
    c.local_empty = bn->comm != nullptr &&
                    ((x == nullptr && dy == nullptr && dx == nullptr && dz == nullptr) || c.pb.elements() == 0);
    c.x = x;
    c.dy = dy;
    c.dx = dx;
    c.dz = dz;
    c.y_in = y;
    c.gamma = gamma;
    c.beta = beta;
    c.saved_mean_in = saved_mean;
    c.saved_invstd_in = saved_invstd;
    c.dgamma = dgamma;
    c.dbeta = dbeta;
    c.reserve = const_cast<void *>(reserve);
    c.reserve_bytes = reserve_bytes;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    check_bn_bwd_args(handle, c);
    const cudaStream_t st = cuda_stream(stream);
    if (!run_empty(handle, st, c)) launch(handle, st, c);
  });
}

}  // extern "C"
