/* SPDX-License-Identifier: Apache-2.0 */
// SyncBatchNorm's use of NCCL: the communicator check and the all-reduce of
// the per-channel statistics. The library never creates communicators: the
// caller's comes in through fnorm_batchnorm_desc_set_comm.
#include "batchnorm/batchnorm.hpp"

#if FNORM_HAVE_NCCL
#include <nccl.h>
#endif

namespace fnorm {

#if FNORM_HAVE_NCCL

namespace {
[[noreturn]] void fail_nccl(ncclResult_t r, ncclComm_t comm, const char *what) {
  const char *last = ncclGetLastError(comm);
  fail(FNORM_STATUS_NCCL_ERROR, "%s failed: %s%s%s", what, ncclGetErrorString(r),
       last != nullptr && last[0] ? ": " : "", last != nullptr ? last : "");
}
}  // namespace

bool nccl_built() { return true; }

void nccl_check_comm(const fnorm_handle *h, struct ncclComm *comm) {
  int dev = -1;
  const ncclResult_t r = ncclCommCuDevice(comm, &dev);
  if (r != ncclSuccess) fail_nccl(r, comm, "ncclCommCuDevice");
  FNORM_REQUIRE(dev == h->device, FNORM_STATUS_BAD_PARAM,
                "the descriptor's communicator is on device %d but the handle is bound to device %d",
                dev, h->device);
}

void nccl_allreduce_sum(struct ncclComm *comm, double *buf, size_t n, cudaStream_t stream) {
  const ncclResult_t r = ncclAllReduce(buf, buf, n, ncclDouble, ncclSum, comm, stream);
  if (r != ncclSuccess) fail_nccl(r, comm, "ncclAllReduce");
}

#else

bool nccl_built() { return false; }
void nccl_check_comm(const fnorm_handle *, struct ncclComm *) {
  fail(FNORM_STATUS_NOT_SUPPORTED_BUILD, "SyncBatchNorm was left out of this build (NCCL not found; meson option 'nccl')");
}
void nccl_allreduce_sum(struct ncclComm *, double *, size_t, cudaStream_t) {
  fail(FNORM_STATUS_NOT_SUPPORTED_BUILD, "SyncBatchNorm was left out of this build (NCCL not found; meson option 'nccl')");
}

#endif

}  // namespace fnorm
