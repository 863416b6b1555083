/* SPDX-License-Identifier: Apache-2.0 */
// The handle's cuBLASLt state, the algorithm cache and the GEMM launch.
#include <algorithm>
#include <memory>

#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {

uint32_t alignment_of(const void *p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(v & (~v + 1), 256));
}

void *LinearBuffers::operator[](Operand o) const {
  switch (o) {
    case Operand::None: return nullptr;
    case Operand::X: return const_cast<void *>(x);
    case Operand::W: return const_cast<void *>(w);
    case Operand::Y: return y;
    case Operand::Bias: return bias;
    case Operand::Aux: return const_cast<void *>(aux);
    case Operand::Dz: return const_cast<void *>(dz);
    case Operand::Dx: return dx;
    case Operand::Dw: return dw;
    case Operand::Db: return db;
    case Operand::XAux: return const_cast<void *>(x_aux);
    case Operand::XDb: return x_db;
  }
  return nullptr;
}

const char *epilogue_name(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_RELU_BIAS: return "RELU_BIAS";
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return "RELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DRELU: return "DRELU";
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return "DRELU_BGRAD";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADA: return "BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "?";
  }
}

void fail_cublas(cublasStatus_t st, const char *what) {
  fail(FNORM_STATUS_CUBLAS_ERROR, "%s failed: %s (%s)", what, cublasLtGetStatusName(st),
       cublasLtGetStatusString(st));
}
void check_cublas(cublasStatus_t st, const char *what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail_cublas(st, what);
}

LinearState::~LinearState() {
  if (lt != nullptr) (void)cublasLtDestroy(lt);
}

LinearState &state_of(fnorm_handle *h) {
  return op_state<LinearState>(h, [h] {
    DeviceGuard guard(h->device);
    auto s = std::make_unique<LinearState>();
    check_cublas(cublasLtCreate(&s->lt), "cublasLtCreate");
    return s.release();
  });
}

namespace {

// The descriptors of one GEMM, on the stack (no allocation per call).
struct GemmDescs {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t a, b, d;
};

void build_descs(const GemmKey &k, const GemmPointers &p, GemmDescs &g) {
  check_cublas(cublasLtMatmulDescInit(&g.op, static_cast<cublasComputeType_t>(k.compute), CUDA_R_32F),
               "cublasLtMatmulDescInit");
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void *v, size_t n) {
    check_cublas(cublasLtMatmulDescSetAttribute(&g.op, attr, v, n), "cublasLtMatmulDescSetAttribute");
  };
  const int32_t ta = k.transa, tb = k.transb;
  set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  const uint32_t epi = k.epilogue;
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (p.bias != nullptr) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias);
  if (p.aux != nullptr) {
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux);
    const int64_t ld = k.aux_ld;
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
  }
  const auto type = static_cast<cudaDataType_t>(k.dtype);
  const bool an = k.transa == CUBLAS_OP_N, bn = k.transb == CUBLAS_OP_N;
  check_cublas(cublasLtMatrixLayoutInit(&g.a, type, an ? k.rows : k.inner, an ? k.inner : k.rows, k.lda),
               "cublasLtMatrixLayoutInit(A)");
  check_cublas(cublasLtMatrixLayoutInit(&g.b, type, bn ? k.inner : k.cols, bn ? k.cols : k.inner, k.ldb),
               "cublasLtMatrixLayoutInit(B)");
  check_cublas(cublasLtMatrixLayoutInit(&g.d, type, k.rows, k.cols, k.ldd), "cublasLtMatrixLayoutInit(D)");
}

}  // namespace

