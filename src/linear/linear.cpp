// Fully-connected layer on cuBLASLt: descriptors, validation, the algorithm
// cache, forward and backward.
//
// Row-major tensors are column-major matrices transposed, so every GEMM here
// is written for cuBLASLt's column-major view: y [m, n] row-major is the
// column-major n x m matrix y^T, and y^T = W^T x^T. With W stored [k, n]
// (KN) its column-major view is already W^T (no transpose); stored [n, k]
// (NK) it is W, transposed by the GEMM. The bias then runs along D's rows,
// which is what cuBLASLt's BIAS epilogue adds, and the aux buffer is laid out
// per column of D, i.e. per row of y.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "internal.hpp"

#if FNORM_HAVE_CUBLASLT
#include <cublasLt.h>

#include "linear_kernels.hpp"
#endif

struct fnorm_linear_desc {
  fnorm_linear_epilogue_t epilogue = FNORM_LINEAR_EPILOGUE_NONE;
  fnorm_linear_weight_layout_t layout = FNORM_LINEAR_WEIGHT_KN;
  uint32_t flags = 0;
};

#if FNORM_HAVE_CUBLASLT

namespace fnorm {

namespace {

// cuBLASLt's workspace: NVIDIA's recommendation for Hopper (32 MiB; 4 MiB is
// enough before it), which PyTorch also gives cuBLASLt there. The heuristic
// is told this budget, so the algorithm never needs more.
constexpr size_t kCublasWorkspace = size_t{32} << 20;
// Room to align the caller's workspace to 256 bytes ourselves.
constexpr size_t kAlignSlack = 256;

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The largest power of two dividing p, at most 256 (cuBLASLt's default
// assumption); 256 for NULL.
uint32_t alignment_of(const void *p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(v & (~v + 1), 256));
}

// One GEMM in cuBLASLt's terms: D (rows x cols) = op(A) (rows x inner) *
// op(B) (inner x cols), column-major; plus what decides the algorithm.
struct GemmKey {
  int32_t dtype = 0;
  int32_t compute = 0;
  int32_t transa = 0, transb = 0;
  uint64_t rows = 0, cols = 0, inner = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  uint32_t epilogue = 0;
  int64_t aux_ld = 0;
  uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_aux = 0;

  auto tie() const {
    return std::tie(dtype, compute, transa, transb, rows, cols, inner, lda, ldb, ldd, epilogue, aux_ld, align_a,
                    align_b, align_d, align_bias, align_aux);
  }
  bool operator<(const GemmKey &o) const { return tie() < o.tie(); }
};

struct CachedAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // the heuristic's, when not found
};

struct GemmPointers {
  const void *a = nullptr;
  const void *b = nullptr;
  void *d = nullptr;
  void *bias = nullptr;  // bias (read) or bias gradient (written)
  void *aux = nullptr;   // aux (written by forward epilogues, read by backward ones)
};

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

[[noreturn]] void fail_cublas(cublasStatus_t st, const char *what) {
  fail(FNORM_STATUS_CUBLAS_ERROR, "%s failed: %s (%s)", what, cublasLtGetStatusName(st),
       cublasLtGetStatusString(st));
}
void check_cublas(cublasStatus_t st, const char *what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail_cublas(st, what);
}

}  // namespace

// The handle's cuBLASLt state: created on first use, with the handle's
// device current. The cache maps a GEMM's key to cuBLASLt's heuristic answer
// (found or not); `mutex` guards it, so threads sharing a handle may launch
// at once. The heuristic runs outside the lock (two threads may both ask it
// for one new key; both get the same answer).
struct LinearState {
  cublasLtHandle_t lt = nullptr;
  std::mutex mutex;
  std::map<GemmKey, CachedAlgo> cache;
  // Test hooks, read once from the environment when the state is created:
  // FNORM_LINEAR_UNFUSED=1 takes the library's own epilogue kernels instead
  // of cuBLASLt's fused epilogues (the paths used when cuBLASLt has no fused
  // kernel for a case), so that tests reach them; FNORM_LINEAR_VERBOSE=1
  // prints each new heuristic answer to stderr.
  bool force_unfused = false;
  bool verbose = false;
};

void linear_state_destroy(LinearState *state) noexcept {
  if (state == nullptr) return;
  if (state->lt != nullptr) (void)cublasLtDestroy(state->lt);
  delete state;
}

