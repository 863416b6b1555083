/* SPDX-License-Identifier: Apache-2.0 */
// The fully-connected layer's entry points in a build without cuBLASLt:
// every one exists and says why it cannot work.
#include "linear/linear.hpp"

#if !FNORM_HAVE_CUBLASLT

namespace {
fnorm_status_t not_built(const char *func) {
  fnorm::set_last_error(std::string(func) +
                        ": the library was built without cuBLASLt (meson found no cublasLt.h / libcublasLt.so); "
                        "the fully-connected layer needs it");
  return FNORM_STATUS_NOT_SUPPORTED_BUILD;
}
}  // namespace

extern "C" {

FNORM_API fnorm_status_t fnorm_linear_desc_create(fnorm_linear_desc_t *) { return not_built(__func__); }
FNORM_API fnorm_status_t fnorm_linear_desc_destroy(fnorm_linear_desc_t desc) {
  delete desc;
  return FNORM_STATUS_SUCCESS;
}
FNORM_API fnorm_status_t fnorm_linear_desc_set(fnorm_linear_desc_t, fnorm_linear_epilogue_t,
                                               fnorm_linear_weight_layout_t, uint32_t) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_desc_get(fnorm_linear_desc_t, fnorm_linear_epilogue_t *,
                                               fnorm_linear_weight_layout_t *, uint32_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_aux_size(fnorm_handle_t, fnorm_linear_desc_t, fnorm_tensor_desc_t, size_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_fwd_workspace_size(fnorm_handle_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                                         fnorm_tensor_desc_t, fnorm_tensor_desc_t, size_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_fwd(fnorm_handle_t, fnorm_stream_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                          const void *, fnorm_tensor_desc_t, const void *, const void *,
                                          fnorm_tensor_desc_t, void *, void *, size_t, void *, size_t) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_bwd_workspace_size(fnorm_handle_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                                         fnorm_tensor_desc_t, fnorm_tensor_desc_t,
                                                         fnorm_linear_desc_t, size_t *) {
  return not_built(__func__);
}
FNORM_API fnorm_status_t fnorm_linear_bwd(fnorm_handle_t, fnorm_stream_t, fnorm_linear_desc_t, fnorm_tensor_desc_t,
                                          const void *, fnorm_tensor_desc_t, const void *, fnorm_tensor_desc_t,
                                          const void *, const void *, size_t, fnorm_linear_desc_t, const void *,
                                          size_t, fnorm_tensor_desc_t, void *, void *, void *, void *, void *,
                                          size_t) {
  return not_built(__func__);
}

}  // extern "C"

#endif  // FNORM_HAVE_CUBLASLT
