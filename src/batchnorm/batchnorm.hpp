/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm inside the library: the descriptor object and the three ops of
// the contract (core/op.hpp), BnOp<FwdTrain>, BnOp<FwdInfer>, BnOp<Bwd>,
// which share their description, plan and launch. The plan chooses the
// engine (NATIVE or CUDNN) and holds that engine's plan.
//   bn_desc.cpp          fnorm_batchnorm_desc_* (the descriptor API)
//   bn_describe.cpp      describe (descriptors -> BnProblem), buffers, check
//   bn_plan.cpp          pointer_class, plan (the engine rule, then the engine's plan), the size queries
//   bn_launch.cpp        launch (on the planned engine), launch_empty
//   bn_api.cpp           the C entry points: one run_op / query_op each
//   bn_native.cpp        the native engine: its plan (BnNativePlan) and launch
//   bn_cudnn_engine.cpp  the cuDNN engine: its plan (CudnnBnPlan, kept in the handle's cuDNN state) and launch
//   bn_nccl.cpp          SyncBatchNorm's NCCL calls
//   batchnorm.cuh, bn_persistent.cuh, bn_stream.cuh, bn_one_launch.cuh, bn_channel_end.cuh,
//   bn_finalize.cu       device code
#pragma once

#include <string>

#include "batchnorm/bn_params.hpp"
#include "core/handle.hpp"
#include "core/op.hpp"
#include "core/validate.hpp"
#include "kernel_config.hpp"

struct fnorm_batchnorm_desc {
  fnorm_bn_epilogue_t epilogue = FNORM_BN_EPILOGUE_NONE;
  double epsilon = 1e-5;
  fnorm_bn_average_t average = FNORM_BN_AVERAGE_EXPONENTIAL;
  double momentum = 0.1;
  fnorm_bn_engine_t engine = FNORM_BN_ENGINE_AUTO;
  struct ncclComm *comm = nullptr;  // SyncBatchNorm when set (not owned)
  uint32_t sync_flags = 0;
};

namespace fnorm {

enum class BnPass : int32_t { FwdTrain, FwdInfer, Bwd };

// describe: a BatchNorm call without its pointers: x as [N, C, spatial...]
// in one of two layouts, its [rows, width] matrix view (BnShape), and the
// descriptor's settings. The plan cache's key (no padding: compared as
// bytes).
struct BnProblem {
  BnShape shape;            // the [rows, width] matrix view (bn_params.hpp)
  int64_t dims[FNORM_MAX_RANK] = {};
  int64_t n = 0, c = 0, spatial = 1;
  uint64_t bytes = 0;       // x's bytes (size_t-checked by describe)
  uint64_t vec_bytes = 0;   // one fp32 value per channel (likewise)
  uint64_t eps_bits = 0;    // the descriptor's epsilon and momentum (doubles)
  uint64_t momentum_bits = 0;
  int32_t rank = 0;
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  int32_t channels_last = 0;
  BnPass pass = BnPass::FwdTrain;
  int32_t epilogue = FNORM_BN_EPILOGUE_NONE;
  int32_t engine = FNORM_BN_ENGINE_AUTO;
  int32_t average = FNORM_BN_AVERAGE_EXPONENTIAL;
  uint32_t sync_flags = 0;
  int32_t sync = 0;         // a communicator is attached (training passes)
  int32_t local_empty = 0;  // SyncBatchNorm: this rank holds no samples