namespace {

bool env_flag(const char *name) {
  const char *v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

LinearState &state_of(fnorm_handle *h) {
  std::lock_guard<std::mutex> lock(h->lazy_mutex);
  if (h->linear == nullptr) {
    DeviceGuard guard(h->device);
    auto s = std::make_unique<LinearState>();
    check_cublas(cublasLtCreate(&s->lt), "cublasLtCreate");
    s->force_unfused = env_flag("FNORM_LINEAR_UNFUSED");
    s->verbose = env_flag("FNORM_LINEAR_VERBOSE");
    h->linear = s.release();
  }
  return *h->linear;
}

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

// cuBLASLt's heuristic answer for this GEMM, from the cache or asked now.
CachedAlgo find_algo(LinearState &s, const GemmKey &k, const GemmPointers &p) {
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
  const uint64_t budget = kCublasWorkspace;
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
  if (s.verbose) {
    int32_t splitk = 0;
    size_t written = 0;
    if (c.found)
      (void)cublasLtMatmulAlgoConfigGetAttribute(&c.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk,
                                                 &written);
    std::fprintf(stderr,
                 "fnorm linear: D %llux%llu inner %llu type %d compute %d op %c%c ld %lld/%lld/%lld %s aux_ld %lld "
                 "align a%u b%u d%u bias%u aux%u -> %s (workspace %zu, split-k %d)\n",
                 static_cast<unsigned long long>(k.rows), static_cast<unsigned long long>(k.cols),
                 static_cast<unsigned long long>(k.inner), k.dtype, k.compute, k.transa ? 'T' : 'N',
                 k.transb ? 'T' : 'N', static_cast<long long>(k.lda), static_cast<long long>(k.ldb),
                 static_cast<long long>(k.ldd), epilogue_name(k.epilogue), static_cast<long long>(k.aux_ld),
                 k.align_a, k.align_b, k.align_d, k.align_bias, k.align_aux,
                 c.found ? "found" : cublasLtGetStatusName(c.status), c.workspace, static_cast<int>(splitk));
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.cache.emplace(k, c);
  return c;
}

void launch_gemm(LinearState &s, const GemmKey &k, const CachedAlgo &algo, const GemmPointers &p,
                 void *workspace, cudaStream_t stream) {
  GemmDescs g;
  build_descs(k, p, g);
  const float alpha = 1.f, beta = 0.f;
  check_cublas(cublasLtMatmul(s.lt, &g.op, &alpha, p.a, &g.a, p.b, &g.b, &beta, p.d, &g.d, p.d, &g.d, &algo.algo,
                              workspace, kCublasWorkspace, stream),
               "cublasLtMatmul");
}

// The dtype's cuBLASLt type and compute type.
cudaDataType_t cuda_type(fnorm_dtype_t t) {
  switch (t) {
    case FNORM_DTYPE_FLOAT32: return CUDA_R_32F;
    case FNORM_DTYPE_FLOAT16: return CUDA_R_16F;
    case FNORM_DTYPE_BFLOAT16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

const fnorm_tensor_desc &require_set(const fnorm_tensor_desc *d, const char *arg) {
  if (d == nullptr) fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
  FNORM_REQUIRE(d->is_set, FNORM_STATUS_BAD_PARAM,
                "argument '%s' was never set (call fnorm_tensor_desc_set first)", arg);
  return *d;
}

// A row-major matrix view of a tensor: the last dimension is the columns
// (packed), the others collapse into rows with one stride `ld`.
struct Matrix {
  int64_t rows = 1, cols = 1, ld = 1;
};

Matrix matrix_of(const fnorm_tensor_desc &d, const char *arg, bool output) {
  const int32_t last = d.rank - 1;
  Matrix v;
  v.cols = d.dims[last];
  FNORM_REQUIRE(d.dims[last] == 1 || d.strides[last] == 1, FNORM_STATUS_NOT_SUPPORTED,
                "argument '%s': the last dimension must be packed (stride 1), but its stride is %lld", arg,
                static_cast<long long>(d.strides[last]));
  int64_t row_stride = v.cols, expected = -1;
  for (int32_t i = last - 1; i >= 0; --i) {
    v.rows *= d.dims[i];
    if (d.dims[i] == 1) continue;
    if (expected < 0) {
      row_stride = d.strides[i];
    } else {
      FNORM_REQUIRE(d.strides[i] == expected, FNORM_STATUS_NOT_SUPPORTED,
                    "argument '%s': the dimensions before the last do not collapse into one row stride "
                    "(strides[%d] is %lld, expected %lld)",
                    arg, i, static_cast<long long>(d.strides[i]), static_cast<long long>(expected));
    }
    FNORM_REQUIRE(d.strides[i] <= INT64_MAX / d.dims[i], FNORM_STATUS_BAD_PARAM,
                  "argument '%s': strides[%d] * dims[%d] overflows int64", arg, i, i);
    expected = d.strides[i] * d.dims[i];
  }
  if (v.rows > 1) {
    FNORM_REQUIRE(row_stride >= v.cols, output ? FNORM_STATUS_BAD_PARAM : FNORM_STATUS_NOT_SUPPORTED,
                  "argument '%s': rows overlap (row stride %lld < %lld columns)", arg,
                  static_cast<long long>(row_stride), static_cast<long long>(v.cols));
    v.ld = row_stride;
  } else {
    v.ld = v.cols;
  }
  return v;
}

// Another tensor with the sizes of `ref` except (maybe) the last, which
// must be `last`.
void require_like(const fnorm_tensor_desc &d, const char *arg, const fnorm_tensor_desc &ref, const char *ref_arg,
                  int64_t last) {
  FNORM_REQUIRE(d.dtype == ref.dtype, FNORM_STATUS_BAD_PARAM_SHAPE, "argument '%s': dtype %s differs from %s's %s",
                arg, dtype_name(d.dtype), ref_arg, dtype_name(ref.dtype));
  FNORM_REQUIRE(d.rank == ref.rank, FNORM_STATUS_BAD_PARAM_SHAPE, "argument '%s': rank %d differs from %s's %d",
                arg, d.rank, ref_arg, ref.rank);
  for (int32_t i = 0; i + 1 < d.rank; ++i)
    FNORM_REQUIRE(d.dims[i] == ref.dims[i], FNORM_STATUS_BAD_PARAM_SHAPE,
                  "argument '%s': dims[%d] is %lld but %s's is %lld", arg, i, static_cast<long long>(d.dims[i]),
                  ref_arg, static_cast<long long>(ref.dims[i]));
  FNORM_REQUIRE(d.dims[d.rank - 1] == last, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': the last size is %lld; it must be %lld", arg,
                static_cast<long long>(d.dims[d.rank - 1]), static_cast<long long>(last));
}

LinearAct act_of(fnorm_linear_epilogue_t e) {
  switch (e) {
    case FNORM_LINEAR_EPILOGUE_BIAS_RELU: return LinearAct::Relu;
    case FNORM_LINEAR_EPILOGUE_BIAS_GELU: return LinearAct::Gelu;
    default: return LinearAct::None;
  }
}
bool has_bias(fnorm_linear_epilogue_t e) { return e != FNORM_LINEAR_EPILOGUE_NONE; }
const char *linear_epilogue_name(fnorm_linear_epilogue_t e) {
  switch (e) {
    case FNORM_LINEAR_EPILOGUE_NONE: return "NONE";
    case FNORM_LINEAR_EPILOGUE_BIAS: return "BIAS";
    case FNORM_LINEAR_EPILOGUE_BIAS_RELU: return "BIAS_RELU";
    case FNORM_LINEAR_EPILOGUE_BIAS_GELU: return "BIAS_GELU";
  }
  return "unknown";
}

// The problem after validation: x [m, k], W ([k, n] or [n, k]), y [m, n].
struct Problem {
  const fnorm_linear_desc *desc = nullptr;
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  int64_t m = 0, n = 0, k = 0;
  Matrix x, w, y;  // y: the forward's y, or the backward's dy
};

// x_desc, w_desc and y_desc (the forward's y or the backward's dy).
Problem check_problem(const fnorm_linear_desc *desc, const fnorm_tensor_desc *x_desc,
                      const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc, const char *y_arg,
                      bool y_is_output) {
  FNORM_REQUIRE_NOT_NULL(desc);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  const fnorm_tensor_desc &w = require_set(w_desc, "w_desc");
  const fnorm_tensor_desc &y = require_set(y_desc, y_arg);
  Problem p;
  p.desc = desc;
  p.dtype = x.dtype;
  p.x = matrix_of(x, "x_desc", false);
  p.m = p.x.rows;
  p.k = p.x.cols;
  FNORM_REQUIRE(w.dtype == x.dtype, FNORM_STATUS_BAD_PARAM_SHAPE, "argument 'w_desc': dtype %s differs from x_desc's %s",
                dtype_name(w.dtype), dtype_name(x.dtype));
  FNORM_REQUIRE(w.rank == 2, FNORM_STATUS_BAD_PARAM_SHAPE, "argument 'w_desc': rank %d; W must have rank 2", w.rank);
  const bool kn = desc->layout == FNORM_LINEAR_WEIGHT_KN;
  const int64_t w_k = kn ? w.dims[0] : w.dims[1];
  FNORM_REQUIRE(w_k == p.k, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'w_desc': dims[%d] is %lld but x's last size (k) is %lld (weight layout %s)", kn ? 0 : 1,
                static_cast<long long>(w_k), static_cast<long long>(p.k), kn ? "KN: [k, n]" : "NK: [n, k]");
  p.n = kn ? w.dims[1] : w.dims[0];
  p.w = matrix_of(w, "w_desc", false);
  require_like(y, y_arg, x, "x_desc", p.n);
  p.y = matrix_of(y, y_arg, y_is_output);
  return p;
}

// Bytes a matrix view spans from its first element.
uint64_t span_bytes(const Matrix &v, fnorm_dtype_t t) {
  return (static_cast<uint64_t>(v.rows - 1) * static_cast<uint64_t>(v.ld) + static_cast<uint64_t>(v.cols)) *
         dtype_size(t);
}

struct Region {
  const char *name;
  const void *ptr;
  uint64_t bytes;
};

void require_disjoint(const Region &out, std::initializer_list<Region> others) {
  if (out.ptr == nullptr) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(out.ptr);
  for (const Region &o : others) {
    if (o.ptr == nullptr || o.bytes == 0) continue;
    const uintptr_t b = reinterpret_cast<uintptr_t>(o.ptr);
    FNORM_REQUIRE(!(a < b + o.bytes && b < a + out.bytes), FNORM_STATUS_BAD_PARAM, "arguments '%s' and '%s' overlap",
                  out.name, o.name);
  }
}

uint64_t aux_bytes_for(LinearAct act, fnorm_dtype_t t, int64_t rows, int64_t cols) {
  const uint64_t ld = static_cast<uint64_t>(linear_aux_ld(act, cols));
  switch (act) {
    case LinearAct::Relu: return static_cast<uint64_t>(rows) * (ld / 8);
    case LinearAct::Gelu: return static_cast<uint64_t>(rows) * ld * dtype_size(t);
    case LinearAct::None: return 0;
  }
  return 0;
}

// cuBLASLt's alignment preferences cover A, B, C and D but not the
// epilogue's vectors (bias, bias gradient): its heuristic may pick a kernel
// that loads them 16 bytes at a time, which faults on a bias one element
// off ("misaligned address", fp32, H200, 2026-11-22). Such vectors go to the
// unfused path.
bool epilogue_vector_ok(const void *p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Bias-gradient epilogues (BGRADA/B, D*_BGRAD) are fused only when D is at
// least this many rows and columns: with D of one row (dw of a layer with
// k = 1, W [n, k], m = 1000) cuBLASLt's BGRADB gave a wrong and sometimes NaN
// bias gradient in fp16 (H200, CUDA 13.0, 2026-11-22). A small dw or dx
// costs little to finish with our column sums.
constexpr uint64_t kMinBgradDim = 16;
bool bgrad_shape_ok(const GemmKey &k) { return k.rows >= kMinBgradDim && k.cols >= kMinBgradDim; }

void require_aux(const void *aux, size_t bytes, uint64_t need, const char *arg, const char *bytes_arg) {
  FNORM_REQUIRE(bytes >= need, FNORM_STATUS_BAD_PARAM,
                "argument '%s' is %zu; the aux buffer needs %llu bytes (ask fnorm_linear_aux_size)", bytes_arg, bytes,
                static_cast<unsigned long long>(need));
  FNORM_REQUIRE(reinterpret_cast<uintptr_t>(aux) % 16 == 0, FNORM_STATUS_BAD_PARAM,
                "argument '%s' must be 16-byte aligned (it is %p)", arg, aux);
}

unsigned char *aligned_workspace(void *ws) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(ws);
  return reinterpret_cast<unsigned char *>(round_up(v, kAlignSlack));
}

void require_workspace(void *workspace, size_t bytes, size_t need, const char *query) {
  FNORM_REQUIRE(bytes >= need, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
                "argument 'workspace_bytes' is %zu; this call needs %zu (ask %s)", bytes, need, query);
  if (need > 0) FNORM_REQUIRE_NOT_NULL(workspace);
}

GemmKey key_base(const Problem &p) {
  GemmKey k;
  k.dtype = cuda_type(p.dtype);
  const bool tf32 = p.dtype == FNORM_DTYPE_FLOAT32 && (p.desc->flags & FNORM_LINEAR_FLAG_ALLOW_TF32) != 0;
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
[[noreturn]] void fail_no_algo(const GemmKey &k, const CachedAlgo &c, const char *what) {
  fail(FNORM_STATUS_NOT_SUPPORTED,
       "cuBLASLt has no kernel for the %s GEMM (%s, %llu x %llu x %llu, pointer alignments %u/%u/%u bytes, "
       "ld %lld/%lld/%lld): %s",
       what, epilogue_name(k.epilogue), static_cast<unsigned long long>(k.rows),
       static_cast<unsigned long long>(k.cols), static_cast<unsigned long long>(k.inner), k.align_a, k.align_b,
       k.align_d, static_cast<long long>(k.lda), static_cast<long long>(k.ldb), static_cast<long long>(k.ldd),
       cublasLtGetStatusName(c.status));
}

// ---------------------------------------------------------------------------
// Backward workspace: [align slack][cuBLASLt][dz][partial column sums]
// ---------------------------------------------------------------------------
struct BwdLayout {
  size_t dz_offset = 0, partial_offset = 0, bytes = 0;
  int splits_n = 1, splits_k = 1;
};

BwdLayout bwd_layout(const Problem &p, bool chained, int sm_count) {
  BwdLayout l;
  const LinearAct act = act_of(p.desc->epilogue);
  l.dz_offset = kCublasWorkspace;
  const size_t dz = act != LinearAct::None
                        ? round_up(static_cast<size_t>(p.m) * static_cast<size_t>(p.n) * dtype_size(p.dtype), 256)
                        : 0;
  l.partial_offset = l.dz_offset + dz;
  size_t partial = 0;
  if (has_bias(p.desc->epilogue)) {
    l.splits_n = linear_colsum_splits(p.m, p.n, sm_count);
    partial = std::max(partial, static_cast<size_t>(l.splits_n) * static_cast<size_t>(p.n) * sizeof(float));
  }
  if (chained) {
    l.splits_k = linear_colsum_splits(p.m, p.k, sm_count);
    partial = std::max(partial, static_cast<size_t>(l.splits_k) * static_cast<size_t>(p.k) * sizeof(float));
  }
  l.bytes = kAlignSlack + l.partial_offset + round_up(partial, 256);
  return l;
}

LinearAct check_producer(const fnorm_linear_desc *prod) {
  if (prod == nullptr) return LinearAct::None;
  const LinearAct a = act_of(prod->epilogue);
  FNORM_REQUIRE(a != LinearAct::None, FNORM_STATUS_BAD_PARAM,
                "argument 'x_producer': its epilogue %s has no activation; pass NULL instead",
                linear_epilogue_name(prod->epilogue));
  return a;
}

}  // namespace

}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_linear_desc_create(fnorm_linear_desc_t *desc) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    *desc = new fnorm_linear_desc();
  });
}

FNORM_API fnorm_status_t fnorm_linear_desc_destroy(fnorm_linear_desc_t desc) {
  delete desc;
  return FNORM_STATUS_SUCCESS;
}

FNORM_API fnorm_status_t fnorm_linear_desc_set(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t epilogue,
                                               fnorm_linear_weight_layout_t weight_layout, uint32_t flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(epilogue >= FNORM_LINEAR_EPILOGUE_NONE && epilogue <= FNORM_LINEAR_EPILOGUE_BIAS_GELU,
                  FNORM_STATUS_BAD_PARAM, "argument 'epilogue' has unknown value %d", static_cast<int>(epilogue));
    FNORM_REQUIRE(weight_layout == FNORM_LINEAR_WEIGHT_KN || weight_layout == FNORM_LINEAR_WEIGHT_NK,
                  FNORM_STATUS_BAD_PARAM, "argument 'weight_layout' has unknown value %d",
                  static_cast<int>(weight_layout));
    const uint32_t known = FNORM_LINEAR_FLAG_ALLOW_TF32;
    FNORM_REQUIRE((flags & ~known) == 0, FNORM_STATUS_BAD_PARAM, "argument 'flags' has unknown bits 0x%x",
                  flags & ~known);
    desc->epilogue = epilogue;
    desc->layout = weight_layout;
    desc->flags = flags;
  });
}

