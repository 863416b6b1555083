// BatchNorm inside the library: the descriptor object, the layout view of a
// tensor descriptor, the argument bundle of a validated call, and what each
// file of the op provides.
//   bn_desc.cpp          fnorm_batchnorm_desc_* (the descriptor API)
//   bn_validate.cpp      descriptors and pointers -> BnView, the call's checks
//   bn_plan.cpp          engine choice; the native engine's NativePlan
//   bn_native.cpp        the native engine's launches (executes a NativePlan)
//   bn_cudnn_engine.cpp  the cuDNN engine
//   bn_nccl.cpp          SyncBatchNorm's NCCL calls
//   bn_api.cpp           the C entry points: validate, plan, launch
//   batchnorm.cuh, bn_persistent.cuh, bn_stream.cuh, bn_channel_end.cuh, bn_finalize.cu  device code
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "batchnorm/bn_params.hpp"
#include "core/handle.hpp"
#include "core/validate.hpp"

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

// A validated BatchNorm tensor: [N, C, spatial...] in one of two layouts.
struct BnView {
  BnShape shape;            // the [rows, width] matrix view (bn_params.hpp)
  bool channels_last = false;
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  int32_t rank = 0;
  int64_t dims[FNORM_MAX_RANK] = {};
  int64_t n = 0, c = 0, spatial = 1;
  int64_t per_channel() const { return n * spatial; }
  int64_t elements() const { return shape.elements(); }
  size_t bytes = 0;      // the tensor's bytes (size_t-checked by bn_view)
  size_t vec_bytes = 0;  // one fp32 value per channel (likewise)
};

// Validates a BatchNorm tensor descriptor and tells its layout. Throws
// BAD_PARAM* (unset, rank < 2) or NOT_SUPPORTED (neither layout), naming `arg`.
BnView bn_view(const fnorm_tensor_desc *desc, const char *arg);
// `other` must describe a tensor of x's sizes, dtype and layout.
void bn_require_same(const BnView &x, const fnorm_tensor_desc *other, const char *arg);
// The descriptor itself (NULL, or values out of range).
void bn_check_desc(const fnorm_batchnorm_desc *bn);

enum class BnPass { FwdTrain, FwdInfer, Bwd };

// Everything one call needs after validation.
struct BnCall {
  BnPass pass = BnPass::FwdTrain;
  const fnorm_batchnorm_desc *desc = nullptr;
  BnView view;
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

// ---- validation (bn_validate.cpp) ------------------------------------------
void require_vecs_aligned(std::initializer_list<std::pair<const float *, const char *>> vecs);
// Checks shared by the training launches: more than one value per channel.
void require_training_count(const BnCall &c);
// z is given exactly when the epilogue adds it (and the rank has samples).
void require_addend(const fnorm_batchnorm_desc *bn, const void *z, bool local_empty);
void check_workspace(fnorm_handle *h, const BnCall &c);
void check_reserve(fnorm_handle *h, const BnCall &c);

// ---- plan (bn_plan.cpp) ---------------------------------------------------------
// The native engine's plan: the reduction kind and splits, and the
// workspace layout. Depends on the shape and the device only.
struct NativePlan {
  BnReduceKind kind = BnReduceKind::Columns;
  int max_splits = 0;  // what the workspace holds; the launch picks <= this many
  int64_t part_width = 0;
  int64_t group_entries = 1;
  int64_t domain = 0;
  size_t off_moment1 = 0, off_moment2 = 0, off_mean = 0, off_xmu_scale = 0, off_shift = 0, off_dy_scale = 0,
         off_sync = 0, total = 0;
};

NativePlan plan_native(const BnView &v, const DeviceInfo &dev, BnPass pass, bool sync);

// AUTO's rule (bn_plan.cpp, with the figures behind it): the device figure
// it reads, and whether cuDNN's persistent kernels beat NATIVE on an
// fp16/bf16 channels-last training call without an epilogue. Pure, so host
// tests can ask it.
struct BnAutoDevice {
  int64_t l2_bytes = 0;  // cudaDevAttrL2CacheSize; 0: unknown (no device)
};
BnAutoDevice bn_auto_device(int device);  // cached per device
bool bn_auto_prefers_cudnn(const BnView &v, BnPass pass, const BnAutoDevice &d);

// The engine a launch runs on, decided once with its pointers and stream:
// NATIVE / CUDNN as asked (CUDNN: NOT_SUPPORTED where cuDNN refuses); AUTO:
// see fnorm_batchnorm_desc_set_engine.
fnorm_bn_engine_t choose_engine(fnorm_handle *h, const BnCall &c, cudaStream_t stream);
// Size queries (the descriptor's engine; AUTO: the most either engine needs,
// pointer-free) and, once c.engine is set, what that launch needs.
size_t workspace_for(fnorm_handle *h, const BnCall &c);
size_t reserve_for(fnorm_handle *h, const BnCall &c);

// ---- native engine (bn_native.cpp) ----------------------------------------------
void run_native(fnorm_handle *h, fnorm_stream_t stream, const BnCall &c);

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
