/* SPDX-License-Identifier: Apache-2.0 */
// The op contract as types. An op is a struct (norm/norm.hpp's NormFwd,
// batchnorm/batchnorm.hpp's BnFwdTrain, ...) with these members, and one driver
// (core/run_op.hpp) walks every entry point through them in one order:
//
//   Descs     the call's descriptors (pointers to the opaque objects).
//   Args      the call's pointers, workspace included (`void *workspace;
//             size_t workspace_bytes`).
//   Desc      what describe makes of the descriptors: validated and
//             pointer-free (shapes, strides, input and output dtypes, flags,
//             which optional tensors are present). No padding: with the
//             pointer class it is the key plans are cached by.
//   Ptrs      the pointer class: what the plan needs to know of the pointers
//             (the pack their alignment allows, which optional ones are
//             given). No padding either.
//   Plan      trivially copyable (it is cached): its Sizes (`sizes`) and
//             everything the launch needs: instances, launch shapes, the
//             engine and its plan.
//
//   describe(Descs, const Args *) -> Desc   (Args null in a size query)
//   buffers(Desc, Args) -> CallBuffers      every buffer with its extent and
//                                           direction, and the allowed
//                                           in-place pairs (the overlap rule
//                                           and checked mode run over them)
//   check(Desc, Args)                       the op's pointer rules
//   empty(Desc, Args) -> Empty              a call with nothing to compute
//   launch_empty(Desc, Args, stream)        what such a call still enqueues
//   pointer_class(handle, Desc, Args) -> Ptrs
//   sizes(handle, Desc, Ptrs) -> Sizes      the workspace (and reserve
//                                           space) the plan will need, known
//                                           without the device where the op
//                                           can: a short one is refused
//                                           before any device work
//   check_reserve(need, Desc, Args)         (ops whose Args have a reserve)
//   plan(handle, Desc, Ptrs) -> Plan        pure: a function of its inputs
//                                           and the handle's device
//   check_plan(Plan, Desc, Args)            refusals that depend on the plan
//                                           (the engine's own rules), before
//                                           any device work
//   launch(Plan, Desc, Args, stream)        enqueues the plan; decides nothing
//   workspace_size(handle, Desc) -> size_t  the size query: the most any
//                                           pointer class needs
//   kWorkspaceQuery, kWorkspaceAlign        the query a short workspace is
//                                           told to ask, and the alignment
//                                           the launch needs of it
//
// FNORM_OP_STEPS declares the steps every op defines out of line; an op
// declares the rest itself (those it defines inline differ by op), or
// inherits OpDefaults' check_plan.
// require_op<Op>() refuses, at compile time, an op that lacks a step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "core/validate.hpp"

struct fnorm_handle;
struct CUstream_st;