FNORM_API fnorm_status_t fnorm_linear_desc_get(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t *epilogue,
                                               fnorm_linear_weight_layout_t *weight_layout, uint32_t *flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (epilogue != nullptr) *epilogue = desc->epilogue;
    if (weight_layout != nullptr) *weight_layout = desc->layout;
    if (flags != nullptr) *flags = desc->flags;
  });
}

FNORM_API fnorm_status_t fnorm_linear_aux_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                               fnorm_tensor_desc_t y_desc, size_t *aux_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE_NOT_NULL(aux_bytes);
    const fnorm_tensor_desc &y = require_set(y_desc, "y_desc");
    int64_t rows = 1;
    for (int32_t i = 0; i + 1 < y.rank; ++i) rows *= y.dims[i];
    *aux_bytes = static_cast<size_t>(aux_bytes_for(act_of(desc->epilogue), y.dtype, rows, y.dims[y.rank - 1]));
  });
}

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
    const Problem p = check_problem(desc, x_desc, w_desc, y_desc, "y_desc", true);
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(w);
    FNORM_REQUIRE_NOT_NULL(y);
    const fnorm_linear_epilogue_t epi = desc->epilogue;
    const LinearAct act = act_of(epi);
    if (has_bias(epi)) {
      FNORM_REQUIRE(bias != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                    "argument 'bias' is NULL; epilogue %s adds a bias", linear_epilogue_name(epi));
    } else {
      FNORM_REQUIRE(bias == nullptr, FNORM_STATUS_BAD_PARAM,
                    "argument 'bias' must be NULL: epilogue NONE adds no bias");
    }
    const uint64_t aux_need = aux_bytes_for(act, p.dtype, p.m, p.n);
    if (act == LinearAct::None) {
      FNORM_REQUIRE(aux == nullptr, FNORM_STATUS_BAD_PARAM,
                    "argument 'aux' must be NULL: epilogue %s has no activation to save",
                    linear_epilogue_name(epi));
    } else if (aux != nullptr) {
      require_aux(aux, aux_bytes, aux_need, "aux", "aux_bytes");
    }
    const size_t es = dtype_size(p.dtype);
    const Region ry{"y", y, span_bytes(p.y, p.dtype)};
    require_disjoint(ry, {{"x", x, span_bytes(p.x, p.dtype)},
                          {"w", w, span_bytes(p.w, p.dtype)},
                          {"bias", bias, static_cast<uint64_t>(p.n) * es},
                          {"aux", aux, aux_need}});
    require_disjoint({"aux", aux, aux_need}, {{"x", x, span_bytes(p.x, p.dtype)},
                                               {"w", w, span_bytes(p.w, p.dtype)},
                                               {"bias", bias, static_cast<uint64_t>(p.n) * es}});
    require_workspace(workspace, workspace_bytes, kAlignSlack + kCublasWorkspace, "fnorm_linear_fwd_workspace_size");

    DeviceGuard guard(handle->device);
    LinearState &s = state_of(handle);
    const cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    unsigned char *ws = aligned_workspace(workspace);

    // y^T (n x m) = op(W) (n x k) * x^T (k x m).
    GemmKey k = key_base(p);
    k.transa = desc->layout == FNORM_LINEAR_WEIGHT_KN ? CUBLAS_OP_N : CUBLAS_OP_T;
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
    GemmKey plain = k;
    plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    set_alignments(plain, ptrs);

    GemmPointers fused_ptrs = ptrs;
    GemmKey fused = k;
    switch (epi) {
      case FNORM_LINEAR_EPILOGUE_NONE: fused.epilogue = CUBLASLT_EPILOGUE_DEFAULT; break;
      case FNORM_LINEAR_EPILOGUE_BIAS: fused.epilogue = CUBLASLT_EPILOGUE_BIAS; break;
      case FNORM_LINEAR_EPILOGUE_BIAS_RELU:
        fused.epilogue = aux ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS;
        break;
      case FNORM_LINEAR_EPILOGUE_BIAS_GELU:
        fused.epilogue = aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_BIAS;
        break;
    }
    fused_ptrs.bias = const_cast<void *>(bias);
    fused_ptrs.aux = aux;
    if (aux != nullptr) fused.aux_ld = linear_aux_ld(act, p.n);
    set_alignments(fused, fused_ptrs);

    if (epi == FNORM_LINEAR_EPILOGUE_NONE || (!s.force_unfused && epilogue_vector_ok(bias))) {
      const CachedAlgo c = find_algo(s, fused, fused_ptrs);
      if (c.found) {
        launch_gemm(s, fused, c, fused_ptrs, ws, st);
        return;
      }
      if (epi == FNORM_LINEAR_EPILOGUE_NONE) fail_no_algo(fused, c, "forward");
    }
    // No fused kernel for this epilogue here (or the test hook asked for
    // none): the plain GEMM, then our epilogue kernel over y in place.
    const CachedAlgo c = find_algo(s, plain, ptrs);
    if (!c.found) fail_no_algo(plain, c, "forward");
    launch_gemm(s, plain, c, ptrs, ws, st);
    check_cuda(launch_linear_fwd_epilogue(p.dtype, act, y, p.m, p.n, p.y.ld, bias, aux, st),
               "linear forward epilogue kernel");
  });
}

