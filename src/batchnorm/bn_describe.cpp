/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm: describe (tensor descriptors -> BnProblem, the layout), each
// pass's buffers with their extents, and the pointer rules. Built on
// core/validate.hpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "batchnorm/batchnorm.hpp"

namespace fnorm {
namespace {

// Packed strides of `dims` in the given order of dimensions (fastest last).
bool strides_match(const fnorm_tensor_desc *d, const int32_t *order) {
  int64_t expect = 1;
  for (int32_t i = d->rank - 1; i >= 0; --i) {
    const int32_t k = order[i];
    if (d->dims[k] != 1 && d->strides[k] != expect) return false;
    expect *= d->dims[k];
  }
  return true;
}

// The tensor part of a problem: sizes and layout of `d`, named `arg`.
void view_of(const fnorm_tensor_desc *d, const char *arg, BnProblem &v) {
  FNORM_REQUIRE(d != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
  FNORM_REQUIRE(d->is_set, FNORM_STATUS_BAD_PARAM, "argument '%s' was never set", arg);
  FNORM_REQUIRE(!is_quantized_dtype(d->dtype), FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s': dtype %s is an output dtype of fnorm_norm_fwd_quant only", arg,
                dtype_name(d->dtype));
  FNORM_REQUIRE(d->rank >= 2, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' has rank %d; BatchNorm needs [N, C, spatial...] (rank >= 2)", arg,
                d->rank);
  v.dtype = d->dtype;
  v.rank = d->rank;
  std::copy(d->dims, d->dims + d->rank, v.dims);
  v.n = d->dims[0];
  v.c = d->dims[1];
  for (int32_t i = 2; i < d->rank; ++i) v.spatial *= d->dims[i];
  // (fnorm_tensor_desc_set keeps N * C * spatial within int64.)
  v.bytes = checked_mul(static_cast<size_t>(v.elements()), dtype_size(v.dtype), arg);
  v.vec_bytes = checked_mul(static_cast<size_t>(v.c), sizeof(float), arg);
  if (v.elements() == 0) {  // no element to address: any strides will do
    v.shape = BnShape{v.n, v.c * v.spatial, v.spatial, v.c};
    return;
  }
  int32_t nchw[FNORM_MAX_RANK], nhwc[FNORM_MAX_RANK];
  for (int32_t i = 0; i < d->rank; ++i) nchw[i] = i;
  nhwc[0] = 0;  // N, spatial..., C (fastest)
  for (int32_t i = 2; i < d->rank; ++i) nhwc[i - 1] = i;
  nhwc[d->rank - 1] = 1;
  const bool cf = strides_match(d, nchw), cl = strides_match(d, nhwc);
  if (v.spatial == 1 && (cf || cl)) {
    v.channels_last = 1;
    v.shape = BnShape{v.n, v.c, 1, v.c};
  } else if (cf) {
    v.shape = BnShape{v.n, v.c * v.spatial, v.spatial, v.c};
  } else if (cl) {
    v.channels_last = 1;
    v.shape = BnShape{v.n * v.spatial, v.c, 1, v.c};
  } else {
    std::string s;
    for (int32_t i = 0; i < d->rank; ++i)
      s += (i ? "," : "") + std::to_string(static_cast<long long>(d->strides[i]));
    fail(FNORM_STATUS_NOT_SUPPORTED,
         "argument '%s': strides [%s] are neither packed channels-first (NCHW) nor packed "
         "channels-last (NHWC)", arg, s.c_str());
  }
}

void require_vec_aligned(const void *p, const char *name) {
  FNORM_REQUIRE(is_aligned(p, 4), FNORM_STATUS_BAD_PARAM,
                "argument '%s' (%p) is not 4-byte aligned (fp32 per-channel vector)", name, p);
}

void require_vecs_aligned(std::initializer_list<std::pair<const float *, const char *>> vecs) {
  for (const auto &v : vecs) require_vec_aligned(v.first, v.second);
}

// Training needs more than one value per channel, as frameworks say (an
// empty batch has none and is no error). SyncBatchNorm: the count that
// matters is the global one, which the host does not see.
void require_training_count(const BnProblem &pb, const BnArgs &a) {
  FNORM_REQUIRE(a.comm != nullptr || pb.per_channel() != 1, FNORM_STATUS_BAD_PARAM,
                "argument 'x_desc': training needs more than one value per channel (N * "
                "spatial = %lld)", static_cast<long long>(pb.per_channel()));
}

// z only with the epilogue that adds it, and then required where the rank
// has samples.
void require_addend(const BnProblem &pb, const BnArgs &a) {
  if (pb.epilogue != FNORM_BN_EPILOGUE_ADD_RELU) {
    FNORM_REQUIRE(a.z == nullptr, FNORM_STATUS_BAD_PARAM, "argument 'z' is given but the epilogue is not ADD_RELU");
  } else if (!pb.local_empty && pb.elements() != 0) {
    FNORM_REQUIRE(a.z != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'z' is NULL; the ADD_RELU epilogue adds it");
  }
}

// Data pointers required where the tensors have elements on this rank.
void require_data(const BnProblem &pb, std::initializer_list<std::pair<const void *, const char *>> data) {
  if (pb.local_empty || pb.elements() == 0) return;
  for (const auto &d : data)
    if (d.first == nullptr) fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", d.second);
}

}  // namespace

BnProblem describe_bn(BnPass pass, const fnorm_batchnorm_desc *bn, const fnorm_tensor_desc *x_desc) {
  FNORM_REQUIRE(bn != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'bn' is NULL");
  BnProblem v;
  view_of(x_desc, "x_desc", v);
  v.pass = pass;
  v.epilogue = bn->epilogue;
  v.engine = bn->engine;
  v.average = bn->average;
  v.sync_flags = bn->sync_flags;
  v.sync = bn->comm != nullptr && pass != BnPass::FwdInfer;
  std::memcpy(&v.eps_bits, &bn->epsilon, sizeof(double));
  std::memcpy(&v.momentum_bits, &bn->momentum, sizeof(double));
  return v;
}

void bn_require_same(const BnProblem &x, const fnorm_tensor_desc *other, const char *arg) {
  BnProblem o;
  view_of(other, arg, o);
  FNORM_REQUIRE(o.dtype == x.dtype, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' has dtype %s; x_desc has %s", arg, dtype_name(o.dtype),
                dtype_name(x.dtype));
  bool same = o.rank == x.rank;
  for (int32_t i = 0; same && i < x.rank; ++i) same = o.dims[i] == x.dims[i];
  FNORM_REQUIRE(same, FNORM_STATUS_BAD_PARAM_SHAPE, "argument '%s' has other sizes than x_desc",
                arg);
  FNORM_REQUIRE(o.channels_last == x.channels_last, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' is %s but x_desc is %s", arg,
                o.channels_last ? "channels-last" : "channels-first",
                x.channels_last ? "channels-last" : "channels-first");
}

double BnProblem::eps() const {
  double e;
  std::memcpy(&e, &eps_bits, sizeof e);
  return e;
}

double BnProblem::momentum() const {
  double m;
  std::memcpy(&m, &momentum_bits, sizeof m);
  return m;
}

template <BnPass P>
BnProblem BnOp<P>::describe(const Descs &d, const BnArgs *a) {
  FNORM_REQUIRE(d.bn != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'bn' is NULL");
  BnProblem pb = describe_bn(P, d.bn, d.x);
  if (a == nullptr) return pb;  // a size query: x_desc alone
  if (P == BnPass::Bwd) {
    bn_require_same(pb, d.other, "dy_desc");
    bn_require_same(pb, d.dx, "dx_desc");
  } else {
    bn_require_same(pb, d.other, "y_desc");
  }
  if (P == BnPass::FwdInfer) return pb;
  if (d.bn->comm != nullptr) nccl_check_comm(d.handle, d.bn->comm);
  // SyncBatchNorm: a rank without samples passes its data pointers as NULL
  // (x_desc then describing [1, C, ...]) or descriptors with no elements.
  const bool no_data = P == BnPass::Bwd ? a->x == nullptr && a->dy == nullptr && a->dx == nullptr && a->dz == nullptr
                                        : a->x == nullptr && a->y == nullptr && a->z == nullptr;
  pb.local_empty = d.bn->comm != nullptr && (no_data || pb.elements() == 0);
  return pb;
}

template <>
CallBuffers BnFwdTrain::buffers(const BnProblem &pb, const BnArgs &a) {
  const uint64_t data = pb.bytes, vec = pb.vec_bytes;
  return {{input("x", a.x, data), input("z", a.z, data), input("gamma", a.gamma, vec), input("beta", a.beta, vec),
           output("y", a.y, data), output("running_mean", a.running_mean, vec),
           output("running_var", a.running_var, vec), output("num_batches_tracked", a.num_batches_tracked, 8),
           output("saved_mean", a.saved_mean, vec), output("saved_invstd", a.saved_invstd, vec),
           output("reserve", a.reserve, a.reserve_bytes), output("workspace", a.workspace, a.workspace_bytes)},
          {{"y", "x"}, {"y", "z"}}};
}

template <>
void BnFwdTrain::check(const BnProblem &pb, const BnArgs &a) {
  require_data(pb, {{a.x, "x"}, {a.y, "y"}});
  require_addend(pb, a);
  FNORM_REQUIRE((a.running_mean == nullptr) == (a.running_var == nullptr), FNORM_STATUS_BAD_PARAM,
                "arguments 'running_mean' and 'running_var' must be given together");
  FNORM_REQUIRE(!(a.running_mean != nullptr && pb.average == FNORM_BN_AVERAGE_CUMULATIVE &&
                  a.num_batches_tracked == nullptr),
                FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument 'num_batches_tracked' is NULL; CUMULATIVE averaging reads it");
  FNORM_REQUIRE(is_aligned(a.num_batches_tracked, 8), FNORM_STATUS_BAD_PARAM,
                "argument 'num_batches_tracked' (%p) is not 8-byte aligned",
                static_cast<void *>(a.num_batches_tracked));
  require_training_count(pb, a);
  require_vecs_aligned({{a.gamma, "gamma"}, {a.beta, "beta"}, {a.running_mean, "running_mean"},
                        {a.running_var, "running_var"}, {a.saved_mean, "saved_mean"},
                        {a.saved_invstd, "saved_invstd"}});
}

template <>
CallBuffers BnFwdInfer::buffers(const BnProblem &pb, const BnArgs &a) {
  const uint64_t data = pb.bytes, vec = pb.vec_bytes;
  return {{input("x", a.x, data), input("z", a.z, data), input("gamma", a.gamma, vec), input("beta", a.beta, vec),
           input("running_mean", a.running_mean_in, vec), input("running_var", a.running_var_in, vec),
           output("y", a.y, data), output("workspace", a.workspace, a.workspace_bytes)},
          {{"y", "x"}, {"y", "z"}}};
}

template <>
void BnFwdInfer::check(const BnProblem &pb, const BnArgs &a) {
  require_data(pb, {{a.x, "x"}, {a.y, "y"}});
  if (pb.c != 0) {
    FNORM_REQUIRE(a.running_mean_in != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'running_mean' is NULL");
    FNORM_REQUIRE(a.running_var_in != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'running_var' is NULL");
  }
  require_addend(pb, a);
  require_vecs_aligned({{a.gamma, "gamma"}, {a.beta, "beta"}, {a.running_mean_in, "running_mean"},
                        {a.running_var_in, "running_var"}});
}

template <>
CallBuffers BnBwd::buffers(const BnProblem &pb, const BnArgs &a) {
  const uint64_t data = pb.bytes, vec = pb.vec_bytes;
  return {{input("x", a.x, data), input("dy", a.dy, data), input("y", a.y_in, data), input("gamma", a.gamma, vec),
           input("beta", a.beta, vec), input("saved_mean", a.saved_mean_in, vec),
           input("saved_invstd", a.saved_invstd_in, vec), input("reserve", a.reserve, a.reserve_bytes),
           output("dx", a.dx, data), output("dz", a.dz, data), output("dgamma", a.dgamma, vec),
           output("dbeta", a.dbeta, vec), output("workspace", a.workspace, a.workspace_bytes)},
          {{"dx", "dy"}, {"dx", "x"}, {"dz", "dy"}}};
}

template <>
void BnBwd::check(const BnProblem &pb, const BnArgs &a) {
  require_data(pb, {{a.x, "x"}, {a.dy, "dy"}, {a.dx, "dx"}});
  if (pb.elements() != 0 || pb.local_empty) {
    FNORM_REQUIRE(a.saved_mean_in != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'saved_mean' is NULL");
    FNORM_REQUIRE(a.saved_invstd_in != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'saved_invstd' is NULL");
  }
  FNORM_REQUIRE(a.dz == nullptr || pb.epilogue == FNORM_BN_EPILOGUE_ADD_RELU, FNORM_STATUS_BAD_PARAM,
                "argument 'dz' is given but the epilogue is not ADD_RELU");
  require_training_count(pb, a);
  require_vecs_aligned({{a.gamma, "gamma"}, {a.beta, "beta"}, {a.saved_mean_in, "saved_mean"},
                        {a.saved_invstd_in, "saved_invstd"}, {a.dgamma, "dgamma"}, {a.dbeta, "dbeta"}});
}

template BnProblem BnFwdTrain::describe(const Descs &, const BnArgs *);
template BnProblem BnFwdInfer::describe(const Descs &, const BnArgs *);
template BnProblem BnBwd::describe(const Descs &, const BnArgs *);

// SyncBatchNorm's rank without samples neither writes nor reads a mask.
template <BnPass P>
void BnOp<P>::check_reserve(size_t need, const BnProblem &pb, const BnArgs &a) {
  if (need == 0 || pb.local_empty) return;
  FNORM_REQUIRE(a.reserve != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument 'reserve' is NULL; epilogue %d needs %zu bytes of reserve space (the "
                "ReLU mask)", static_cast<int>(pb.epilogue), need);
  FNORM_REQUIRE(a.reserve_bytes >= need, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
                "argument 'reserve_bytes' is %zu; the reserve space needs %zu bytes",
                a.reserve_bytes, need);
  FNORM_REQUIRE(is_aligned(a.reserve, 16), FNORM_STATUS_BAD_PARAM,
                "argument 'reserve' (%p) is not 16-byte aligned", a.reserve);
}

template void BnFwdTrain::check_reserve(size_t, const BnProblem &, const BnArgs &);
template void BnFwdInfer::check_reserve(size_t, const BnProblem &, const BnArgs &);
template void BnBwd::check_reserve(size_t, const BnProblem &, const BnArgs &);

}  // namespace fnorm
