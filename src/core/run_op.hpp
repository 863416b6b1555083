/* SPDX-License-Identifier: Apache-2.0 */
// The one driver of the op contract (core/op.hpp): every extern "C" launch
// is one call of run_op, every size query one call of query_op.
//
//   run_op:   guard -> handle -> describe -> overlap rule -> check -> checked
//             mode -> empty -> workspace and reserve (the cached plan's
//             sizes, or the op's sizes step) -> device -> cached plan ->
//             check_plan -> launch
//   query_op: guard -> handle -> the answer's pointer -> describe -> answer
//
// Every refusal comes before the first enqueued work, so a refused call
// writes nothing. A repeated call with the same descriptors and pointer
// class plans nothing and takes no lock (PlanCache).
#pragma once

#include "core/handle.hpp"
#include "core/op.hpp"
#include "core/pointer_check.hpp"

namespace fnorm {

// The plan of (desc, ptrs) on the handle: cached per thread, or made now
// with the handle's device current (planning may ask its occupancy).
template <class Op>
const typename Op::Plan &cached_plan(fnorm_handle *h, const typename Op::Desc &desc, const typename Op::Ptrs &ptrs) {
  using Key = PlanKey<typename Op::Desc, typename Op::Ptrs>;
  return PlanCache<Key, typename Op::Plan>::get(h->id, Key{desc, ptrs}, [&] {
    DeviceGuard guard(h->device);
    return Op::plan(h, desc, ptrs);
  });
}

// The checks between describe and plan: the overlap rule over every buffer
// of the call, the op's own pointer rules, checked mode.
template <class Op>
void check_call(const fnorm_handle *h, const typename Op::Desc &desc, const typename Op::Args &args) {
  const CallBuffers buffers = Op::buffers(desc, args);
  require_no_overlap(buffers);
  Op::check(desc, args);
  require_device_memory(h, buffers);
}

// One launch entry point: `func` names it in the last-error message.
template <class Op>
fnorm_status_t run_op(const char *func, fnorm_handle *h, fnorm_stream_t stream, const typename Op::Descs &descs,
                      const typename Op::Args &args) noexcept {
  static_assert(require_op<Op>());
  return api_guard(func, [&] {
    require_not_null(h, "handle");
    const typename Op::Desc desc = Op::describe(descs, &args);
    check_call<Op>(h, desc, args);
    const cudaStream_t st = cuda_stream(stream);
    const Empty empty = Op::empty(desc, args);
    if (empty != Empty::No) {
      if (empty == Empty::Enqueue) {
        DeviceGuard guard(h->device);
        Op::launch_empty(desc, args, st);
      }
      return;
    }
    using Key = PlanKey<typename Op::Desc, typename Op::Ptrs>;
    using Cache = PlanCache<Key, typename Op::Plan>;
    const Key key{desc, Op::pointer_class(h, desc, args)};
    const uint64_t hash = Cache::hash_bytes(&key, sizeof key);
    const typename Op::Plan *cached = Cache::find(h->id, key, hash);
    // What the plan needs of the caller's memory, refused before any device
    // work (and, where the op knows it without the device, before planning).
    const Sizes need = cached != nullptr ? cached->sizes : Op::sizes(h, desc, key.ptrs);
    require_workspace(args.workspace, args.workspace_bytes, need.workspace, Op::kWorkspaceQuery, Op::kWorkspaceAlign);
    if constexpr (has_reserve<Op>()) Op::check_reserve(need.reserve, desc, args);
    DeviceGuard guard(h->device);
    const typename Op::Plan &plan = cached != nullptr ? *cached : cached_plan<Op>(h, desc, key.ptrs);
    Op::check_plan(plan, desc, args);
    Op::launch(plan, desc, args, st);
  });
}

// One size query: `answer(handle, desc)` into *out (named `out_arg` when
// NULL); by default the op's workspace_size.
template <class Op, class Answer>
fnorm_status_t query_op(const char *func, fnorm_handle *h, const typename Op::Descs &descs, size_t *out,
                        const char *out_arg, Answer &&answer) noexcept {
  static_assert(require_op<Op>());
  return api_guard(func, [&] {
    require_not_null(h, "handle");
    require_not_null(out, out_arg);
    const typename Op::Desc desc = Op::describe(descs, nullptr);
    *out = answer(h, desc);
  });
}
template <class Op>
fnorm_status_t query_op(const char *func, fnorm_handle *h, const typename Op::Descs &descs,
                        size_t *workspace_bytes) noexcept {
  return query_op<Op>(func, h, descs, workspace_bytes, "workspace_bytes",
                      [](fnorm_handle *hh, const typename Op::Desc &d) { return Op::workspace_size(hh, d); });
}

}  // namespace fnorm