FNORM_API fnorm_status_t fnorm_linear_bwd_workspace_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                                         fnorm_tensor_desc_t x_desc, fnorm_tensor_desc_t w_desc,
                                                         fnorm_tensor_desc_t dy_desc, fnorm_linear_desc_t x_producer,
                                                         size_t *workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(workspace_bytes);
    const Problem p = check_problem(desc, x_desc, w_desc, dy_desc, "dy_desc", false);
    const bool chained = check_producer(x_producer) != LinearAct::None;
    *workspace_bytes = bwd_layout(p, chained, handle->info.sm_count).bytes;
  });
}

FNORM_API fnorm_status_t fnorm_linear_bwd(fnorm_handle_t handle, fnorm_stream_t stream, fnorm_linear_desc_t desc,
                                          fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t w_desc,
                                          const void *w, fnorm_tensor_desc_t dy_desc, const void *dy,
                                          const void *aux, size_t aux_bytes, fnorm_linear_desc_t x_producer,
                                          const void *x_aux, size_t x_aux_bytes, fnorm_tensor_desc_t dx_desc,
                                          void *dx, void *dw, void *db, void *x_db, void *workspace,
                                          size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    const Problem p = check_problem(desc, x_desc, w_desc, dy_desc, "dy_desc", false);
    const fnorm_linear_epilogue_t epi = desc->epilogue;
    const LinearAct act = act_of(epi);
    const LinearAct prod_act = check_producer(x_producer);
    const bool chained = prod_act != LinearAct::None;
    const size_t es = dtype_size(p.dtype);

    Matrix dxm;
    if (dx != nullptr) {
      const fnorm_tensor_desc &dxd = require_set(dx_desc, "dx_desc");
      require_like(dxd, "dx_desc", *x_desc, "x_desc", p.k);
      dxm = matrix_of(dxd, "dx_desc", true);
    }
    const bool want = dx != nullptr || dw != nullptr || db != nullptr;
    if (want) FNORM_REQUIRE_NOT_NULL(dy);
    if (dw != nullptr) FNORM_REQUIRE_NOT_NULL(x);
    if (dx != nullptr) FNORM_REQUIRE_NOT_NULL(w);
    FNORM_REQUIRE(db == nullptr || has_bias(epi), FNORM_STATUS_BAD_PARAM,
                  "argument 'db' must be NULL: epilogue NONE has no bias");
    const uint64_t aux_need = aux_bytes_for(act, p.dtype, p.m, p.n);
    if (act != LinearAct::None) {
      if (want) {
        FNORM_REQUIRE(aux != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                      "argument 'aux' is NULL; the backward of %s needs the forward's aux",
                      linear_epilogue_name(epi));
        require_aux(aux, aux_bytes, aux_need, "aux", "aux_bytes");
      }
    } else {
      FNORM_REQUIRE(aux == nullptr, FNORM_STATUS_BAD_PARAM, "argument 'aux' must be NULL: epilogue %s has no activation",
                    linear_epilogue_name(epi));
    }
    const uint64_t x_aux_need = aux_bytes_for(prod_act, p.dtype, p.m, p.k);
    if (chained) {
      FNORM_REQUIRE(dx != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                    "argument 'dx' is NULL; with x_producer the call exists to compute dx");
      FNORM_REQUIRE(x_aux != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                    "argument 'x_aux' is NULL; x_producer's activation needs its aux");
      require_aux(x_aux, x_aux_bytes, x_aux_need, "x_aux", "x_aux_bytes");
    } else {
      FNORM_REQUIRE(x_aux == nullptr && x_aux_bytes == 0 && x_db == nullptr, FNORM_STATUS_BAD_PARAM,
                    "arguments 'x_aux', 'x_aux_bytes' and 'x_db' must be NULL / 0 without x_producer");
    }
    const uint64_t n_bytes = static_cast<uint64_t>(p.n) * es, k_bytes = static_cast<uint64_t>(p.k) * es;
    const Region rx{"x", x, span_bytes(p.x, p.dtype)}, rw{"w", w, span_bytes(p.w, p.dtype)},
        rdy{"dy", dy, span_bytes(p.y, p.dtype)}, raux{"aux", aux, aux_need}, rxaux{"x_aux", x_aux, x_aux_need},
        rdx{"dx", dx, dx != nullptr ? span_bytes(dxm, p.dtype) : 0}, rdw{"dw", dw, span_bytes(p.w, p.dtype)},
        rdb{"db", db, n_bytes}, rxdb{"x_db", x_db, k_bytes};
    for (const Region &out : {rdx, rdw, rdb, rxdb})
      require_disjoint(out, {rx, rw, rdy, raux, rxaux});
    require_disjoint(rdx, {rdw, rdb, rxdb});
    require_disjoint(rdw, {rdb, rxdb});
    require_disjoint(rdb, {rxdb});
    const BwdLayout layout = bwd_layout(p, chained, handle->info.sm_count);
    require_workspace(workspace, workspace_bytes, layout.bytes, "fnorm_linear_bwd_workspace_size");
    if (!want) return;

    DeviceGuard guard(handle->device);
    LinearState &s = state_of(handle);
    const cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
    unsigned char *ws = aligned_workspace(workspace);
    float *partial = reinterpret_cast<float *>(ws + layout.partial_offset);
    const bool kn = desc->layout == FNORM_LINEAR_WEIGHT_KN;

    // dw (+ db): KN: dw^T (n x k) = dz^T (n x m) * x (m x k), db from A (BGRADA);
    //            NK: dw^T (k x n) = x^T (k x m) * dz (m x n), db from B (BGRADB).
    // dz is dy, or (with an activation) formed first in the workspace's
    // 256-byte aligned dz region.
    const void *dz = act != LinearAct::None ? static_cast<const void *>(ws + layout.dz_offset) : dy;
    const int64_t lddz = act != LinearAct::None ? p.n : p.y.ld;
    GemmKey kw = key_base(p);
    GemmPointers pw;
    if (kn) {
      kw.transa = CUBLAS_OP_N;
      kw.transb = CUBLAS_OP_T;
      kw.rows = static_cast<uint64_t>(p.n);
      kw.cols = static_cast<uint64_t>(p.k);
      kw.lda = lddz;
      kw.ldb = p.x.ld;
      pw.a = dz;
      pw.b = x;
    } else {
      kw.transa = CUBLAS_OP_N;
      kw.transb = CUBLAS_OP_T;
      kw.rows = static_cast<uint64_t>(p.k);
      kw.cols = static_cast<uint64_t>(p.n);
      kw.lda = p.x.ld;
      kw.ldb = lddz;
      pw.a = x;
      pw.b = dz;
    }
    kw.inner = static_cast<uint64_t>(p.m);
    kw.ldd = p.w.ld;
    pw.d = dw;
    GemmKey kw_plain = kw;
    kw_plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    set_alignments(kw_plain, pw);
    CachedAlgo aw_plain, aw_fused;
    bool db_fused = false;
    GemmPointers pw_fused = pw;
    GemmKey kw_fused = kw;
    if (dw != nullptr && db != nullptr && !s.force_unfused && epilogue_vector_ok(db) && bgrad_shape_ok(kw)) {
      kw_fused.epilogue = kn ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
      pw_fused.bias = db;
      set_alignments(kw_fused, pw_fused);
      aw_fused = find_algo(s, kw_fused, pw_fused);
      db_fused = aw_fused.found;
    }
    if (dw != nullptr && !db_fused) {
      aw_plain = find_algo(s, kw_plain, pw);
      if (!aw_plain.found) fail_no_algo(kw_plain, aw_plain, "dw");
    }

    // dx: dx^T (k x m) = op(W) (k x n) * dz^T (n x m); with a chained
    // producer, its activation's derivative (and bias gradient) in the
    // epilogue.
    GemmKey kx = key_base(p);
    GemmPointers px;
    CachedAlgo ax_plain, ax_fused;
    bool dx_fused = false;
    GemmKey kx_plain, kx_fused;
    GemmPointers px_fused;
    if (dx != nullptr) {
      kx.transa = kn ? CUBLAS_OP_T : CUBLAS_OP_N;
      kx.transb = CUBLAS_OP_N;
      kx.rows = static_cast<uint64_t>(p.k);
      kx.cols = static_cast<uint64_t>(p.m);
      kx.inner = static_cast<uint64_t>(p.n);
      kx.lda = p.w.ld;
      kx.ldb = lddz;
      kx.ldd = dxm.ld;
      px.a = w;
      px.b = dz;
      px.d = dx;
      kx_plain = kx;
      kx_plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      set_alignments(kx_plain, px);
      if (chained && !s.force_unfused && epilogue_vector_ok(x_db) && (x_db == nullptr || bgrad_shape_ok(kx))) {
        kx_fused = kx;
        px_fused = px;
        if (prod_act == LinearAct::Relu)
          kx_fused.epilogue = x_db ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU;
        else
          kx_fused.epilogue = x_db ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
        kx_fused.aux_ld = linear_aux_ld(prod_act, p.k);
        px_fused.aux = const_cast<void *>(x_aux);
        px_fused.bias = x_db;
        set_alignments(kx_fused, px_fused);
        ax_fused = find_algo(s, kx_fused, px_fused);
        dx_fused = ax_fused.found;
      }
      if (!dx_fused) {
        ax_plain = find_algo(s, kx_plain, px);
        if (!ax_plain.found) fail_no_algo(kx_plain, ax_plain, "dx");
      }
    }

    // Everything is planned and checked: only launches from here on.
    // 1. dz (with an activation) in one pass over dy and aux; db's column
    //    sums here too unless the dw GEMM fuses them (or there is no dw).
    const bool db_here = db != nullptr && !db_fused;
    if (act != LinearAct::None) {
      void *dz_out = dx != nullptr || dw != nullptr ? ws + layout.dz_offset : nullptr;
      check_cuda(launch_linear_bwd_act(p.dtype, act, dy, p.y.ld, aux, dz_out, p.n, p.m, p.n,
                                       db_here ? partial : nullptr, layout.splits_n, st),
                 "linear backward activation kernel");
    } else if (db_here) {
      check_cuda(launch_linear_bwd_act(p.dtype, LinearAct::None, dy, p.y.ld, nullptr, nullptr, 0, p.m, p.n, partial,
                                       layout.splits_n, st),
                 "linear bias-gradient kernel");
    }
    if (db_here)
      check_cuda(launch_norm_bwd_reduce(partial, nullptr, layout.splits_n, p.n, p.dtype, db, nullptr, st),
                 "bias-gradient reduction");
    // 2. dw (+ db).
    if (dw != nullptr) {
      if (db_fused)
        launch_gemm(s, kw_fused, aw_fused, pw_fused, ws, st);
      else
        launch_gemm(s, kw_plain, aw_plain, pw, ws, st);
    }
    // 3. dx (+ the producer's derivative and bias gradient).
    if (dx != nullptr) {
      if (dx_fused) {
        launch_gemm(s, kx_fused, ax_fused, px_fused, ws, st);
      } else {
        launch_gemm(s, kx_plain, ax_plain, px, ws, st);
        if (chained) {
          check_cuda(launch_linear_bwd_act(p.dtype, prod_act, dx, dxm.ld, x_aux, dx, dxm.ld, p.m, p.k,
                                           x_db ? partial : nullptr, layout.splits_k, st),
                     "linear backward activation kernel (x_producer)");
          if (x_db != nullptr)
            check_cuda(launch_norm_bwd_reduce(partial, nullptr, layout.splits_k, p.k, p.dtype, x_db, nullptr, st),
                       "bias-gradient reduction (x_producer)");
        }
      }
    }
  });
}

}  // extern "C"