  int64_t per_channel() const { return n * spatial; }
  int64_t elements() const { return n * c * spatial; }
  double eps() const;
  double momentum() const;
  bool relu() const { return epilogue != FNORM_BN_EPILOGUE_NONE; }
};

// The pointers of a call (each pass uses its own), the descriptor's
// communicator, and the stream (AUTO asks whether it is being captured).
struct BnArgs {
  const void *x = nullptr, *z = nullptr, *dy = nullptr;
  const void *y_in = nullptr;  // backward: the forward's output (CUDNN engine only)
  void *y = nullptr, *dx = nullptr, *dz = nullptr;
  const float *gamma = nullptr, *beta = nullptr;
  float *running_mean = nullptr, *running_var = nullptr;  // training: in/out
  const float *running_mean_in = nullptr, *running_var_in = nullptr;  // inference
  int64_t *num_batches_tracked = nullptr;
  float *saved_mean = nullptr, *saved_invstd = nullptr;  // forward outputs
  const float *saved_mean_in = nullptr, *saved_invstd_in = nullptr;  // backward inputs
  float *dgamma = nullptr, *dbeta = nullptr;
  void *reserve = nullptr;
  size_t reserve_bytes = 0;
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
  struct ncclComm *comm = nullptr;  // SyncBatchNorm (the descriptor's)
  cudaStream_t stream = nullptr;
};

// ---- describe and check (bn_describe.cpp) ----------------------------------------
// Validates the descriptors of a call of `pass` (x_desc; the descriptor) and
// returns the problem. Throws BAD_PARAM* (unset, rank < 2) or NOT_SUPPORTED
// (neither layout), naming the argument.
BnProblem describe_bn(BnPass pass, const fnorm_batchnorm_desc *bn, const fnorm_tensor_desc *x_desc);
// `other` must describe a tensor of x's sizes, dtype and layout.
void bn_require_same(const BnProblem &x, const fnorm_tensor_desc *other, const char *arg);

// ---- the native engine's workspace layout (bn_plan.cpp) ---------------------------
// The reduction kind and splits, and where each region goes. Depends on the
// shape and the device only.
struct NativeLayout {
  BnReduceKind kind = BnReduceKind::Columns;
  int max_splits = 0;  // what the workspace holds; the launch shape uses <= this many
  int64_t part_width = 0;
  int64_t group_entries = 1;
  int64_t domain = 0;
  size_t off_moment1 = 0, off_moment2 = 0, off_mean = 0, off_xmu_scale = 0, off_shift = 0, off_dy_scale = 0,
         off_sync = 0, total = 0;
};
NativeLayout native_layout(const BnProblem &v, const DeviceInfo &dev);
// The reduction kind of a shape.
BnReduceKind bn_reduce_kind(const BnShape &s);
// The native engine's reserve space: the ReLU mask, one bit per element.
size_t native_reserve_bytes(const BnProblem &v);

// AUTO's rule (bn_plan.cpp, with the figures behind it): whether cuDNN's
// persistent kernels beat NATIVE on an fp16/bf16 channels-last training call
// without an epilogue, on a device of `l2_bytes` of L2 (0: unknown). Pure,
// so host tests can ask it.
bool bn_auto_prefers_cudnn(const BnProblem &v, BnPass pass, int64_t l2_bytes);
// Whether AUTO may send this problem to cuDNN at all (shape and descriptor).
bool bn_auto_candidate(const fnorm_handle *h, const BnProblem &pb);

// ---- the native engine (bn_native.cpp) ---------------------------------------------
// The packs the call's pointers allow each kind of kernel.
struct BnPacks {
  int32_t reduce = 1, apply = 1, persist = 1, unused = 0;
};
BnPacks bn_packs(const BnProblem &pb, const BnArgs &a);
// Its plan: the workspace layout, the instances and every launch shape
// (one-launch path, reduction, elementwise passes).
struct BnNativePlan {
  NativeLayout ws;
  const BnInstance *reduce = nullptr, *apply_main = nullptr, *apply_tail = nullptr, *persist = nullptr;
  bool one_launch = false;  // persist_shape.kernel is set (its launch may still find the device busier)
  BnPersistShape persist_shape;
  BnReduceShape reduce_shape;
  int64_t apply_main_end = 0;  // elements the widest-pack pass covers (whole mask words)
  LaunchShape apply_main_shape, apply_tail_shape;
};
BnNativePlan plan_native(fnorm_handle *h, const BnProblem &pb, const BnPacks &packs);
// Whether the native one-wave kernel (the tensor held on chip, one
// cooperative launch: bn_persistent.cuh) takes the pass with these packs.
bool bn_native_one_wave(fnorm_handle *h, const BnProblem &pb, const BnPacks &packs);
void launch_native(const BnNativePlan &plan, const BnProblem &pb, const BnArgs &a, cudaStream_t stream);

// SyncBatchNorm's NCCL calls (bn_nccl.cpp; without NCCL they throw
// NOT_SUPPORTED_BUILD). The communicator must live on the handle's device.
bool nccl_built();
void nccl_check_comm(const fnorm_handle *h, struct ncclComm *comm);
// In-place sum of n doubles across the communicator's ranks, on `stream`.
void nccl_allreduce_sum(struct ncclComm *comm, double *buf, size_t n, cudaStream_t stream);

// ---- the cuDNN engine (bn_cudnn_engine.cpp) -----------------------------------------
// Its plan of one description: cuDNN's descriptors (kept in the handle's
// cuDNN state, made once per description), whether cuDNN takes the case
// (else why not), and its workspace and reserve bytes.
struct CudnnBnPlan;
bool cudnn_bn_built();
// The plan of `pb` (made on first use, creating the state). Never null.
const CudnnBnPlan &cudnn_bn_plan(fnorm_handle *h, const BnProblem &pb);
// The plan if the handle's cuDNN state exists (never creates it), else null.
const CudnnBnPlan *cudnn_bn_plan_if_ready(fnorm_handle *h, const BnProblem &pb);
bool cudnn_bn_takes(const CudnnBnPlan &p, std::string *why);
size_t cudnn_bn_workspace(const CudnnBnPlan &p);
size_t cudnn_bn_reserve(const CudnnBnPlan &p);
// Creates the cuDNN state for an AUTO launch on `stream` where that is safe
// (not while the stream is being captured into a CUDA graph). False when the
// state does not exist afterwards; never throws.
bool cudnn_bn_auto_state(fnorm_handle *h, cudaStream_t stream);
// What the engine asks of the call's pointers (before any device work).
void cudnn_bn_check(const CudnnBnPlan &p, const BnProblem &pb, const BnArgs &a);
void cudnn_bn_launch(const CudnnBnPlan &p, const BnProblem &pb, const BnArgs &a, cudaStream_t stream);

// ---- the ops (core/op.hpp) ------------------------------------------------------

// The pointer class: the packs, and for an AUTO call cuDNN may take, whether
// its pointers and stream let it (the cuDNN state exists or could be made
// outside a capture) and the workspace it was given.
struct BnPtrs {
  BnPacks packs;
  int32_t auto_cudnn = 0;
  int32_t unused = 0;
  uint64_t workspace_bytes = 0;
};

struct BnPlan {
  Sizes sizes;
  fnorm_bn_engine_t engine = FNORM_BN_ENGINE_NATIVE;
  BnNativePlan native;                  // engine NATIVE
  const CudnnBnPlan *cudnn = nullptr;  // engine CUDNN (owned by the handle's cuDNN state)
};

template <BnPass P>
struct BnOp {
  // y_desc (forward) or dy_desc and dx_desc (backward); the handle (the
  // communicator must live on its device).
  struct Descs {
    const fnorm_handle *handle;
    const fnorm_batchnorm_desc *bn;
    const fnorm_tensor_desc *x, *other = nullptr, *dx = nullptr;
  };
  using Desc = BnProblem;
  using Args = BnArgs;
  using Ptrs = BnPtrs;
  using Plan = BnPlan;
  static constexpr const char *kWorkspaceQuery = "the size query";
  static constexpr size_t kWorkspaceAlign = 16;
  FNORM_OP_STEPS
  static Empty empty(const Desc &pb, const Args &a);
  static void launch_empty(const Desc &pb, const Args &a, cudaStream_t stream);
  static Sizes sizes(fnorm_handle *h, const Desc &pb, const Ptrs &ptrs);
  static void check_reserve(size_t need, const Desc &pb, const Args &a);
  static void check_plan(const Plan &plan, const Desc &pb, const Args &a);
  static size_t workspace_size(fnorm_handle *h, const Desc &pb);
  static size_t reserve_size(fnorm_handle *h, const Desc &pb);
};
using BnFwdTrain = BnOp<BnPass::FwdTrain>;
using BnFwdInfer = BnOp<BnPass::FwdInfer>;
using BnBwd = BnOp<BnPass::Bwd>;

}  // namespace fnorm
