/* SPDX-License-Identifier: Apache-2.0 */
// fnorm_stream_t converts from cudaStream_t with no cast.
#include <cuda_runtime_api.h>

#include "fusednorm.h"

#include <type_traits>

static_assert(std::is_same<fnorm_stream_t, cudaStream_t>::value, "fnorm_stream_t is cudaStream_t");

int main() { return 0; }
