/* SPDX-License-Identifier: Apache-2.0 */
// The functions of cuDNN that the BatchNorm cuDNN engine calls, resolved at
// first use (core/dynload.hpp). Several are marked deprecated in cuDNN 9
// (the legacy BatchNorm API): defining their forwarders is not a use.
#include <cudnn.h>

#include "core/build_config.hpp"
#include "core/dynload.hpp"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define FNORM_CUDNN_FUNCTIONS(X)                                                                              \
  X(cudnnStatus_t, cudnnCreate, (cudnnHandle_t * h), (h))                                                     \
  X(cudnnStatus_t, cudnnDestroy, (cudnnHandle_t h), (h))                                                      \
  X(cudnnStatus_t, cudnnSetStream, (cudnnHandle_t h, cudaStream_t s), (h, s))                                 \
  X(const char *, cudnnGetErrorString, (cudnnStatus_t s), (s))                                                \
  X(void, cudnnGetLastErrorString, (char *message, size_t max_size), (message, max_size))                     \
  X(cudnnStatus_t, cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t * d), (d))                           \
  X(cudnnStatus_t, cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t d), (d))                            \
  X(cudnnStatus_t, cudnnSetTensorNdDescriptor,                                                                \
    (cudnnTensorDescriptor_t d, cudnnDataType_t type, int nb, const int dims[], const int strides[]),        \
    (d, type, nb, dims, strides))                                                                             \
  X(cudnnStatus_t, cudnnDeriveBNTensorDescriptor,                                                             \
    (cudnnTensorDescriptor_t derived, const cudnnTensorDescriptor_t x, cudnnBatchNormMode_t mode),           \
    (derived, x, mode))                                                                                       \
  X(cudnnStatus_t, cudnnCreateActivationDescriptor, (cudnnActivationDescriptor_t * d), (d))                   \
  X(cudnnStatus_t, cudnnDestroyActivationDescriptor, (cudnnActivationDescriptor_t d), (d))                    \
  X(cudnnStatus_t, cudnnSetActivationDescriptor,                                                              \
    (cudnnActivationDescriptor_t d, cudnnActivationMode_t mode, cudnnNanPropagation_t nan, double coef),     \
    (d, mode, nan, coef))                                                                                     \
  X(cudnnStatus_t, cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize,                                  \
    (cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,   \
     const cudnnTensorDescriptor_t z, const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t p,       \
     const cudnnActivationDescriptor_t act, size_t *bytes),                                                   \
    (h, mode, ops, x, z, y, p, act, bytes))                                                                   \
  X(cudnnStatus_t, cudnnGetBatchNormalizationBackwardExWorkspaceSize,                                         \
    (cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x,   \
     const cudnnTensorDescriptor_t y, const cudnnTensorDescriptor_t dy, const cudnnTensorDescriptor_t dz,     \
     const cudnnTensorDescriptor_t dx, const cudnnTensorDescriptor_t dp, const cudnnActivationDescriptor_t act, \
     size_t *bytes),                                                                                          \
    (h, mode, ops, x, y, dy, dz, dx, dp, act, bytes))                                                         \
  X(cudnnStatus_t, cudnnGetBatchNormalizationTrainingExReserveSpaceSize,                                      \
    (cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,                                     \
     const cudnnActivationDescriptor_t act, const cudnnTensorDescriptor_t x, size_t *bytes),                  \
    (h, mode, ops, act, x, bytes))                                                                            \
  X(cudnnStatus_t, cudnnBatchNormalizationForwardTrainingEx,                                                  \
    (cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alpha, const void *beta, \
     const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t zd, const void *z,        \
     const cudnnTensorDescriptor_t yd, void *y, const cudnnTensorDescriptor_t pd, const void *scale,          \
     const void *bias, double factor, void *run_mean, void *run_var, double eps, void *save_mean,            \
     void *save_invvar, cudnnActivationDescriptor_t act, void *ws, size_t ws_bytes, void *reserve,            \
     size_t reserve_bytes),                                                                                   \
    (h, mode, ops, alpha, beta, xd, x, zd, z, yd, y, pd, scale, bias, factor, run_mean, run_var, eps,        \
     save_mean, save_invvar, act, ws, ws_bytes, reserve, reserve_bytes))                                      \
  X(cudnnStatus_t, cudnnBatchNormalizationForwardInference,                                                   \
    (cudnnHandle_t h, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,                         \
     const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t yd, void *y,              \
     const cudnnTensorDescriptor_t pd, const void *scale, const void *bias, const void *mean,                 \
     const void *var, double eps),                                                                            \
    (h, mode, alpha, beta, xd, x, yd, y, pd, scale, bias, mean, var, eps))                                   \
  X(cudnnStatus_t, cudnnBatchNormalizationBackwardEx,                                                         \
    (cudnnHandle_t h, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alpha_data,             \
     const void *beta_data, const void *alpha_param, const void *beta_param, const cudnnTensorDescriptor_t xd, \
     const void *x, const cudnnTensorDescriptor_t yd, const void *y, const cudnnTensorDescriptor_t dyd,       \
     const void *dy, const cudnnTensorDescriptor_t dzd, void *dz, const cudnnTensorDescriptor_t dxd,          \
     void *dx, const cudnnTensorDescriptor_t pd, const void *scale, const void *bias, void *dscale,          \
     void *dbias, double eps, const void *save_mean, const void *save_invvar,                                 \
     cudnnActivationDescriptor_t act, void *ws, size_t ws_bytes, void *reserve, size_t reserve_bytes),       \
    (h, mode, ops, alpha_data, beta_data, alpha_param, beta_param, xd, x, yd, y, dyd, dy, dzd, dz, dxd, dx,  \
     pd, scale, bias, dscale, dbias, eps, save_mean, save_invvar, act, ws, ws_bytes, reserve, reserve_bytes))

namespace {
enum : size_t { FNORM_CUDNN_FUNCTIONS(FNORM_DYNLOAD_INDEX) kCount };
const char *const kNames[] = {FNORM_CUDNN_FUNCTIONS(FNORM_DYNLOAD_NAME)};
fnorm::dynload::Library &kLib = *new fnorm::dynload::Library("cuDNN", FNORM_CUDNN_SONAME,
                                                  "the BatchNorm cuDNN engine (FNORM_BN_ENGINE_CUDNN)", kNames, kCount);
}  // namespace

extern "C" {
#define X(ret, name, params, args) FNORM_DYNLOAD_DEFINE(kLib, ret, name, params, args)
FNORM_CUDNN_FUNCTIONS(X)
#undef X
}
