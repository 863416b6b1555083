/* SPDX-License-Identifier: Apache-2.0 */
// The fully-connected layer inside the library: the descriptor object, the
// op contract's steps (core/op.hpp), the cuBLASLt GEMM description and
// algorithm cache, and what each file of the op provides.
//   linear_desc.cpp      fnorm_linear_desc_* and fnorm_linear_aux_size
//   linear_describe.cpp  describe (descriptors -> LinearProblem), buffers, check (aux and epilogue rules)
//   linear_cublaslt.cpp  the handle's cuBLASLt state, the algorithm cache, GEMM launch
//   linear_plan.cpp      plan: forward (fused epilogue or GEMM + our pass), backward (workspace
//                        layout, dgrad / wgrad GEMMs), and our kernels' launches (LinearLaunch)
//   linear_launch.cpp    launch: the planned GEMMs and our kernels
//   linear_api.cpp       the C entry points: one run_op / query_op each
//   linear_kernels.cu    our own epilogue kernels; their launchers launch the plan's LinearLaunch
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
#include "core/op.hpp"
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

// A call's buffers, by the role a plan gives them in a GEMM (plans keep
// roles, not pointers: the next call brings its own).
enum class Operand : uint8_t { None, X, W, Y, Bias, Aux, Dz, Dx, Dw, Db, XAux, XDb };
struct LinearBuffers {
  const void *x = nullptr, *w = nullptr, *dy = nullptr, *dz = nullptr, *aux = nullptr, *x_aux = nullptr;
  void *y = nullptr, *bias = nullptr, *dx = nullptr, *dw = nullptr, *db = nullptr, *x_db = nullptr;
  void *operator[](Operand o) const;
};
struct GemmRoles {
  Operand a = Operand::None, b = Operand::None, d = Operand::None, bias = Operand::None, aux = Operand::None;
  GemmPointers bind(const LinearBuffers &buf) const {
    return {buf[a], buf[b], buf[d], buf[bias], buf[aux]};
  }
};

// The handle's cuBLASLt state: created on first use, with the handle's
// device current. The cache maps a GEMM's key to cuBLASLt's heuristic answer
// (found or not); `mutex` guards it, so threads sharing a handle may plan at
// once. The heuristic runs outside the lock (two threads may both ask it
// for one new key; both get the same answer). Plans (which hold the
// answers) are cached per thread (core/op.hpp), so a launch whose plan is
// cached takes no lock.
struct LinearState : OpState {
  ~LinearState() override;
  cublasLtHandle_t lt = nullptr;
  std::mutex mutex;
  std::map<GemmKey, CachedAlgo> cache;
};

// describe: the problem of a call: x [m, k], W ([k, n] or [n, k]), y [m, n]
// as matrix views, and the descriptor's settings. The plan caches' key (no
// padding: compared as bytes).
struct LinearProblem {
  int64_t m = 0, n = 0, k = 0;
  MatrixView x, w, y;  // y: the forward's y, or the backward's dy
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  fnorm_linear_epilogue_t epilogue = FNORM_LINEAR_EPILOGUE_NONE;
  fnorm_linear_weight_layout_t layout = FNORM_LINEAR_WEIGHT_KN;
  uint32_t flags = 0;
};

struct BwdLayout {
  size_t dz_offset = 0, partial_offset = 0, bytes = 0;
  int splits_n = 1, splits_k = 1;
  int splits_n1 = 0;  // n = 1: launch_linear_bwd_n1's row slices (0: not planned)
};

// ---- cuBLASLt (linear_cublaslt.cpp) ------------------------------------------------
LinearState &state_of(fnorm_handle *h);
// The largest power of two dividing p, at most 256 (cuBLASLt's default
// assumption); 256 for NULL.
uint32_t alignment_of(const void *p);
const char *epilogue_name(uint32_t e);
[[noreturn]] void fail_cublas(cublasStatus_t st, const char *what);
void check_cublas(cublasStatus_t st, const char *what);
// cuBLASLt's heuristic answer for this GEMM, from the cache or asked now.
CachedAlgo find_algo(LinearState &s, const Tuning &t, const GemmKey &k, const GemmPointers &p);
void launch_gemm(const LinearState &s, const GemmKey &k, const CachedAlgo &algo, const GemmPointers &p,
                 void *workspace, cudaStream_t stream);
// The problem's type, compute type (TF32 when allowed) and nothing else.
GemmKey key_base(const LinearProblem &p);
void set_alignments(GemmKey &k, const GemmPointers &p);
// The message for a GEMM cuBLASLt has no kernel for.
[[noreturn]] void fail_no_algo(const GemmKey &k, const CachedAlgo &c, const char *what);

