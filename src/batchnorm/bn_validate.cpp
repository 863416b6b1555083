// BatchNorm validation: tensor descriptors -> BnView (layout), and the checks
// of a call's pointers and sizes. Built on core/validate.hpp.
#include <algorithm>
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

}  // namespace

void bn_check_desc(const fnorm_batchnorm_desc *bn) {
  FNORM_REQUIRE(bn != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'bn' is NULL");
}

BnView bn_view(const fnorm_tensor_desc *d, const char *arg) {
  FNORM_REQUIRE(d != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
  FNORM_REQUIRE(d->is_set, FNORM_STATUS_BAD_PARAM, "argument '%s' was never set", arg);
  FNORM_REQUIRE(d->rank >= 2, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' has rank %d; BatchNorm needs [N, C, spatial...] (rank >= 2)", arg,
                d->rank);
  BnView v;
  v.dtype = d->dtype;
  v.rank = d->rank;
  std::copy(d->dims, d->dims + d->rank, v.dims);
  v.n = d->dims[0];
  v.c = d->dims[1];
  for (int32_t i = 2; i < d->rank; ++i) v.spatial *= d->dims[i];
  // (fnorm_tensor_desc_set keeps N * C * spatial within int64.)
  v.bytes = checked_mul(static_cast<size_t>(v.n * v.c * v.spatial), dtype_size(v.dtype), arg);
  v.vec_bytes = checked_mul(static_cast<size_t>(v.c), sizeof(float), arg);
  int32_t nchw[FNORM_MAX_RANK], nhwc[FNORM_MAX_RANK];
  for (int32_t i = 0; i < d->rank; ++i) nchw[i] = i;
  nhwc[0] = 0;  // N, spatial..., C (fastest)
  for (int32_t i = 2; i < d->rank; ++i) nhwc[i - 1] = i;
  nhwc[d->rank - 1] = 1;
  const bool cf = strides_match(d, nchw), cl = strides_match(d, nhwc);
  if (v.spatial == 1 && (cf || cl)) {
    v.channels_last = true;
    v.shape = BnShape{v.n, v.c, 1, v.c};
  } else if (cf) {
    v.shape = BnShape{v.n, v.c * v.spatial, v.spatial, v.c};
  } else if (cl) {
    v.channels_last = true;
    v.shape = BnShape{v.n * v.spatial, v.c, 1, v.c};
  } else {
    std::string s;
    for (int32_t i = 0; i < d->rank; ++i)
      s += (i ? "," : "") + std::to_string(static_cast<long long>(d->strides[i]));
    fail(FNORM_STATUS_NOT_SUPPORTED,
         "argument '%s': strides [%s] are neither packed channels-first (NCHW) nor packed "
         "channels-last (NHWC)", arg, s.c_str());
  }
  return v;
}

void bn_require_same(const BnView &x, const fnorm_tensor_desc *other, const char *arg) {
  const BnView o = bn_view(other, arg);
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

namespace {
void require_vec_aligned(const void *p, const char *name) {
  FNORM_REQUIRE(is_aligned(p, 4), FNORM_STATUS_BAD_PARAM,
                "argument '%s' (%p) is not 4-byte aligned (fp32 per-channel vector)", name, p);
}

}  // namespace

void check_workspace(fnorm_handle *h, const BnCall &c) {
  require_workspace(c.workspace, c.workspace_bytes, workspace_for(h, c), "the size query", 16);
}

void check_reserve(fnorm_handle *h, const BnCall &c) {
  const size_t need = reserve_for(h, c);
  if (need == 0) return;
  FNORM_REQUIRE(c.reserve != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument 'reserve' is NULL; epilogue %d needs %zu bytes of reserve space (the "
                "ReLU mask)", static_cast<int>(c.desc->epilogue), need);
  FNORM_REQUIRE(c.reserve_bytes >= need, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
                "argument 'reserve_bytes' is %zu; the reserve space needs %zu bytes",
                c.reserve_bytes, need);
  FNORM_REQUIRE(is_aligned(c.reserve, 16), FNORM_STATUS_BAD_PARAM,
                "argument 'reserve' (%p) is not 16-byte aligned", c.reserve);
}

// Checks shared by the launches.
void require_training_count(const BnCall &c) {
  // (SyncBatchNorm: the count that matters is the global one, which the host
  // does not see.)
  FNORM_REQUIRE(c.desc->comm != nullptr || c.view.per_channel() > 1, FNORM_STATUS_BAD_PARAM,
                "argument 'x_desc': training needs more than one value per channel (N * "
                "spatial = %lld)", static_cast<long long>(c.view.per_channel()));
}

void require_vecs_aligned(std::initializer_list<std::pair<const float *, const char *>> vecs) {
  for (const auto &v : vecs) require_vec_aligned(v.first, v.second);
}

// z is given exactly when the epilogue adds it (and the rank has samples).
void require_addend(const fnorm_batchnorm_desc *bn, const void *z, bool local_empty) {
  const bool add = bn->epilogue == FNORM_BN_EPILOGUE_ADD_RELU && !local_empty;
  FNORM_REQUIRE(add == (z != nullptr), add ? FNORM_STATUS_BAD_PARAM_NULL_POINTER : FNORM_STATUS_BAD_PARAM,
                add ? "argument 'z' is NULL; the ADD_RELU epilogue adds it"
                    : "argument 'z' is given but the epilogue is not ADD_RELU");
}

}  // namespace fnorm
