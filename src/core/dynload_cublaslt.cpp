/* SPDX-License-Identifier: Apache-2.0 */
// The functions of cuBLASLt that libfusednorm calls (the fully-connected
// layer), resolved from the library at first use (core/dynload.hpp). The
// *Init functions of cublasLt.h are inline and call the *_internal ones.
#include <cublasLt.h>

#include "core/build_config.hpp"
#include "core/dynload.hpp"

#define FNORM_CUBLASLT_FUNCTIONS(X)                                                                           \
  X(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * h), (h))                                              \
  X(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t h), (h))                                               \
  X(const char *, cublasLtGetStatusName, (cublasStatus_t s), (s))                                             \
  X(const char *, cublasLtGetStatusString, (cublasStatus_t s), (s))                                           \
  X(cublasStatus_t, cublasLtMatmulDescInit_internal,                                                          \
    (cublasLtMatmulDesc_t d, size_t size, cublasComputeType_t compute, cudaDataType_t scale),                 \
    (d, size, compute, scale))                                                                                \
  X(cublasStatus_t, cublasLtMatmulDescSetAttribute,                                                           \
    (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t n),                \
    (d, attr, buf, n))                                                                                        \
  X(cublasStatus_t, cublasLtMatrixLayoutInit_internal,                                                        \
    (cublasLtMatrixLayout_t l, size_t size, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),    \
    (l, size, type, rows, cols, ld))                                                                          \
  X(cublasStatus_t, cublasLtMatmulPreferenceInit_internal, (cublasLtMatmulPreference_t p, size_t size),       \
    (p, size))                                                                                                \
  X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                                     \
    (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t n),    \
    (p, attr, buf, n))                                                                                        \
  X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                                           \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,        \
     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,     \
     cublasLtMatmulHeuristicResult_t results[], int *returned),                                               \
    (h, op, a, b, c, d, pref, requested, results, returned))                                                  \
  X(cublasStatus_t, cublasLtMatmulAlgoConfigGetAttribute,                                                     \
    (const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf, size_t n,       \
     size_t *written),                                                                                        \
    (algo, attr, buf, n, written))                                                                            \
  X(cublasStatus_t, cublasLtMatmul,                                                                           \
    (cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A, cublasLtMatrixLayout_t ad, \
     const void *B, cublasLtMatrixLayout_t bd, const void *beta, const void *C, cublasLtMatrixLayout_t cd,    \
     void *D, cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,        \
     cudaStream_t stream),                                                                                    \
    (h, op, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, ws, ws_bytes, stream))

namespace {
enum : size_t { FNORM_CUBLASLT_FUNCTIONS(FNORM_DYNLOAD_INDEX) kCount };
const char *const kNames[] = {FNORM_CUBLASLT_FUNCTIONS(FNORM_DYNLOAD_NAME)};
fnorm::dynload::Library &kLib = *new fnorm::dynload::Library("cuBLASLt", FNORM_CUBLASLT_SONAME,
                                                  "the fully-connected layer (fnorm_linear_*)", kNames, kCount);
}  // namespace

extern "C" {
#define X(ret, name, params, args) FNORM_DYNLOAD_DEFINE(kLib, ret, name, params, args)
FNORM_CUBLASLT_FUNCTIONS(X)
#undef X
}
