// BatchNorm: descriptor, validation, the native engine's plan and launches,
// and the dispatch to the cuDNN engine.
#include "batchnorm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

namespace fnorm {
namespace {

constexpr size_t kAlign = 256;  // every workspace region starts at a multiple of this
size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
bool aligned(const void *p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Channels-first runs at least this long get one block per (channel, split);
// shorter runs are reduced as columns of the [N, C * S] matrix.
constexpr int64_t kSegmentMinGroup = 512;
constexpr int64_t kMaxGridY = 65535;

// Packed strides of `dims` in the given order of dimensions (fastest last).
bool strides_match(const fnorm_tensor_desc *d, const int32_t *order) {
  int64_t expect = 1;
  for (int32_t i = d->rank - 1; i >= 0; --i) {
    const int32_t k = order[i];
    if (d->dims[k] != 1 && d->strides[k] != expect) return false;
    expect *= d->dims[k];
  }
  return true;
}

struct NativePlan {
  BnReduceKind kind = BnReduceKind::Columns;
  int max_splits = 0;  // what the workspace holds; the launch picks <= this many
  int64_t part_width = 0;
  int64_t group_entries = 1;
  int64_t domain = 0;
  size_t off_a = 0, off_b = 0, off_mean = 0, off_c1 = 0, off_c2 = 0, off_c3 = 0, off_sync = 0, total = 0;
};

// Depends on the shape and the device only (never on pointer alignment or
// occupancy), so the size query and the launch agree. The reductions run one
// wave of resident blocks (at most max_threads_per_sm / 256 per SM) split
// over the column tiles (Columns) or channels (Segments).
NativePlan plan_native(const BnView &v, const DeviceInfo &dev, BnPass pass, bool sync) {
  NativePlan p;
  const BnShape &s = v.shape;
  const int64_t most_blocks = static_cast<int64_t>(std::max(dev.sm_count, 1)) *
                              std::max(dev.max_threads_per_sm / 256, 1);
  size_t off = 0;
  if (pass != BnPass::FwdInfer) {
    int64_t splits = 0;
    if (s.group >= kSegmentMinGroup) {
      p.kind = BnReduceKind::Segments;
      p.domain = s.rows * s.group;
      p.part_width = s.channels;
      p.group_entries = 1;
      splits = std::min(ceil_div(most_blocks, s.channels), ceil_div(p.domain, 8));
    } else {
      p.kind = BnReduceKind::Columns;
      p.domain = s.rows;
      p.part_width = s.width;
      p.group_entries = s.group;
      // The fewest column tiles any pack gives: the widest pack's.
      const int64_t min_tiles = ceil_div(s.width, 32 * (16 / static_cast<int64_t>(dtype_size(v.dtype))));
      splits = std::min(ceil_div(most_blocks, min_tiles), s.rows);
    }
    p.max_splits = static_cast<int>(std::clamp<int64_t>(splits, 1, kMaxGridY));
    const size_t part = static_cast<size_t>(p.max_splits) * static_cast<size_t>(p.part_width) * 4;
    p.off_a = off;
    off += align_up(part);
    p.off_b = off;
    off += align_up(part);
  }
  const size_t vec = align_up(static_cast<size_t>(s.channels) * 4);
  p.off_mean = off;
  p.off_c1 = off + vec;
  p.off_c2 = off + 2 * vec;
  p.off_c3 = off + 3 * vec;
  p.total = off + (pass == BnPass::Bwd ? 4 : 3) * vec;
  if (sync && pass != BnPass::FwdInfer) {  // the all-reduced per-channel triples
    p.off_sync = p.total;
    p.total += align_up(static_cast<size_t>(s.channels) * 3 * sizeof(double));
  }
  return p;
}

const BnInstance *find_instance(fnorm_dtype_t dtype, int pack) {
  for (size_t i = 0; i < kBnInstanceCount; ++i)
    if (kBnInstances[i].dtype == dtype && kBnInstances[i].pack == pack) return &kBnInstances[i];
  return nullptr;
}

// The widest pack (<= 16 bytes) that `divides` (0: no constraint) and every
// pointer allow.
int widest_pack(size_t esize, int64_t divides, std::initializer_list<const void *> ptrs) {
  int pack = static_cast<int>(16 / esize);
  for (; pack > 1; pack /= 2) {
    bool ok = divides % pack == 0;
    for (const void *q : ptrs) ok = ok && (q == nullptr || aligned(q, pack * esize));
    if (ok) break;
  }
  return pack;
}

LaunchContext context_for(fnorm_handle *h, fnorm_stream_t stream) {
  LaunchContext ctx;
  ctx.dev = h->info;
  ctx.cache = &h->cache;
  ctx.stream = reinterpret_cast<cudaStream_t>(stream);
  return ctx;
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
  const int pack = widest_pack(esize, divides, {p.x, p.dy});
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
  f.part_a = reinterpret_cast<const float *>(ws + plan.off_a);
  f.part_b = reinterpret_cast<const float *>(ws + plan.off_b);
  f.mean = reinterpret_cast<float *>(ws + plan.off_mean);
  f.c1 = reinterpret_cast<float *>(ws + plan.off_c1);
  f.c2 = reinterpret_cast<float *>(ws + plan.off_c2);
  f.c3 = reinterpret_cast<float *>(ws + plan.off_c3);
  return f;
}

BnApplyParams apply_params(const BnView &v, const BnFinalizeParams &f) {
  BnApplyParams a;
  a.shape = v.shape;
  a.mean = f.mean;
  a.c1 = f.c1;
  a.c2 = f.c2;
  a.c3 = f.c3;
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
  q.part_a = reinterpret_cast<float *>(ws + plan.off_a);
  q.part_b = reinterpret_cast<float *>(ws + plan.off_b);
  q.max_blocks = plan.max_splits;
  q.epilogue = c.desc->epilogue;
  set_channel_io(q.f, c);  // q.f.mean == nullptr: no workspace coefficients
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
  const int pack = forward ? widest_pack(dtype_size(v.dtype), v.shape.width, {c.x, c.z, c.y})
                           : widest_pack(dtype_size(v.dtype), v.shape.width, {c.x, c.dy, c.dx, c.dz});
  const BnInstance &inst = instance_or_throw(v.dtype, pack);
  bool launched = false;
  check_cuda((forward ? inst.persist_forward : inst.persist_backward)(q, ctx, &launched), inst.name);
  return launched;
}

void run_native(fnorm_handle *h, fnorm_stream_t stream, const BnCall &c) {
  const BnView &v = c.view;
  const bool sync = c.desc->comm != nullptr && c.pass != BnPass::FwdInfer;
  const NativePlan plan = plan_native(v, h->info, c.pass, sync);
  const LaunchContext ctx = context_for(h, stream);
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
    run_apply(a, v, widest_pack(esize, 0, {c.x, c.z, c.y}), true, ctx);
    return;
  }

  if (!sync && run_one_launch(plan, c, ctx, ws)) return;

  BnReduceParams r;
  r.shape = v.shape;
  r.part_a = reinterpret_cast<float *>(ws + plan.off_a);
  r.part_b = reinterpret_cast<float *>(ws + plan.off_b);
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
    run_apply(a, v, widest_pack(esize, 0, {c.x, c.z, c.y}), true, ctx);
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
    run_apply(a, v, widest_pack(esize, 0, {c.x, c.dy, c.dx, c.dz}), false, ctx);
  }
}

// The engine a call runs on. AUTO: see fnorm_batchnorm_desc_set_engine.
fnorm_bn_engine_t resolve_engine(fnorm_handle *h, const BnCall &c) {
  if (c.desc->engine != FNORM_BN_ENGINE_CUDNN) return FNORM_BN_ENGINE_NATIVE;
  FNORM_REQUIRE(c.desc->comm == nullptr || c.pass == BnPass::FwdInfer, FNORM_STATUS_NOT_SUPPORTED,
                "SyncBatchNorm (a communicator is attached) runs on the NATIVE engine only");
  FNORM_REQUIRE(cudnn_bn_built(), FNORM_STATUS_NOT_SUPPORTED_BUILD,
                "the CUDNN engine was left out of this build (cuDNN not found; meson option 'cudnn')");
  std::string why;
  FNORM_REQUIRE(cudnn_bn_supports(h, c, &why), FNORM_STATUS_NOT_SUPPORTED,
                "the CUDNN engine does not take this case: %s", why.c_str());
  return FNORM_BN_ENGINE_CUDNN;
}

size_t workspace_for(fnorm_handle *h, const BnCall &c) {
  if (resolve_engine(h, c) == FNORM_BN_ENGINE_CUDNN) return cudnn_bn_workspace_size(h, c);
  return plan_native(c.view, h->info, c.pass, c.desc->comm != nullptr).total;
}

size_t reserve_for(fnorm_handle *h, const BnCall &c) {
  if (resolve_engine(h, c) == FNORM_BN_ENGINE_CUDNN) return cudnn_bn_reserve_size(h, c);
  if (c.desc->epilogue == FNORM_BN_EPILOGUE_NONE) return 0;
  return static_cast<size_t>(ceil_div(c.view.elements(), 32)) * 4;
}

// [ptr, ptr + bytes) regions for aliasing checks.
struct Span {
  const char *name;
  const void *ptr;
  size_t bytes;
};

bool overlap(const Span &a, const Span &b) {
  if (a.ptr == nullptr || b.ptr == nullptr || a.bytes == 0 || b.bytes == 0) return false;
  const uintptr_t pa = reinterpret_cast<uintptr_t>(a.ptr), pb = reinterpret_cast<uintptr_t>(b.ptr);
  return pa < pb + b.bytes && pb < pa + a.bytes;
}

// `out` overlaps none of `others`, except being exactly one named in same_ok.
void require_disjoint(const Span &out, std::initializer_list<Span> others,
                      std::initializer_list<const char *> same_ok = {}) {
  for (const Span &o : others) {
    if (!overlap(out, o)) continue;
    bool ok = false;
    for (const char *n : same_ok) ok = ok || (std::strcmp(n, o.name) == 0 && out.ptr == o.ptr);
    FNORM_REQUIRE(ok, FNORM_STATUS_BAD_PARAM,
                  "arguments '%s' and '%s' overlap without being the same tensor", out.name,
                  o.name);
  }
}

void require_vec_aligned(const void *p, const char *name) {
  FNORM_REQUIRE(aligned(p, 4), FNORM_STATUS_BAD_PARAM,
                "argument '%s' (%p) is not 4-byte aligned (fp32 per-channel vector)", name, p);
}

void check_workspace(fnorm_handle *h, const BnCall &c) {
  const size_t need = workspace_for(h, c);
  FNORM_REQUIRE(c.workspace_bytes >= need, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
                "argument 'workspace_bytes' is %zu; this call needs %zu (ask the size query)",
                c.workspace_bytes, need);
  FNORM_REQUIRE(need == 0 || c.workspace != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument 'workspace' is NULL; this call needs %zu bytes", need);
  FNORM_REQUIRE(aligned(c.workspace, 16), FNORM_STATUS_BAD_PARAM,
                "argument 'workspace' (%p) is not 16-byte aligned", c.workspace);
}

void check_reserve(fnorm_handle *h, const BnCall &c) {
  const size_t need = reserve_for(h, c);
  if (need == 0) return;
  FNORM_REQUIRE(c.reserve != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                "argument 'reserve' is NULL; epilogue %d needs %zu bytes of reserve space (the "
                "ReLU mask)", static_cast<int>(c.desc->epilogue), need);
  FNORM_REQUIRE(c.reserve_bytes >= need, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
                "argument 'reserve_bytes' is %zu; the reserve space needs %zu bytes",
                c.reserve_bytes, need);
  FNORM_REQUIRE(aligned(c.reserve, 16), FNORM_STATUS_BAD_PARAM,
                "argument 'reserve' (%p) is not 16-byte aligned", c.reserve);
}

// Checks shared by the launches.
void require_training_count(const BnCall &c) {
  // (SyncBatchNorm: the count that matters is the global one, which the host
  // does not see.)
  FNORM_REQUIRE(c.desc->comm != nullptr || c.view.per_channel() > 1, FNORM_STATUS_BAD_PARAM,
                "argument 'x_desc': training needs more than one value per channel (N * "
                "spatial = %lld)", static_cast<long long>(c.view.per_channel()));
}

void require_vecs_aligned(std::initializer_list<std::pair<const float *, const char *>> vecs) {
  for (const auto &v : vecs) require_vec_aligned(v.first, v.second);
}

// z is given exactly when the epilogue adds it (and the rank has samples).
void require_addend(const fnorm_batchnorm_desc *bn, const void *z, bool local_empty) {
  const bool add = bn->epilogue == FNORM_BN_EPILOGUE_ADD_RELU && !local_empty;
  FNORM_REQUIRE(add == (z != nullptr), add ? FNORM_STATUS_BAD_PARAM_NULL_POINTER : FNORM_STATUS_BAD_PARAM,
                add ? "argument 'z' is NULL; the ADD_RELU epilogue adds it"
                    : "argument 'z' is given but the epilogue is not ADD_RELU");
}

// Runs a validated call on its engine, on the handle's device.
void launch(fnorm_handle *handle, fnorm_stream_t stream, const BnCall &c) {
  DeviceGuard guard(handle->device);
  if (resolve_engine(handle, c) == FNORM_BN_ENGINE_CUDNN)
    cudnn_bn_run(handle, reinterpret_cast<cudaStream_t>(stream), c);
  else
    run_native(handle, stream, c);
}

BnCall prepare(BnPass pass, fnorm_handle *handle, const fnorm_batchnorm_desc *bn,
               const fnorm_tensor_desc *x_desc) {
  FNORM_REQUIRE_NOT_NULL(handle);
  bn_check_desc(bn);
  BnCall c;
  c.pass = pass;
  c.desc = bn;
  c.view = bn_view(x_desc, "x_desc");
  return c;
}

// One size query: the workspace of `pass`, or (reserve) the reserve space.
fnorm_status_t size_query(const char *func, BnPass pass, bool reserve, fnorm_handle *handle,
                          const fnorm_batchnorm_desc *bn, const fnorm_tensor_desc *x_desc,
                          size_t *out) noexcept {
  return api_guard(func, [&] {
    BnCall c = prepare(pass, handle, bn, x_desc);
    FNORM_REQUIRE(out != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL",
                  reserve ? "reserve_bytes" : "workspace_bytes");
    *out = reserve ? reserve_for(handle, c) : workspace_for(handle, c);
  });
}

}  // namespace

void bn_check_desc(const fnorm_batchnorm_desc *bn) {
  FNORM_REQUIRE(bn != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument 'bn' is NULL");
}

BnView bn_view(const fnorm_tensor_desc *d, const char *arg) {
  FNORM_REQUIRE(d != nullptr, FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", arg);
  FNORM_REQUIRE(d->is_set, FNORM_STATUS_BAD_PARAM, "argument '%s' was never set", arg);
  FNORM_REQUIRE(d->rank >= 2, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' has rank %d; BatchNorm needs [N, C, spatial...] (rank >= 2)", arg,
                d->rank);
  BnView v;
  v.dtype = d->dtype;
  v.rank = d->rank;
  std::copy(d->dims, d->dims + d->rank, v.dims);
  v.n = d->dims[0];
  v.c = d->dims[1];
  for (int32_t i = 2; i < d->rank; ++i) v.spatial *= d->dims[i];
  int32_t nchw[FNORM_MAX_RANK], nhwc[FNORM_MAX_RANK];
  for (int32_t i = 0; i < d->rank; ++i) nchw[i] = i;
  nhwc[0] = 0;  // N, spatial..., C (fastest)
  for (int32_t i = 2; i < d->rank; ++i) nhwc[i - 1] = i;
  nhwc[d->rank - 1] = 1;
  const bool cf = strides_match(d, nchw), cl = strides_match(d, nhwc);
  if (v.spatial == 1 && (cf || cl)) {
    v.channels_last = true;
    v.shape = BnShape{v.n, v.c, 1, v.c};
  } else if (cf) {
    v.shape = BnShape{v.n, v.c * v.spatial, v.spatial, v.c};
  } else if (cl) {
    v.channels_last = true;
    v.shape = BnShape{v.n * v.spatial, v.c, 1, v.c};
  } else {
    std::string s;
    for (int32_t i = 0; i < d->rank; ++i)
      s += (i ? "," : "") + std::to_string(static_cast<long long>(d->strides[i]));
    fail(FNORM_STATUS_NOT_SUPPORTED,
         "argument '%s': strides [%s] are neither packed channels-first (NCHW) nor packed "
         "channels-last (NHWC)", arg, s.c_str());
  }
  return v;
}

void bn_require_same(const BnView &x, const fnorm_tensor_desc *other, const char *arg) {
  const BnView o = bn_view(other, arg);
  FNORM_REQUIRE(o.dtype == x.dtype, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' has dtype %s; x_desc has %s", arg, dtype_name(o.dtype),
                dtype_name(x.dtype));
  bool same = o.rank == x.rank;
  for (int32_t i = 0; same && i < x.rank; ++i) same = o.dims[i] == x.dims[i];
  FNORM_REQUIRE(same, FNORM_STATUS_BAD_PARAM_SHAPE, "argument '%s' has other sizes than x_desc",
                arg);
  FNORM_REQUIRE(o.channels_last == x.channels_last, FNORM_STATUS_BAD_PARAM_SHAPE,
                "argument '%s' is %s but x_desc is %s", arg,
                o.channels_last ? "channels-last" : "channels-first",
                x.channels_last ? "channels-last" : "channels-first");
}

}  // namespace fnorm

using fnorm::BnCall;
using fnorm::BnPass;

extern "C" {

FNORM_API fnorm_status_t fnorm_batchnorm_desc_create(fnorm_batchnorm_desc_t *desc) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    *desc = new fnorm_batchnorm_desc();
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_destroy(fnorm_batchnorm_desc_t desc) {
  delete desc;
  return FNORM_STATUS_SUCCESS;
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_set(fnorm_batchnorm_desc_t desc,
                                                  fnorm_bn_epilogue_t epilogue, double epsilon,
                                                  fnorm_bn_average_t average, double momentum) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(epilogue == FNORM_BN_EPILOGUE_NONE || epilogue == FNORM_BN_EPILOGUE_RELU ||
                      epilogue == FNORM_BN_EPILOGUE_ADD_RELU,
                  FNORM_STATUS_BAD_PARAM, "argument 'epilogue' has unknown value %d",
                  static_cast<int>(epilogue));
    FNORM_REQUIRE(std::isfinite(epsilon) && epsilon >= 0.0, FNORM_STATUS_BAD_PARAM,
                  "argument 'epsilon' is %g; it must be finite and >= 0", epsilon);
    FNORM_REQUIRE(average == FNORM_BN_AVERAGE_EXPONENTIAL || average == FNORM_BN_AVERAGE_CUMULATIVE,
                  FNORM_STATUS_BAD_PARAM, "argument 'average' has unknown value %d",
                  static_cast<int>(average));
    FNORM_REQUIRE(momentum >= 0.0 && momentum <= 1.0, FNORM_STATUS_BAD_PARAM,
                  "argument 'momentum' is %g; it must be in [0, 1]", momentum);
    desc->epilogue = epilogue;
    desc->epsilon = epsilon;
    desc->average = average;
    desc->momentum = momentum;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_get(fnorm_batchnorm_desc_t desc,
                                                  fnorm_bn_epilogue_t *epilogue, double *epsilon,
                                                  fnorm_bn_average_t *average, double *momentum) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (epilogue) *epilogue = desc->epilogue;
    if (epsilon) *epsilon = desc->epsilon;
    if (average) *average = desc->average;
    if (momentum) *momentum = desc->momentum;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_set_engine(fnorm_batchnorm_desc_t desc,
                                                         fnorm_bn_engine_t engine) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE(engine == FNORM_BN_ENGINE_AUTO || engine == FNORM_BN_ENGINE_NATIVE ||
                      engine == FNORM_BN_ENGINE_CUDNN,
                  FNORM_STATUS_BAD_PARAM, "argument 'engine' has unknown value %d",
                  static_cast<int>(engine));
    desc->engine = engine;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_get_engine(fnorm_batchnorm_desc_t desc,
                                                         fnorm_bn_engine_t *engine) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE_NOT_NULL(engine);
    *engine = desc->engine;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_set_comm(fnorm_batchnorm_desc_t desc,
                                                       struct ncclComm *comm, uint32_t flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    FNORM_REQUIRE((flags & ~static_cast<uint32_t>(FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS)) == 0,
                  FNORM_STATUS_BAD_PARAM, "argument 'flags' has unknown bits 0x%x", flags);
    FNORM_REQUIRE(comm == nullptr || fnorm::nccl_built(), FNORM_STATUS_NOT_SUPPORTED_BUILD,
                  "SyncBatchNorm was left out of this build (NCCL not found; meson option 'nccl')");
    desc->comm = comm;
    desc->sync_flags = flags;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_desc_get_comm(fnorm_batchnorm_desc_t desc,
                                                       struct ncclComm **comm, uint32_t *flags) {
  return fnorm::api_guard(__func__, [&] {
    FNORM_REQUIRE_NOT_NULL(desc);
    if (comm) *comm = desc->comm;
    if (flags) *flags = desc->sync_flags;
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes) {
  return fnorm::size_query(__func__, BnPass::FwdTrain, false, handle, bn, x_desc, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer_workspace_size(fnorm_handle_t handle,
                                                                  fnorm_batchnorm_desc_t bn,
                                                                  fnorm_tensor_desc_t x_desc,
                                                                  size_t *workspace_bytes) {
  return fnorm::size_query(__func__, BnPass::FwdInfer, false, handle, bn, x_desc, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_bwd_workspace_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *workspace_bytes) {
  return fnorm::size_query(__func__, BnPass::Bwd, false, handle, bn, x_desc, workspace_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_reserve_space_size(fnorm_handle_t handle,
                                                            fnorm_batchnorm_desc_t bn,
                                                            fnorm_tensor_desc_t x_desc,
                                                            size_t *reserve_bytes) {
  return fnorm::size_query(__func__, BnPass::FwdTrain, true, handle, bn, x_desc, reserve_bytes);
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_train(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, float *running_mean, float *running_var, int64_t *num_batches_tracked,
    fnorm_tensor_desc_t y_desc, void *y, float *saved_mean, float *saved_invstd, void *workspace,
    size_t workspace_bytes, void *reserve, size_t reserve_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    BnCall c = prepare(BnPass::FwdTrain, handle, bn, x_desc);
    bn_require_same(c.view, y_desc, "y_desc");
    if (bn->comm != nullptr) nccl_check_comm(handle, bn->comm);
    // SyncBatchNorm: a rank without samples passes x and y as NULL.
    c.local_empty = bn->comm != nullptr && x == nullptr && y == nullptr && z == nullptr;
    if (!c.local_empty) {
      FNORM_REQUIRE_NOT_NULL(x);
      FNORM_REQUIRE_NOT_NULL(y);
    }
    require_addend(bn, z, c.local_empty);
    FNORM_REQUIRE((running_mean == nullptr) == (running_var == nullptr), FNORM_STATUS_BAD_PARAM,
                  "arguments 'running_mean' and 'running_var' must be given together");
    FNORM_REQUIRE(!(running_mean != nullptr && bn->average == FNORM_BN_AVERAGE_CUMULATIVE &&
                    num_batches_tracked == nullptr),
                  FNORM_STATUS_BAD_PARAM_NULL_POINTER,
                  "argument 'num_batches_tracked' is NULL; CUMULATIVE averaging reads it");
    FNORM_REQUIRE(aligned(num_batches_tracked, 8), FNORM_STATUS_BAD_PARAM,
                  "argument 'num_batches_tracked' (%p) is not 8-byte aligned", static_cast<void *>(num_batches_tracked));
    require_training_count(c);
    require_vecs_aligned({{gamma, "gamma"}, {beta, "beta"}, {running_mean, "running_mean"},
                          {running_var, "running_var"}, {saved_mean, "saved_mean"},
                          {saved_invstd, "saved_invstd"}});
    c.x = x;
    c.z = z;
    c.y = y;
    c.gamma = gamma;
    c.beta = beta;
    c.running_mean = running_mean;
    c.running_var = running_var;
    c.num_batches_tracked = num_batches_tracked;
    c.saved_mean = saved_mean;
    c.saved_invstd = saved_invstd;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    c.reserve = reserve;
    c.reserve_bytes = reserve_bytes;
    check_workspace(handle, c);
    if (!c.local_empty) check_reserve(handle, c);
    const size_t data = c.view.bytes(), vec = static_cast<size_t>(c.view.c) * 4;
    const Span sx{"x", x, data}, sz{"z", z, data}, sy{"y", y, data},
        sr{"reserve", c.reserve, reserve_for(handle, c)}, sw{"workspace", workspace, workspace_bytes},
        srm{"running_mean", running_mean, vec}, srv{"running_var", running_var, vec},
        ssm{"saved_mean", saved_mean, vec}, ssi{"saved_invstd", saved_invstd, vec};
    require_disjoint(sy, {sx, sz, sr, sw, srm, srv, ssm, ssi}, {"x", "z"});
    require_disjoint(sr, {sx, sz, sw, srm, srv, ssm, ssi});
    require_disjoint(srm, {srv, ssm, ssi, sw});
    require_disjoint(srv, {ssm, ssi, sw});
    require_disjoint(ssm, {ssi, sw});
    require_disjoint(ssi, {sw});
    launch(handle, stream, c);
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_fwd_infer(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, const void *z, const float *gamma,
    const float *beta, const float *running_mean, const float *running_var,
    fnorm_tensor_desc_t y_desc, void *y, void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    BnCall c = prepare(BnPass::FwdInfer, handle, bn, x_desc);
    bn_require_same(c.view, y_desc, "y_desc");
    FNORM_REQUIRE_NOT_NULL(x);
    FNORM_REQUIRE_NOT_NULL(y);
    FNORM_REQUIRE_NOT_NULL(running_mean);
    FNORM_REQUIRE_NOT_NULL(running_var);
    require_addend(bn, z, false);
    require_vecs_aligned({{gamma, "gamma"}, {beta, "beta"}, {running_mean, "running_mean"},
                          {running_var, "running_var"}});
    c.x = x;
    c.z = z;
    c.y = y;
    c.gamma = gamma;
    c.beta = beta;
    c.running_mean_in = running_mean;
    c.running_var_in = running_var;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    check_workspace(handle, c);
    const size_t data = c.view.bytes();
    const Span sx{"x", x, data}, sz{"z", z, data}, sy{"y", y, data},
        sw{"workspace", workspace, workspace_bytes};
    require_disjoint(sy, {sx, sz, sw}, {"x", "z"});
    launch(handle, stream, c);
  });
}

FNORM_API fnorm_status_t fnorm_batchnorm_bwd(
    fnorm_handle_t handle, fnorm_stream_t stream, fnorm_batchnorm_desc_t bn,
    fnorm_tensor_desc_t x_desc, const void *x, fnorm_tensor_desc_t dy_desc, const void *dy,
    const void *y, const float *gamma, const float *beta, const float *saved_mean,
    const float *saved_invstd, const void *reserve,
    size_t reserve_bytes, fnorm_tensor_desc_t dx_desc, void *dx, void *dz, float *dgamma,
    float *dbeta, void *workspace, size_t workspace_bytes) {
  return fnorm::api_guard(__func__, [&] {
    using namespace fnorm;
    BnCall c = prepare(BnPass::Bwd, handle, bn, x_desc);
    bn_require_same(c.view, dy_desc, "dy_desc");
    bn_require_same(c.view, dx_desc, "dx_desc");
    if (bn->comm != nullptr) nccl_check_comm(handle, bn->comm);
    // SyncBatchNorm: a rank without samples passes x, dy and dx as NULL.
    c.local_empty = bn->comm != nullptr && x == nullptr && dy == nullptr && dx == nullptr && dz == nullptr;
    if (!c.local_empty) {
      FNORM_REQUIRE_NOT_NULL(x);
      FNORM_REQUIRE_NOT_NULL(dy);
      FNORM_REQUIRE_NOT_NULL(dx);
    }
    FNORM_REQUIRE_NOT_NULL(saved_mean);
    FNORM_REQUIRE_NOT_NULL(saved_invstd);
    FNORM_REQUIRE(dz == nullptr || bn->epilogue == FNORM_BN_EPILOGUE_ADD_RELU, FNORM_STATUS_BAD_PARAM,
                  "argument 'dz' is given but the epilogue is not ADD_RELU");
    require_training_count(c);
    require_vecs_aligned({{gamma, "gamma"}, {beta, "beta"}, {saved_mean, "saved_mean"},
                          {saved_invstd, "saved_invstd"}, {dgamma, "dgamma"}, {dbeta, "dbeta"}});
    c.x = x;
    c.dy = dy;
    c.dx = dx;
    c.dz = dz;
    c.y_in = y;
    c.gamma = gamma;
    c.beta = beta;
    c.saved_mean_in = saved_mean;
    c.saved_invstd_in = saved_invstd;
    c.dgamma = dgamma;
    c.dbeta = dbeta;
    c.reserve = const_cast<void *>(reserve);
    c.reserve_bytes = reserve_bytes;
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    check_workspace(handle, c);
    if (!c.local_empty) check_reserve(handle, c);
    const size_t data = c.view.bytes(), vec = static_cast<size_t>(c.view.c) * 4;
    const Span sx{"x", x, data}, sdy{"dy", dy, data}, sdx{"dx", dx, data}, sdz{"dz", dz, data},
        sr{"reserve", c.reserve, reserve_for(handle, c)}, sw{"workspace", workspace, workspace_bytes},
        sdg{"dgamma", dgamma, vec}, sdb{"dbeta", dbeta, vec}, sm{"saved_mean", saved_mean, vec},
        si{"saved_invstd", saved_invstd, vec}, sg{"gamma", gamma, vec};
    require_disjoint(sdx, {sx, sdy, sdz, sr, sw, sdg, sdb, sm, si, sg}, {"dy", "x"});
    require_disjoint(sdz, {sx, sr, sw, sdg, sdb, sm, si, sg});
    require_disjoint(sdz, {sdy}, {"dy"});
    require_disjoint(sdg, {sdb, sw, sm, si, sg, sx, sdy, sr});
    require_disjoint(sdb, {sw, sm, si, sg, sx, sdy, sr});
    require_disjoint(sw, {sx, sdy, sr, sm, si, sg});
    launch(handle, stream, c);
  });
}

}  // extern "C"
