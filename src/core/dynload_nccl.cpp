/* SPDX-License-Identifier: Apache-2.0 */
// The functions of NCCL that SyncBatchNorm calls, resolved at first use
// (core/dynload.hpp) from the NCCL already in the process when there is one:
// the caller's communicator must be used by the NCCL that created it.
#include <nccl.h>

#include "core/build_config.hpp"
#include "core/dynload.hpp"

#define FNORM_NCCL_FUNCTIONS(X)                                                                   \
  X(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int *device), (comm, device))         \
  X(ncclResult_t, ncclAllReduce,                                                                  \
    (const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, \
     cudaStream_t stream),                                                                        \
    (send, recv, count, type, op, comm, stream))                                                  \
  X(const char *, ncclGetErrorString, (ncclResult_t r), (r))                                      \
  X(const char *, ncclGetLastError, (ncclComm_t comm), (comm))

namespace {
enum : size_t { FNORM_NCCL_FUNCTIONS(FNORM_DYNLOAD_INDEX) kCount };
const char *const kNames[] = {FNORM_NCCL_FUNCTIONS(FNORM_DYNLOAD_NAME)};
fnorm::dynload::Library &kLib = *new fnorm::dynload::Library("NCCL", FNORM_NCCL_SONAME,
                                                  "SyncBatchNorm (a descriptor with a communicator)", kNames, kCount);
}  // namespace

extern "C" {
#define X(ret, name, params, args) FNORM_DYNLOAD_DEFINE(kLib, ret, name, params, args)
FNORM_NCCL_FUNCTIONS(X)
#undef X
}
