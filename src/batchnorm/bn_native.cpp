/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm's native engine: its plan (BnNativePlan: the workspace layout
// of bn_plan.cpp, the instances and every launch shape) and its execution
// with the generated kernels: a one-launch kernel for channels-last problems
// it takes, else reduce -> per-channel finalize (SyncBatchNorm: all-reduce
// between) -> elementwise pass.
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

const BnReduceFns &reduce_fns(const BnInstance &inst, BnReduceKind kind, bool backward) {
  if (kind == BnReduceKind::Segments) return backward ? inst.grads_segments : inst.stats_segments;
  return backward ? inst.grads_columns : inst.stats_columns;
}

// The one-launch kernel's shape for a channels-last problem without a
// communicator (kernel None where neither one-launch kernel takes it).
BnPersistShape persist_shape(const fnorm_handle *h, const BnProblem &pb, const BnInstance &inst,
                             const NativeLayout &ws, const DeviceContext &ctx) {
  BnPersistParams q;
  q.shape = pb.shape;
  q.max_blocks = ws.max_splits;
  q.epilogue = pb.epilogue;
  const BnPersistFns &fns = pb.pass != BnPass::Bwd ? inst.persist_forward : inst.persist_backward;
  BnPersistTuning t;
  t.gather_all = h->tuning.bn_persist_gather_all;
  t.onewave_tile = h->tuning.bn_onewave_tile;
  t.onewave_k = h->tuning.bn_onewave_k;
  BnPersistShape s;
  check_cuda(fns.shape(q, t, ctx, &s), inst.name);
  return s;
}

}  // namespace

bool bn_native_one_wave(fnorm_handle *h, const BnProblem &pb, const BnPacks &packs) {
  if (pb.sync || pb.pass == BnPass::FwdInfer || pb.local_empty || pb.elements() == 0) return false;
  const DeviceContext ctx = device_context(h);
  const NativeLayout ws = native_layout(pb, ctx.dev);
  if (pb.shape.group != 1 || ws.kind != BnReduceKind::Columns) return false;
  return persist_shape(h, pb, instance_or_throw(pb.dtype, packs.persist), ws, ctx).kernel == BnOneLaunch::OneWave;
}

BnPacks bn_packs(const BnProblem &pb, const BnArgs &a) {
  BnPacks k;
  const size_t es = dtype_size(pb.dtype);
  const BnShape &sh = pb.shape;
  const int64_t divides = bn_reduce_kind(sh) == BnReduceKind::Segments ? sh.group : sh.width;
  if (pb.pass == BnPass::Bwd) {
    k.reduce = pack_for(es, divides, {a.x, a.dy});
    k.apply = pack_for(es, 0, {a.x, a.dy, a.dx, a.dz});
    k.persist = pack_for(es, sh.width, {a.x, a.dy, a.dx, a.dz});
  } else {
    k.reduce = pack_for(es, divides, {a.x});
    k.apply = pack_for(es, 0, {a.x, a.z, a.y});
    k.persist = pack_for(es, sh.width, {a.x, a.z, a.y});
  }
  return k;
}

BnNativePlan plan_native(fnorm_handle *h, const BnProblem &pb, const BnPacks &packs) {
  const DeviceContext ctx = device_context(h);
  BnNativePlan L;
  L.ws = native_layout(pb, ctx.dev);
  if (pb.local_empty || pb.elements() == 0) return L;  // SyncBatchNorm's rank without samples
  const BnShape &sh = pb.shape;
  const bool forward = pb.pass != BnPass::Bwd;
  // The elementwise pass: the widest pack over whole mask words' worth of
  // packs, then single elements for the rest.
  const int64_t elements = pb.elements();
  L.apply_main_end = elements / (32 * packs.apply) * (32 * packs.apply);
  if (L.apply_main_end > 0) {
    L.apply_main = &instance_or_throw(pb.dtype, packs.apply);
    check_cuda((forward ? L.apply_main->forward : L.apply_main->backward)
                   .shape(sh, L.apply_main_end, ctx, &L.apply_main_shape),
               L.apply_main->name);
  }
  if (L.apply_main_end < elements) {
    L.apply_tail = &instance_or_throw(pb.dtype, 1);
    check_cuda((forward ? L.apply_tail->forward : L.apply_tail->backward)
                   .shape(sh, elements - L.apply_main_end, ctx, &L.apply_tail_shape),
               L.apply_tail->name);
  }
  if (pb.pass == BnPass::FwdInfer) return L;
  // Channels-last problems (no communicator): one cooperative launch where
  // a one-launch kernel takes the shape and its grid fits co-resident
  // (bn_persistent.cuh's shape_bn_persistent says which kernel).
  if (!pb.sync && sh.group == 1 && L.ws.kind == BnReduceKind::Columns) {
    L.persist = &instance_or_throw(pb.dtype, packs.persist);
    L.persist_shape = persist_shape(h, pb, *L.persist, L.ws, ctx);
    L.one_launch = L.persist_shape.kernel != BnOneLaunch::None;
  }
  // The general path (also where the one-launch kernel finds the device
  // busier than its occupancy said).
  L.reduce = &instance_or_throw(pb.dtype, packs.reduce);
  check_cuda(reduce_fns(*L.reduce, L.ws.kind, !forward).shape(sh, L.ws.max_splits, ctx, &L.reduce_shape),
             L.reduce->name);
  return L;
}

