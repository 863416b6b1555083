/* SPDX-License-Identifier: Apache-2.0 */
// The object behind fnorm_tensor_desc_t (core/tensor_desc.cpp).
#pragma once

#include <cstdint>

#include "fusednorm.h"

struct fnorm_tensor_desc {
  bool is_set = false;
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  int32_t rank = 0;
  int64_t dims[FNORM_MAX_RANK] = {};
  int64_t strides[FNORM_MAX_RANK] = {};
};
