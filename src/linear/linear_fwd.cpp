// Fully-connected forward: y = act(x W + bias) through cuBLASLt's fused
// epilogue, or its GEMM without the activation (or without aux) and our
// pass beside it where that is faster (own_pass), or the plain GEMM and our
// epilogue kernel where cuBLASLt has no fused kernel.
#include "core/pointer_check.hpp"
#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {
namespace {

// Pointer rules, the aux buffer and overlaps of a forward call.
void check_fwd_call(const fnorm_handle *h, const LinearProblem &p, const void *x, const void *w, const void *bias, const void *y,
                    const void *aux, size_t aux_bytes) {
  FNORM_REQUIRE_NOT_NULL(x);
  FNORM_REQUIRE_NOT_NULL(w);
  FNORM_REQUIRE_NOT_NULL(y);
  const fnorm_linear_epilogue_t epi = p.desc->epilogue;
  const LinearAct act = act_of(epi);
  if (has_bias(epi)) {
    FNORM_REQUIRE(bias != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'bias' is NULL; epilogue %s adds a bias", linear_epilogue_name(epi));
  } else {
    FNORM_REQUIRE(bias == nullptr, FNORM_STATUS_BAD_PARAM,
                  "argument 'bias' must be NULL: epilogue NONE adds no bias");
  }
  const size_t aux_need = aux_bytes_for(act, p.dtype, p.m, p.n, "y_desc");
  if (act == LinearAct::None) {
    FNORM_REQUIRE(aux == nullptr, FNORM_STATUS_BAD_PARAM,
                  "argument 'aux' must be NULL: epilogue %s has no activation to save",
                  linear_epilogue_name(epi));
  } else if (aux != nullptr) {
    require_aux(aux, aux_bytes, aux_need, "aux", "aux_bytes");
  }
  const size_t bias_bytes = checked_mul(static_cast<size_t>(p.n), dtype_size(p.dtype), "w_desc");
  const Span sx{"x", x, matrix_bytes(p.x, p.dtype, "x_desc")}, sw{"w", w, matrix_bytes(p.w, p.dtype, "w_desc")},
      sb{"bias", bias, bias_bytes}, saux{"aux", aux, aux_need};
  const Span sy{"y", y, matrix_bytes(p.y, p.dtype, "y_desc")};
  require_disjoint(sy, {sx, sw, sb, saux});
  require_disjoint(saux, {sx, sw, sb});
  require_device_memory(h, {sx, sw, sb, saux, sy});
}

// What runs after the GEMM.
enum class FwdPost {
  None,         // cuBLASLt's epilogue did everything
  Epilogue,     // plain GEMM: our epilogue kernel (bias, activation, aux) over y
  ReluMask,     // RELU_BIAS GEMM into y: our mask pass y -> aux
  GeluFromAux,  // BIAS GEMM into aux (z): our pass y = gelu(z)
  GeluInPlace   // BIAS GEMM into y (inference): our pass y = gelu(y)
};

struct FwdPlan {
  GemmPlan gemm;
  FwdPost post = FwdPost::None;
};

// Whether the activation comes from our pass beside a GEMM without it (or
// without aux) rather than from cuBLASLt's epilogue. Measured in one
// process (bench/ab_linear.py, H200, CUDA 13.0, 2026-11-22) at m = 8192,
// (n, k) in (1024, 784), (1024, 1024), (512, 1024), (256, 512), (1, 256),
// us, ours against cuBLASLt's epilogue:
//  - ReLU training, fp32: RELU_AUX_BIAS costs 6-29% over RELU_BIAS, our mask
//    pass 1-3% (271 against 340 at 1024 x 784; 59 against 68 at 256 x 512):
//    ours at every n.
//  - ReLU training, fp16/bf16: RELU_AUX_BIAS is 15-40% slower at n = 1024
//    and n = 1 (30.4 against 34.2 at 1024 x 784), but within 12% at n = 256
//    and 512, where our pass costs more (17.8 against 19.8 at 512 x 1024):
//    ours outside 128 <= n <= 512.
//  - GELU training: our BIAS GEMM into aux and a GELU pass win at n = 1024
//    (fp16 33.5 against 36.2, fp32 287 against 291 at 1024 x 784) and in
//    fp32 at n = 256; GELU_AUX_BIAS wins at fp16 n <= 512 (21.1 against 21.5
//    at 512 x 1024) and at n = 1 (6.5 against 8.0): ours for n > 512, and
//    for fp32 from n = 128.
//  - GELU inference: GELU_BIAS beats BIAS and a pass (fp16 26.9 against
//    32.9, fp32 280 against 285 at 1024 x 784): cuBLASLt's.
bool own_pass(const LinearState &s, const LinearProblem &p, LinearAct act, bool training) {
  if (act == LinearAct::None || (act == LinearAct::Relu && !training)) return false;
  switch (s.fwd_aux) {
    case LinearState::FwdAux::Lt: return false;
    case LinearState::FwdAux::Own: return true;
    case LinearState::FwdAux::Rule: break;
  }
  if (!training) return false;
  const bool fp32 = p.dtype == FNORM_DTYPE_FLOAT32;
  if (act == LinearAct::Relu) return fp32 || p.n < 128 || p.n > 512;
  return p.n > 512 || (fp32 && p.n >= 128);
}

// y^T (n x m) = op(W) (n x k) * x^T (k x m), with cuBLASLt's epilogue for
// the desc's when it has a kernel for it (or with our pass beside it).
FwdPlan plan_fwd(LinearState &s, const LinearProblem &p, const void *x, const void *w, const void *bias, void *y,
                 void *aux) {
  const fnorm_linear_epilogue_t epi = p.desc->epilogue;
  const LinearAct act = act_of(epi);
  GemmKey k = key_base(p);
  k.transa = p.desc->layout == FNORM_LINEAR_WEIGHT_KN ? CUBLAS_OP_N : CUBLAS_OP_T;
  k.transb = CUBLAS_OP_N;
  k.rows = static_cast<uint64_t>(p.n);
  k.cols = static_cast<uint64_t>(p.m);
  k.inner = static_cast<uint64_t>(p.k);
  k.lda = p.w.ld;
  k.ldb = p.x.ld;
  k.ldd = p.y.ld;
  k.budget = kFwdHeuristicBudget;
  GemmPointers ptrs;
  ptrs.a = w;
  ptrs.b = x;
  ptrs.d = y;
  const bool try_fused = epi == FNORM_LINEAR_EPILOGUE_NONE || (!s.force_unfused && epilogue_vector_ok(bias));
  FwdPlan plan;
  if (try_fused && own_pass(s, p, act, aux != nullptr)) {
    // ReLU (training): the inference GEMM, then the mask from y. GELU: z
    // (with the bias) into aux (training) or y (inference), then gelu.
    GemmPlan own;
    own.key = k;
    own.ptrs = ptrs;
    own.ptrs.bias = const_cast<void *>(bias);
    if (act == LinearAct::Relu) {
      own.key.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
      plan.post = FwdPost::ReluMask;
    } else {
      own.key.epilogue = CUBLASLT_EPILOGUE_BIAS;
      plan.post = FwdPost::GeluInPlace;
      if (aux != nullptr) {
        own.key.ldd = linear_aux_ld(act, p.n);
        own.ptrs.d = aux;
        plan.post = FwdPost::GeluFromAux;
      }
    }
    set_alignments(own.key, own.ptrs);
    own.algo = find_algo(s, own.key, own.ptrs);
    if (own.algo.found) {
      own.fused = true;
      plan.gemm = own;
      return plan;
    }
  }
  GemmPlan fused;
  fused.key = k;
  fused.ptrs = ptrs;
  switch (epi) {
    case FNORM_LINEAR_EPILOGUE_NONE: fused.key.epilogue = CUBLASLT_EPILOGUE_DEFAULT; break;
    case FNORM_LINEAR_EPILOGUE_BIAS: fused.key.epilogue = CUBLASLT_EPILOGUE_BIAS; break;
    case FNORM_LINEAR_EPILOGUE_BIAS_RELU:
      fused.key.epilogue = aux ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS;
      break;
    case FNORM_LINEAR_EPILOGUE_BIAS_GELU:
      fused.key.epilogue = aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
      break;
  }
  fused.ptrs.bias = const_cast<void *>(bias);
  fused.ptrs.aux = aux;
  if (aux != nullptr) fused.key.aux_ld = linear_aux_ld(act, p.n);
  plan.gemm = choose_gemm(s, fused, try_fused, k, ptrs, "forward");
  // No fused kernel for this epilogue here (or the test hook asked for
  // none): our epilogue kernel over y in place after the plain GEMM.
  plan.post = plan.gemm.fused ? FwdPost::None : FwdPost::Epilogue;
  return plan;
}

}  // namespace
}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_linear_fwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                                         fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                                         fnorm_tensor_desc_t y_desc, size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    (void)check_problem(desc, x_desc, w_desc, y_desc, "y_desc", true);
    *workspace_bytes = kAlignSlack + kCublasWorkspace;
  });
}

