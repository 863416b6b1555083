/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm inside the library: the descriptor object and the op contract's
// three steps (core/op.hpp), shared by the three passes.
//   bn_desc.cpp          fnorm_batchnorm_desc_* (the descriptor API)
//   bn_validate.cpp      describe (descriptors -> BnProblem) and the checks of a call's pointers
//   bn_plan.cpp          the engine rule and the native engine's workspace layout (NativePlan)
//   bn_native.cpp        the native engine: plan (BnNativeLaunch, cached) and launch
//   bn_cudnn_engine.cpp  the cuDNN engine
//   bn_nccl.cpp          SyncBatchNorm's NCCL calls
//   bn_api.cpp           the C entry points
//   batchnorm.cuh, bn_persistent.cuh, bn_stream.cuh, bn_one_launch.cuh, bn_channel_end.cuh,
//   bn_finalize.cu       device code
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

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
  int32_t unused = 0;

  int64_t per_channel() const { return n * spatial; }
  int64_t elements() const { return n * c * spatial; }
};

// Everything one call needs after describe: the problem, the descriptor (its
// communicator and settings) and the pointers.
struct BnCall {
  const fnorm_batchnorm_desc *desc = nullptr;
  BnProblem pb;
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
  bool local_empty = false;  // SyncBatchNorm: this rank holds no samples
  // The engine that runs a launch (choose_engine, once per launch, after the
  // pointers are set); size queries leave it AUTO and ask the descriptor's.
  fnorm_bn_engine_t engine = FNORM_BN_ENGINE_AUTO;
};

// ---- describe and check (bn_validate.cpp) ------------------------------------
// Validates the descriptors of a call of `pass` (x_desc; the descriptor) and
// returns the problem. Throws BAD_PARAM* (unset, rank < 2) or NOT_SUPPORTED
// (neither layout), naming the argument.
BnProblem describe_bn(BnPass pass, const fnorm_batchnorm_desc *bn, const fnorm_tensor_desc *x_desc);
// `other` must describe a tensor of x's sizes, dtype and layout.
void bn_require_same(const BnProblem &x, const fnorm_tensor_desc *other, const char *arg);
// The pointer rules of each pass (required pointers, alignment, the
// overlap rule over all the call's buffers, checked mode), before the engine
// is chosen. Throw Error.
void check_bn_fwd_train_args(const fnorm_handle *h, const BnCall &c);
void check_bn_fwd_infer_args(const fnorm_handle *h, const BnCall &c);
void check_bn_bwd_args(const fnorm_handle *h, const BnCall &c);
// The workspace and reserve space of the chosen engine's launch.
void check_workspace(fnorm_handle *h, const BnCall &c, size_t need);
void check_reserve(fnorm_handle *h, const BnCall &c);

// ---- plan (bn_plan.cpp) ---------------------------------------------------------
// The native engine's workspace layout: the reduction kind and splits, and
// where each region goes. Depends on the shape and the device only.
struct NativePlan {
  BnReduceKind kind = BnReduceKind::Columns;
  int max_splits = 0;  // what the workspace holds; the launch shape uses <= this many
  int64_t part_width = 0;
  int64_t group_entries = 1;
  int64_t domain = 0;
  size_t off_moment1 = 0, off_moment2 = 0, off_mean = 0, off_xmu_scale = 0, off_shift = 0, off_dy_scale = 0,
         off_sync = 0, total = 0;
};

NativePlan plan_native(const BnProblem &v, const DeviceInfo &dev, BnPass pass, bool sync);

// AUTO's rule (bn_plan.cpp, with the figures behind it): whether cuDNN's
// persistent kernels beat NATIVE on an fp16/bf16 channels-last training call
// without an epilogue, on a device of `l2_bytes` of L2 (0: unknown). Pure,
// so host tests can ask it.
bool bn_auto_prefers_cudnn(const BnProblem &v, BnPass pass, int64_t l2_bytes);
// Whether AUTO may send this problem to cuDNN at all (shape and descriptor
// only; the launch then asks the pointers, the stream and cuDNN).
bool bn_auto_candidate(const fnorm_handle *h, const BnProblem &pb);

