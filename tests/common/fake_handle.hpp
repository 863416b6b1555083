/* SPDX-License-Identifier: Apache-2.0 */
// A handle that needs no GPU, for the host API tests: validation and size
// queries happen before any device work. Shaped like one H100/H200.
// Including this header also gives a white-box test every op's internal
// header (core, norm, batchnorm, linear).
#pragma once

#include "batchnorm/batchnorm.hpp"
#include "core/handle.hpp"
#include "linear/linear_kernels.hpp"
#include "norm/norm.hpp"

inline fnorm_handle *fake_handle() {
  static fnorm_handle fake;
  fake.device = 0;
  fake.info.sm_count = 132;
  fake.info.max_smem_optin = 227 * 1024;
  fake.info.max_threads_per_sm = 2048;
  return &fake;
}
