/* SPDX-License-Identifier: Apache-2.0 */
// The BatchNorm cuDNN engine: the same entry points mapped onto cuDNN's
// cudnnBatchNormalizationForwardTrainingEx / BackwardEx / ForwardInference.
// NHWC fp16/bf16 uses CUDNN_BATCHNORM_SPATIAL_PERSISTENT (the mode of cuDNN's
// fused BN + add + ReLU), everything else CUDNN_BATCHNORM_SPATIAL. Whatever
// cuDNN refuses comes back as NOT_SUPPORTED with cuDNN's own message.
#include <climits>
#include <map>
#include <memory>
#include <vector>

#include "batchnorm/batchnorm.hpp"

#if FNORM_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace fnorm {

#if FNORM_HAVE_CUDNN

// What AUTO asked cuDNN about one case (pass, dtype, layout, sizes).
struct CudnnAutoEntry {
  bool takes = false;  // cuDNN describes and sizes it, with a 0-byte reserve
  size_t workspace = 0;
};

struct CudnnState : OpState {
  ~CudnnState() override {
    if (handle != nullptr) cudnnDestroy(handle);
  }
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;  // cudnnSetStream + call must not interleave between threads
  std::mutex auto_mutex;  // guards auto_cache
  std::map<std::vector<int64_t>, CudnnAutoEntry> auto_cache;
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

// The state if it exists (never creates it).
CudnnState *existing_state(fnorm_handle *h) { return find_op_state<CudnnState>(h); }

CudnnState &state_of(fnorm_handle *h) {
  return op_state<CudnnState>(h, [h] {
    auto s = std::make_unique<CudnnState>();
    DeviceGuard guard(h->device);
    check(cudnnCreate(&s->handle), "cudnnCreate", false);
    return s.release();
  });
}

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

// The problem as cuDNN sees it.
struct Problem {
  TensorDesc x, param;
  ActivationDesc act;
  cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  cudnnBatchNormOps_t ops = CUDNN_BATCHNORM_OPS_BN;
  cudnnActivationDescriptor_t act_or_null = nullptr;
};

void describe(const BnCall &c, Problem &p) {
  const BnProblem &v = c.pb;
  FNORM_REQUIRE(v.rank <= 5, FNORM_STATUS_NOT_SUPPORTED,
                "the CUDNN engine takes rank 2..5 tensors (x_desc has rank %d)", v.rank);
  FNORM_REQUIRE(!(c.desc->average == FNORM_BN_AVERAGE_CUMULATIVE && c.running_mean != nullptr),
                FNORM_STATUS_NOT_SUPPORTED,
                "the CUDNN engine takes the averaging factor on the host; CUMULATIVE averaging "
                "reads it from the device counter (use NATIVE)");
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
    int64_t s = dims[1];
    for (int i = nd - 1; i >= 2; --i) {
      strides[i] = s;
      s *= dims[i];
    }
    strides[0] = s;
  } else {
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; --i) {
      strides[i] = s;
      s *= dims[i];
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
  check(cudnnSetTensorNdDescriptor(p.x.d, dt, nd, idims, istrides), "cudnnSetTensorNdDescriptor",
        true);
  p.mode = (v.channels_last && v.dtype != FNORM_DTYPE_FLOAT32) ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT
                                                              : CUDNN_BATCHNORM_SPATIAL;
  check(cudnnDeriveBNTensorDescriptor(p.param.d, p.x.d, p.mode), "cudnnDeriveBNTensorDescriptor",
        true);
  switch (c.desc->epilogue) {
    case FNORM_BN_EPILOGUE_NONE:
      p.ops = CUDNN_BATCHNORM_OPS_BN;
      break;
    case FNORM_BN_EPILOGUE_RELU:
      p.ops = CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
      p.act_or_null = p.act.d;
      break;
    case FNORM_BN_EPILOGUE_ADD_RELU:
      p.ops = CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
      p.act_or_null = p.act.d;
      break;
  }
  FNORM_REQUIRE(!(c.pb.pass == BnPass::FwdInfer && c.desc->epilogue != FNORM_BN_EPILOGUE_NONE),
                FNORM_STATUS_NOT_SUPPORTED,
                "cuDNN's inference forward has no fused activation (use NATIVE)");
}

// cuDNN's own scratch bytes for the call.
size_t cudnn_scratch(CudnnState &s, const BnCall &c, Problem &p) {
  size_t bytes = 0;
  if (c.pb.pass == BnPass::FwdTrain) {
    check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
              s.handle, p.mode, p.ops, p.x.d, p.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? p.x.d : nullptr,
              p.x.d, p.param.d, p.act_or_null, &bytes),
          "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", true);
  } else if (c.pb.pass == BnPass::Bwd) {
    check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
              s.handle, p.mode, p.ops, p.x.d, p.act_or_null ? p.x.d : nullptr, p.x.d,
              p.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? p.x.d : nullptr, p.x.d, p.param.d,
              p.act_or_null, &bytes),
          "cudnnGetBatchNormalizationBackwardExWorkspaceSize", true);
  }
  return bytes;
}


