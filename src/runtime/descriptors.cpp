#include <cmath>
#include <memory>

#include "internal.hpp"

namespace fnorm {

int32_t resolve_axis(int32_t axis, int32_t rank, const char *arg) {
  const int32_t a = axis < 0 ? axis + rank : axis;
  FNORM_REQUIRE(a >= 0 && a < rank, FNORM_STATUS_BAD_PARAM,
                "%s %d is out of range for a tensor of rank %d (valid: %d..%d)", arg, axis, rank,
                -rank, rank - 1);
  return a;
}

}  // namespace fnorm

extern "C" {

FNORM_API fnorm_status_t fnorm_tensor_desc_create(fnorm_tensor_desc_t *desc) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    *desc = new fnorm_tensor_desc();
  });
}

FNORM_API fnorm_status_t fnorm_tensor_desc_destroy(fnorm_tensor_desc_t desc) {
  delete desc;
  return FNORM_STATUS_SUCCESS;
}

FNORM_API fnorm_status_t fnorm_tensor_desc_set(fnorm_tensor_desc_t desc, fnorm_dtype_t dtype,
                                               int32_t rank, const int64_t *dims,
                                               const int64_t *strides) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(fnorm::dtype_size(dtype) != 0, FNORM_STATUS_BAD_PARAM,
                  "argument 'dtype' has unknown value %d", static_cast<int>(dtype));
    FNORM_REQUIRE(rank >= 1 && rank <= FNORM_MAX_RANK, FNORM_STATUS_BAD_PARAM,
                  "argument 'rank' is %d; it must be in 1..%d", rank, FNORM_MAX_RANK);
    FNORM_REQUIRE_NOT_NULL(dims);
    fnorm_tensor_desc d;
    d.dtype = dtype;
    d.rank = rank;
    int64_t elements = 1;
    for (int32_t i = 0; i < rank; ++i) {
      FNORM_REQUIRE(dims[i] >= 1, FNORM_STATUS_BAD_PARAM,
                    "argument 'dims[%d]' is %lld; sizes must be >= 1", i,
                    static_cast<long long>(dims[i]));
      FNORM_REQUIRE(elements <= INT64_MAX / dims[i], FNORM_STATUS_BAD_PARAM,
                    "argument 'dims': the element count overflows int64 at dims[%d] = %lld", i,
                    static_cast<long long>(dims[i]));
      elements *= dims[i];
      d.dims[i] = dims[i];
    }
    if (strides != nullptr) {
      for (int32_t i = 0; i < rank; ++i) {
        FNORM_REQUIRE(strides[i] >= 1, FNORM_STATUS_BAD_PARAM,
                      "argument 'strides[%d]' is %lld; strides must be >= 1", i,
                      static_cast<long long>(strides[i]));
        d.strides[i] = strides[i];
      }
    } else {
      int64_t s = 1;
      for (int32_t i = rank - 1; i >= 0; --i) {
        d.strides[i] = s;
        s *= d.dims[i];
      }
    }
    d.is_set = true;
    *desc = d;
  });
}

FNORM_API fnorm_status_t fnorm_tensor_desc_get(fnorm_tensor_desc_t desc, fnorm_dtype_t *dtype,
                                               int32_t *rank, int64_t *dims, int64_t *strides,
                                               int32_t max_rank) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(desc->is_set, FNORM_STATUS_BAD_PARAM,
                  "argument 'desc' was never set (call fnorm_tensor_desc_set first)");
    FNORM_REQUIRE(max_rank >= 0, FNORM_STATUS_BAD_PARAM, "argument 'max_rank' is %d (< 0)",
                  max_rank);
    if (dtype != nullptr) *dtype = desc->dtype;
    if (rank != nullptr) *rank = desc->rank;
    const int32_t n = desc->rank < max_rank ? desc->rank : max_rank;
    for (int32_t i = 0; i < n; ++i) {
      if (dims != nullptr) dims[i] = desc->dims[i];
      if (strides != nullptr) strides[i] = desc->strides[i];
    }
  });
}

FNORM_API fnorm_status_t fnorm_tensor_desc_get_elements(fnorm_tensor_desc_t desc,
                                                        int64_t *elements) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE_NOT_NULL(elements);
    FNORM_REQUIRE(desc->is_set, FNORM_STATUS_BAD_PARAM,
                  "argument 'desc' was never set (call fnorm_tensor_desc_set first)");
    int64_t n = 1;
    for (int32_t i = 0; i < desc->rank; ++i) n *= desc->dims[i];
    *elements = n;
  });
}

FNORM_API fnorm_status_t fnorm_norm_desc_create(fnorm_norm_desc_t *desc) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    *desc = new fnorm_norm_desc();
  });
}

FNORM_API fnorm_status_t fnorm_norm_desc_destroy(fnorm_norm_desc_t desc) {
  delete desc;
  return FNORM_STATUS_SUCCESS;
}

FNORM_API fnorm_status_t fnorm_norm_desc_set(fnorm_norm_desc_t desc, fnorm_norm_mode_t mode,
                                             int32_t begin_norm_axis, double epsilon) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(mode == FNORM_NORM_LAYERNORM || mode == FNORM_NORM_RMSNORM,
                  FNORM_STATUS_BAD_PARAM, "argument 'mode' has unknown value %d",
                  static_cast<int>(mode));
    FNORM_REQUIRE(std::isfinite(epsilon) && epsilon >= 0.0, FNORM_STATUS_BAD_PARAM,
                  "argument 'epsilon' is %g; it must be finite and >= 0", epsilon);
    FNORM_REQUIRE(begin_norm_axis >= -FNORM_MAX_RANK && begin_norm_axis < FNORM_MAX_RANK,
                  FNORM_STATUS_BAD_PARAM,
                  "argument 'begin_norm_axis' is %d; it must be in %d..%d", begin_norm_axis,
                  -FNORM_MAX_RANK, FNORM_MAX_RANK - 1);
    desc->mode = mode;
    desc->begin_norm_axis = begin_norm_axis;
    desc->epsilon = epsilon;
  });
}

FNORM_API fnorm_status_t fnorm_norm_desc_set_flags(fnorm_norm_desc_t desc, uint32_t flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    const uint32_t known = FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA;
    FNORM_REQUIRE((flags & ~known) == 0, FNORM_STATUS_BAD_PARAM,
                  "argument 'flags' has unknown bits 0x%x", flags & ~known);
    desc->flags = flags;
  });
}

FNORM_API fnorm_status_t fnorm_norm_desc_get_flags(fnorm_norm_desc_t desc, uint32_t *flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE_NOT_NULL(flags);
    *flags = desc->flags;
  });
}

FNORM_API fnorm_status_t fnorm_norm_desc_get(fnorm_norm_desc_t desc, fnorm_norm_mode_t *mode,
                                             int32_t *begin_norm_axis, double *epsilon) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (mode != nullptr) *mode = desc->mode;
    if (begin_norm_axis != nullptr) *begin_norm_axis = desc->begin_norm_axis;
    if (epsilon != nullptr) *epsilon = desc->epsilon;
  });
}

}  // extern "C"
