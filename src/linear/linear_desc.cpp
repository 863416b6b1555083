/* SPDX-License-Identifier: Apache-2.0 */
// The fully-connected layer's descriptor API and aux size query.
#include "linear/linear.hpp"

#if FNORM_HAVE_CUBLASLT

extern "C" {

FNORM_API fnorm_status_t fnorm_linear_desc_create(fnorm_linear_desc_t *desc) {
  return fnorm::create_object(__func__, desc);
}

FNORM_API fnorm_status_t fnorm_linear_desc_destroy(fnorm_linear_desc_t desc) { return fnorm::destroy_object(desc); }

FNORM_API fnorm_status_t fnorm_linear_desc_set(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t epilogue,
                                               fnorm_linear_weight_layout_t weight_layout, uint32_t flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(epilogue >= FNORM_LINEAR_EPILOGUE_NONE && epilogue <= FNORM_LINEAR_EPILOGUE_BIAS_GELU,
                  FNORM_STATUS_BAD_PARAM, "argument 'epilogue' has unknown value %d", static_cast<int>(epilogue));
    FNORM_REQUIRE(weight_layout == FNORM_LINEAR_WEIGHT_KN || weight_layout == FNORM_LINEAR_WEIGHT_NK,
                  FNORM_STATUS_BAD_PARAM, "argument 'weight_layout' has unknown value %d",
                  static_cast<int>(weight_layout));
    const uint32_t known = FNORM_LINEAR_FLAG_ALLOW_TF32;
    FNORM_REQUIRE((flags & ~known) == 0, FNORM_STATUS_BAD_PARAM, "argument 'flags' has unknown bits 0x%x",
                  flags & ~known);
    desc->epilogue = epilogue;
    desc->layout = weight_layout;
    desc->flags = flags;
  });
}

FNORM_API fnorm_status_t fnorm_linear_desc_get(fnorm_linear_desc_t desc, fnorm_linear_epilogue_t *epilogue,
                                               fnorm_linear_weight_layout_t *weight_layout, uint32_t *flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (epilogue != nullptr) *epilogue = desc->epilogue;
    if (weight_layout != nullptr) *weight_layout = desc->layout;
    if (flags != nullptr) *flags = desc->flags;
  });
}

FNORM_API fnorm_status_t fnorm_linear_aux_size(fnorm_handle_t handle, fnorm_linear_desc_t desc,
                                               fnorm_tensor_desc_t y_desc, size_t *aux_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    FNORM_REQUIRE_NOT_NULL(handle);
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE_NOT_NULL(aux_bytes);
    const fnorm_tensor_desc &y = require_set(y_desc, "y_desc");
    int64_t rows = 1;
    for (int32_t i = 0; i + 1 < y.rank; ++i) rows *= y.dims[i];
    *aux_bytes = aux_bytes_for(act_of(desc->epilogue), y.dtype, rows, y.dims[y.rank - 1], "y_desc");
  });
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