// One GEMM of a plan: the fused form when cuBLASLt has a kernel for it,
// else the plain one.
struct GemmPlan {
  bool fused = false;
  GemmKey key;
  GemmRoles roles;
  CachedAlgo algo;
  void launch(const LinearState &s, const LinearBuffers &buf, void *workspace, cudaStream_t stream) const {
    launch_gemm(s, key, algo, roles.bind(buf), workspace, stream);
  }
};

// The fused form `fused` (key and roles set) when `try_fused` and cuBLASLt
// has a kernel for it, else the plain GEMM of `key` and `roles` (NOT_SUPPORTED
// naming `what` when cuBLASLt has neither). `buf`: the call's buffers (their
// alignments go into the keys).
GemmPlan choose_gemm(LinearState &s, const Tuning &t, GemmPlan fused, bool try_fused, const GemmKey &key,
                     const GemmRoles &roles, const LinearBuffers &buf, const char *what);

// ---- describe (linear_describe.cpp) -------------------------------------------
MatrixView matrix_of(const fnorm_tensor_desc &d, const char *arg, bool output);
LinearAct act_of(fnorm_linear_epilogue_t e);
bool has_bias(fnorm_linear_epilogue_t e);
const char *linear_epilogue_name(fnorm_linear_epilogue_t e);
// describe: x_desc, w_desc and y_desc (the forward's y or the backward's dy).
LinearProblem describe_linear(const fnorm_linear_desc *desc, const fnorm_tensor_desc *x_desc,
                              const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc,
                              const char *y_arg, bool y_is_output);
// Bytes a matrix view spans from its first element (size_t-checked, naming
// `arg`).
size_t matrix_bytes(const MatrixView &v, fnorm_dtype_t t, const char *arg);
// Bytes of the aux buffer of `act` for a [rows, cols] output (checked).
size_t aux_bytes_for(LinearAct act, fnorm_dtype_t t, int64_t rows, int64_t cols, const char *arg);
bool epilogue_vector_ok(const void *p);
bool bgrad_shape_ok(const GemmKey &k);
void require_aux(const void *aux, size_t bytes, uint64_t need, const char *arg, const char *bytes_arg);
// The caller's workspace rounded up to 256 bytes (kAlignSlack covers it).
unsigned char *aligned_workspace(void *ws);
LinearAct check_producer(const fnorm_linear_desc *prod);

// ---- the ops (core/op.hpp) ------------------------------------------------------

