/* SPDX-License-Identifier: Apache-2.0 */
// The contract every op follows (norm/, batchnorm/, linear/), in three steps
// with the same names everywhere:
//
//   describe  the call's descriptors -> a Desc: validated, pointer-free
//             (shapes, strides, input and output dtypes, flags, which
//             optional tensors are present). An output dtype other than the
//             input's is one more field, not another path.
//   plan      (Desc, what the pointers allow, device) -> a Plan: everything
//             the launch needs (kernel instance, packs, launch shapes,
//             workspace layout). A pure function of its inputs; the size
//             queries answer from it alone, so they cannot disagree with the
//             launch.
//   launch    (Plan, Args, stream): the call's pointers in one named struct
//             per call; enqueues the planned kernels and decides nothing.
//
// Between describe and launch every entry point checks its Args the same
// way: required pointers, the overlap rule over all of the call's buffers
// (core/validate.hpp: require_no_overlap), the workspace, checked mode. A
// call over tensors with no elements stops there: it enqueues nothing but
// the zeros of outputs that are sums over no elements (api/fusednorm.h).
//
// Plans are cached per (handle, Desc + pointer class) in a small cache per
// thread (PlanCache): a repeated call describes and validates, but plans
// nothing and takes no lock.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fnorm {

// A cache of plans keyed by (handle id, Key), one per thread and op: lookups
// need no lock, and a thread's entries are its own. Key must have no padding
// (compared and hashed as bytes); Plan must be trivially copyable. Entries
// of a destroyed handle are never hit again (handle ids are not reused) and
// age out as others replace them.
template <class Key, class Plan, int N = 16>
class PlanCache {
  static_assert(std::has_unique_object_representations_v<Key>, "keys are compared as bytes: no padding");
  static_assert(std::is_trivially_copyable_v<Plan>, "plans are copied into the cache");

 public:
  // The cached plan of (handle, key), or null.
  static const Plan *find(uint64_t handle, const Key &key, uint64_t hash) {
    Slots &s = slots();
    for (int i = 0; i < N; ++i) {
      const Entry &e = s.entry[i];
      if (e.hash == hash && e.handle == handle && std::memcmp(&e.key, &key, sizeof(Key)) == 0) return &e.plan;
    }
    return nullptr;
  }
  // Remembers a plan (replacing the oldest entry) and returns the copy kept.
  static const Plan &insert(uint64_t handle, const Key &key, uint64_t hash, const Plan &plan) {
    Slots &s = slots();
    Entry &e = s.entry[s.next];
    s.next = (s.next + 1) % N;
    e.handle = handle;
    e.hash = hash;
    e.key = key;
    e.plan = plan;
    return e.plan;
  }
  // The plan of (handle, key): cached, or made by make() and cached.
  template <class Make>
  static const Plan &get(uint64_t handle, const Key &key, Make &&make) {
    const uint64_t hash = hash_bytes(&key, sizeof(Key));
    if (const Plan *p = find(handle, key, hash)) return *p;
    return insert(handle, key, hash, make());
  }

  static uint64_t hash_bytes(const void *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over 64-bit words
    const unsigned char *b = static_cast<const unsigned char *>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, b + i, 8);
      h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
    return h | 1;  // 0 marks an empty entry
  }

 private:
  struct Entry {
    uint64_t handle = 0;
    uint64_t hash = 0;
    Key key;
    Plan plan;
  };
  struct Slots {
    Entry entry[N];
    int next = 0;
  };
  static Slots &slots() {
    static thread_local Slots s;
    return s;
  }
};

}  // namespace fnorm
