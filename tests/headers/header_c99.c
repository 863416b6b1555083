/* SPDX-License-Identifier: Apache-2.0 */
/* The public header compiles alone as strict C99 with warnings as errors. */
#include "fusednorm.h"

/* Fixed values of the ABI (C99 has no static_assert). */
typedef char check_success[FNORM_STATUS_SUCCESS == 0 ? 1 : -1];
typedef char check_bad_param[FNORM_STATUS_BAD_PARAM == 1000 ? 1 : -1];
typedef char check_dtype[FNORM_DTYPE_BFLOAT16 == 2 ? 1 : -1];
typedef char check_rank[FNORM_MAX_RANK == 8 ? 1 : -1];

int main(void) {
  fnorm_handle_t h = 0;
  fnorm_stream_t s = 0;
  (void)h;
  (void)s;
  return fnorm_get_version() == FNORM_VERSION ? 0 : 1;
}