// The pointers of a forward call.
struct LinearFwdArgs {
  const void *x = nullptr, *w = nullptr, *bias = nullptr;
  void *y = nullptr, *aux = nullptr;
  size_t aux_bytes = 0;
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The plan's pointer class: each operand's alignment (alignment_of; 0:
// absent). The plan's GEMMs are asked of cuBLASLt with stand-ins of these
// alignments (stand_in), and our kernels' `packed` is decided from them
// (with the description's row strides), so it depends on nothing else of
// the pointers.
struct LinearFwdPtrs {
  uint32_t x = 0, w = 0, y = 0, bias = 0, aux = 0, unused = 0;
};

// What runs after the forward GEMM.
enum class FwdPost : int32_t {
  None,         // cuBLASLt's epilogue did everything
  Epilogue,     // plain GEMM: our epilogue kernel (bias, activation, aux) over y
  ReluMask,     // RELU_BIAS GEMM into y: our mask pass y -> aux
  GeluFromAux,  // BIAS GEMM into aux (z): our pass y = gelu(z)
  GeluInPlace,  // BIAS GEMM into y (inference): our pass y = gelu(y)
  NoInner,      // k = 0: y = 0 without a GEMM, then our epilogue kernel: y = act(0 + bias)
  Zero          // k = 0, no activation and no bias: y = 0 alone
};

struct LinearFwdPlan {
  Sizes sizes;
  const LinearState *state = nullptr;  // the handle's (its cuBLASLt handle)
  GemmPlan gemm;
  FwdPost post = FwdPost::None;
  LinearLaunch pass;  // our kernel of `post` (Epilogue, ReluMask, Gelu*, NoInner)
};

struct LinearFwd : OpDefaults {
  struct Descs {
    const fnorm_linear_desc *desc;
    const fnorm_tensor_desc *x, *w, *y;
  };
  using Desc = LinearProblem;
  using Args = LinearFwdArgs;
  using Ptrs = LinearFwdPtrs;
  using Plan = LinearFwdPlan;
  static constexpr const char *kWorkspaceQuery = "fnorm_linear_fwd_workspace_size";
  static constexpr size_t kWorkspaceAlign = 1;  // the launch aligns it (kAlignSlack)
  FNORM_OP_STEPS
  static Empty empty(const Desc &p, const Args &) { return p.m * p.n == 0 ? Empty::Done : Empty::No; }
  static void launch_empty(const Desc &, const Args &, cudaStream_t) {}
  static Sizes sizes(fnorm_handle *h, const Desc &p, const Ptrs &) { return {workspace_size(h, p), 0}; }
  static size_t workspace_size(fnorm_handle *h, const Desc &p);
};

// A backward call without its pointers: the problem (y: dy), dx's view,
// the activations, and which outputs are wanted.
struct LinearBwdDesc {
  LinearProblem p;
  MatrixView dxm;                        // dx's view (when dx is wanted)
  LinearAct act = LinearAct::None;       // desc's activation
  LinearAct prod_act = LinearAct::None;  // x_producer's activation (chained when set)
  uint32_t wanted = 0;  // kWantDx | kWantDw | kWantDb | kWantXDb
  uint32_t unused = 0;
  static constexpr uint32_t kWantDx = 1, kWantDw = 2, kWantDb = 4, kWantXDb = 8;
  bool chained() const { return prod_act != LinearAct::None; }
  bool degenerate() const { return p.m == 0 || p.n == 0 || p.k == 0; }
};

// The pointers of one backward call.
struct LinearBwdArgs {
  const void *x = nullptr, *w = nullptr, *dy = nullptr, *aux = nullptr, *x_aux = nullptr;
  void *dx = nullptr, *dw = nullptr, *db = nullptr, *x_db = nullptr;
  size_t aux_bytes = 0, x_aux_bytes = 0;
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
  uint32_t wanted() const;
};

struct LinearBwdPtrs {
  uint32_t x = 0, w = 0, dy = 0, aux = 0, x_aux = 0, dx = 0, dw = 0, db = 0, x_db = 0, unused = 0;
};

struct LinearBwdPlan {
  Sizes sizes;
  const LinearState *state = nullptr;
  BwdLayout layout;
  bool degenerate = false;  // m, n or k is 0: zeros, or (k = 0) db alone
  bool n1 = false;          // n = 1: launch_linear_bwd_n1 instead of the GEMMs
  bool wgrad_planned = false, dgrad_planned = false;
  bool db_pass = false;     // db from our column sums (no fused bias gradient)
  bool dz_flat = false;        // the dz pass element-wise (launch_linear_bwd_act's flat)
  bool producer_flat = false;  // likewise the producer's derivative over dx
  bool dz_written = false;     // the dz pass writes dz into the workspace (dx or dw wanted, k > 0)
  bool n1_sums = false;        // n = 1: dw or db wanted (the pass's partial sums, then their finish)
  LinearLaunch dz_pass;        // over dy: dz and / or db's partial sums (with an activation or db_pass)
  LinearLaunch producer_pass;  // over dx: the producer's derivative (chained, dgrad not fused)
  LinearLaunch n1_pass, n1_finish;
  GemmPlan wgrad, dgrad;
};

struct LinearBwd : OpDefaults {
  struct Descs {
    const fnorm_linear_desc *desc;
    const fnorm_tensor_desc *x, *w, *dy;
    const fnorm_linear_desc *x_producer;
    const fnorm_tensor_desc *dx = nullptr;
  };
  using Desc = LinearBwdDesc;
  using Args = LinearBwdArgs;
  using Ptrs = LinearBwdPtrs;
  using Plan = LinearBwdPlan;
  static constexpr const char *kWorkspaceQuery = "fnorm_linear_bwd_workspace_size";
  static constexpr size_t kWorkspaceAlign = 1;  // the launch aligns it (kAlignSlack)
  FNORM_OP_STEPS
  static Empty empty(const Desc &c, const Args &) { return c.wanted == 0 ? Empty::Done : Empty::No; }
  static void launch_empty(const Desc &, const Args &, cudaStream_t) {}
  static Sizes sizes(fnorm_handle *h, const Desc &c, const Ptrs &) { return {workspace_size(h, c), 0}; }
  static size_t workspace_size(fnorm_handle *h, const Desc &c);
};

// ---- backward workspace (linear_plan.cpp) -------------------------------------------
BwdLayout bwd_layout(const LinearProblem &p, bool chained, int sm_count);

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
