/* SPDX-License-Identifier: Apache-2.0 */
// The BatchNorm cuDNN engine: the same entry points mapped onto cuDNN's
// cudnnBatchNormalizationForwardTrainingEx / BackwardEx / ForwardInference.
// NHWC fp16/bf16 uses CUDNN_BATCHNORM_SPATIAL_PERSISTENT (the mode of cuDNN's
// fused BN + add + ReLU), everything else CUDNN_BATCHNORM_SPATIAL. Whatever
// cuDNN refuses comes back as NOT_SUPPORTED with cuDNN's own message.
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "batchnorm/batchnorm.hpp"

#if FNORM_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace fnorm {

#if FNORM_HAVE_CUDNN

namespace {

void check(cudnnStatus_t st, const char *what, bool refusal);

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { check(cudnnCreateTensorDescriptor(&d), "cudnnCreateTensorDescriptor", false); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc &) = delete;
  TensorDesc &operator=(const TensorDesc &) = delete;
};

struct ActivationDesc {
  cudnnActivationDescriptor_t d = nullptr;
  ActivationDesc() {
    check(cudnnCreateActivationDescriptor(&d), "cudnnCreateActivationDescriptor", false);
    check(cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor", false);
  }
  ~ActivationDesc() { cudnnDestroyActivationDescriptor(d); }
  ActivationDesc(const ActivationDesc &) = delete;
  ActivationDesc &operator=(const ActivationDesc &) = delete;
};

}  // namespace

// The problem as cuDNN sees it, described once, and what cuDNN answered.
// Workspace: cuDNN's scratch, then four C-float vectors (ones, zeros, and
// stand-ins for outputs the caller did not ask for).
struct CudnnBnPlan {
  TensorDesc x, param;
  ActivationDesc act;
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  cudnnActivationDescriptor_t act_or_null = nullptr;
  bool takes = false;
  std::string why;  // cuDNN's refusal, when it does not take the case
  size_t scratch = 0, vec = 0, total = 0, reserve = 0;
  cudnnHandle_t handle = nullptr;  // the state's
  std::mutex *mutex = nullptr;     // the state's: cudnnSetStream + call must not interleave
};

struct CudnnState : OpState {
  ~CudnnState() override {
    plans.clear();
    if (handle != nullptr) cudnnDestroy(handle);
  }
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;        // cudnnSetStream + call must not interleave between threads
  std::mutex plans_mutex;  // guards plans
  std::map<std::string, std::unique_ptr<CudnnBnPlan>> plans;  // by the description's bytes
};

bool cudnn_bn_built() { return true; }

namespace {

// cuDNN's status and its last error text. `refusal`: a failure while
// describing or sizing the problem means cuDNN does not take the case.
[[noreturn]] void fail_cudnn(cudnnStatus_t st, const char *what, bool refusal) {
  char detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof detail);
  const bool not_supported = refusal || (st >= CUDNN_STATUS_NOT_SUPPORTED && st < 4000);
  fail(not_supported ? FNORM_STATUS_NOT_SUPPORTED : FNORM_STATUS_CUDNN_ERROR,
       "cuDNN refused or failed in %s: %s%s%s", what, cudnnGetErrorString(st),
       detail[0] ? ": " : "", detail);
}

void check(cudnnStatus_t st, const char *what, bool refusal) {
  if (st != CUDNN_STATUS_SUCCESS) fail_cudnn(st, what, refusal);
}

CudnnState &state_of(fnorm_handle *h) {
  return op_state<CudnnState>(h, [h] {
    auto s = std::make_unique<CudnnState>();
    DeviceGuard guard(h->device);
    check(cudnnCreate(&s->handle), "cudnnCreate", false);
    return s.release();
  });
}