FNORM_API fnorm_status_t fnorm_linear_fwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                          const void *w, const void *bias, fnorm_tensor_desc_t y_desc, void *y,
                                          void *aux, size_t aux_bytes, void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const LinearProblem p = check_problem(desc, x_desc, w_desc, y_desc, "y_desc", true);
    check_fwd_call(handle, p, x, w, bias, y, aux, aux_bytes);
    require_workspace(workspace, workspace_bytes, kAlignSlack + kCublasWorkspace, "fnorm_linear_fwd_workspace_size", 1);
    require_device_memory(handle, {{"workspace", workspace, workspace_bytes}});

    DeviceGuard guard(handle->device);
    LinearState &s = state_of(handle);
    const cudaStream_t st = cuda_stream(stream);
    const FwdPlan plan = plan_fwd(s, p, x, w, bias, y, aux);
    launch_gemm(s, plan.gemm.key, plan.gemm.algo, plan.gemm.ptrs, aligned_workspace(workspace), st);
    switch (plan.post) {
      case FwdPost::None: break;
      case FwdPost::Epilogue:
        check_cuda(launch_linear_fwd_epilogue(p.dtype, act_of(desc->epilogue), y, p.m, p.n, p.y.ld, bias, aux, st),
                   "linear forward epilogue kernel");
        break;
      case FwdPost::ReluMask:
        check_cuda(launch_linear_relu_mask(p.dtype, y, p.y.ld, p.m, p.n, aux, st), "linear ReLU mask kernel");
        break;
      case FwdPost::GeluFromAux:
        check_cuda(launch_linear_gelu_pass(p.dtype, aux, linear_aux_ld(LinearAct::Gelu, p.n), y, p.y.ld, p.m, p.n, st),
                   "linear GELU kernel");
        break;
      case FwdPost::GeluInPlace:
        check_cuda(launch_linear_gelu_pass(p.dtype, y, p.y.ld, y, p.y.ld, p.m, p.n, st), "linear GELU kernel");
        break;
    }
  });
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