// Workspace: cuDNN's scratch, then four C-float vectors (ones, zeros, and
// stand-ins for outputs the caller did not ask for).
struct Layout {
  size_t scratch = 0, vec = 0, total = 0;
};

Layout layout_of(CudnnState &s, const BnCall &c, Problem &p) {
  Layout l;
  l.scratch = checked_align_up(cudnn_scratch(s, c, p), kRegionAlign, "x_desc");
  l.vec = checked_align_up(c.pb.vec_bytes, kRegionAlign, "x_desc");
  l.total = l.scratch + 4 * l.vec;
  return l;
}

}  // namespace

bool cudnn_bn_supports(fnorm_handle *h, const BnCall &c, std::string *why) {
  try {
    CudnnState &s = state_of(h);
    Problem p;
    describe(c, p);
    (void)cudnn_scratch(s, c, p);
    if (c.pb.pass == BnPass::FwdTrain && p.act_or_null != nullptr) {
      size_t r = 0;
      check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(s.handle, p.mode, p.ops,
                                                                 p.act_or_null, p.x.d, &r),
            "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", true);
    }
    return true;
  } catch (const Error &e) {
    if (e.status != FNORM_STATUS_NOT_SUPPORTED) throw;
    *why = e.message;
    return false;
  }
}

bool cudnn_bn_auto_takes(fnorm_handle *h, const BnCall &c, size_t *workspace) {
  CudnnState *s = existing_state(h);
  if (s == nullptr) return false;
  const BnProblem &v = c.pb;
  std::vector<int64_t> key = {static_cast<int64_t>(c.pb.pass), static_cast<int64_t>(c.desc->epilogue),
                              static_cast<int64_t>(v.dtype), v.channels_last ? 1 : 0, v.rank};
  key.insert(key.end(), v.dims, v.dims + v.rank);
  {
    std::lock_guard<std::mutex> lock(s->auto_mutex);
    auto it = s->auto_cache.find(key);
    if (it != s->auto_cache.end()) {
      *workspace = it->second.workspace;
      return it->second.takes;
    }
  }
  CudnnAutoEntry e;
  try {
    Problem p;
    describe(c, p);
    // The reserve of the training forward of this case: the forward and the
    // backward of a step may then run on different engines only where it is 0.
    size_t r = 0;
    check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(s->handle, p.mode, p.ops, p.act_or_null, p.x.d, &r),
          "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", true);
    e.workspace = layout_of(*s, c, p).total;
    e.takes = r == 0;
  } catch (const Error &) {  // refused, or failed: AUTO stays NATIVE
    e.takes = false;
  }
  std::lock_guard<std::mutex> lock(s->auto_mutex);
  s->auto_cache.emplace(key, e);
  *workspace = e.workspace;
  return e.takes;
}

