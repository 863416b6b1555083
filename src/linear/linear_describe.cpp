/* SPDX-License-Identifier: Apache-2.0 */
// Fully-connected layer: describe (descriptors -> LinearProblem), each
// call's buffers with their extents, the pointer rules (aux buffers,
// epilogue vectors). Built on core/validate.hpp.
#include <algorithm>

#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

namespace fnorm {

MatrixView matrix_of(const fnorm_tensor_desc &d, const char *arg, bool output) {
  const MatrixView l = packed_rows(d, d.rank - 1, arg);
  require_disjoint_rows(l, arg, output);
  return l;
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

LinearProblem describe_linear(const fnorm_linear_desc *desc, const fnorm_tensor_desc *x_desc,
                              const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc, const char *y_arg,
                              bool y_is_output) {
  FNORM_REQUIRE_NOT_NULL(desc);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  const fnorm_tensor_desc &w = require_set(w_desc, "w_desc");
  const fnorm_tensor_desc &y = require_set(y_desc, y_arg);
  LinearProblem p;
  p.epilogue = desc->epilogue;
  p.layout = desc->layout;
  p.flags = desc->flags;
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
  require_same_sizes(y, y_arg, x, "x_desc", p.n);
  p.y = matrix_of(y, y_arg, y_is_output);
  return p;
}

size_t matrix_bytes(const MatrixView &v, fnorm_dtype_t t, const char *arg) {
  return span_bytes(v, dtype_size(t), arg);
}

size_t aux_bytes_for(LinearAct act, fnorm_dtype_t t, int64_t rows, int64_t cols, const char *arg) {
  if (act == LinearAct::None) return 0;
  // linear_aux_ld rounds cols up to 128 (bits) or 8 (elements) in int64.
  FNORM_REQUIRE(cols <= INT64_MAX - 128, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': %lld columns overflow the aux buffer's leading dimension", arg,
                static_cast<long long>(cols));
  const size_t ld = static_cast<size_t>(linear_aux_ld(act, cols));
  if (act == LinearAct::Relu) return checked_mul(static_cast<size_t>(rows), ld / 8, arg);
  return checked_mul(checked_mul(static_cast<size_t>(rows), ld, arg), dtype_size(t), arg);
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
  return reinterpret_cast<unsigned char *>(align_up(v, kAlignSlack));
}

LinearAct check_producer(const fnorm_linear_desc *prod) {
  if (prod == nullptr) return LinearAct::None;
  const LinearAct a = act_of(prod->epilogue);
  FNORM_REQUIRE(a != LinearAct::None, FNORM_STATUS_BAD_PARAM,
                "argument 'x_producer': its epilogue %s has no activation; pass NULL instead",
                linear_epilogue_name(prod->epilogue));
  return a;
}

LinearProblem LinearFwd::describe(const Descs &d, const LinearFwdArgs *) {
  return describe_linear(d.desc, d.x, d.w, d.y, "y_desc", true);
}

CallBuffers LinearFwd::buffers(const LinearProblem &p, const LinearFwdArgs &a) {
  const size_t bias_bytes = checked_mul(static_cast<size_t>(p.n), dtype_size(p.dtype), "w_desc");
  return {{input("x", a.x, matrix_bytes(p.x, p.dtype, "x_desc"), p.x.row_stride),
           input("w", a.w, matrix_bytes(p.w, p.dtype, "w_desc"), p.w.row_stride), input("bias", a.bias, bias_bytes),
           output("y", a.y, matrix_bytes(p.y, p.dtype, "y_desc"), p.y.row_stride),
           output("aux", a.aux, aux_bytes_for(act_of(p.epilogue), p.dtype, p.m, p.n, "y_desc")),
           output("workspace", a.workspace, a.workspace_bytes)}};
}

void LinearFwd::check(const LinearProblem &p, const LinearFwdArgs &a) {
  if (p.m * p.n != 0) {  // an empty output may come without memory (NULL), and so may x and w then
    require_not_null(a.y, "y");
    if (p.k != 0) {
      require_not_null(a.x, "x");
      require_not_null(a.w, "w");
    }
  }
  const fnorm_linear_epilogue_t epi = p.epilogue;
  const LinearAct act = act_of(epi);
  if (has_bias(epi)) {
    FNORM_REQUIRE(a.bias != nullptr || p.n == 0, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'bias' is NULL; epilogue %s adds a bias", linear_epilogue_name(epi));
  } else {
    FNORM_REQUIRE(a.bias == nullptr, FNORM_STATUS_BAD_PARAM,
                  "argument 'bias' must be NULL: epilogue NONE adds no bias");
  }
  if (act == LinearAct::None) {
    FNORM_REQUIRE(a.aux == nullptr, FNORM_STATUS_BAD_PARAM,
                  "argument 'aux' must be NULL: epilogue %s has no activation to save",
                  linear_epilogue_name(epi));
  } else if (a.aux != nullptr) {
    require_aux(a.aux, a.aux_bytes, aux_bytes_for(act, p.dtype, p.m, p.n, "y_desc"), "aux", "aux_bytes");
  }
}

uint32_t LinearBwdArgs::wanted() const {
  return (dx ? LinearBwdDesc::kWantDx : 0) | (dw ? LinearBwdDesc::kWantDw : 0) | (db ? LinearBwdDesc::kWantDb : 0) |
         (x_db ? LinearBwdDesc::kWantXDb : 0);
}

LinearBwdDesc LinearBwd::describe(const Descs &d, const LinearBwdArgs *a) {
  LinearBwdDesc c;
  c.p = describe_linear(d.desc, d.x, d.w, d.dy, "dy_desc", false);
  c.act = act_of(d.desc->epilogue);
  c.prod_act = check_producer(d.x_producer);
  if (a == nullptr) return c;  // a size query
  c.wanted = a->wanted();
  if (a->dx != nullptr) {
    const fnorm_tensor_desc &dxd = require_set(d.dx, "dx_desc");
    require_same_sizes(dxd, "dx_desc", *d.x, "x_desc", c.p.k);
    c.dxm = matrix_of(dxd, "dx_desc", true);
  }
  return c;
}

CallBuffers LinearBwd::buffers(const LinearBwdDesc &c, const LinearBwdArgs &a) {
  const LinearProblem &p = c.p;
  const size_t es = dtype_size(p.dtype);
  const size_t n_bytes = checked_mul(static_cast<size_t>(p.n), es, "w_desc"),
               k_bytes = checked_mul(static_cast<size_t>(p.k), es, "x_desc");
  return {{input("x", a.x, matrix_bytes(p.x, p.dtype, "x_desc"), p.x.row_stride),
           input("w", a.w, matrix_bytes(p.w, p.dtype, "w_desc"), p.w.row_stride),
           input("dy", a.dy, matrix_bytes(p.y, p.dtype, "dy_desc"), p.y.row_stride),
           input("aux", a.aux, aux_bytes_for(c.act, p.dtype, p.m, p.n, "dy_desc")),
           input("x_aux", a.x_aux, aux_bytes_for(c.prod_act, p.dtype, p.m, p.k, "x_desc")),
           output("dx", a.dx, a.dx != nullptr ? matrix_bytes(c.dxm, p.dtype, "dx_desc") : 0, c.dxm.row_stride),
           output("dw", a.dw, matrix_bytes(p.w, p.dtype, "w_desc"), p.w.row_stride), output("db", a.db, n_bytes),
           output("x_db", a.x_db, k_bytes), output("workspace", a.workspace, a.workspace_bytes)}};
}

void LinearBwd::check(const LinearBwdDesc &c, const LinearBwdArgs &a) {
  const LinearProblem &p = c.p;
  const fnorm_linear_epilogue_t epi = p.epilogue;
  // Tensors with no elements may come without memory (NULL).
  const bool dz_empty = p.m == 0 || p.n == 0;
  if (c.wanted != 0 && !dz_empty) require_not_null(a.dy, "dy");
  if (a.dw != nullptr && p.m * p.k != 0) require_not_null(a.x, "x");
  if (a.dx != nullptr && p.n * p.k != 0) require_not_null(a.w, "w");
  FNORM_REQUIRE(a.db == nullptr || has_bias(epi), FNORM_STATUS_BAD_PARAM,
                "argument 'db' must be NULL: epilogue NONE has no bias");
  if (c.act != LinearAct::None) {
    if (c.wanted != 0 && !dz_empty) {
      FNORM_REQUIRE(a.aux != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                    "argument 'aux' is NULL; the backward of %s needs the forward's aux",
                    linear_epilogue_name(epi));
      require_aux(a.aux, a.aux_bytes, aux_bytes_for(c.act, p.dtype, p.m, p.n, "dy_desc"), "aux", "aux_bytes");
    }
  } else {
    FNORM_REQUIRE(a.aux == nullptr, FNORM_STATUS_BAD_PARAM, "argument 'aux' must be NULL: epilogue %s has no activation",
                  linear_epilogue_name(epi));
  }
  if (c.chained()) {
    FNORM_REQUIRE(a.dx != nullptr || p.m * p.k == 0, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'dx' is NULL; with x_producer the call exists to compute dx");
    if (p.m * p.k != 0) {
      FNORM_REQUIRE(a.x_aux != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                    "argument 'x_aux' is NULL; x_producer's activation needs its aux");
      require_aux(a.x_aux, a.x_aux_bytes, aux_bytes_for(c.prod_act, p.dtype, p.m, p.k, "x_desc"), "x_aux",
                  "x_aux_bytes");
    }
  } else {
    FNORM_REQUIRE(a.x_aux == nullptr && a.x_aux_bytes == 0 && a.x_db == nullptr, FNORM_STATUS_BAD_PARAM,
                  "arguments 'x_aux', 'x_aux_bytes' and 'x_db' must be NULL / 0 without x_producer");
  }
}

}  // namespace fnorm

#endif  // FNORM_HAVE_CUBLASLT
