/* SPDX-License-Identifier: Apache-2.0 */
// LayerNorm / RMSNorm: describe (descriptors -> NormProblem), each call's
// buffers with their extents, and the pointer rules. Built on
// core/validate.hpp.
#include <cstring>

#include "norm/norm.hpp"

namespace fnorm {

float NormProblem::eps() const {
  float e;
  std::memcpy(&e, &eps_bits, sizeof e);
  return e;
}

uint32_t NormFwdArgs::present() const {
  return (residual ? kNormResidual : 0) | (sum ? kNormSum : 0) | (gamma ? kNormGamma : 0) | (beta ? kNormBeta : 0) |
         (mean ? kNormMean : 0) | (rstd ? kNormRstd : 0) | (amax ? kNormAmax : 0);
}

uint32_t NormBwdArgs::present() const {
  return (gamma ? kNormGamma : 0) | (mean ? kNormMean : 0) | (dsum ? kNormDsum : 0) | (dgamma ? kNormDgamma : 0) |
         (dbeta ? kNormDbeta : 0);
}

int32_t resolve_axis(int32_t axis, int32_t rank, const char *arg) {
  const int32_t a = axis < 0 ? axis + rank : axis;
  FNORM_REQUIRE(a >= 0 && a < rank, FNORM_STATUS_BAD_PARAM,
                "%s %d is out of range for a tensor of rank %d (valid: %d..%d)", arg, axis, rank,
                -rank, rank - 1);
  return a;
}

namespace {

// The problem's x part and the descriptor's settings (fnorm_norm_desc_set
// validated them).
NormProblem problem_of(const fnorm_norm_desc *norm, const fnorm_tensor_desc &x, uint32_t present) {
  NormProblem v;
  v.dtype = x.dtype;
  v.out_dtype = x.dtype;
  v.axis = resolve_axis(norm->begin_norm_axis, x.rank, "norm's begin_norm_axis");
  const MatrixView l = packed_rows(x, v.axis, "x_desc");
  require_disjoint_rows(l, "x_desc", false);
  v.rows = l.rows;
  v.cols = l.cols;
  v.x_row_stride = l.row_stride;
  v.mode = norm->mode;
  v.flags = norm->flags;
  const float eps = static_cast<float>(norm->epsilon);
  std::memcpy(&v.eps_bits, &eps, sizeof eps);
  v.present = present;
  return v;
}

// Row stride of an output (or second input) described like x.
int64_t other_row_stride(const fnorm_tensor_desc &d, const fnorm_tensor_desc &x, const NormProblem &v,
                         const char *arg, bool output) {
  require_same_sizes(d, arg, x, "x_desc");
  const MatrixView l = packed_rows(d, v.axis, arg);
  require_disjoint_rows(l, arg, output);
  return l.row_stride;
}

// The weight descriptor (gamma, beta and their gradients): its dtype.
int32_t weight_dtype(const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc &x, const NormProblem &view) {
  const fnorm_tensor_desc &w = require_set(w_desc, "w_desc");
  FNORM_REQUIRE(w.dtype == x.dtype || w.dtype == FNORM_DTYPE_FLOAT32, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'w_desc': dtype %s must be x_desc's (%s) or FLOAT32", dtype_name(w.dtype),
                dtype_name(x.dtype));
  const bool flat = w.rank == 1 && w.dims[0] == view.cols;
  bool same = w.rank == x.rank - view.axis;
  for (int32_t i = 0; same && i < w.rank; ++i) same = w.dims[i] == x.dims[view.axis + i];
  FNORM_REQUIRE(flat || same, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'w_desc': its sizes must equal x's normalized dimensions (or be one "
                "dimension of %lld); got rank %d with dims[0] = %lld",
                static_cast<long long>(view.cols), w.rank, static_cast<long long>(w.dims[0]));
  (void)packed_rows(w, 0, "w_desc");
  return w.dtype;
}

size_t param_bytes(const NormProblem &v) {
  return v.param_dtype < 0 ? 0
                           : checked_mul(static_cast<size_t>(v.cols),
                                         dtype_size(static_cast<fnorm_dtype_t>(v.param_dtype)), "w_desc");
}

size_t stat_bytes(const NormProblem &v) { return checked_mul(static_cast<size_t>(v.rows), sizeof(float), "x_desc"); }

size_t rows_bytes(const NormProblem &v, int64_t row_stride, fnorm_dtype_t t, const char *arg) {
  return span_bytes(v.rows, v.cols, row_stride, dtype_size(t), arg);
}

}  // namespace

NormProblem describe_norm_fwd(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                              const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc, uint32_t present) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  const fnorm_tensor_desc &y = require_set(y_desc, "y_desc");
  require_same_sizes(y, "y_desc", x, "x_desc");
  NormProblem v = problem_of(norm, x, present);
  v.y_row_stride = other_row_stride(y, x, v, "y_desc", true);
  v.out_dtype = y.dtype;
  if (v.has(kNormGamma) || v.has(kNormBeta)) v.param_dtype = weight_dtype(w_desc, x, v);
  return v;
}

