// The fully-connected layer inside the library: the descriptor object, the
// cuBLASLt GEMM description and algorithm cache, the validated problem, and
// what each file of the op provides.
//   linear_desc.cpp      fnorm_linear_desc_* and fnorm_linear_aux_size
//   linear_validate.cpp  descriptors and pointers -> LinearProblem, aux and epilogue rules
//   linear_cublaslt.cpp  the handle's cuBLASLt state, the algorithm cache, GEMM launch
//   linear_fwd.cpp       forward: fused epilogue or GEMM + our epilogue kernel
//   linear_bwd_plan.cpp  backward: workspace layout and the dgrad / wgrad GEMM plans
//   linear_bwd.cpp       backward: the entry points executing the plan
//   linear_kernels.cu    our own epilogue kernels
//   linear_not_built.cpp the entry points of a build without cuBLASLt
//
// Row-major tensors are column-major matrices transposed, so every GEMM here
// is written for cuBLASLt's column-major view: y [m, n] row-major is the
// column-major n x m matrix y^T, and y^T = W^T x^T. With W stored [k, n]
// (KN) its column-major view is already W^T (no transpose); stored [n, k]
// (NK) it is W, transposed by the GEMM. The bias then runs along D's rows,
// which is what cuBLASLt's BIAS epilogue adds, and the aux buffer is laid out
// per column of D, i.e. per row of y.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/column_sums.hpp"
#include "core/handle.hpp"
#include "core/validate.hpp"
#include "linear/linear_kernels.hpp"

struct fnorm_linear_desc {
  fnorm_linear_epilogue_t epilogue = FNORM_LINEAR_EPILOGUE_NONE;
  fnorm_linear_weight_layout_t layout = FNORM_LINEAR_WEIGHT_KN;
  uint32_t flags = 0;
};

#if FNORM_HAVE_CUBLASLT
#include <cublasLt.h>

namespace fnorm {

// cuBLASLt's workspace: NVIDIA's recommendation for Hopper (32 MiB; 4 MiB is
// enough before it), which PyTorch also gives cuBLASLt there. The heuristic
// is told this budget, so the algorithm never needs more.
constexpr size_t kCublasWorkspace = size_t{32} << 20;
// The budget the heuristic is told for forward GEMMs. With 32 MiB it picked
// a slower kernel than PyTorch's for fp32 8192 x 256 x 512 (BIAS: 56.6 us
// against 52.0); told 4 MiB (or 1) it picked PyTorch's (52.0), and no other
// forward cell of the seed shapes moved by more than noise (H200, CUDA 13.0,
// bench/ab_linear.py, 2026-11-22). Backward GEMMs keep 32 MiB: their split-K
// kernels over m need it (fp32 8192 x 256 x 512 backward took 154 us instead
// of 111 with 4 MiB).
constexpr size_t kFwdHeuristicBudget = size_t{4} << 20;
// Room to align the caller's workspace to 256 bytes ourselves.
constexpr size_t kAlignSlack = 256;

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
  uint64_t budget = kCublasWorkspace;  // the workspace the heuristic may plan for

