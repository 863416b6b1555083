/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm launch: the call on the engine its plan chose, and what a call
// with nothing to normalize still enqueues.
#include "batchnorm/batchnorm.hpp"

namespace fnorm {

template <BnPass P>
void BnOp<P>::launch(const BnPlan &plan, const BnProblem &pb, const BnArgs &a, cudaStream_t stream) {
  if (plan.engine == FNORM_BN_ENGINE_CUDNN)
    cudnn_bn_launch(*plan.cudnn, pb, a, stream);
  else
    launch_native(plan.native, pb, a, stream);
}

// A call over no elements (and, with a communicator, no channels): nothing
// to normalize. Training still counts the batch, as torch.nn's modules do
// for an empty one; a backward's dgamma / dbeta are sums over no values.
template <BnPass P>
Empty BnOp<P>::empty(const BnProblem &pb, const BnArgs &a) {
  if (pb.elements() != 0 || (pb.local_empty && pb.c != 0)) return Empty::No;
  if (P == BnPass::FwdTrain && a.num_batches_tracked != nullptr) return Empty::Enqueue;
  if (P == BnPass::Bwd && pb.vec_bytes != 0 && (a.dgamma != nullptr || a.dbeta != nullptr)) return Empty::Enqueue;
  return Empty::Done;
}

template <BnPass P>
void BnOp<P>::launch_empty(const BnProblem &pb, const BnArgs &a, cudaStream_t stream) {
  if (P == BnPass::FwdTrain) check_cuda(launch_bn_count(a.num_batches_tracked, stream), "bn_count");
  if (P == BnPass::Bwd)
    for (float *g : {a.dgamma, a.dbeta})
      if (g != nullptr) check_cuda(cudaMemsetAsync(g, 0, pb.vec_bytes, stream), "cudaMemsetAsync (dgamma/dbeta)");
}

#define FNORM_BN_LAUNCH_STEPS(P)                                                                  \
  template void BnOp<P>::launch(const BnPlan &, const BnProblem &, const BnArgs &, cudaStream_t);  \
  template Empty BnOp<P>::empty(const BnProblem &, const BnArgs &);                                \
  template void BnOp<P>::launch_empty(const BnProblem &, const BnArgs &, cudaStream_t);
FNORM_BN_LAUNCH_STEPS(BnPass::FwdTrain)
FNORM_BN_LAUNCH_STEPS(BnPass::FwdInfer)
FNORM_BN_LAUNCH_STEPS(BnPass::Bwd)
#undef FNORM_BN_LAUNCH_STEPS

}  // namespace fnorm