CachedAlgo find_algo(LinearState &s, const Tuning &t, const GemmKey &k, const GemmPointers &p) {
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.cache.find(k);
    if (it != s.cache.end()) return it->second;
  }
  GemmDescs g;
  build_descs(k, p, g);
  cublasLtMatmulPreferenceOpaque_t pref;
  check_cublas(cublasLtMatmulPreferenceInit(&pref), "cublasLtMatmulPreferenceInit");
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const void *v, size_t n) {
    check_cublas(cublasLtMatmulPreferenceSetAttribute(&pref, attr, v, n), "cublasLtMatmulPreferenceSetAttribute");
  };
  const uint64_t budget = t.linear_heuristic_budget != 0 ? t.linear_heuristic_budget : k.budget;
  set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &budget, sizeof budget);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k.align_a, sizeof k.align_a);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k.align_b, sizeof k.align_b);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k.align_d, sizeof k.align_d);
  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k.align_d, sizeof k.align_d);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  CachedAlgo c;
  c.status = cublasLtMatmulAlgoGetHeuristic(s.lt, &g.op, &g.a, &g.b, &g.d, &g.d, &pref, 1, &result, &returned);
  // NOT_SUPPORTED (no kernel) and INVALID_VALUE (a combination cuBLASLt
  // refuses, e.g. an epilogue with these transposes) both mean: no fused
  // kernel here; the caller falls back or reports NOT_SUPPORTED.
  if (c.status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    c.found = true;
    c.algo = result.algo;
    c.workspace = result.workspaceSize;
  } else if (c.status == CUBLAS_STATUS_SUCCESS) {
    c.status = CUBLAS_STATUS_NOT_SUPPORTED;
  } else if (c.status != CUBLAS_STATUS_NOT_SUPPORTED && c.status != CUBLAS_STATUS_INVALID_VALUE) {
    fail_cublas(c.status, "cublasLtMatmulAlgoGetHeuristic");
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.cache.emplace(k, c);
  return c;
}

void launch_gemm(const LinearState &s, const GemmKey &k, const CachedAlgo &algo, const GemmPointers &p,
                 void *workspace, cudaStream_t stream) {
  GemmDescs g;
  build_descs(k, p, g);
  const float alpha = 1.f, beta = 0.f;
  check_cublas(cublasLtMatmul(s.lt, &g.op, &alpha, p.a, &g.a, p.b, &g.b, &beta, p.d, &g.d, p.d, &g.d, &algo.algo,
                              workspace, kCublasWorkspace, stream),
               "cublasLtMatmul");
}

namespace {

// The dtype's cuBLASLt type.
cudaDataType_t cuda_type(fnorm_dtype_t t) {
  switch (t) {
    case FNORM_DTYPE_FLOAT32: return CUDA_R_32F;
    case FNORM_DTYPE_FLOAT16: return CUDA_R_16F;
    case FNORM_DTYPE_BFLOAT16: return CUDA_R_16BF;
    default: break;  // the one-byte dtypes: refused by validation
  }
  return CUDA_R_32F;
}

}  // namespace

GemmKey key_base(const LinearProblem &p) {
  GemmKey k;
  k.dtype = cuda_type(p.dtype);
  const bool tf32 = p.dtype == FNORM_DTYPE_FLOAT32 && (p.flags & FNORM_LINEAR_FLAG_ALLOW_TF32) != 0;
  k.compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  return k;
}

void set_alignments(GemmKey &k, const GemmPointers &p) {
  k.align_a = alignment_of(p.a);
  k.align_b = alignment_of(p.b);
  k.align_d = alignment_of(p.d);
  k.align_bias = p.bias != nullptr ? alignment_of(p.bias) : 0;
  k.align_aux = p.aux != nullptr ? alignment_of(p.aux) : 0;
}

// The message for a GEMM cuBLASLt has no kernel for.
void fail_no_algo(const GemmKey &k, const CachedAlgo &c, const char *what) {
  fail(FNORM_STATUS_NOT_SUPPORTED,
       "cuBLASLt has no kernel for the %s GEMM (%s, %llu x %llu x %llu, pointer alignments %u/%u/%u bytes, "
       "ld %lld/%lld/%lld): %s",
       what, epilogue_name(k.epilogue), static_cast<unsigned long long>(k.rows),
       static_cast<unsigned long long>(k.cols), static_cast<unsigned long long>(k.inner), k.align_a, k.align_b,
       k.align_d, static_cast<long long>(k.lda), static_cast<long long>(k.ldb), static_cast<long long>(k.ldd),
       cublasLtGetStatusName(c.status));
}

GemmPlan choose_gemm(LinearState &s, const Tuning &t, GemmPlan fused, bool try_fused, const GemmKey &key,
                     const GemmRoles &roles, const LinearBuffers &buf, const char *what) {
  if (try_fused) {
    const GemmPointers p = fused.roles.bind(buf);
    set_alignments(fused.key, p);
    fused.algo = find_algo(s, t, fused.key, p);
    fused.fused = fused.algo.found;
    if (fused.fused) return fused;
  }
  GemmPlan plain;
  plain.key = key;
  plain.key.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  plain.roles = roles;
  const GemmPointers p = roles.bind(buf);
  set_alignments(plain.key, p);
  plain.algo = find_algo(s, t, plain.key, p);
  if (!plain.algo.found) fail_no_algo(plain.key, plain.algo, what);
  return plain;
}

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