namespace fnorm {

// What a call over tensors with no elements does: nothing to compute
// (No: not empty), nothing at all (Done), or enqueue launch_empty's zeros
// of outputs that are sums over no elements and counters that still count
// (Enqueue; api/fusednorm.h says which).
enum class Empty { No, Done, Enqueue };

// What a plan needs of the caller's memory: workspace bytes (the launch's
// scratch) and reserve bytes (what a forward keeps for its backward).
struct Sizes {
  size_t workspace = 0;
  size_t reserve = 0;
};

// The plan cache's key: the description and the pointer class, compared and
// hashed as bytes.
template <class Desc, class Ptrs>
struct PlanKey {
  Desc desc;
  Ptrs ptrs;
};

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

// What an op inherits unless it declares its own: no refusal that depends
// on the plan (BatchNorm's cuDNN engine has its own rules).
struct OpDefaults {
  template <class Plan, class Desc, class Args>
  static void check_plan(const Plan &, const Desc &, const Args &) {}
};

#define FNORM_OP_STEPS                                                                        \
  static Desc describe(const Descs &descs, const Args *args);                                \
  static CallBuffers buffers(const Desc &desc, const Args &args);                            \
  static void check(const Desc &desc, const Args &args);                                     \
  static Ptrs pointer_class(fnorm_handle *h, const Desc &desc, const Args &args);            \
  static Plan plan(fnorm_handle *h, const Desc &desc, const Ptrs &ptrs);                     \
  static void launch(const Plan &plan, const Desc &desc, const Args &args, CUstream_st *stream);

// ---- the compile-time check ---------------------------------------------------

namespace op_steps {
template <class...>
using void_t = void;
#define FNORM_OP_STEP(name, expr)                                       \
  template <class Op, class = void>                                     \
  struct name : std::false_type {};                                     \
  template <class Op>                                                   \
  struct name<Op, void_t<decltype(expr)>> : std::true_type {};
template <class T>
T &val();
FNORM_OP_STEP(has_describe, (val<typename Op::Desc &>() = Op::describe(val<const typename Op::Descs &>(),
                                                                        static_cast<const typename Op::Args *>(nullptr))))
FNORM_OP_STEP(has_buffers, (val<CallBuffers &>() = Op::buffers(val<const typename Op::Desc &>(),
                                                               val<const typename Op::Args &>())))
FNORM_OP_STEP(has_check, Op::check(val<const typename Op::Desc &>(), val<const typename Op::Args &>()))
FNORM_OP_STEP(has_empty, (val<Empty &>() = Op::empty(val<const typename Op::Desc &>(),
                                                      val<const typename Op::Args &>())))
FNORM_OP_STEP(has_launch_empty, Op::launch_empty(val<const typename Op::Desc &>(), val<const typename Op::Args &>(),
                                                 static_cast<CUstream_st *>(nullptr)))
FNORM_OP_STEP(has_pointer_class,
              (val<typename Op::Ptrs &>() = Op::pointer_class(static_cast<fnorm_handle *>(nullptr),
                                                              val<const typename Op::Desc &>(),
                                                              val<const typename Op::Args &>())))
FNORM_OP_STEP(has_plan, (val<typename Op::Plan &>() = Op::plan(static_cast<fnorm_handle *>(nullptr),
                                                               val<const typename Op::Desc &>(),
                                                               val<const typename Op::Ptrs &>())))
FNORM_OP_STEP(has_check_plan, Op::check_plan(val<const typename Op::Plan &>(), val<const typename Op::Desc &>(),
                                             val<const typename Op::Args &>()))
FNORM_OP_STEP(has_launch, Op::launch(val<const typename Op::Plan &>(), val<const typename Op::Desc &>(),
                                     val<const typename Op::Args &>(), static_cast<CUstream_st *>(nullptr)))
FNORM_OP_STEP(has_workspace_size, (val<size_t &>() = Op::workspace_size(static_cast<fnorm_handle *>(nullptr),
                                                                         val<const typename Op::Desc &>())))
FNORM_OP_STEP(has_sizes, (val<Sizes &>() = Op::sizes(static_cast<fnorm_handle *>(nullptr),
                                                    val<const typename Op::Desc &>(),
                                                    val<const typename Op::Ptrs &>()),
                          val<Sizes &>() = val<typename Op::Plan &>().sizes))
FNORM_OP_STEP(has_workspace_protocol,
              (val<size_t &>() = Op::kWorkspaceAlign + sizeof(*Op::kWorkspaceQuery) +
                                 val<typename Op::Args &>().workspace_bytes,
               val<void *&>() = val<typename Op::Args &>().workspace))
FNORM_OP_STEP(has_reserve_args, (val<void *&>() = val<typename Op::Args &>().reserve))
FNORM_OP_STEP(has_check_reserve, Op::check_reserve(size_t{0}, val<const typename Op::Desc &>(),
                                                   val<const typename Op::Args &>()))
#undef FNORM_OP_STEP
}  // namespace op_steps

// Refuses at compile time an op that lacks a step or whose types break the
// contract; the driver calls it for every op it runs.
template <class Op>
constexpr bool has_reserve() {
  return op_steps::has_reserve_args<Op>::value;
}

template <class Op>
constexpr bool require_op() {
  namespace s = op_steps;
  static_assert(s::has_describe<Op>::value, "an op needs Descs, Args, Desc and Desc describe(const Descs &, const Args *)");
  static_assert(s::has_buffers<Op>::value, "an op needs CallBuffers buffers(const Desc &, const Args &)");
  static_assert(s::has_check<Op>::value, "an op needs check(const Desc &, const Args &)");
  static_assert(s::has_empty<Op>::value, "an op needs Empty empty(const Desc &, const Args &)");
  static_assert(s::has_launch_empty<Op>::value, "an op needs launch_empty(const Desc &, const Args &, stream)");
  static_assert(s::has_pointer_class<Op>::value, "an op needs Ptrs and Ptrs pointer_class(fnorm_handle *, const Desc &, const Args &)");
  static_assert(s::has_plan<Op>::value, "an op needs Plan and Plan plan(fnorm_handle *, const Desc &, const Ptrs &)");
  static_assert(s::has_check_plan<Op>::value, "an op needs check_plan(const Plan &, const Desc &, const Args &)");
  static_assert(s::has_launch<Op>::value, "an op needs launch(const Plan &, const Desc &, const Args &, stream)");
  static_assert(s::has_workspace_size<Op>::value, "an op needs size_t workspace_size(fnorm_handle *, const Desc &)");
  static_assert(s::has_sizes<Op>::value, "an op needs Sizes sizes(fnorm_handle *, const Desc &, const Ptrs &) and "
                                         "Plan::sizes");
  static_assert(s::has_workspace_protocol<Op>::value,
                "an op needs kWorkspaceQuery, kWorkspaceAlign and Args::workspace / workspace_bytes");
  static_assert(!s::has_reserve_args<Op>::value || s::has_check_reserve<Op>::value,
                "an op whose Args have a reserve needs check_reserve(size_t need, const Desc &, const Args &)");
  static_assert(std::has_unique_object_representations_v<PlanKey<typename Op::Desc, typename Op::Ptrs>>,
                "Desc and Ptrs are the plan cache's key: pointer-free, no padding");
  static_assert(std::is_trivially_copyable_v<typename Op::Plan>, "a Plan is trivially copyable (it is cached)");
  return true;
}

}  // namespace fnorm
