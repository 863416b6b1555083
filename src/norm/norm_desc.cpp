/* SPDX-License-Identifier: Apache-2.0 */
// The normalization descriptor API (fnorm_norm_desc_*).
#include <cfloat>
#include <cmath>

#include "norm/norm.hpp"

extern "C" {

FNORM_API fnorm_status_t fnorm_norm_desc_create(fnorm_norm_desc_t *desc) {
  return fnorm::create_object(__func__, desc);
}

FNORM_API fnorm_status_t fnorm_norm_desc_destroy(fnorm_norm_desc_t desc) { return fnorm::destroy_object(desc); }

FNORM_API fnorm_status_t fnorm_norm_desc_set(fnorm_norm_desc_t desc, fnorm_norm_mode_t mode,
                                             int32_t begin_norm_axis, double epsilon) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(mode == FNORM_NORM_LAYERNORM || mode == FNORM_NORM_RMSNORM,
                  FNORM_STATUS_BAD_PARAM, "argument 'mode' has unknown value %d",
                  static_cast<int>(mode));
    FNORM_REQUIRE(std::isfinite(epsilon) && epsilon >= 0.0, FNORM_STATUS_BAD_PARAM,
                  "argument 'epsilon' is %g; it must be finite and >= 0", epsilon);
    // The kernels add epsilon in fp32: the header promises the refusal here,
    // not at the first size query or launch.
    FNORM_REQUIRE(epsilon <= FLT_MAX, FNORM_STATUS_BAD_PARAM,
                  "argument 'epsilon' is %g; it is not representable in fp32 (max %g)", epsilon,
                  static_cast<double>(FLT_MAX));
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
    const uint32_t known = FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA | FNORM_NORM_FLAG_ROUND_XHAT;
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