// Describes the problem to cuDNN and asks its sizes. Throws NOT_SUPPORTED
// where cuDNN refuses (or the case is outside what this engine maps).
void describe(const BnProblem &v, CudnnState &s, CudnnBnPlan &p) {
  FNORM_REQUIRE(v.rank <= 5, FNORM_STATUS_NOT_SUPPORTED,
                "the CUDNN engine takes rank 2..5 tensors (x_desc has rank %d)", v.rank);
  // [N, C] and [N, C, L] as 4-d tensors with trailing unit dimensions.
  int nd = v.rank < 4 ? 4 : v.rank;
  int64_t dims[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < v.rank; ++i) dims[i] = v.dims[i];
  for (int i = 0; i < nd; ++i)
    FNORM_REQUIRE(dims[i] <= INT_MAX, FNORM_STATUS_NOT_SUPPORTED,
                  "the CUDNN engine describes sizes as int; dims[%d] = %lld", i,
                  static_cast<long long>(dims[i]));
  int64_t strides[5];
  if (v.channels_last) {  // C fastest, then the spatial dims from the last, then N
    strides[1] = 1;
    int64_t st = dims[1];
    for (int i = nd - 1; i >= 2; --i) {
      strides[i] = st;
      st *= dims[i];
    }
    strides[0] = st;
  } else {
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; --i) {
      strides[i] = st;
      st *= dims[i];
    }
  }
  int idims[5], istrides[5];
  for (int i = 0; i < nd; ++i) {
    FNORM_REQUIRE(strides[i] <= INT_MAX, FNORM_STATUS_NOT_SUPPORTED,
                  "the CUDNN engine describes strides as int; stride[%d] = %lld", i,
                  static_cast<long long>(strides[i]));
    idims[i] = static_cast<int>(dims[i]);
    istrides[i] = static_cast<int>(strides[i]);
  }
  const cudnnDataType_t dt = v.dtype == FNORM_DTYPE_FLOAT16    ? CUDNN_DATA_HALF
                             : v.dtype == FNORM_DTYPE_BFLOAT16 ? CUDNN_DATA_BFLOAT16
                                                               : CUDNN_DATA_FLOAT;
  check(cudnnSetTensorNdDescriptor(p.x.d, dt, nd, idims, istrides), "cudnnSetTensorNdDescriptor", true);
  p.mode = (v.channels_last && v.dtype != FNORM_DTYPE_FLOAT32) ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT
                                                              : CUDNN_BATCHNORM_SPATIAL;
  check(cudnnDeriveBNTensorDescriptor(p.param.d, p.x.d, p.mode), "cudnnDeriveBNTensorDescriptor", true);
  switch (v.epilogue) {
    case FNORM_BN_EPILOGUE_RELU:
      p.ops = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
      p.act_or_null = p.act.d;
      break;
    case FNORM_BN_EPILOGUE_ADD_RELU:
      p.ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
      p.act_or_null = p.act.d;
      break;
    default:
      p.ops = CUDNN_BATCHNORM_OPS_BN;
      break;
  }
  FNORM_REQUIRE(!(v.pass == BnPass::FwdInfer && v.relu()), FNORM_STATUS_NOT_SUPPORTED,
                "cuDNN's inference forward has no fused activation (use NATIVE)");
  const bool add = p.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  size_t scratch = 0;
  if (v.pass == BnPass::FwdTrain) {
    check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(s.handle, p.mode, p.ops, p.x.d,
                                                                    add ? p.x.d : nullptr, p.x.d, p.param.d,
                                                                    p.act_or_null, &scratch),
          "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", true);
  } else if (v.pass == BnPass::Bwd) {
    check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
              s.handle, p.mode, p.ops, p.x.d, p.act_or_null ? p.x.d : nullptr, p.x.d, add ? p.x.d : nullptr,
              p.x.d, p.param.d, p.act_or_null, &scratch),
          "cudnnGetBatchNormalizationBackwardExWorkspaceSize", true);
  }
  // The reserve the training forward of this case writes (and its backward
  // reads); inference keeps nothing.
  if (v.pass != BnPass::FwdInfer)
    check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(s.handle, p.mode, p.ops, p.act_or_null, p.x.d,
                                                               &p.reserve),
          "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", true);
  p.scratch = checked_align_up(scratch, kRegionAlign, "x_desc");
  p.vec = checked_align_up(v.vec_bytes, kRegionAlign, "x_desc");
  p.total = p.scratch + 4 * p.vec;
}

std::string key_of(const BnProblem &pb) {
  return std::string(reinterpret_cast<const char *>(&pb), sizeof pb);
}

