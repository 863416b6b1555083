/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm's native engine: the plan of a launch (BnNativeLaunch: the
// workspace layout of bn_plan.cpp and every launch shape, cached per handle)
// and its execution with the generated kernels: a one-launch kernel for
// channels-last problems it takes, else reduce -> per-channel finalize
// (SyncBatchNorm: all-reduce between) -> elementwise pass.
#include <algorithm>
#include <initializer_list>

#include "batchnorm/batchnorm.hpp"

namespace fnorm {
namespace {

const BnInstance &instance_or_throw(fnorm_dtype_t dtype, int pack) {
  for (size_t i = 0; i < kBnInstanceCount; ++i)
    if (kBnInstances[i].dtype == dtype && kBnInstances[i].pack == pack) return kBnInstances[i];
  fail(FNORM_STATUS_NOT_SUPPORTED_BUILD, "dtype %s was left out of this build (meson option 'dtypes')",
       dtype_name(dtype));
}

// The widest pack (<= kMaxPackBytes) that `divides` (0: no constraint) and
// every pointer allow.
int pack_for(size_t esize, int64_t divides, std::initializer_list<const void *> ptrs) {
  return widest_pack(esize, kMaxPackBytes,
                     [&](int p) { return divides % p == 0 && all_aligned(ptrs, p * esize); });
}

// Plans are cached per (handle, problem, the packs the pointers allow).
struct BnPlanKey {
  BnProblem problem;
  int32_t reduce_pack = 1, apply_pack = 1, persist_pack = 1, local_empty = 0;
};

BnPlanKey key_of(const BnCall &c) {
  BnPlanKey k;
  k.problem = c.pb;
  k.local_empty = c.local_empty;
  const size_t es = dtype_size(c.pb.dtype);
  const BnShape &sh = c.pb.shape;
  const int64_t divides = bn_reduce_kind(sh) == BnReduceKind::Segments ? sh.group : sh.width;
  if (c.pb.pass == BnPass::Bwd) {
    k.reduce_pack = pack_for(es, divides, {c.x, c.dy});
    k.apply_pack = pack_for(es, 0, {c.x, c.dy, c.dx, c.dz});
    k.persist_pack = pack_for(es, sh.width, {c.x, c.dy, c.dx, c.dz});
  } else {
    k.reduce_pack = pack_for(es, divides, {c.x});
    k.apply_pack = pack_for(es, 0, {c.x, c.z, c.y});
    k.persist_pack = pack_for(es, sh.width, {c.x, c.z, c.y});
  }
  return k;
}

BnNativeLaunch plan_launch(fnorm_handle *h, const BnPlanKey &k) {
  const BnProblem &pb = k.problem;
  const DeviceContext ctx = device_context(h);
  BnNativeLaunch L;
  L.auto_candidate = bn_auto_candidate(h, pb);
  L.ws = plan_native(pb, ctx.dev, pb.pass, pb.sync != 0);
  L.reduce_pack = k.reduce_pack;
  L.apply_pack = k.apply_pack;
  L.persist_pack = k.persist_pack;
  if (k.local_empty || pb.elements() == 0) return L;  // SyncBatchNorm's rank without samples
  const BnShape &sh = pb.shape;
  const bool forward = pb.pass != BnPass::Bwd;
  // The elementwise pass: the widest pack over whole mask words' worth of
  // packs, then single elements for the rest.
  const int64_t elements = pb.elements();
  L.apply_main_end = elements / (32 * L.apply_pack) * (32 * L.apply_pack);
  if (L.apply_main_end > 0) {
    const BnInstance &inst = instance_or_throw(pb.dtype, L.apply_pack);
    check_cuda((forward ? inst.forward : inst.backward).shape(sh, L.apply_main_end, ctx, &L.apply_main), inst.name);
  }
  if (L.apply_main_end < elements) {
    const BnInstance &inst = instance_or_throw(pb.dtype, 1);
    check_cuda((forward ? inst.forward : inst.backward).shape(sh, elements - L.apply_main_end, ctx, &L.apply_tail),
               inst.name);
  }
  if (pb.pass == BnPass::FwdInfer) return L;
  // Channels-last problems (no communicator): one cooperative launch where
  // a one-launch kernel takes the shape and its grid fits co-resident
  // (bn_persistent.cuh's shape_bn_persistent says which kernel).
  if (!pb.sync && sh.group == 1 && L.ws.kind == BnReduceKind::Columns) {
    const BnInstance &inst = instance_or_throw(pb.dtype, L.persist_pack);
    BnPersistParams q;
    q.shape = sh;
    q.max_blocks = L.ws.max_splits;
    q.epilogue = pb.epilogue;
    const BnPersistFns &fns = forward ? inst.persist_forward : inst.persist_backward;
    check_cuda(fns.shape(q, h->tuning.bn_persist_gather_all, ctx, &L.persist), inst.name);
    L.one_launch = L.persist.kernel != BnOneLaunch::None;
  }
  // The general path (also where the one-launch kernel finds the device
  // busier than its occupancy said).
  const BnInstance &inst = instance_or_throw(pb.dtype, L.reduce_pack);
  const BnReduceFns &fns = L.ws.kind == BnReduceKind::Segments ? (forward ? inst.stats_segments : inst.grads_segments)
                                                               : (forward ? inst.stats_columns : inst.grads_columns);
  check_cuda(fns.shape(sh, L.ws.max_splits, ctx, &L.reduce), inst.name);
  return L;
}

void run_apply(BnApplyParams p, const BnCall &c, const BnNativeLaunch &L, bool forward, cudaStream_t stream) {
  const int64_t elements = c.pb.elements();
  int64_t *counter = p.num_batches_tracked;
  if (L.apply_main_end > 0) {
    const BnInstance &inst = instance_or_throw(c.pb.dtype, L.apply_pack);
    p.begin = 0;
    p.end = L.apply_main_end;
    check_cuda((forward ? inst.forward : inst.backward).launch(p, L.apply_main, stream), inst.name);
    p.num_batches_tracked = nullptr;  // counted once
  }
  if (L.apply_main_end < elements) {
    const BnInstance &inst = instance_or_throw(c.pb.dtype, 1);
    p.begin = L.apply_main_end;
    p.end = elements;
    p.num_batches_tracked = L.apply_main_end > 0 ? nullptr : counter;
    check_cuda((forward ? inst.forward : inst.backward).launch(p, L.apply_tail, stream), inst.name);
  }
}

void run_reduce(const BnNativeLaunch &L, BnReduceParams p, const BnCall &c, bool backward, cudaStream_t stream) {
  const BnInstance &inst = instance_or_throw(c.pb.dtype, L.reduce_pack);
  p.splits = L.reduce.splits;
  p.split_len = L.reduce.split_len;
  const BnReduceFns &fns = L.ws.kind == BnReduceKind::Segments
                               ? (backward ? inst.grads_segments : inst.stats_segments)
                               : (backward ? inst.grads_columns : inst.stats_columns);
  check_cuda(fns.launch(p, L.reduce, stream), inst.name);
}

BnFinalizeParams finalize_params(const NativePlan &plan, const BnProblem &v, char *ws, const BnReduceShape &used) {
  BnFinalizeParams f;
  f.channels = v.shape.channels;
  f.group = plan.group_entries;
  f.part_width = plan.part_width;
  f.split_len = used.split_len;
  f.domain = plan.domain;
  f.count = static_cast<double>(v.per_channel());
  f.splits = used.splits;
  f.part_moment1 = reinterpret_cast<const float *>(ws + plan.off_moment1);
  f.part_moment2 = reinterpret_cast<const float *>(ws + plan.off_moment2);
  f.mean = reinterpret_cast<float *>(ws + plan.off_mean);
  f.xmu_scale = reinterpret_cast<float *>(ws + plan.off_xmu_scale);
  f.shift = reinterpret_cast<float *>(ws + plan.off_shift);
  f.dy_scale = reinterpret_cast<float *>(ws + plan.off_dy_scale);
  return f;
}

BnApplyParams apply_params(const BnProblem &v, const BnFinalizeParams &f) {
  BnApplyParams a;
  a.shape = v.shape;
  a.mean = f.mean;
  a.xmu_scale = f.xmu_scale;
  a.shift = f.shift;
  a.dy_scale = f.dy_scale;
  return a;
}

using FinalizeFn = cudaError_t (*)(const BnFinalizeParams &, cudaStream_t);

// The per-channel combination of a pass. SyncBatchNorm: this rank's triples
// (zeros for a rank without samples) -> one all-reduce -> the global finalize.
void finalize(const BnCall &c, const NativePlan &plan, char *ws, BnFinalizeParams &f, FinalizeFn local,
              FinalizeFn global, cudaStream_t stream) {
  if (c.desc->comm == nullptr) {
    check_cuda(local(f, stream), "bn_finalize");
    return;
  }
  double *triples = reinterpret_cast<double *>(ws + plan.off_sync);
  const size_t n = static_cast<size_t>(c.pb.shape.channels) * 3;
  if (c.local_empty) {
    check_cuda(cudaMemsetAsync(triples, 0, n * sizeof(double), stream), "cudaMemsetAsync");
  } else {
    f.sync_local = triples;
    check_cuda(local(f, stream), "bn_finalize");
    f.sync_local = nullptr;
  }
  nccl_allreduce_sum(c.desc->comm, triples, n, stream);
  f.sync_global = triples;
  check_cuda(global(f, stream), "bn_finalize_sync");
}

// What the per-channel end of a training pass reads and writes besides the
// partials: statistics, running averages and affine parameters (forward),
// weight gradients (backward). Shared by the three-launch and one-launch paths.
void set_channel_io(BnFinalizeParams &f, const BnCall &c) {
  f.gamma = c.gamma;
  if (c.pb.pass == BnPass::FwdTrain) {
    f.eps = c.desc->epsilon;
    f.cumulative = c.desc->average == FNORM_BN_AVERAGE_CUMULATIVE;
    f.factor = c.desc->momentum;
    f.num_batches_tracked = c.num_batches_tracked;
    f.beta = c.beta;
    f.running_mean = c.running_mean;
    f.running_var = c.running_var;
    f.saved_mean = c.saved_mean;
    f.saved_invstd = c.saved_invstd;
  } else {
    f.in_mean = c.saved_mean_in;
    f.in_invstd = c.saved_invstd_in;
    f.dgamma = c.dgamma;
    f.dbeta = c.dbeta;
    f.global_weight_grads = (c.desc->sync_flags & FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS) != 0;
  }
}

// The one-launch kernel; false when the device refused its cooperative
// launch (the caller then runs the general path).
bool run_one_launch(const BnNativeLaunch &L, const BnCall &c, char *ws, cudaStream_t stream) {
  const BnProblem &v = c.pb;
  const bool relu = c.desc->epilogue != FNORM_BN_EPILOGUE_NONE;
  const bool forward = v.pass == BnPass::FwdTrain;
  BnPersistParams q;
  q.shape = v.shape;
  q.part_moment1 = reinterpret_cast<float *>(ws + L.ws.off_moment1);
  q.part_moment2 = reinterpret_cast<float *>(ws + L.ws.off_moment2);
  q.max_blocks = L.ws.max_splits;
  q.epilogue = c.desc->epilogue;
  set_channel_io(q.f, c);
  q.f.mean = reinterpret_cast<float *>(ws + L.ws.off_mean);  // the coefficients, once per channel
  q.f.xmu_scale = reinterpret_cast<float *>(ws + L.ws.off_xmu_scale);
  q.f.shift = reinterpret_cast<float *>(ws + L.ws.off_shift);
  q.f.dy_scale = forward ? nullptr : reinterpret_cast<float *>(ws + L.ws.off_dy_scale);
  q.x = c.x;
  if (forward) {
    q.z = c.z;
    q.y = c.y;
    q.mask_out = relu ? static_cast<uint32_t *>(c.reserve) : nullptr;
    q.num_batches_tracked = c.num_batches_tracked;
  } else {
    q.dy = c.dy;
    q.dx = c.dx;
    q.dz = c.dz;
    q.mask_in = relu ? static_cast<const uint32_t *>(c.reserve) : nullptr;
  }
  const BnInstance &inst = instance_or_throw(v.dtype, L.persist_pack);
  bool launched = false;
  check_cuda((forward ? inst.persist_forward : inst.persist_backward).launch(q, L.persist, stream, &launched),
             inst.name);
  return launched;
}

}  // namespace

const BnNativeLaunch &bn_native_plan(fnorm_handle *h, const BnCall &c) {
  using Cache = PlanCache<BnPlanKey, BnNativeLaunch>;
  const BnPlanKey key = key_of(c);
  const uint64_t hash = Cache::hash_bytes(&key, sizeof key);
  const BnNativeLaunch *L = Cache::find(h->id, key, hash);
  // The workspace and the reserve space, before any device work.
  check_workspace(h, c, L != nullptr ? L->ws.total : plan_native(c.pb, h->info, c.pb.pass, c.pb.sync != 0).total);
  if (!c.local_empty) check_reserve(h, c);
  if (L != nullptr) return *L;
  DeviceGuard guard(h->device);
  return Cache::insert(h->id, key, hash, plan_launch(h, key));
}

void launch_native(const BnCall &c, const BnNativeLaunch &L, cudaStream_t stream) {
  const BnProblem &v = c.pb;
  const bool sync = v.sync != 0;
  char *ws = static_cast<char *>(c.workspace);
  BnFinalizeParams f = finalize_params(L.ws, v, ws, BnReduceShape{});
  const bool relu = c.desc->epilogue != FNORM_BN_EPILOGUE_NONE;

  if (v.pass == BnPass::FwdInfer) {
    f.gamma = c.gamma;
    f.beta = c.beta;
    f.running_mean = const_cast<float *>(c.running_mean_in);  // read only by this kernel
    f.running_var = const_cast<float *>(c.running_var_in);
    f.eps = c.desc->epsilon;
    check_cuda(launch_bn_infer_coef(f, stream), "bn_infer_coef");
    BnApplyParams a = apply_params(v, f);
    a.x = c.x;
    a.z = c.z;
    a.y = c.y;
    a.epilogue = c.desc->epilogue;
    run_apply(a, c, L, true, stream);
    return;
  }

  if (L.one_launch && run_one_launch(L, c, ws, stream)) return;

  BnReduceParams r;
  r.shape = v.shape;
  r.part_moment1 = reinterpret_cast<float *>(ws + L.ws.off_moment1);
  r.part_moment2 = reinterpret_cast<float *>(ws + L.ws.off_moment2);
  if (v.pass == BnPass::FwdTrain) {
    r.x = c.x;
    if (!c.local_empty) {
      run_reduce(L, r, c, false, stream);
      f = finalize_params(L.ws, v, ws, L.reduce);
    }
    set_channel_io(f, c);
    finalize(c, L.ws, ws, f, launch_bn_finalize_fwd, launch_bn_finalize_fwd_sync, stream);
    if (c.local_empty) {
      if (c.num_batches_tracked != nullptr)
        check_cuda(launch_bn_count(c.num_batches_tracked, stream), "bn_count");
      return;
    }
    BnApplyParams a = apply_params(v, f);
    a.x = c.x;
    a.z = c.z;
    a.y = c.y;
    a.epilogue = c.desc->epilogue;
    a.mask_out = relu ? static_cast<uint32_t *>(c.reserve) : nullptr;
    a.num_batches_tracked = c.num_batches_tracked;
    run_apply(a, c, L, true, stream);
  } else {
    r.x = c.x;
    r.dy = c.dy;
    r.mask = relu ? static_cast<const uint32_t *>(c.reserve) : nullptr;
    r.mean = c.saved_mean_in;
    if (!c.local_empty) {
      run_reduce(L, r, c, true, stream);
      f = finalize_params(L.ws, v, ws, L.reduce);
    }
    set_channel_io(f, c);
    if (sync && c.local_empty && !f.global_weight_grads) {  // this rank's sums over no samples
      const size_t bytes = static_cast<size_t>(v.shape.channels) * 4;
      if (c.dgamma != nullptr) check_cuda(cudaMemsetAsync(c.dgamma, 0, bytes, stream), "cudaMemsetAsync");
      if (c.dbeta != nullptr) check_cuda(cudaMemsetAsync(c.dbeta, 0, bytes, stream), "cudaMemsetAsync");
    }
    finalize(c, L.ws, ws, f, launch_bn_finalize_bwd, launch_bn_finalize_bwd_sync, stream);
    if (c.local_empty) return;
    BnApplyParams a = apply_params(v, f);
    a.x = c.x;
    a.dy = c.dy;
    a.dx = c.dx;
    a.dz = c.dz;
    a.mask_in = r.mask;
    run_apply(a, c, L, false, stream);
  }
}

}  // namespace fnorm
