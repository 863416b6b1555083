/* SPDX-License-Identifier: Apache-2.0 */
// The object behind fnorm_handle_t: the device it is bound to, that device's
// properties, the tuning read at its creation, the occupancy cache, and one
// opaque slot per op for what an op creates on first use (a cuBLASLt or
// cuDNN handle). Core knows no op: an op's state derives from OpState and
// finds its slot through op_state<T>().
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.hpp"
#include "core/launch.hpp"
#include "core/tuning.hpp"

namespace fnorm {

// Makes the handle's device current for its lifetime, then restores the
// caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// Kernel occupancy per (kernel, block, dynamic shared memory), asked of the
// driver once per handle (core/occupancy.cpp). Only planning asks it.
class OccupancyCache {
 public:
  cudaError_t occupancy(const void *func, int block, size_t smem, int *blocks_per_sm);

 private:
  std::mutex mutex_;
  std::map<std::tuple<const void *, int, size_t>, int> blocks_per_sm_;
};

// What an op keeps on a handle (destroyed with it).
class OpState {
 public:
  virtual ~OpState() = default;
};

// The handle's op slots: created once, under a lock; read without one.
class OpStates {
 public:
  static constexpr int kSlots = 8;
  OpStates() = default;
  OpStates(const OpStates &) = delete;
  OpStates &operator=(const OpStates &) = delete;
  ~OpStates() {
    for (auto &s : slots_) delete s.load(std::memory_order_acquire);
  }
  OpState *find(int slot) const { return slots_[slot].load(std::memory_order_acquire); }
  // The state in `slot`, made by make() (which returns a new OpState
  // subclass or throws) when there is none yet.
  template <class Make>
  OpState &get(int slot, Make &&make) {
    if (OpState *s = find(slot)) return *s;
    std::lock_guard<std::mutex> lock(mutex_);
    if (OpState *s = find(slot)) return *s;
    OpState *made = make();
    slots_[slot].store(made, std::memory_order_release);
    return *made;
  }

 private:
  std::mutex mutex_;
  std::atomic<OpState *> slots_[kSlots] = {};
};

// A slot number per op state type, handed out on first use.
int next_op_state_slot();
template <class T>
int op_state_slot() {
  static const int slot = next_op_state_slot();
  return slot;
}

}  // namespace fnorm

struct fnorm_handle {
  int device = 0;
  // Unique in the process (never reused, unlike the address): what the plan
  // caches key a handle by.
  uint64_t id = 0;
  fnorm::DeviceInfo info;
  fnorm::Tuning tuning;
  fnorm::OccupancyCache occupancy;
  fnorm::OpStates states;
  fnorm_handle();
};

namespace fnorm {

// The caller's stream as CUDA's type (fnorm.h forward-declares CUstream_st).
inline cudaStream_t cuda_stream(fnorm_stream_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

// What planning needs from the handle.
inline DeviceContext device_context(fnorm_handle *h) { return DeviceContext{h->info, &h->occupancy}; }

// The op state T of the handle, created by make() on first use.
template <class T, class Make>
T &op_state(fnorm_handle *h, Make &&make) {
  return static_cast<T &>(h->states.get(op_state_slot<T>(), make));
}
// The op state T if it exists (never creates it).
template <class T>
T *find_op_state(const fnorm_handle *h) {
  return static_cast<T *>(h->states.find(op_state_slot<T>()));
}

}  // namespace fnorm
