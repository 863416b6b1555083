/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's describe step (descriptors -> GnProblem, the layout), the
// call's buffers (the driver's overlap rule and checked mode run over them)
// and its pointer rules. Built on core/validate.hpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "core/pointer_check.hpp"
#include "core/validate.hpp"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {

double GnProblem::epsilon() const {
  double e;
  std::memcpy(&e, &eps_bits, sizeof e);
  return e;
}

namespace {

// Packed strides of d's dimensions in `order` (fastest last); size-1
// dimensions may have any stride.
bool strides_match(const fnorm_tensor_desc &d, const int32_t *order) {
  int64_t expect = 1;
  for (int32_t i = d.rank - 1; i >= 0; --i) {
    const int32_t k = order[i];
    if (d.dims[k] != 1 && d.strides[k] != expect) return false;
    expect *= d.dims[k];
  }
  return true;
}

// 1: channels-last, 0: channels-first; NOT_SUPPORTED for any other layout.
int64_t layout_of(const fnorm_tensor_desc &d, int64_t spatial, const char *arg) {
  if (elements_of(d) == 0) return 0;  // nothing to address: any strides will do
  int32_t cf[FNORM_MAX_RANK], cl[FNORM_MAX_RANK];
  for (int32_t i = 0; i < d.rank; ++i) cf[i] = i;
  cl[0] = 0;  // N, spatial..., C (fastest)
  for (int32_t i = 2; i < d.rank; ++i) cl[i - 1] = i;
  cl[d.rank - 1] = 1;
  const bool is_cf = strides_match(d, cf), is_cl = strides_match(d, cl);
  // [N, C] (spatial 1) is both: the channels-last kernels read its rows.
  if (is_cl) return 1;
  if (is_cf) return spatial == 1 ? 1 : 0;
  std::string s;
  for (int32_t i = 0; i < d.rank; ++i) s += (i ? "," : "") + std::to_string(static_cast<long long>(d.strides[i]));
  fail(FNORM_STATUS_NOT_SUPPORTED,
       "argument '%s': strides [%s] are neither packed channels-first (NCHW) nor packed channels-last (NHWC); "
       "make the tensor contiguous in one of them",
       arg, s.c_str());
}

void require_param_dtype(const fnorm_tensor_desc &d, const char *arg, int64_t x_dtype) {
  FNORM_REQUIRE(d.dtype == x_dtype || d.dtype == FNORM_DTYPE_FLOAT32, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': dtype %s is neither x's (%s) nor FLOAT32", arg, dtype_name(d.dtype),
                dtype_name(static_cast<fnorm_dtype_t>(x_dtype)));
}

// w_desc: C packed values, dimensions of size 1 around them.
void check_w_desc(const fnorm_tensor_desc &d, const GnProblem &pb) {
  require_param_dtype(d, "w_desc", pb.dtype);
  FNORM_REQUIRE(elements_of(d) == pb.c, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'w_desc' describes %lld values; GroupNorm needs C = %lld",
                static_cast<long long>(elements_of(d)), static_cast<long long>(pb.c));
  for (int32_t i = 0; i < d.rank; ++i) {
    FNORM_REQUIRE(d.dims[i] == 1 || d.dims[i] == pb.c, FNORM_STATUS_BAD_PARAM_SHAPE,
                  "argument 'w_desc': dims[%d] is %lld; only C and 1 are allowed", i,
                  static_cast<long long>(d.dims[i]));
    FNORM_REQUIRE(d.dims[i] == 1 || d.strides[i] == 1, FNORM_STATUS_NOT_SUPPORTED,
                  "argument 'w_desc': the C values must be packed (strides[%d] is %lld)", i,
                  static_cast<long long>(d.strides[i]));
  }
}

// ss_desc: [N, C] or [N, C, 1, ...], any strides.
void check_ss_desc(const fnorm_tensor_desc &d, GnProblem &pb) {
  require_param_dtype(d, "ss_desc", pb.dtype);
  FNORM_REQUIRE(d.rank >= 2 && d.dims[0] == pb.n && d.dims[1] == pb.c, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'ss_desc': sizes must be [N, C, 1...] = [%lld, %lld, ...] (rank %d, dims[0] %lld)",
                static_cast<long long>(pb.n), static_cast<long long>(pb.c), d.rank,
                static_cast<long long>(d.rank >= 1 ? d.dims[0] : -1));
  for (int32_t i = 2; i < d.rank; ++i)
    FNORM_REQUIRE(d.dims[i] == 1, FNORM_STATUS_BAD_PARAM_SHAPE,
                  "argument 'ss_desc': dims[%d] is %lld; the dimensions after C must be 1", i,
                  static_cast<long long>(d.dims[i]));
  pb.ss_stride_n = d.dims[0] == 1 ? 0 : d.strides[0];
  pb.ss_stride_c = d.dims[1] == 1 ? 0 : d.strides[1];
}

size_t data_bytes(const GnProblem &pb) {
  return checked_mul(static_cast<size_t>(pb.elements()), dtype_size(static_cast<fnorm_dtype_t>(pb.dtype)), "x_desc");
}
size_t stats_bytes(const GnProblem &pb) { return static_cast<size_t>(pb.n * pb.groups) * sizeof(float); }
size_t vec_bytes(const GnProblem &pb) {
  return pb.w_present ? static_cast<size_t>(pb.c) * dtype_size(static_cast<fnorm_dtype_t>(pb.w_dtype)) : 0;
}
// Bytes from an [n, c] tensor's first element to one past its last.
size_t ss_bytes(const GnProblem &pb) {
  if (!pb.ss_present || pb.n == 0 || pb.c == 0) return 0;
  const size_t last = checked_add(checked_mul(static_cast<size_t>(pb.n - 1), static_cast<size_t>(pb.ss_stride_n), "ss_desc"),
                                  checked_mul(static_cast<size_t>(pb.c - 1), static_cast<size_t>(pb.ss_stride_c), "ss_desc"),
                                  "ss_desc");
  return checked_mul(last + 1, dtype_size(static_cast<fnorm_dtype_t>(pb.ss_dtype)), "ss_desc");
}

// An output [n, c] tensor whose elements do not overlap each other.
void require_ss_output_disjoint(const GnProblem &pb, const char *arg) {
  const int64_t sn = pb.ss_stride_n, sc = pb.ss_stride_c, n = pb.n, c = pb.c;
  const bool ok = n <= 1 || c <= 1 ? true : (sn >= sc * c || sc >= sn * n);
  FNORM_REQUIRE(ok, FNORM_STATUS_BAD_PARAM,
                "argument '%s': with ss_desc's strides [%lld, %lld] its elements overlap each other", arg,
                static_cast<long long>(sn), static_cast<long long>(sc));
}

void require_aligned(const void *p, size_t bytes, const char *arg) {
  FNORM_REQUIRE(p == nullptr || is_aligned(p, bytes), FNORM_STATUS_BAD_PARAM,
                "argument '%s' (%p) is not aligned to its element (%zu bytes)", arg, p, bytes);
}

void require_given(const void *p, const char *arg) { require_not_null(p, arg); }

// A tensor's descriptor is required when one of its pointers is given.
void require_desc_for(bool present, const void *p, const char *arg, const char *desc) {
  FNORM_REQUIRE(p == nullptr || present, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument '%s' is NULL but '%s' is given", desc, arg);
}

}  // namespace

GnProblem describe_gn(GnPass pass, const fnorm_groupnorm_desc *gn, const fnorm_tensor_desc *x_desc,
                      const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *ss_desc) {
  FNORM_REQUIRE(gn != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'gn' is NULL");
  const fnorm_tensor_desc &x = require_set(x_desc, "x_desc");
  FNORM_REQUIRE(x.rank >= 2, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'x_desc' has rank %d; GroupNorm needs [N, C, spatial...] (rank >= 2)", x.rank);
  GnProblem pb;
  pb.pass = static_cast<int64_t>(pass);
  pb.dtype = x.dtype;
  pb.n = x.dims[0];
  pb.c = x.dims[1];
  for (int32_t i = 2; i < x.rank; ++i) pb.s *= x.dims[i];
  FNORM_REQUIRE(pb.c >= 1, FNORM_STATUS_BAD_PARAM_SHAPE, "argument 'x_desc': C (dims[1]) is 0; no group count divides it");
  FNORM_REQUIRE(pb.c % gn->groups == 0, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument 'gn': groups = %lld does not divide C = %lld (x_desc dims[1])",
                static_cast<long long>(gn->groups), static_cast<long long>(pb.c));
  pb.groups = gn->groups;
  pb.activation = gn->activation;
  std::memcpy(&pb.eps_bits, &gn->epsilon, sizeof(double));
  pb.channels_last = layout_of(x, pb.s, "x_desc");
  (void)data_bytes(pb);
  if (w_desc != nullptr) {
    const fnorm_tensor_desc &w = require_set(w_desc, "w_desc");
    check_w_desc(w, pb);
    pb.w_present = 1;
    pb.w_dtype = w.dtype;
  }
  if (ss_desc != nullptr) {
    const fnorm_tensor_desc &ss = require_set(ss_desc, "ss_desc");
    check_ss_desc(ss, pb);
    pb.ss_present = 1;
    pb.ss_dtype = ss.dtype;
    (void)ss_bytes(pb);
  }
  return pb;
}

namespace {

// A tensor of the call with x's sizes, dtype and layout (y, dy, dx).
void require_like_x(const GnProblem &pb, const fnorm_tensor_desc *d, const fnorm_tensor_desc *x_desc,
                    const char *arg) {
  const fnorm_tensor_desc &t = require_set(d, arg);
  require_same_sizes(t, arg, *x_desc, "x_desc");
  if (pb.elements() == 0) return;
  FNORM_REQUIRE(layout_of(t, pb.s, arg) == pb.channels_last, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' is %s but x_desc is %s; they must share the layout", arg,
                pb.channels_last ? "channels-first" : "channels-last",
                pb.channels_last ? "channels-last" : "channels-first");
}

size_t elem(int64_t present, int64_t dtype) {
  return present ? dtype_size(static_cast<fnorm_dtype_t>(dtype)) : 1;
}

}  // namespace

GnProblem GnFwd::describe(const Descs &d, const Args *a) {
  GnProblem pb = describe_gn(GnPass::Fwd, d.gn, d.x, d.w, d.ss);
  if (a != nullptr) require_like_x(pb, d.y, d.x, "y_desc");
  return pb;
}

CallBuffers GnFwd::buffers(const GnProblem &pb, const GnFwdArgs &a) {
  const bool empty = pb.elements() == 0;
  const size_t xb = empty ? 0 : data_bytes(pb), sb = empty ? 0 : stats_bytes(pb);
  const size_t vb = vec_bytes(pb), qb = ss_bytes(pb);
  return {{input("x", a.x, xb), output("y", a.y, xb), input("gamma", a.gamma, vb), input("beta", a.beta, vb),
           input("scale", a.scale, qb), input("shift", a.shift, qb), output("mean", a.mean, sb),
           output("rstd", a.rstd, sb), output("workspace", a.workspace, empty ? 0 : a.workspace_bytes)},
          {{"y", "x"}}};
}

void GnFwd::check(const GnProblem &pb, const GnFwdArgs &a) {
  require_desc_for(pb.w_present, a.gamma, "gamma", "w_desc");
  require_desc_for(pb.w_present, a.beta, "beta", "w_desc");
  require_desc_for(pb.ss_present, a.scale, "scale", "ss_desc");
  require_desc_for(pb.ss_present, a.shift, "shift", "ss_desc");
  if (pb.elements() != 0) {
    require_given(a.x, "x");
    require_given(a.y, "y");
  }
  const size_t es = dtype_size(static_cast<fnorm_dtype_t>(pb.dtype));
  const size_t ws = elem(pb.w_present, pb.w_dtype), ss = elem(pb.ss_present, pb.ss_dtype);
  require_aligned(a.x, es, "x");
  require_aligned(a.y, es, "y");
  require_aligned(a.gamma, ws, "gamma");
  require_aligned(a.beta, ws, "beta");
  require_aligned(a.scale, ss, "scale");
  require_aligned(a.shift, ss, "shift");
  require_aligned(a.mean, 4, "mean");
  require_aligned(a.rstd, 4, "rstd");
}

GnProblem GnBwd::describe(const Descs &d, const Args *a) {
  GnProblem pb = describe_gn(GnPass::Bwd, d.gn, d.x, d.w, d.ss);
  if (a != nullptr) {
    require_like_x(pb, d.dy, d.x, "dy_desc");
    require_like_x(pb, d.dx, d.x, "dx_desc");
  }
  return pb;
}

CallBuffers GnBwd::buffers(const GnProblem &pb, const GnBwdArgs &a) {
  const bool empty = pb.elements() == 0;
  const size_t xb = empty ? 0 : data_bytes(pb), sb = empty ? 0 : stats_bytes(pb);
  const size_t vb = vec_bytes(pb), qb = ss_bytes(pb);
  return {{input("x", a.x, xb), input("dy", a.dy, xb), input("mean", a.mean, sb), input("rstd", a.rstd, sb),
           input("gamma", a.gamma, vb), input("beta", a.beta, vb), input("scale", a.scale, qb),
           input("shift", a.shift, qb), output("dx", a.dx, xb), output("dgamma", a.dgamma, vb),
           output("dbeta", a.dbeta, vb), output("dscale", a.dscale, qb), output("dshift", a.dshift, qb),
           output("workspace", a.workspace, empty ? 0 : a.workspace_bytes)},
          {{"dx", "dy"}, {"dx", "x"}}};
}

void GnBwd::check(const GnProblem &pb, const GnBwdArgs &a) {
  require_desc_for(pb.w_present, a.gamma, "gamma", "w_desc");
  require_desc_for(pb.w_present, a.beta, "beta", "w_desc");
  require_desc_for(pb.w_present, a.dgamma, "dgamma", "w_desc");
  require_desc_for(pb.w_present, a.dbeta, "dbeta", "w_desc");
  require_desc_for(pb.ss_present, a.scale, "scale", "ss_desc");
  require_desc_for(pb.ss_present, a.shift, "shift", "ss_desc");
  require_desc_for(pb.ss_present, a.dscale, "dscale", "ss_desc");
  require_desc_for(pb.ss_present, a.dshift, "dshift", "ss_desc");
  if (pb.elements() != 0) {
    require_given(a.x, "x");
    require_given(a.dy, "dy");
    require_given(a.mean, "mean");
    require_given(a.rstd, "rstd");
    require_given(a.dx, "dx");
  }
  if (a.dscale != nullptr) require_ss_output_disjoint(pb, "dscale");
  if (a.dshift != nullptr) require_ss_output_disjoint(pb, "dshift");
  const size_t es = dtype_size(static_cast<fnorm_dtype_t>(pb.dtype));
  const size_t ws = elem(pb.w_present, pb.w_dtype), ss = elem(pb.ss_present, pb.ss_dtype);
  require_aligned(a.x, es, "x");
  require_aligned(a.dy, es, "dy");
  require_aligned(a.dx, es, "dx");
  require_aligned(a.mean, 4, "mean");
  require_aligned(a.rstd, 4, "rstd");
  require_aligned(a.gamma, ws, "gamma");
  require_aligned(a.beta, ws, "beta");
  require_aligned(a.dgamma, ws, "dgamma");
  require_aligned(a.dbeta, ws, "dbeta");
  require_aligned(a.scale, ss, "scale");
  require_aligned(a.shift, ss, "shift");
  require_aligned(a.dscale, ss, "dscale");
  require_aligned(a.dshift, ss, "dshift");
}

}  // namespace fnorm
