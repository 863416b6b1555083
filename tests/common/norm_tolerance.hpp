/* SPDX-License-Identifier: Apache-2.0 */
// The LayerNorm / RMSNorm GPU tests' tolerance per output dtype (see
// reference.hpp's Tolerance: |got - ref| <= atol + rtol * |ref|).
#pragma once

#include "fusednorm.h"
#include "reference.hpp"

namespace fnorm_test {

inline Tolerance norm_tolerance(fnorm_dtype_t t) {
  switch (t) {
    case FNORM_DTYPE_FLOAT32: return {5e-5, 5e-5};
    case FNORM_DTYPE_FLOAT16: return {1e-3, 1e-3};
    default: return {8e-3, 8e-3};
  }
}

}  // namespace fnorm_test