bool cudnn_bn_auto_state(fnorm_handle *h, cudaStream_t stream) {
  if (existing_state(h) != nullptr) return true;
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

size_t cudnn_bn_workspace_size(fnorm_handle *h, const BnCall &c) {
  CudnnState &s = state_of(h);
  Problem p;
  describe(c, p);
  return layout_of(s, c, p).total;
}

size_t cudnn_bn_reserve_size(fnorm_handle *h, const BnCall &c) {
  CudnnState &s = state_of(h);
  Problem p;
  describe(c, p);
  size_t r = 0;
  check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(s.handle, p.mode, p.ops, p.act_or_null,
                                                             p.x.d, &r),
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", true);
  return r;
}

void cudnn_bn_run(fnorm_handle *h, cudaStream_t stream, const BnCall &c) {
  // cuDNN's kernels assume aligned tensors: a misaligned one faulted
  // (cudaErrorMisalignedAddress, NHWC fp16, cuDNN 9.14), so refuse instead.
  const void *data[] = {c.x, c.z, c.y, c.dy, c.dx, c.dz, c.y_in};
  const char *names[] = {"x", "z", "y", "dy", "dx", "dz", "y"};
  for (int i = 0; i < 7; ++i)
    FNORM_REQUIRE(reinterpret_cast<uintptr_t>(data[i]) % 16 == 0, FNORM_STATUS_NOT_SUPPORTED,
                  "the CUDNN engine needs 16-byte aligned tensors; argument '%s' is %p (use NATIVE)",
                  names[i], data[i]);
  CudnnState &s = state_of(h);
  Problem p;
  describe(c, p);
  const Layout l = layout_of(s, c, p);
  char *ws = static_cast<char *>(c.workspace);
  float *ones = reinterpret_cast<float *>(ws + l.scratch);
  float *zeros = reinterpret_cast<float *>(ws + l.scratch + l.vec);
  float *spare1 = reinterpret_cast<float *>(ws + l.scratch + 2 * l.vec);
  float *spare2 = reinterpret_cast<float *>(ws + l.scratch + 3 * l.vec);
  const int64_t C = c.pb.c;
  if (c.gamma == nullptr) check_cuda(launch_bn_fill(ones, C, 1.f, stream), "bn_fill");
  if (c.beta == nullptr) check_cuda(launch_bn_fill(zeros, C, 0.f, stream), "bn_fill");
  const float *gamma = c.gamma ? c.gamma : ones;
  const float *beta = c.beta ? c.beta : zeros;
  const float one = 1.f, zero = 0.f;
  std::lock_guard<std::mutex> lock(s.mutex);
  check(cudnnSetStream(s.handle, stream), "cudnnSetStream", false);
  if (c.pb.pass == BnPass::FwdTrain) {
    check(cudnnBatchNormalizationForwardTrainingEx(
              s.handle, p.mode, p.ops, &one, &zero, p.x.d, c.x,
              p.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION ? p.x.d : nullptr, c.z, p.x.d, c.y, p.param.d,
              gamma, beta, c.desc->momentum, c.running_mean, c.running_var, c.desc->epsilon,
              c.saved_mean, c.saved_invstd, p.act_or_null, ws, l.scratch, c.reserve,
              c.reserve_bytes),
          "cudnnBatchNormalizationForwardTrainingEx", false);
    if (c.num_batches_tracked != nullptr)
      check_cuda(launch_bn_count(c.num_batches_tracked, stream), "bn_count");
  } else if (c.pb.pass == BnPass::FwdInfer) {
    check(cudnnBatchNormalizationForwardInference(s.handle, p.mode, &one, &zero, p.x.d, c.x, p.x.d,
                                                  c.y, p.param.d, gamma, beta, c.running_mean_in,
                                                  c.running_var_in, c.desc->epsilon),
          "cudnnBatchNormalizationForwardInference", false);
  } else {
    const bool act = p.act_or_null != nullptr;
    FNORM_REQUIRE(!act || c.y_in != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'y' is NULL; the CUDNN engine's fused ReLU backward reads it");
    FNORM_REQUIRE(!(p.ops == CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION && c.dz == nullptr),
                  FNORM_STATUS_NOT_SUPPORTED,
                  "the CUDNN engine's ADD_RELU backward always writes dz; pass it");
    check(cudnnBatchNormalizationBackwardEx(
              s.handle, p.mode, p.ops, &one, &zero, &one, &zero, p.x.d, c.x,
              act ? p.x.d : nullptr, act ? c.y_in : nullptr, p.x.d, c.dy,
              c.dz ? p.x.d : nullptr, c.dz, p.x.d, c.dx, p.param.d, gamma, beta,
              c.dgamma ? c.dgamma : spare1, c.dbeta ? c.dbeta : spare2, c.desc->epsilon,
              c.saved_mean_in, c.saved_invstd_in, p.act_or_null, ws, l.scratch, c.reserve,
              c.reserve_bytes),
          "cudnnBatchNormalizationBackwardEx", false);
  }
}

#else  // no cuDNN in this build

bool cudnn_bn_built() { return false; }

bool cudnn_bn_supports(fnorm_handle *, const BnCall &, std::string *why) {
  *why = "this build has no cuDNN (meson option 'cudnn')";
  return false;
}
size_t cudnn_bn_workspace_size(fnorm_handle *, const BnCall &) { return 0; }
size_t cudnn_bn_reserve_size(fnorm_handle *, const BnCall &) { return 0; }
bool cudnn_bn_auto_takes(fnorm_handle *, const BnCall &, size_t *) { return false; }
bool cudnn_bn_auto_state(fnorm_handle *, cudaStream_t) { return false; }
void cudnn_bn_run(fnorm_handle *, cudaStream_t, const BnCall &) {
  fail(FNORM_STATUS_NOT_SUPPORTED_BUILD, "this build has no cuDNN (meson option 'cudnn')");
}

#endif

}  // namespace fnorm
