/* SPDX-License-Identifier: Apache-2.0 */
// The public header compiles alone as C++ with warnings as errors, and its
// stream type is what cudaStream_t points to.
#include "fusednorm.h"

#include <type_traits>

static_assert(std::is_pointer<fnorm_stream_t>::value, "stream is a pointer");
static_assert(sizeof(fnorm_status_t) == sizeof(int), "status is an int-sized enum");

int main() { return fnorm_get_version() == FNORM_VERSION ? 0 : 1; }
