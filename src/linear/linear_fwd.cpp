// Fully-connected forward: y = act(x W + bias) through cuBLASLt's fused
// epilogue, or the plain GEMM and our epilogue kernel where cuBLASLt has none.
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

// y^T (n x m) = op(W) (n x k) * x^T (k x m), with cuBLASLt's epilogue for
// the desc's when it has a kernel for it.
GemmPlan plan_fwd(LinearState &s, const LinearProblem &p, const void *x, const void *w, const void *bias, void *y,
                  void *aux) {
  const fnorm_linear_epilogue_t epi = p.desc->epilogue;
  GemmKey k = key_base(p);
  k.transa = p.desc->layout == FNORM_LINEAR_WEIGHT_KN ? CUBLAS_OP_N : CUBLAS_OP_T;
  k.transb = CUBLAS_OP_N;
  k.rows = static_cast<uint64_t>(p.n);
  k.cols = static_cast<uint64_t>(p.m);
  k.inner = static_cast<uint64_t>(p.k);
  k.lda = p.w.ld;
  k.ldb = p.x.ld;
  k.ldd = p.y.ld;
  GemmPointers ptrs;
  ptrs.a = w;
  ptrs.b = x;
  ptrs.d = y;
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
  if (aux != nullptr) fused.key.aux_ld = linear_aux_ld(act_of(epi), p.n);
  const bool try_fused = epi == FNORM_LINEAR_EPILOGUE_NONE || (!s.force_unfused && epilogue_vector_ok(bias));
  return choose_gemm(s, fused, try_fused, k, ptrs, "forward");
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
    const GemmPlan plan = plan_fwd(s, p, x, w, bias, y, aux);
    launch_gemm(s, plan.key, plan.algo, plan.ptrs, aligned_workspace(workspace), st);
    // No fused kernel for this epilogue here (or the test hook asked for
    // none): our epilogue kernel over y in place after the plain GEMM.
    if (!plan.fused)
      check_cuda(launch_linear_fwd_epilogue(p.dtype, act_of(desc->epilogue), y, p.m, p.n, p.y.ld, bias, aux, st),
                 "linear forward epilogue kernel");
  });
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