// The engine a launch runs on, decided once with its pointers and stream:
// NATIVE / CUDNN as asked (CUDNN: NOT_SUPPORTED where cuDNN refuses); AUTO:
// see fnorm_batchnorm_desc_set_engine (`candidate`: bn_auto_candidate's
// answer for the problem).
fnorm_bn_engine_t choose_engine(fnorm_handle *h, const BnCall &c, bool candidate, cudaStream_t stream);
// Size queries (the descriptor's engine; AUTO: the most either engine needs,
// pointer-free) and, once c.engine is set, what that launch needs.
size_t workspace_for(fnorm_handle *h, const BnCall &c);
size_t reserve_for(fnorm_handle *h, const BnCall &c);

// ---- native engine (bn_native.cpp) ----------------------------------------------
// The native engine's plan of a launch: the workspace layout and, for the
// packs its pointers allow, every launch shape (one-launch path, reduction,
// elementwise passes). Cached per (handle, problem, packs).
struct BnNativeLaunch {
  NativePlan ws;
  int reduce_pack = 1, apply_pack = 1, persist_pack = 1;
  bool one_launch = false;  // persist.kernel is set (its launch may still find the device busier)
  BnPersistShape persist;
  BnReduceShape reduce;
  int64_t apply_main_end = 0;  // elements the widest-pack pass covers (whole mask words)
  LaunchShape apply_main, apply_tail;
  bool auto_candidate = false;  // AUTO may run cuDNN here (bn_auto_candidate)
};
// The plan of a launch (the packs from its pointers; cached), after
// checking the call's workspace and reserve space against it (before any
// device work).
const BnNativeLaunch &bn_native_plan(fnorm_handle *h, const BnCall &c);
// The reduction kind of a shape (bn_plan.cpp).
BnReduceKind bn_reduce_kind(const BnShape &s);
void launch_native(const BnCall &c, const BnNativeLaunch &plan, cudaStream_t stream);

// SyncBatchNorm's NCCL calls (bn_nccl.cpp; without NCCL they throw
// NOT_SUPPORTED_BUILD). The communicator must live on the handle's device.
bool nccl_built();
void nccl_check_comm(const fnorm_handle *h, struct ncclComm *comm);
// In-place sum of n doubles across the communicator's ranks, on `stream`.
void nccl_allreduce_sum(struct ncclComm *comm, double *buf, size_t n, cudaStream_t stream);

// The cuDNN engine (bn_cudnn_engine.cpp). Was the library built with cuDNN?
// Does the cuDNN engine take this case?
// When it does not, *why says why.
bool cudnn_bn_built();
bool cudnn_bn_supports(fnorm_handle *h, const BnCall &call, std::string *why);
size_t cudnn_bn_workspace_size(fnorm_handle *h, const BnCall &call);
size_t cudnn_bn_reserve_size(fnorm_handle *h, const BnCall &call);
// AUTO's view of cuDNN, never creating its state (a size query touches no
// GPU): false when the state does not exist yet, or cuDNN refuses the case or
// asks for reserve space; else true with its workspace bytes. Cached per
// case in the state.
bool cudnn_bn_auto_takes(fnorm_handle *h, const BnCall &call, size_t *workspace);
// Creates the cuDNN state for an AUTO launch on `stream` where that is safe
// (not while the stream is being captured into a CUDA graph). False when the
// state does not exist afterwards; never throws.
bool cudnn_bn_auto_state(fnorm_handle *h, cudaStream_t stream);
// Runs the call through cuDNN (after validation). Throws Error.
void cudnn_bn_run(fnorm_handle *h, cudaStream_t stream, const BnCall &call);

}  // namespace fnorm