const CudnnBnPlan *find_plan(CudnnState &s, const std::string &key) {
  std::lock_guard<std::mutex> lock(s.plans_mutex);
  auto it = s.plans.find(key);
  return it != s.plans.end() ? it->second.get() : nullptr;
}

const CudnnBnPlan &plan_in(CudnnState &s, const BnProblem &pb) {
  const std::string key = key_of(pb);
  if (const CudnnBnPlan *p = find_plan(s, key)) return *p;
  auto p = std::make_unique<CudnnBnPlan>();
  p->handle = s.handle;
  p->mutex = &s.mutex;
  try {
    describe(pb, s, *p);
    p->takes = true;
  } catch (const Error &e) {
    if (e.status != FNORM_STATUS_NOT_SUPPORTED) throw;
    p->why = e.message;
  }
  std::lock_guard<std::mutex> lock(s.plans_mutex);
  return *s.plans.emplace(key, std::move(p)).first->second;  // a plan another thread made first wins
}

}  // namespace

const CudnnBnPlan &cudnn_bn_plan(fnorm_handle *h, const BnProblem &pb) { return plan_in(state_of(h), pb); }

const CudnnBnPlan *cudnn_bn_plan_if_ready(fnorm_handle *h, const BnProblem &pb) {
  CudnnState *s = find_op_state<CudnnState>(h);
  return s != nullptr ? &plan_in(*s, pb) : nullptr;
}

bool cudnn_bn_takes(const CudnnBnPlan &p, std::string *why) {
  if (!p.takes && why != nullptr) *why = p.why;
  return p.takes;
}
size_t cudnn_bn_workspace(const CudnnBnPlan &p) { return p.total; }
size_t cudnn_bn_reserve(const CudnnBnPlan &p) { return p.reserve; }

bool cudnn_bn_auto_state(fnorm_handle *h, cudaStream_t stream) {
  if (find_op_state<CudnnState>(h) != nullptr) return true;
  // cudnnCreate inside a stream capture may make calls a capture forbids;
  // capture-time launches take NATIVE until an uncaptured launch (or the
  // CUDNN engine) has created the state.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (capture != cudaStreamCaptureStatusNone) return false;
  try {
    (void)state_of(h);
    return true;
  } catch (const Error &) {
    (void)cudaGetLastError();
    return false;
  }
}

