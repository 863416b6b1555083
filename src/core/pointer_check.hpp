/* SPDX-License-Identifier: Apache-2.0 */
// Checked mode: with FNORM_CHECK_POINTERS=1 in the environment when the
// handle is created, every launch asks CUDA about each pointer it was given
// before enqueuing anything (api/fusednorm.h, fnorm_create).
#pragma once

#include "core/handle.hpp"
#include "core/validate.hpp"

namespace fnorm {

// In checked mode (h->tuning.check_pointers), each non-NULL buffer must be memory the
// handle's device can access (device memory of that device, managed memory,
// or mapped pinned host memory), and where CUDA can tell the allocation's
// extent (cuMemGetAddressRange), hold `bytes` from the pointer on. BAD_PARAM
// naming the argument otherwise. Outside checked mode: nothing (a host
// pointer then faults in the kernel).
void require_device_memory(const fnorm_handle *h, const CallBuffers &buffers);

}  // namespace fnorm