NormTensor quant_scaling_bit(fnorm_quant_scaling_t scaling) {
  FNORM_REQUIRE(scaling == FNORM_QUANT_SCALING_PER_TENSOR || scaling == FNORM_QUANT_SCALING_PER_TOKEN,
                FNORM_STATUS_BAD_PARAM, "argument 'scaling' has unknown value %d", static_cast<int>(scaling));
  return scaling == FNORM_QUANT_SCALING_PER_TOKEN ? kNormScales : kNormScale;
}

NormProblem describe_norm_fwd_quant(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                                    const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *y_desc,
                                    fnorm_quant_scaling_t scaling, uint32_t present) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  const fnorm_tensor_desc &y = require_set(y_desc, "y_desc", true);
  const NormTensor bit = quant_scaling_bit(scaling);
  FNORM_REQUIRE(!(y.dtype == FNORM_DTYPE_INT8 && bit == kNormScale), FNORM_STATUS_NOT_SUPPORTED,
                "argument 'scaling': INT8 output is per-token (dynamic) only; PER_TENSOR is not supported");
  // y is laid out as x is, in its own elements: described as x's dtype,
  // then given its own.
  fnorm_tensor_desc y_as_x = y;
  y_as_x.dtype = x.dtype;
  NormProblem v = describe_norm_fwd(norm, x_desc, w_desc, &y_as_x, (present & ~(kNormScale | kNormScales)) | bit);
  v.out_dtype = y.dtype;
  return v;
}

size_t quant_scale_bytes(const NormProblem &pb) { return pb.per_token() ? stat_bytes(pb) : sizeof(float); }

NormProblem describe_norm_bwd(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                              const fnorm_tensor_desc *dy_desc, const fnorm_tensor_desc *dx_desc,
                              const fnorm_tensor_desc *w_desc, uint32_t present) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  NormProblem v = problem_of(norm, x, present);
  v.y_row_stride = v.x_row_stride;
  v.dx_row_stride = v.x_row_stride;
  if (dy_desc != nullptr)
    v.y_row_stride = other_row_stride(require_set(dy_desc, "dy_desc"), x, v, "dy_desc", false);
  if (dx_desc != nullptr) {
    const fnorm_tensor_desc &dx = require_set(dx_desc, "dx_desc");
    v.dx_row_stride = other_row_stride(dx, x, v, "dx_desc", true);
    v.out_dtype = dx.dtype;
  }
  if (v.has(kNormGamma) || v.has(kNormDgamma) || v.has(kNormDbeta)) v.param_dtype = weight_dtype(w_desc, x, v);
  return v;
}

NormProblem NormFwd::describe(const Descs &d, const Args *a) {
  const uint32_t present = a != nullptr ? a->present() : 0;
  if (d.quant) return describe_norm_fwd_quant(d.norm, d.x, d.w, d.y, d.scaling, present);
  return describe_norm_fwd(d.norm, d.x, d.w, d.y, present);
}

