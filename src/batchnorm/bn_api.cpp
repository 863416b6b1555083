// BatchNorm / SyncBatchNorm entry points: validate (bn_validate.cpp), plan
// (bn_plan.cpp), run on the chosen engine (bn_native.cpp,
// bn_cudnn_engine.cpp).
#include "batchnorm/batchnorm.hpp"
#include "core/pointer_check.hpp"

namespace fnorm {
namespace {

// Runs a validated call on its engine (c.engine), on the handle's device.
void launch(fnorm_handle *handle, fnorm_stream_t stream, const BnCall &c) {
  DeviceGuard guard(handle->device);
  if (c.engine == FNORM_BN_ENGINE_CUDNN)
    cudnn_bn_run(handle, cuda_stream(stream), c);
  else
    run_native(handle, stream, c);
}

BnCall prepare(BnPass pass, fnorm_handle *handle, const fnorm_batchnorm_desc *bn,
               const fnorm_tensor_desc *x_desc) {
  FNORM_REQUIRE_NOT_NULL(handle);
  bn_check_desc(bn);
  BnCall c;
  c.pass = pass;
  c.desc = bn;
  c.view = bn_view(x_desc, "x_desc");
  return c;
}

// One size query: the workspace of `pass`, or (reserve) the reserve space.
fnorm_status_t size_query(const char *func, BnPass pass, bool reserve, fnorm_handle *handle,
                          const fnorm_batchnorm_desc *bn, const fnorm_tensor_desc *x_desc,
                          size_t *out) noexcept {
  return api_guard(func, [&] {
    BnCall c = prepare(pass, handle, bn, x_desc);
    FNORM_REQUIRE(out != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL",
                  reserve ? "reserve_bytes" : "workspace_bytes");
    *out = reserve ? reserve_for(handle, c) : workspace_for(handle, c);
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
    bn_require_same(c.view, y_desc, "y_desc");
    if (bn->comm != nullptr) nccl_check_comm(handle, bn->comm);
    // SyncBatchNorm: a rank without samples passes x and y as NULL.
    c.local_empty = bn->comm != nullptr && x == nullptr && y == nullptr && z == nullptr;
    if (!c.local_empty) {
      FNORM_REQUIRE_NOT_NULL(x);
      FNORM_REQUIRE_NOT_NULL(y);
    }
    require_addend(bn, z, c.local_empty);
    FNORM_REQUIRE((running_mean == nullptr) == (running_var == nullptr), FNORM_STATUS_BAD_PARAM,
                  "arguments 'running_mean' and 'running_var' must be given together");
    FNORM_REQUIRE(!(running_mean != nullptr && bn->average == FNORM_BN_AVERAGE_CUMULATIVE &&
                    num_batches_tracked == nullptr),
                  FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'num_batches_tracked' is NULL; CUMULATIVE averaging reads it");
    FNORM_REQUIRE(is_aligned(num_batches_tracked, 8), FNORM_STATUS_BAD_PARAM,
                  "argument 'num_batches_tracked' (%p) is not 8-byte aligned", static_cast<void *>(num_batches_tracked));
    require_training_count(c);
    require_vecs_aligned({{gamma, "gamma"}, {beta, "beta"}, {running_mean, "running_mean"},
                          {running_var, "running_var"}, {saved_mean, "saved_mean"},
                          {saved_invstd, "saved_invstd"}});
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
    c.engine = choose_engine(handle, c, cuda_stream(stream));
    check_workspace(handle, c);
    if (!c.local_empty) check_reserve(handle, c);
    const size_t data = c.view.bytes, vec = c.view.vec_bytes;
    const Span sx{"x", x, data}, sz{"z", z, data}, sy{"y", y, data},
        sr{"reserve", c.reserve, reserve_for(handle, c)}, sw{"workspace", workspace, workspace_bytes},
        srm{"running_mean", running_mean, vec}, srv{"running_var", running_var, vec},
        ssm{"saved_mean", saved_mean, vec}, ssi{"saved_invstd", saved_invstd, vec};
    require_disjoint(sy, {sx, sz, sr, sw, srm, srv, ssm, ssi}, {"x", "z"});
    require_disjoint(sr, {sx, sz, sw, srm, srv, ssm, ssi});
    require_disjoint(srm, {srv, ssm, ssi, sw});
    require_disjoint(srv, {ssm, ssi, sw});
    require_disjoint(ssm, {ssi, sw});
    require_disjoint(ssi, {sw});
    require_device_memory(handle, {sx, sz, sy, sr, sw, srm, srv, ssm, ssi, {"gamma", gamma, vec},
                                   {"beta", beta, vec}, {"num_batches_tracked", num_batches_tracked, 8}});
    launch(handle, stream, c);
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
    bn_require_same(c.view, y_desc, "y_desc");
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(y);
    FNORM_REQUIRE_NOT_NULL(running_mean);
    FNORM_REQUIRE_NOT_NULL(running_var);
    require_addend(bn, z, false);
    require_vecs_aligned({{gamma, "gamma"}, {beta, "beta"}, {running_mean, "running_mean"},
                          {running_var, "running_var"}});
    c.x = x;
    c.z = z;
    c.y = y;
    c.gamma = gamma;
    c.beta = beta;
    c.running_mean_in = running_mean;
    c.running_var_in = running_var;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    c.engine = choose_engine(handle, c, cuda_stream(stream));
    check_workspace(handle, c);
    const size_t data = c.view.bytes;
    const Span sx{"x", x, data}, sz{"z", z, data}, sy{"y", y, data},
        sw{"workspace", workspace, workspace_bytes};
    require_disjoint(sy, {sx, sz, sw}, {"x", "z"});
    const size_t vec = c.view.vec_bytes;
    require_device_memory(handle, {sx, sz, sy, sw, {"gamma", gamma, vec}, {"beta", beta, vec},
                                   {"running_mean", running_mean, vec}, {"running_var", running_var, vec}});
    launch(handle, stream, c);
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
    bn_require_same(c.view, dy_desc, "dy_desc");
    bn_require_same(c.view, dx_desc, "dx_desc");
    if (bn->comm != nullptr) nccl_check_comm(handle, bn->comm);
    // SyncBatchNorm: a rank without samples passes x, dy and dx as NULL.
    c.local_empty = bn->comm != nullptr && x == nullptr && dy == nullptr && dx == nullptr && dz == nullptr;
    if (!c.local_empty) {
      FNORM_REQUIRE_NOT_NULL(x);
      FNORM_REQUIRE_NOT_NULL(dy);
      FNORM_REQUIRE_NOT_NULL(dx);
    }
    FNORM_REQUIRE_NOT_NULL(saved_mean);
    FNORM_REQUIRE_NOT_NULL(saved_invstd);
    FNORM_REQUIRE(dz == nullptr || bn->epilogue == FNORM_BN_EPILOGUE_ADD_RELU, FNORM_STATUS_BAD_PARAM,
                  "argument 'dz' is given but the epilogue is not ADD_RELU");
    require_training_count(c);
    require_vecs_aligned({{gamma, "gamma"}, {beta, "beta"}, {saved_mean, "saved_mean"},
                          {saved_invstd, "saved_invstd"}, {dgamma, "dgamma"}, {dbeta, "dbeta"}});
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
    c.engine = choose_engine(handle, c, cuda_stream(stream));
    check_workspace(handle, c);
    if (!c.local_empty) check_reserve(handle, c);
    const size_t data = c.view.bytes, vec = c.view.vec_bytes;
    const Span sx{"x", x, data}, sdy{"dy", dy, data}, sdx{"dx", dx, data}, sdz{"dz", dz, data},
        sr{"reserve", c.reserve, reserve_for(handle, c)}, sw{"workspace", workspace, workspace_bytes},
        sdg{"dgamma", dgamma, vec}, sdb{"dbeta", dbeta, vec}, sm{"saved_mean", saved_mean, vec},
        si{"saved_invstd", saved_invstd, vec}, sg{"gamma", gamma, vec};
    require_disjoint(sdx, {sx, sdy, sdz, sr, sw, sdg, sdb, sm, si, sg}, {"dy", "x"});
    require_disjoint(sdz, {sx, sr, sw, sdg, sdb, sm, si, sg});
    require_disjoint(sdz, {sdy}, {"dy"});
    require_disjoint(sdg, {sdb, sw, sm, si, sg, sx, sdy, sr});
    require_disjoint(sdb, {sw, sm, si, sg, sx, sdy, sr});
    require_disjoint(sw, {sx, sdy, sr, sm, si, sg});
    require_device_memory(handle, {sx, sdy, sdx, sdz, sr, sw, sdg, sdb, sm, si, sg, {"beta", beta, vec},
                                   {"y", y, data}});
    launch(handle, stream, c);
  });
}

}  // extern "C"
