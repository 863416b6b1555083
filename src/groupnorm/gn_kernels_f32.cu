/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's kernels for f32: every pack x layout x pass (gn_kernels.cuh).
#include "groupnorm/gn_kernels.cuh"

namespace fnorm {

extern const GnInstance kGnInstances_f32[] = {
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 4, false, false),
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 4, false, true),
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 4, true, false),
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 4, true, true),
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 1, false, false),
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 1, false, true),
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 1, true, false),
    FNORM_GN_INSTANCE(float, FNORM_DTYPE_FLOAT32, 1, true, true),
};
extern const int kGnInstanceCount_f32 = sizeof(kGnInstances_f32) / sizeof(kGnInstances_f32[0]);

}  // namespace fnorm