namespace {

void run_apply(BnApplyParams p, const BnNativePlan &L, const BnProblem &pb, cudaStream_t stream) {
  const bool forward = pb.pass != BnPass::Bwd;
  int64_t *counter = p.num_batches_tracked;
  if (L.apply_main != nullptr) {
    p.begin = 0;
    p.end = L.apply_main_end;
    check_cuda((forward ? L.apply_main->forward : L.apply_main->backward).launch(p, L.apply_main_shape, stream),
               L.apply_main->name);
    counter = nullptr;  // counted once
  }
  if (L.apply_tail != nullptr) {
    p.begin = L.apply_main_end;
    p.end = pb.elements();
    p.num_batches_tracked = counter;
    check_cuda((forward ? L.apply_tail->forward : L.apply_tail->backward).launch(p, L.apply_tail_shape, stream),
               L.apply_tail->name);
  }
}

// The per-channel combination's parameters: where the partials and the
// per-channel coefficients go in the workspace, and the reduction's splits.
BnFinalizeParams finalize_params(const BnNativePlan &L, const BnProblem &v, char *ws) {
  BnFinalizeParams f;
  f.channels = v.shape.channels;
  f.group = L.ws.group_entries;
  f.part_width = L.ws.part_width;
  f.split_len = L.reduce_shape.split_len;
  f.domain = L.ws.domain;
  f.count = static_cast<double>(v.per_channel());
  f.splits = L.reduce_shape.splits;
  f.part_moment1 = reinterpret_cast<const float *>(ws + L.ws.off_moment1);
  f.part_moment2 = reinterpret_cast<const float *>(ws + L.ws.off_moment2);
  f.mean = reinterpret_cast<float *>(ws + L.ws.off_mean);
  f.xmu_scale = reinterpret_cast<float *>(ws + L.ws.off_xmu_scale);
  f.shift = reinterpret_cast<float *>(ws + L.ws.off_shift);
  f.dy_scale = reinterpret_cast<float *>(ws + L.ws.off_dy_scale);
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
void finalize(const BnProblem &pb, const BnArgs &a, const NativeLayout &layout, char *ws, BnFinalizeParams &f,
              FinalizeFn local, FinalizeFn global, cudaStream_t stream) {
  if (a.comm == nullptr) {
    check_cuda(local(f, stream), "bn_finalize");
    return;
  }
  double *triples = reinterpret_cast<double *>(ws + layout.off_sync);
  const size_t n = static_cast<size_t>(pb.shape.channels) * 3;
  if (pb.local_empty) {
    check_cuda(cudaMemsetAsync(triples, 0, n * sizeof(double), stream), "cudaMemsetAsync");
  } else {
    f.sync_local = triples;
    check_cuda(local(f, stream), "bn_finalize");
    f.sync_local = nullptr;
  }
  nccl_allreduce_sum(a.comm, triples, n, stream);
  f.sync_global = triples;
  check_cuda(global(f, stream), "bn_finalize_sync");
}

// What the per-channel end of a training pass reads and writes besides the
// partials: statistics, running averages and affine parameters (forward),
// weight gradients (backward). Shared by the three-launch and one-launch paths.
void set_channel_io(BnFinalizeParams &f, const BnProblem &pb, const BnArgs &a) {
  f.gamma = a.gamma;
  if (pb.pass == BnPass::FwdTrain) {
    f.eps = pb.eps();
    f.cumulative = pb.average == FNORM_BN_AVERAGE_CUMULATIVE;
    f.factor = pb.momentum();
    f.num_batches_tracked = a.num_batches_tracked;
    f.beta = a.beta;
    f.running_mean = a.running_mean;
    f.running_var = a.running_var;
    f.saved_mean = a.saved_mean;
    f.saved_invstd = a.saved_invstd;
  } else {
    f.in_mean = a.saved_mean_in;
    f.in_invstd = a.saved_invstd_in;
    f.dgamma = a.dgamma;
    f.dbeta = a.dbeta;
    f.global_weight_grads = (pb.sync_flags & FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS) != 0;
  }
}

// The one-launch kernel; false when the device refused its cooperative
// launch (the caller then runs the general path).
bool run_one_launch(const BnNativePlan &L, const BnProblem &v, const BnArgs &a, char *ws, cudaStream_t stream) {
  const bool forward = v.pass == BnPass::FwdTrain;
  BnPersistParams q;
  q.shape = v.shape;
  q.part_moment1 = reinterpret_cast<float *>(ws + L.ws.off_moment1);
  q.part_moment2 = reinterpret_cast<float *>(ws + L.ws.off_moment2);
  q.max_blocks = L.ws.max_splits;
  q.epilogue = v.epilogue;
  set_channel_io(q.f, v, a);
  q.f.mean = reinterpret_cast<float *>(ws + L.ws.off_mean);  // the coefficients, once per channel
  q.f.xmu_scale = reinterpret_cast<float *>(ws + L.ws.off_xmu_scale);
  q.f.shift = reinterpret_cast<float *>(ws + L.ws.off_shift);
  q.f.dy_scale = forward ? nullptr : reinterpret_cast<float *>(ws + L.ws.off_dy_scale);
  q.x = a.x;
  if (forward) {
    q.z = a.z;
    q.y = a.y;
    q.mask_out = v.relu() ? static_cast<uint32_t *>(a.reserve) : nullptr;
    q.num_batches_tracked = a.num_batches_tracked;
  } else {
    q.dy = a.dy;
    q.dx = a.dx;
    q.dz = a.dz;
    q.mask_in = v.relu() ? static_cast<const uint32_t *>(a.reserve) : nullptr;
  }
  bool launched = false;
  check_cuda((forward ? L.persist->persist_forward : L.persist->persist_backward)
                 .launch(q, L.persist_shape, stream, &launched),
             L.persist->name);
  return launched;
}

void run_reduce(const BnNativePlan &L, BnReduceParams r, const BnProblem &v, cudaStream_t stream) {
  r.splits = L.reduce_shape.splits;
  r.split_len = L.reduce_shape.split_len;
  check_cuda(reduce_fns(*L.reduce, L.ws.kind, v.pass == BnPass::Bwd).launch(r, L.reduce_shape, stream), L.reduce->name);
}

}  // namespace

void launch_native(const BnNativePlan &L, const BnProblem &v, const BnArgs &a, cudaStream_t stream) {
  char *ws = static_cast<char *>(a.workspace);
  BnFinalizeParams f = finalize_params(L, v, ws);

  if (v.pass == BnPass::FwdInfer) {
    f.gamma = a.gamma;
    f.beta = a.beta;
    f.running_mean = const_cast<float *>(a.running_mean_in);  // read only by this kernel
    f.running_var = const_cast<float *>(a.running_var_in);
    f.eps = v.eps();
    check_cuda(launch_bn_infer_coef(f, stream), "bn_infer_coef");
    BnApplyParams p = apply_params(v, f);
    p.x = a.x;
    p.z = a.z;
    p.y = a.y;
    p.epilogue = v.epilogue;
    run_apply(p, L, v, stream);
    return;
  }

  if (L.one_launch && run_one_launch(L, v, a, ws, stream)) return;

  BnReduceParams r;
  r.shape = v.shape;
  r.part_moment1 = reinterpret_cast<float *>(ws + L.ws.off_moment1);
  r.part_moment2 = reinterpret_cast<float *>(ws + L.ws.off_moment2);
  r.x = a.x;
  if (v.pass == BnPass::FwdTrain) {
    if (!v.local_empty) run_reduce(L, r, v, stream);
    set_channel_io(f, v, a);
    finalize(v, a, L.ws, ws, f, launch_bn_finalize_fwd, launch_bn_finalize_fwd_sync, stream);
    if (v.local_empty) {
      if (a.num_batches_tracked != nullptr) check_cuda(launch_bn_count(a.num_batches_tracked, stream), "bn_count");
      return;
    }
    BnApplyParams p = apply_params(v, f);
    p.x = a.x;
    p.z = a.z;
    p.y = a.y;
    p.epilogue = v.epilogue;
    p.mask_out = v.relu() ? static_cast<uint32_t *>(a.reserve) : nullptr;
    p.num_batches_tracked = a.num_batches_tracked;
    run_apply(p, L, v, stream);
    return;
  }
  r.dy = a.dy;
  r.mask = v.relu() ? static_cast<const uint32_t *>(a.reserve) : nullptr;
  r.mean = a.saved_mean_in;
  if (!v.local_empty) run_reduce(L, r, v, stream);
  set_channel_io(f, v, a);
  if (v.sync && v.local_empty && !f.global_weight_grads) {  // this rank's sums over no samples
    for (float *g : {a.dgamma, a.dbeta})
      if (g != nullptr) check_cuda(cudaMemsetAsync(g, 0, v.vec_bytes, stream), "cudaMemsetAsync");
  }
  finalize(v, a, L.ws, ws, f, launch_bn_finalize_bwd, launch_bn_finalize_bwd_sync, stream);
  if (v.local_empty) return;
  BnApplyParams p = apply_params(v, f);
  p.x = a.x;
  p.dy = a.dy;
  p.dx = a.dx;
  p.dz = a.dz;
  p.mask_in = r.mask;
  run_apply(p, L, v, stream);
}

}  // namespace fnorm
