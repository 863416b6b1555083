// LayerNorm / RMSNorm validation: descriptors -> RowView, the weight
// descriptor, the pack the pointers allow. Built on core/validate.hpp.
#include <algorithm>
#include <cfloat>

#include "norm/norm.hpp"

namespace fnorm {

int32_t resolve_axis(int32_t axis, int32_t rank, const char *arg) {
  const int32_t a = axis < 0 ? axis + rank : axis;
  FNORM_REQUIRE(a >= 0 && a < rank, FNORM_STATUS_BAD_PARAM,
                "%s %d is out of range for a tensor of rank %d (valid: %d..%d)", arg, axis, rank,
                -rank, rank - 1);
  return a;
}

namespace {

// Row view of x.
RowView view_of(const fnorm_norm_desc *norm, const fnorm_tensor_desc &x) {
  FNORM_REQUIRE(norm->mode == FNORM_NORM_LAYERNORM || norm->mode == FNORM_NORM_RMSNORM,
                FNORM_STATUS_BAD_PARAM, "argument 'norm': unknown mode %d",
                static_cast<int>(norm->mode));
  FNORM_REQUIRE(norm->epsilon <= FLT_MAX, FNORM_STATUS_BAD_PARAM,
                "argument 'norm': epsilon %g does not fit in fp32", norm->epsilon);
  RowView v;
  v.dtype = x.dtype;
  v.axis = resolve_axis(norm->begin_norm_axis, x.rank, "norm's begin_norm_axis");
  const RowLayout l = packed_rows(x, v.axis, "x_desc");
  require_disjoint_rows(l, "x_desc", false);
  v.rows = l.rows;
  v.cols = l.cols;
  v.x_row_stride = l.row_stride;
  return v;
}

// Row stride of an output (or second input) described like x.
int64_t other_row_stride(const fnorm_tensor_desc &d, const fnorm_tensor_desc &x, const RowView &v,
                         const char *arg, bool output) {
  require_same_sizes(d, arg, x, "x_desc");
  const RowLayout l = packed_rows(d, v.axis, arg);
  require_disjoint_rows(l, arg, output);
  return l.row_stride;
}

}  // namespace

RowView check_norm_fwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *y_desc) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  const fnorm_tensor_desc &y = require_set(y_desc, "y_desc");
  require_same_sizes(y, "y_desc", x, "x_desc");
  RowView v = view_of(norm, x);
  v.y_row_stride = other_row_stride(y, x, v, "y_desc", true);
  return v;
}

RowView check_norm_bwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *dy_desc, const fnorm_tensor_desc *dx_desc) {
  FNORM_REQUIRE_NOT_NULL(norm);
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  RowView v = view_of(norm, x);
  v.y_row_stride = v.x_row_stride;
  v.dx_row_stride = v.x_row_stride;
  if (dy_desc != nullptr)
    v.y_row_stride = other_row_stride(require_set(dy_desc, "dy_desc"), x, v, "dy_desc", false);
  if (dx_desc != nullptr)
    v.dx_row_stride = other_row_stride(require_set(dx_desc, "dx_desc"), x, v, "dx_desc", true);
  return v;
}

bool check_weight_desc(const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *x_desc,
                       const RowView &view, bool needed) {
  if (!needed) return false;
  const fnorm_tensor_desc &w = require_set(w_desc, "w_desc");
  const fnorm_tensor_desc &x = *x_desc;
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
  return w.dtype != x.dtype;
}

int choose_pack(const RowView &v, std::initializer_list<const void *> data,
                std::initializer_list<int64_t> strides, std::initializer_list<const void *> params,
                bool param_f32) {
  const size_t elem = dtype_size(v.dtype);
  return widest_pack(elem, [&](int p) {
    bool ok = v.cols % p == 0;
    for (int64_t s : strides) ok = ok && (v.rows == 1 || s % p == 0);
    const size_t param_align = param_f32 ? 4 * static_cast<size_t>(std::min(p, 4)) : p * elem;
    return ok && all_aligned(data, p * elem) && all_aligned(params, param_align);
  });
}

Span row_span(const char *name, const void *p, const RowView &v, int64_t row_stride) {
  return {name, p, p == nullptr ? 0 : span_bytes(v.rows, v.cols, row_stride, dtype_size(v.dtype), name),
          row_stride};
}

size_t param_vector_bytes(const RowView &v, bool param_f32) {
  return checked_mul(static_cast<size_t>(v.cols), param_f32 ? sizeof(float) : dtype_size(v.dtype), "w_desc");
}

size_t row_stat_bytes(const RowView &v) {
  return checked_mul(static_cast<size_t>(v.rows), sizeof(float), "x_desc");
}

}  // namespace fnorm
