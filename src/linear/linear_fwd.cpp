/* SPDX-License-Identifier: Apache-2.0 */
// Fully-connected forward: y = act(x W + bias) through cuBLASLt's fused
// epilogue, or its GEMM without the activation (or without aux) and our
// pass beside it where that is faster (own_pass), or the plain GEMM and our
// epilogue kernel where cuBLASLt has no fused kernel.
#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {
namespace {

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
bool own_pass(const Tuning &t, const LinearProblem &p, LinearAct act, bool training) {
  if (act == LinearAct::None || (act == LinearAct::Relu && !training)) return false;
  switch (t.linear_fwd_aux) {
    case Tuning::LinearFwdAux::Lt: return false;
    case Tuning::LinearFwdAux::Own: return true;
    case Tuning::LinearFwdAux::Rule: break;
  }
  if (!training) return false;
  const bool fp32 = p.dtype == FNORM_DTYPE_FLOAT32;
  if (act == LinearAct::Relu) return fp32 || p.n < 128 || p.n > 512;
  return p.n > 512 || (fp32 && p.n >= 128);
}

// y^T (n x m) = op(W) (n x k) * x^T (k x m), with cuBLASLt's epilogue for
// the desc's when it has a kernel for it (or with our pass beside it).
FwdPlan plan_fwd(LinearState &s, const Tuning &t, const LinearProblem &p, const LinearBuffers &buf) {
  const fnorm_linear_epilogue_t epi = p.epilogue;
  const LinearAct act = act_of(epi);
  GemmKey k = key_base(p);
  k.transa = p.layout == FNORM_LINEAR_WEIGHT_KN ? CUBLAS_OP_N : CUBLAS_OP_T;
  k.transb = CUBLAS_OP_N;
  k.rows = static_cast<uint64_t>(p.n);
  k.cols = static_cast<uint64_t>(p.m);
  k.inner = static_cast<uint64_t>(p.k);
  k.lda = p.w.row_stride;
  k.ldb = p.x.row_stride;
  k.ldd = p.y.row_stride;
  k.budget = kFwdHeuristicBudget;
  GemmRoles roles;
  roles.a = Operand::W;
  roles.b = Operand::X;
  roles.d = Operand::Y;
  const bool aux = buf.aux != nullptr;
  const bool try_fused = epi == FNORM_LINEAR_EPILOGUE_NONE || (!t.linear_unfused && epilogue_vector_ok(buf.bias));
  FwdPlan plan;
  if (try_fused && own_pass(t, p, act, aux)) {
    // ReLU (training): the inference GEMM, then the mask from y. GELU: z
    // (with the bias) into aux (training) or y (inference), then gelu.
    GemmPlan own;
    own.key = k;
    own.roles = roles;
    own.roles.bias = Operand::Bias;
    if (act == LinearAct::Relu) {
      own.key.epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
      plan.post = FwdPost::ReluMask;
    } else {
      own.key.epilogue = CUBLASLT_EPILOGUE_BIAS;
      plan.post = FwdPost::GeluInPlace;
      if (aux) {
        own.key.ldd = linear_aux_ld(act, p.n);
        own.roles.d = Operand::Aux;
        plan.post = FwdPost::GeluFromAux;
      }
    }
    const GemmPointers ptrs = own.roles.bind(buf);
    set_alignments(own.key, ptrs);
    own.algo = find_algo(s, t, own.key, ptrs);
    if (own.algo.found) {
      own.fused = true;
      plan.gemm = own;
      return plan;
    }
  }
  GemmPlan fused;
  fused.key = k;
  fused.roles = roles;
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
  if (buf.bias != nullptr) fused.roles.bias = Operand::Bias;
  if (aux) {
    fused.roles.aux = Operand::Aux;
    fused.key.aux_ld = linear_aux_ld(act, p.n);
  }
  plan.gemm = choose_gemm(s, t, fused, try_fused, k, roles, buf, "forward");
  // No fused kernel for this epilogue here (or the test hook asked for
  // none): our epilogue kernel over y in place after the plain GEMM.
  plan.post = plan.gemm.fused ? FwdPost::None : FwdPost::Epilogue;
  return plan;
}

// Plans are cached per (handle, problem, the pointers' alignments and which
// optional ones are given).
struct FwdKey {
  LinearProblem problem;
  uint32_t align_x = 0, align_w = 0, align_y = 0, align_bias = 0, align_aux = 0;
  uint32_t has_aux = 0;
};

const FwdPlan &linear_fwd_plan(fnorm_handle *h, const LinearProblem &p, const LinearBuffers &buf) {
  FwdKey key;
  key.problem = p;
  key.align_x = alignment_of(buf.x);
  key.align_w = alignment_of(buf.w);
  key.align_y = alignment_of(buf.y);
  key.align_bias = alignment_of(buf.bias);
  key.align_aux = alignment_of(buf.aux);
  key.has_aux = buf.aux != nullptr;
  return PlanCache<FwdKey, FwdPlan>::get(h->id, key, [&] { return plan_fwd(state_of(h), h->tuning, p, buf); });
}

void launch_fwd(const LinearState &s, const FwdPlan &plan, const LinearProblem &p, const LinearBuffers &buf,
                void *workspace, cudaStream_t st) {
  plan.gemm.launch(s, buf, aligned_workspace(workspace), st);
  void *y = buf.y, *aux = const_cast<void *>(buf.aux);
  switch (plan.post) {
    case FwdPost::None: break;
    case FwdPost::Epilogue:
      check_cuda(launch_linear_fwd_epilogue(p.dtype, act_of(p.epilogue), y, p.m, p.n, p.y.row_stride, buf.bias, aux, st),
                 "linear forward epilogue kernel");
      break;
    case FwdPost::ReluMask:
      check_cuda(launch_linear_relu_mask(p.dtype, y, p.y.row_stride, p.m, p.n, aux, st), "linear ReLU mask kernel");
      break;
    case FwdPost::GeluFromAux:
      check_cuda(launch_linear_gelu_pass(p.dtype, aux, linear_aux_ld(LinearAct::Gelu, p.n), y, p.y.row_stride, p.m,
                                         p.n, st),
                 "linear GELU kernel");
      break;
    case FwdPost::GeluInPlace:
      check_cuda(launch_linear_gelu_pass(p.dtype, y, p.y.row_stride, y, p.y.row_stride, p.m, p.n, st),
                 "linear GELU kernel");
      break;
  }
}

// k = 0: y = act(0 + bias), and aux what the backward needs, without a GEMM.
void launch_fwd_no_inner(const LinearProblem &p, const LinearBuffers &buf, cudaStream_t st) {
  const size_t es = dtype_size(p.dtype);
  check_cuda(cudaMemset2DAsync(buf.y, static_cast<size_t>(p.y.row_stride) * es, 0, static_cast<size_t>(p.n) * es,
                               static_cast<size_t>(p.m), st),
             "cudaMemset2DAsync (y)");
  const LinearAct act = act_of(p.epilogue);
  if (act != LinearAct::None || buf.bias != nullptr)
    check_cuda(launch_linear_fwd_epilogue(p.dtype, act, buf.y, p.m, p.n, p.y.row_stride, buf.bias,
                                          const_cast<void *>(buf.aux), st),
               "linear forward epilogue kernel");
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
    const LinearProblem p = describe_linear(desc, x_desc, w_desc, y_desc, "y_desc", true);
    *workspace_bytes = p.m == 0 || p.n == 0 || p.k == 0 ? 0 : kAlignSlack + kCublasWorkspace;
  });
}

FNORM_API fnorm_status_t fnorm_linear_fwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                          const void *w, const void *bias, fnorm_tensor_desc_t y_desc, void *y,
                                          void *aux, size_t aux_bytes, void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const LinearProblem p = describe_linear(desc, x_desc, w_desc, y_desc, "y_desc", true);
    const LinearFwdArgs a{x, w, bias, y, aux, aux_bytes, workspace, workspace_bytes};
    check_linear_fwd_args(handle, p, a);
    if (p.m * p.n == 0) return;  // y has no elements
    LinearBuffers buf;
    buf.x = x;
    buf.w = w;
    buf.bias = const_cast<void *>(bias);
    buf.y = y;
    buf.aux = aux;
    const cudaStream_t st = cuda_stream(stream);
    if (p.k == 0) {
      DeviceGuard guard(handle->device);
      launch_fwd_no_inner(p, buf, st);
      return;
    }
    require_workspace(workspace, workspace_bytes, kAlignSlack + kCublasWorkspace, "fnorm_linear_fwd_workspace_size", 1);
    DeviceGuard guard(handle->device);
    const FwdPlan &plan = linear_fwd_plan(handle, p, buf);
    launch_fwd(state_of(handle), plan, p, buf, workspace, st);
  });
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