CallBuffers NormFwd::buffers(const NormProblem &pb, const NormFwdArgs &a) {
  const size_t data = rows_bytes(pb, pb.x_row_stride, pb.dtype, "x_desc");
  const size_t params = param_bytes(pb), stats = stat_bytes(pb);
  const size_t y_bytes = rows_bytes(pb, pb.y_row_stride, pb.out_dtype, "y_desc");
  if (!pb.quantized())
    return {{input("x", a.x, data, pb.x_row_stride), input("residual", a.residual, data, pb.x_row_stride),
             input("gamma", a.gamma, params), input("beta", a.beta, params),
             output("sum", a.sum, data, pb.x_row_stride), output("y", a.y, y_bytes, pb.y_row_stride),
             output("mean", a.mean, stats), output("rstd", a.rstd, stats)},
            {{"y", "x"}, {"sum", "x"}, {"sum", "residual"}}};
  // Quantized: y (one-byte codes) is never in place of x; the scale is read
  // (per tensor) or written (per token); amax is written.
  const size_t scale_bytes = quant_scale_bytes(pb);
  return {{input("x", a.x, data, pb.x_row_stride), input("residual", a.residual, data, pb.x_row_stride),
           input("gamma", a.gamma, params), input("beta", a.beta, params),
           pb.per_token() ? output("scale", a.scale, scale_bytes) : input("scale", a.scale, scale_bytes),
           output("sum", a.sum, data, pb.x_row_stride), output("y", a.y, y_bytes, pb.y_row_stride),
           output("amax", a.amax, sizeof(float)), output("mean", a.mean, stats), output("rstd", a.rstd, stats)},
          {{"sum", "x"}, {"sum", "residual"}}};
}

void NormFwd::check(const NormProblem &pb, const NormFwdArgs &a) {
  if (pb.elements() != 0) {  // an empty tensor may come without memory (NULL)
    require_not_null(a.x, "x");
    require_not_null(a.y, "y");
  }
  FNORM_REQUIRE(!(pb.rms() && a.beta != nullptr), FNORM_STATUS_BAD_PARAM,
                "argument 'beta' must be NULL: RMSNorm has no shift");
  FNORM_REQUIRE(!(pb.rms() && a.mean != nullptr), FNORM_STATUS_BAD_PARAM,
                "argument 'mean' must be NULL: RMSNorm saves only rrms (in 'rstd')");
  FNORM_REQUIRE(a.sum == nullptr || a.residual != nullptr, FNORM_STATUS_BAD_PARAM,
                "argument 'sum' is given without 'residual'");
  if (pb.quantized() && pb.elements() != 0) require_not_null(a.scale, "scale");
}

NormProblem NormBwd::describe(const Descs &d, const Args *a) {
  if (a == nullptr)  // the size query: w_desc given means the launch may ask for dgamma / dbeta
    return describe_norm_bwd(d.norm, d.x, nullptr, nullptr, d.w, d.w != nullptr ? kNormDgamma : 0);
  require_not_null(d.dy, "dy_desc");
  require_not_null(d.dx, "dx_desc");
  return describe_norm_bwd(d.norm, d.x, d.dy, d.dx, d.w, a->present());
}

CallBuffers NormBwd::buffers(const NormProblem &pb, const NormBwdArgs &a) {
  const size_t data = rows_bytes(pb, pb.x_row_stride, pb.dtype, "x_desc");
  const size_t grads = rows_bytes(pb, pb.y_row_stride, pb.dtype, "dy_desc");
  const size_t params = param_bytes(pb), stats = stat_bytes(pb);
  return {{input("x", a.x, data, pb.x_row_stride), input("dy", a.dy, grads, pb.y_row_stride),
           input("dsum", a.dsum, grads, pb.y_row_stride), input("mean", a.mean, stats),
           input("rstd", a.rstd, stats), input("gamma", a.gamma, params),
           output("dx", a.dx, rows_bytes(pb, pb.dx_row_stride, pb.out_dtype, "dx_desc"), pb.dx_row_stride),
           output("dgamma", a.dgamma, params), output("dbeta", a.dbeta, params),
           output("workspace", a.workspace, a.workspace_bytes)},
          {{"dx", "dy"}, {"dx", "dsum"}}};
}

void NormBwd::check(const NormProblem &pb, const NormBwdArgs &a) {
  if (pb.elements() != 0) {
    require_not_null(a.x, "x");
    require_not_null(a.dy, "dy");
    require_not_null(a.dx, "dx");
    require_not_null(a.rstd, "rstd");
  }
  if (pb.rms()) {
    FNORM_REQUIRE(a.mean == nullptr, FNORM_STATUS_BAD_PARAM, "argument 'mean' must be NULL for RMSNorm");
    FNORM_REQUIRE(a.dbeta == nullptr, FNORM_STATUS_BAD_PARAM, "argument 'dbeta' must be NULL: RMSNorm has no shift");
  } else if (pb.elements() != 0) {
    require_not_null(a.mean, "mean");
  }
}

}  // namespace fnorm
