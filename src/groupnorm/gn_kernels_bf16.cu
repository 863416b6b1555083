/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's kernels for bf16: every pack x layout x pass (gn_kernels.cuh).
#include "groupnorm/gn_kernels.cuh"

namespace fnorm {

extern const GnInstance kGnInstances_bf16[] = {
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 8, false, false),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 8, false, true),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 8, true, false),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 8, true, true),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 4, false, false),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 4, false, true),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 4, true, false),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 4, true, true),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 1, false, false),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 1, false, true),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 1, true, false),
    FNORM_GN_INSTANCE(__nv_bfloat16, FNORM_DTYPE_BFLOAT16, 1, true, true),
};
extern const int kGnInstanceCount_bf16 = sizeof(kGnInstances_bf16) / sizeof(kGnInstances_bf16[0]);

}  // namespace fnorm
