// BatchNorm's native engine: executes a NativePlan (bn_plan.cpp) with the
// generated kernels: the one-launch path for small channels-last problems,
// else reduce -> per-channel finalize (SyncBatchNorm: all-reduce between) ->
// elementwise pass.
#include <algorithm>
#include <cstdlib>
#include <initializer_list>

#include "batchnorm/batchnorm.hpp"

namespace fnorm {
namespace {

const BnInstance *find_instance(fnorm_dtype_t dtype, int pack) {
  for (size_t i = 0; i < kBnInstanceCount; ++i)
    if (kBnInstances[i].dtype == dtype && kBnInstances[i].pack == pack) return &kBnInstances[i];
  return nullptr;
}

// The widest pack (<= kMaxPackBytes) that `divides` (0: no constraint) and
// every pointer allow.
int pack_for(size_t esize, int64_t divides, std::initializer_list<const void *> ptrs) {
  return widest_pack(esize, [&](int p) { return divides % p == 0 && all_aligned(ptrs, p * esize); });
}

const BnInstance &instance_or_throw(fnorm_dtype_t dtype, int pack) {
  const BnInstance *inst = find_instance(dtype, pack);
  FNORM_REQUIRE(inst != nullptr, FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "dtype %s was left out of this build (meson option 'dtypes')", dtype_name(dtype));
  return *inst;
}

// The elementwise pass over every element: the widest pack over whole mask
// words' worth of packs, then single elements for the rest.
void run_apply(BnApplyParams p, const BnView &v, int pack, bool forward, const LaunchContext &ctx) {
  const int64_t elements = v.elements();
  const int64_t main_end = elements / (32 * pack) * (32 * pack);
  int64_t *counter = p.num_batches_tracked;
  if (main_end > 0) {
    const BnInstance &inst = instance_or_throw(v.dtype, pack);
    p.begin = 0;
    p.end = main_end;
    check_cuda((forward ? inst.forward : inst.backward)(p, ctx), inst.name);
    p.num_batches_tracked = nullptr;  // counted once
  }
  if (main_end < elements) {
    const BnInstance &inst = instance_or_throw(v.dtype, 1);
    p.begin = main_end;
    p.end = elements;
    p.num_batches_tracked = main_end > 0 ? nullptr : counter;
    check_cuda((forward ? inst.forward : inst.backward)(p, ctx), inst.name);
  }
}

// Launches the reduction; returns the splits and split length it used.
BnReduceParams run_reduce(const NativePlan &plan, BnReduceParams p, const BnView &v, bool backward,
                          const LaunchContext &ctx) {
  const size_t esize = dtype_size(v.dtype);
  const int64_t divides = plan.kind == BnReduceKind::Segments ? v.shape.group : v.shape.width;
  const int pack = pack_for(esize, divides, {p.x, p.dy});
  const BnInstance &inst = instance_or_throw(v.dtype, pack);
  p.splits = plan.max_splits;
  BnReduceLaunchFn fn = plan.kind == BnReduceKind::Segments
                            ? (backward ? inst.grads_segments : inst.stats_segments)
                            : (backward ? inst.grads_columns : inst.stats_columns);
  check_cuda(fn(p, ctx), inst.name);
  return p;
}

BnFinalizeParams finalize_params(const NativePlan &plan, const BnView &v, char *ws,
                                 const BnReduceParams &used) {
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

BnApplyParams apply_params(const BnView &v, const BnFinalizeParams &f) {
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
  const size_t n = static_cast<size_t>(c.view.shape.channels) * 3;
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
  if (c.pass == BnPass::FwdTrain) {
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

// Small channels-last problems (no communicator): one launch with the values
// in registers (bn_persistent.cuh) when the shape and one wave of blocks allow
// it. Returns whether it ran; if not, the caller runs the three-launch path.
bool run_one_launch(const NativePlan &plan, const BnCall &c, const LaunchContext &ctx, char *ws) {
  const BnView &v = c.view;
  if (v.shape.group != 1 || plan.kind != BnReduceKind::Columns) return false;
  const bool relu = c.desc->epilogue != FNORM_BN_EPILOGUE_NONE;
  const bool forward = c.pass == BnPass::FwdTrain;
  BnPersistParams q;
  q.shape = v.shape;
  q.part_moment1 = reinterpret_cast<float *>(ws + plan.off_moment1);
  q.part_moment2 = reinterpret_cast<float *>(ws + plan.off_moment2);
  q.max_blocks = plan.max_splits;
  q.epilogue = c.desc->epilogue;
  set_channel_io(q.f, c);
  q.f.mean = reinterpret_cast<float *>(ws + plan.off_mean);  // the coefficients, once per channel
  q.f.xmu_scale = reinterpret_cast<float *>(ws + plan.off_xmu_scale);
  q.f.shift = reinterpret_cast<float *>(ws + plan.off_shift);
  q.f.dy_scale = forward ? nullptr : reinterpret_cast<float *>(ws + plan.off_dy_scale);
  q.gather_all = std::getenv("FNORM_BN_PERSIST_GATHER_ALL") != nullptr;
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
  const int pack = forward ? pack_for(dtype_size(v.dtype), v.shape.width, {c.x, c.z, c.y})
                           : pack_for(dtype_size(v.dtype), v.shape.width, {c.x, c.dy, c.dx, c.dz});
  const BnInstance &inst = instance_or_throw(v.dtype, pack);
  bool launched = false;
  check_cuda((forward ? inst.persist_forward : inst.persist_backward)(q, ctx, &launched), inst.name);
  return launched;
}

}  // namespace

void run_native(fnorm_handle *h, fnorm_stream_t stream, const BnCall &c) {
  const BnView &v = c.view;
  const bool sync = c.desc->comm != nullptr && c.pass != BnPass::FwdInfer;
  const NativePlan plan = plan_native(v, h->info, c.pass, sync);
  const LaunchContext ctx = launch_context(h, stream);
  char *ws = static_cast<char *>(c.workspace);
  BnFinalizeParams f = finalize_params(plan, v, ws, BnReduceParams{});
  const size_t esize = dtype_size(v.dtype);
  const bool relu = c.desc->epilogue != FNORM_BN_EPILOGUE_NONE;

  if (c.pass == BnPass::FwdInfer) {
    f.gamma = c.gamma;
    f.beta = c.beta;
    f.running_mean = const_cast<float *>(c.running_mean_in);  // read only by this kernel
    f.running_var = const_cast<float *>(c.running_var_in);
    f.eps = c.desc->epsilon;
    check_cuda(launch_bn_infer_coef(f, ctx.stream), "bn_infer_coef");
    BnApplyParams a = apply_params(v, f);
    a.x = c.x;
    a.z = c.z;
    a.y = c.y;
    a.epilogue = c.desc->epilogue;
    run_apply(a, v, pack_for(esize, 0, {c.x, c.z, c.y}), true, ctx);
    return;
  }

  if (!sync && run_one_launch(plan, c, ctx, ws)) return;

  BnReduceParams r;
  r.shape = v.shape;
  r.part_moment1 = reinterpret_cast<float *>(ws + plan.off_moment1);
  r.part_moment2 = reinterpret_cast<float *>(ws + plan.off_moment2);
  if (c.pass == BnPass::FwdTrain) {
    r.x = c.x;
    if (!c.local_empty) f = finalize_params(plan, v, ws, run_reduce(plan, r, v, false, ctx));
    set_channel_io(f, c);
    finalize(c, plan, ws, f, launch_bn_finalize_fwd, launch_bn_finalize_fwd_sync, ctx.stream);
    if (c.local_empty) {
      if (c.num_batches_tracked != nullptr)
        check_cuda(launch_bn_count(c.num_batches_tracked, ctx.stream), "bn_count");
      return;
    }
    BnApplyParams a = apply_params(v, f);
    a.x = c.x;
    a.z = c.z;
    a.y = c.y;
    a.epilogue = c.desc->epilogue;
    a.mask_out = relu ? static_cast<uint32_t *>(c.reserve) : nullptr;
    a.num_batches_tracked = c.num_batches_tracked;
    run_apply(a, v, pack_for(esize, 0, {c.x, c.z, c.y}), true, ctx);
  } else {
    r.x = c.x;
    r.dy = c.dy;
    r.mask = relu ? static_cast<const uint32_t *>(c.reserve) : nullptr;
    r.mean = c.saved_mean_in;
    if (!c.local_empty) f = finalize_params(plan, v, ws, run_reduce(plan, r, v, true, ctx));
    set_channel_io(f, c);
    if (sync && c.local_empty && !f.global_weight_grads) {  // this rank's sums over no samples
      const size_t bytes = static_cast<size_t>(v.shape.channels) * 4;
      if (c.dgamma != nullptr) check_cuda(cudaMemsetAsync(c.dgamma, 0, bytes, ctx.stream), "cudaMemsetAsync");
      if (c.dbeta != nullptr) check_cuda(cudaMemsetAsync(c.dbeta, 0, bytes, ctx.stream), "cudaMemsetAsync");
    }
    finalize(c, plan, ws, f, launch_bn_finalize_bwd, launch_bn_finalize_bwd_sync, ctx.stream);
    if (c.local_empty) return;
    BnApplyParams a = apply_params(v, f);
    a.x = c.x;
    a.dy = c.dy;
    a.dx = c.dx;
    a.dz = c.dz;
    a.mask_in = r.mask;
    run_apply(a, v, pack_for(esize, 0, {c.x, c.dy, c.dx, c.dz}), false, ctx);
  }
}

}  // namespace fnorm