void cudnn_bn_check(const CudnnBnPlan &p, const BnProblem &pb, const BnArgs &a) {
  FNORM_REQUIRE(!(pb.average == FNORM_BN_AVERAGE_CUMULATIVE && a.running_mean != nullptr), FNORM_STATUS_NOT_SUPPORTED,
                "the CUDNN engine does not take this case: the CUDNN engine takes the averaging factor on the host; "
                "CUMULATIVE averaging reads it from the device counter (use NATIVE)");
  // cuDNN's kernels assume aligned tensors: a misaligned one faulted
  // (cudaErrorMisalignedAddress, NHWC fp16, cuDNN 9.14), so refuse instead.
  const void *data[] = {a.x, a.z, a.y, a.dy, a.dx, a.dz, a.y_in};
  const char *names[] = {"x", "z", "y", "dy", "dx", "dz", "y"};
  for (int i = 0; i < 7; ++i)
    FNORM_REQUIRE(reinterpret_cast<uintptr_t>(data[i]) % 16 == 0, FNORM_STATUS_NOT_SUPPORTED,
                  "the CUDNN engine needs 16-byte aligned tensors; argument '%s' is %p (use NATIVE)",
                  names[i], data[i]);
  if (pb.pass != BnPass::Bwd) return;
  FNORM_REQUIRE(p.act_or_null == nullptr || a.y_in != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument 'y' is NULL; the CUDNN engine's fused ReLU backward reads it");
  FNORM_REQUIRE(!(p.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION && a.dz == nullptr), FNORM_STATUS_NOT_SUPPORTED,
                "the CUDNN engine's ADD_RELU backward always writes dz; pass it");
}

void cudnn_bn_launch(const CudnnBnPlan &p, const BnProblem &pb, const BnArgs &a, cudaStream_t stream) {
  char *ws = static_cast<char *>(a.workspace);
  float *ones = reinterpret_cast<float *>(ws + p.scratch);
  float *zeros = reinterpret_cast<float *>(ws + p.scratch + p.vec);
  float *spare1 = reinterpret_cast<float *>(ws + p.scratch + 2 * p.vec);
  float *spare2 = reinterpret_cast<float *>(ws + p.scratch + 3 * p.vec);
  if (a.gamma == nullptr) check_cuda(launch_bn_fill(ones, pb.c, 1.f, stream), "bn_fill");
  if (a.beta == nullptr) check_cuda(launch_bn_fill(zeros, pb.c, 0.f, stream), "bn_fill");
  const float *gamma = a.gamma ? a.gamma : ones;
  const float *beta = a.beta ? a.beta : zeros;
  const float one = 1.f, zero = 0.f;
  const bool add = p.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
  std::lock_guard<std::mutex> lock(*p.mutex);
  check(cudnnSetStream(p.handle, stream), "cudnnSetStream", false);
  if (pb.pass == BnPass::FwdTrain) {
    check(cudnnBatchNormalizationForwardTrainingEx(
              p.handle, p.mode, p.ops, &one, &zero, p.x.d, a.x, add ? p.x.d : nullptr, a.z, p.x.d, a.y, p.param.d,
              gamma, beta, pb.momentum(), a.running_mean, a.running_var, pb.eps(), a.saved_mean, a.saved_invstd,
              p.act_or_null, ws, p.scratch, a.reserve, a.reserve_bytes),
          "cudnnBatchNormalizationForwardTrainingEx", false);
    if (a.num_batches_tracked != nullptr) check_cuda(launch_bn_count(a.num_batches_tracked, stream), "bn_count");
  } else if (pb.pass == BnPass::FwdInfer) {
    check(cudnnBatchNormalizationForwardInference(p.handle, p.mode, &one, &zero, p.x.d, a.x, p.x.d, a.y, p.param.d,
                                                  gamma, beta, a.running_mean_in, a.running_var_in, pb.eps()),
          "cudnnBatchNormalizationForwardInference", false);
  } else {
    const bool act = p.act_or_null != nullptr;
    check(cudnnBatchNormalizationBackwardEx(
              p.handle, p.mode, p.ops, &one, &zero, &one, &zero, p.x.d, a.x, act ? p.x.d : nullptr,
              act ? a.y_in : nullptr, p.x.d, a.dy, a.dz ? p.x.d : nullptr, a.dz, p.x.d, a.dx, p.param.d, gamma,
              beta, a.dgamma ? a.dgamma : spare1, a.dbeta ? a.dbeta : spare2, pb.eps(), a.saved_mean_in,
              a.saved_invstd_in, p.act_or_null, ws, p.scratch, a.reserve, a.reserve_bytes),
          "cudnnBatchNormalizationBackwardEx", false);
  }
}

#else  // no cuDNN in this build

struct CudnnBnPlan {};

bool cudnn_bn_built() { return false; }

const CudnnBnPlan &cudnn_bn_plan(fnorm_handle *, const BnProblem &) {
  fail(FNORM_STATUS_NOT_SUPPORTED_BUILD, "this build has no cuDNN (meson option 'cudnn')");
}
const CudnnBnPlan *cudnn_bn_plan_if_ready(fnorm_handle *, const BnProblem &) { return nullptr; }
bool cudnn_bn_takes(const CudnnBnPlan &, std::string *why) {
  if (why != nullptr) *why = "this build has no cuDNN (meson option 'cudnn')";
  return false;
}
size_t cudnn_bn_workspace(const CudnnBnPlan &) { return 0; }
size_t cudnn_bn_reserve(const CudnnBnPlan &) { return 0; }
bool cudnn_bn_auto_state(fnorm_handle *, cudaStream_t) { return false; }
void cudnn_bn_check(const CudnnBnPlan &, const BnProblem &, const BnArgs &) {}
void cudnn_bn_launch(const CudnnBnPlan &, const BnProblem &, const BnArgs &, cudaStream_t) {
  fail(FNORM_STATUS_NOT_SUPPORTED_BUILD, "this build has no cuDNN (meson option 'cudnn')");
}

#endif

}  // namespace fnorm
