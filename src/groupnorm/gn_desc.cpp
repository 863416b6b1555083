/* SPDX-License-Identifier: Apache-2.0 */
// The GroupNorm descriptor API (fnorm_groupnorm_desc_*).
#include <cmath>
#include <cfloat>

#include "groupnorm/groupnorm.hpp"

extern "C" {

FNORM_API fnorm_status_t fnorm_groupnorm_desc_create(fnorm_groupnorm_desc_t *desc) {
  return fnorm::create_object(__func__, desc);
}

FNORM_API fnorm_status_t fnorm_groupnorm_desc_destroy(fnorm_groupnorm_desc_t desc) {
  return fnorm::destroy_object(desc);
}

FNORM_API fnorm_status_t fnorm_groupnorm_desc_set(fnorm_groupnorm_desc_t desc, int64_t groups, double epsilon,
                                                  fnorm_gn_activation_t activation) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(groups >= 1, FNORM_STATUS_BAD_PARAM, "argument 'groups' is %lld; it must be >= 1",
                  static_cast<long long>(groups));
    FNORM_REQUIRE(std::isfinite(epsilon) && epsilon >= 0.0 && epsilon <= FLT_MAX, FNORM_STATUS_BAD_PARAM,
                  "argument 'epsilon' is %g; it must be finite, >= 0 and representable in fp32", epsilon);
    FNORM_REQUIRE(activation == FNORM_GN_ACTIVATION_NONE || activation == FNORM_GN_ACTIVATION_SILU,
                  FNORM_STATUS_BAD_PARAM, "argument 'activation' has unknown value %d",
                  static_cast<int>(activation));
    desc->groups = groups;
    desc->epsilon = epsilon;
    desc->activation = activation;
  });
}

FNORM_API fnorm_status_t fnorm_groupnorm_desc_get(fnorm_groupnorm_desc_t desc, int64_t *groups, double *epsilon,
                                                  fnorm_gn_activation_t *activation) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (groups) *groups = desc->groups;
    if (epsilon) *epsilon = desc->epsilon;
    if (activation) *activation = desc->activation;
  });
}

}  // extern "C"
