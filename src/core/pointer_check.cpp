/* SPDX-License-Identifier: Apache-2.0 */
#include "core/pointer_check.hpp"

#include <cuda.h>


namespace fnorm {

namespace {

// cuMemGetAddressRange through the runtime's driver entry point (the library
// links only cudart); null when the driver does not offer it.
using AddressRangeFn = CUresult (*)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
AddressRangeFn address_range_fn() {
  static const AddressRangeFn fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<AddressRangeFn>(nullptr);
    }
    return reinterpret_cast<AddressRangeFn>(p);
  }();
  return fn;
}

const char *type_name(cudaMemoryType t) {
  switch (t) {
    case cudaMemoryTypeUnregistered: return "pageable host memory (malloc / new)";
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeDevice: return "device memory";
    case cudaMemoryTypeManaged: return "managed memory";
  }
  return "unknown memory";
}

void require_one(const fnorm_handle *h, const Buffer &s) {
  cudaPointerAttributes a{};
  const cudaError_t err = cudaPointerGetAttributes(&a, s.ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail(FNORM_STATUS_BAD_PARAM, "argument '%s' (%p): checked mode: CUDA cannot tell what memory this is (%s)",
         s.name, s.ptr, cudaGetErrorName(err));
  }
  const bool accessible = a.type == cudaMemoryTypeManaged ||
                          (a.type == cudaMemoryTypeDevice && a.device == h->device) ||
                          (a.type == cudaMemoryTypeHost && a.devicePointer == s.ptr);
  FNORM_REQUIRE(accessible, FNORM_STATUS_BAD_PARAM,
                "argument '%s' (%p) is %s%s, not memory the handle's device %d can access (checked mode; "
                "unchecked, the kernel would fault)",
                s.name, s.ptr, type_name(a.type),
                a.type == cudaMemoryTypeDevice ? format(" of device %d", a.device).c_str() : "", h->device);
  const AddressRangeFn range = address_range_fn();
  if (range == nullptr || s.bytes == 0) return;
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUdeviceptr p = reinterpret_cast<CUdeviceptr>(s.ptr);
  if (range(&base, &size, p) != CUDA_SUCCESS) return;  // e.g. host memory: the extent is unknown
  const size_t holds = base + size - p;
  FNORM_REQUIRE(s.bytes <= holds, FNORM_STATUS_BAD_PARAM,
                "argument '%s' (%p): its allocation holds %zu bytes from this pointer on, but the call needs %llu "
                "(checked mode)",
                s.name, s.ptr, holds, static_cast<unsigned long long>(s.bytes));
}

}  // namespace

void require_device_memory(const fnorm_handle *h, const CallBuffers &buffers) {
  if (!h->tuning.check_pointers) return;
  for (const Buffer &s : buffers)
    if (s.ptr != nullptr && s.bytes != 0) require_one(h, s);
}

}  // namespace fnorm