#else  // !FNORM_HAVE_CUBLASLT: every entry point exists and says why it cannot work.

namespace fnorm {
struct LinearState {};
void linear_state_destroy(LinearState *state) noexcept { delete state; }
}  // namespace fnorm

namespace {
fnorm_status_t not_built(const char *func) {
  fnorm::set_last_error(std::string(func) +
                        ": the library was built without cuBLASLt (meson found no cublasLt.h / libcublasLt.so); "
                        "the fully-connected layer needs it");
  return FNORM_STATUS_NOT_SUPPORTED_BUILD;
}
}  // namespace

extern "C" {

FNORM_API fnorm_status_t fnorm_linear_desc_create(fnorm_linear_desc_t *) { return not_built(__func__); }
FNORM_API fnorm_status_t fnorm_linear_desc_destroy(fnorm_linear_desc_t desc) {
  delete desc;
  return FNORM_STATUS_SUCCESS;
}
FNORM_API fnorm_status_t fnorm_linear_desc_set(fnorm_linear_desc_t, fnorm_linear_epilogue_t,
                                               fnorm_linear_weight_layout_t, uint32_t) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_desc_get(fnorm_linear_desc_t, fnorm_linear_epilogue_t *,
                                               fnorm_linear_weight_layout_t *, uint32_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_aux_size(fnorm_handle_t, fnorm_linear_desc_t, fnorm_tensor_desc_t, size_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_fwd_workspace_size(fnorm_handle_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                                         fnorm_tensor_desc_t, fnorm_tensor_desc_t, size_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_fwd(fnorm_handle_t, fnorm_stream_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                          const void *, fnorm_tensor_desc_t, const void *, const void *,
                                          fnorm_tensor_desc_t, void *, void *, size_t, void *, size_t) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_bwd_workspace_size(fnorm_handle_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                                         fnorm_tensor_desc_t, fnorm_tensor_desc_t,
                                                         fnorm_linear_desc_t, size_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_bwd(fnorm_handle_t, fnorm_stream_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                          const void *, fnorm_tensor_desc_t, const void *, fnorm_tensor_desc_t,
                                          const void *, const void *, size_t, fnorm_linear_desc_t, const void *,
                                          size_t, fnorm_tensor_desc_t, void *, void *, void *, void *, void *,
                                          size_t) {
  return not_built(__func__);
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
