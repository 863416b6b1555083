// A handle that needs no GPU, for the host API tests: validation and size
// queries happen before any device work. Shaped like one H100/H200.
#pragma once

#include "internal.hpp"

inline fnorm_handle *fake_handle() {
  static fnorm_handle fake;
  fake.device = 0;
  fake.info.sm_count = 132;
  fake.info.max_smem_optin = 227 * 1024;
  fake.info.max_threads_per_sm = 2048;
  return &fake;
}