  auto tie() const {
    return std::tie(dtype, compute, transa, transb, rows, cols, inner, lda, ldb, ldd, epilogue, aux_ld, align_a,
                    align_b, align_d, align_bias, align_aux, budget);
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
  // A/B hooks (bench/ab_linear.py), read with the others:
  // FNORM_LINEAR_FWD_AUX=lt|own: the forward's activation from cuBLASLt's
  // epilogues always (lt: *_AUX_BIAS in training, RELU_BIAS / GELU_BIAS in
  // inference) or from our passes beside the GEMM whenever the rule in
  // linear_fwd.cpp may choose them (own); unset: that rule.
  // FNORM_LINEAR_LEGACY_BWD=1: the partial-sums dz kernel even without
  // partial sums (the first version).
  // FNORM_LINEAR_NO_N1=1: n = 1 backward through the GEMMs, not our pass.
  // FNORM_LINEAR_WS_MIB=N: the workspace budget the heuristic is told for
  // every GEMM, forward and backward (at most 32; unset: GemmKey::budget).
  enum class FwdAux { Rule, Lt, Own } fwd_aux = FwdAux::Rule;
  bool legacy_bwd = false;
  bool no_n1 = false;
  uint64_t heuristic_budget = 0;  // 0: none forced
};

// A row-major matrix view of a tensor: the last dimension is the columns
// (packed), the others collapse into rows with one stride `ld`.
struct Matrix {
  int64_t rows = 1, cols = 1, ld = 1;
};

// The problem after validation: x [m, k], W ([k, n] or [n, k]), y [m, n].
struct LinearProblem {
  const fnorm_linear_desc *desc = nullptr;
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  int64_t m = 0, n = 0, k = 0;
  Matrix x, w, y;  // y: the forward's y, or the backward's dy
};

struct BwdLayout {
  size_t dz_offset = 0, partial_offset = 0, bytes = 0;
  int splits_n = 1, splits_k = 1;
  int splits_n1 = 0;  // n = 1: launch_linear_bwd_n1's row slices (0: not planned)
};

// ---- cuBLASLt (linear_cublaslt.cpp) ------------------------------------------------
LinearState &state_of(fnorm_handle *h);
const char *epilogue_name(uint32_t e);
[[noreturn]] void fail_cublas(cublasStatus_t st, const char *what);
void check_cublas(cublasStatus_t st, const char *what);
// cuBLASLt's heuristic answer for this GEMM, from the cache or asked now.
CachedAlgo find_algo(LinearState &s, const GemmKey &k, const GemmPointers &p);
void launch_gemm(LinearState &s, const GemmKey &k, const CachedAlgo &algo, const GemmPointers &p,
                 void *workspace, cudaStream_t stream);
// The problem's type, compute type (TF32 when allowed) and nothing else.
GemmKey key_base(const LinearProblem &p);
void set_alignments(GemmKey &k, const GemmPointers &p);
// The message for a GEMM cuBLASLt has no kernel for.
[[noreturn]] void fail_no_algo(const GemmKey &k, const CachedAlgo &c, const char *what);

// One GEMM of the plan: the fused form when cuBLASLt has a kernel for it,
// else the plain one.
struct GemmPlan {
  bool fused = false;
  GemmKey key;
  GemmPointers ptrs;
  CachedAlgo algo;
};

// The fused form `fused` (key and pointers set) when `try_fused` and
// cuBLASLt has a kernel for it, else the plain GEMM of `key` and `ptrs`
// (NOT_SUPPORTED naming `what` when cuBLASLt has neither).
GemmPlan choose_gemm(LinearState &s, GemmPlan fused, bool try_fused, const GemmKey &key,
                     const GemmPointers &ptrs, const char *what);

// ---- validation (linear_validate.cpp) -------------------------------------------
Matrix matrix_of(const fnorm_tensor_desc &d, const char *arg, bool output);
LinearAct act_of(fnorm_linear_epilogue_t e);
bool has_bias(fnorm_linear_epilogue_t e);
const char *linear_epilogue_name(fnorm_linear_epilogue_t e);
// x_desc, w_desc and y_desc (the forward's y or the backward's dy).
LinearProblem check_problem(const fnorm_linear_desc *desc, const fnorm_tensor_desc *x_desc,
                            const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc,
                            const char *y_arg, bool y_is_output);
// Bytes a matrix view spans from its first element (size_t-checked, naming
// `arg`).
size_t matrix_bytes(const Matrix &v, fnorm_dtype_t t, const char *arg);
// Bytes of the aux buffer of `act` for a [rows, cols] output (checked).
size_t aux_bytes_for(LinearAct act, fnorm_dtype_t t, int64_t rows, int64_t cols, const char *arg);
bool epilogue_vector_ok(const void *p);
bool bgrad_shape_ok(const GemmKey &k);
void require_aux(const void *aux, size_t bytes, uint64_t need, const char *arg, const char *bytes_arg);
// The caller's workspace rounded up to 256 bytes (kAlignSlack covers it).
unsigned char *aligned_workspace(void *ws);
LinearAct check_producer(const fnorm_linear_desc *prod);

// ---- backward plan (linear_bwd_plan.cpp) -------------------------------------------
BwdLayout bwd_layout(const LinearProblem &p, bool chained, int sm_count);

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
