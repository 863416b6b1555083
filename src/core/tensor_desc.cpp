/* SPDX-License-Identifier: Apache-2.0 */
// The tensor descriptor API (fnorm_tensor_desc_*), used by every op.
#include "core/error.hpp"
#include "core/tensor.hpp"

extern "C" {

FNORM_API fnorm_status_t fnorm_tensor_desc_create(fnorm_tensor_desc_t *desc) {
  return fnorm::create_object(__func__, desc);
}

FNORM_API fnorm_status_t fnorm_tensor_desc_destroy(fnorm_tensor_desc_t desc) { return fnorm::destroy_object(desc); }

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
    // A size may be 0 (an empty tensor). The product of the other sizes
    // must still fit in int64, so that every partial product an op forms
    // from them does.
    int64_t nonzero = 1;
    for (int32_t i = 0; i < rank; ++i) {
      FNORM_REQUIRE(dims[i] >= 0, FNORM_STATUS_BAD_PARAM,
                    "argument 'dims[%d]' is %lld; sizes must be >= 0", i,
                    static_cast<long long>(dims[i]));
      if (dims[i] > 0) {
        FNORM_REQUIRE(nonzero <= INT64_MAX / dims[i], FNORM_STATUS_BAD_PARAM,
                      "argument 'dims': the element count overflows int64 at dims[%d] = %lld", i,
                      static_cast<long long>(dims[i]));
        nonzero *= dims[i];
      }
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
      // Packed row-major; a size-0 dimension strides as a size-1 one (as
      // PyTorch's contiguous strides do).
      int64_t s = 1;
      for (int32_t i = rank - 1; i >= 0; --i) {
        d.strides[i] = s;
        s *= d.dims[i] > 0 ? d.dims[i] : 1;
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

}  // extern "C"
