/* SPDX-License-Identifier: Apache-2.0 */
// The torch glue of LayerNorm / RMSNorm (and add & norm, and the quantized forward): its ops' schemas and CUDA, autograd and
// autocast kernels, and its eager entry points (common.hpp, ops.cpp).
#include "common.hpp"

namespace fnorm_torch {
namespace {

fnorm_norm_desc_t norm_desc(int64_t mode, int64_t axis, double eps, int64_t flags) {
  static std::unordered_map<Key, fnorm_norm_desc_t, KeyHash> cache;
  Key key;
  key.add(mode);
  key.add(axis);
  key.add_double(eps);
  key.add(flags);
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  fnorm_norm_desc_t d = nullptr;
  check(abi.fnorm_norm_desc_create(&d), "fnorm_norm_desc_create");
  check(abi.fnorm_norm_desc_set(d, static_cast<fnorm_norm_mode_t>(mode), static_cast<int32_t>(axis), eps),
        "fnorm_norm_desc_set (eps)");
  if (flags) check(abi.fnorm_norm_desc_set_flags(d, static_cast<uint32_t>(flags)), "fnorm_norm_desc_set_flags");
  cache.emplace(key, d);
  return d;
}

// The parameters' descriptor: weight's, else bias's (they share it), null
// with neither.
fnorm_tensor_desc_t param_desc(const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias) {
  const at::Tensor *w = given(weight) ? &*weight : (given(bias) ? &*bias : nullptr);
  return w ? desc_of(*w, "weight") : nullptr;
}

// fnorm_norm_fwd's workspace for these descriptors (asked once per handle
// and descriptors).
size_t norm_fwd_workspace_bytes(fnorm_handle_t h, fnorm_norm_desc_t nd, fnorm_tensor_desc_t xd,
                                fnorm_tensor_desc_t yd) {
  return cached_size(1, {h, nd, xd, yd}, [&] {
    size_t n = 0;
    check(abi.fnorm_norm_fwd_workspace_size(h, nd, xd, yd, &n), "fnorm_norm_fwd_workspace_size");
    return n;
  });
}

// What a norm Function's backward needs of its call besides the tensors:
// mode, axis, flags and the edges of weight and bias (-1: absent), packed
// in the one integer of its saved data.
struct SavedCall {
  int64_t mode, axis, flags, ew, eb;
  int64_t pack() const { return mode | (axis << 4) | (flags << 20) | ((ew + 1) << 28) | ((eb + 1) << 32); }
  static SavedCall unpack(int64_t m) {
    return {m & 0xf, (m >> 4) & 0xffff, (m >> 20) & 0xff, ((m >> 28) & 0xf) - 1, ((m >> 32) & 0xf) - 1};
  }
};

// Whether the eager entries can take these parameters: each absent or
// packed on x's device, sized as x's dimensions from axis, in x's dtype or
// float32, weight and bias in one dtype.
bool params_fit(const c10::optional<at::Tensor> &w, const c10::optional<at::Tensor> &b, const at::Tensor &x,
                int64_t axis) {
  const c10::optional<at::Tensor> &p = w.has_value() ? w : b;
  if (!p.has_value()) return true;
  const auto pt = p->scalar_type();
  if ((pt != x.scalar_type() && pt != at::kFloat) || (w.has_value() && b.has_value() && b->scalar_type() != pt))
    return false;
  for (auto *t : {&w, &b})
    if (t->has_value() &&
        ((*t)->device() != x.device() || (*t)->sizes() != x.sizes().slice(axis) || !(*t)->is_contiguous()))
      return false;
  return true;
}

// ---- LayerNorm / RMSNorm --------------------------------------------------
// x: the normalized dimensions [axis, dim) packed, the rows collapsing into one
// stride (the callers make it so). weight/bias: packed, sized as the
// normalized dimensions, x's dtype or float32. flags: fnorm_norm_flag_t.
// mean and rstd are undefined where not written (without stats; mean for
// RMSNorm).
std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_fwd_impl(const at::Tensor &x,
                                                             const c10::optional<at::Tensor> &weight,
                                                             const c10::optional<at::Tensor> &bias, int64_t mode,
                                                             int64_t axis, double eps, int64_t flags, bool stats) {
  c10::cuda::CUDAGuard guard(x.device());
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.size(d);
  at::Tensor y = new_like(x);
  at::Tensor rstd = stats ? new_vec(rows, at::kFloat, x) : at::Tensor();
  at::Tensor mean = stats && mode == FNORM_NORM_LAYERNORM ? new_vec(rows, at::kFloat, x) : at::Tensor();
  auto h = handle_for(x);
  auto nd = norm_desc(mode, axis, eps, flags);
  auto xd = desc_of(x, "x");
  auto yd = y.strides() == x.strides() ? xd : desc_of(y, "y");
  auto wd = param_desc(weight, bias);
  const size_t ws_bytes = norm_fwd_workspace_bytes(h, nd, xd, yd);
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_norm_fwd(h, stream_of(x), nd, xd, ptr(x), nullptr, nullptr, wd, ptr(weight), ptr(bias), yd,
                           mptr(y), stats && mode == FNORM_NORM_LAYERNORM ? static_cast<float *>(mptr(mean)) : nullptr,
                           stats ? static_cast<float *>(mptr(rstd)) : nullptr, mptr(ws), ws_bytes),
        "fnorm_norm_fwd");
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_fwd(const at::Tensor &x, const c10::optional<at::Tensor> &weight,
                                                        const c10::optional<at::Tensor> &bias, int64_t mode,
                                                        int64_t axis, double eps, int64_t flags) {
  TORCH_CHECK(x.is_cuda(), "fusednorm::norm_fwd: x must be a CUDA tensor");
  same_device(weight, x, "weight");
  same_device(bias, x, "bias");
  // A compiled graph may hand over other strides than the traced ones: y
  // keeps the layout the fake kernel promised (empty_like(x)).
  const bool packed = rowwise(x, axis);
  auto r = norm_fwd_impl(packed ? x : x.contiguous(), weight, bias, mode, axis, eps, flags, true);
  if (!packed) std::get<0>(r) = at::empty_like(x).copy_(std::get<0>(r));
  defined_or_empty(std::get<1>(r), x, at::kFloat);
  return r;
}

// LayerNorm / RMSNorm (with the residual add when given) writing y in
// `dtype` (float8_e4m3fn, float8_e5m2, int8): static per-tensor scaling with
// `scale` (a float32 tensor of one element), per-token otherwise (scales, of
// x's sizes before `axis`, returned). sum: x + residual in x's layout (empty
// without residual); amax: a 0-dim float32 when asked (empty otherwise).
// x must be row-wise and residual have x's strides (the Python side makes it
// so). Forward only: the codes carry no gradient.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> norm_quant(
    const at::Tensor &x, const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias,
    const c10::optional<at::Tensor> &residual, const c10::optional<at::Tensor> &scale, int64_t mode, int64_t axis,
    double eps, at::ScalarType dtype, bool want_amax) {
  TORCH_CHECK(x.is_cuda(), "fusednorm::norm_quant: x must be a CUDA tensor");
  TORCH_CHECK(rowwise(x, axis), "fusednorm::norm_quant: x's rows must collapse into one stride");
  same_device(weight, x, "weight");
  same_device(bias, x, "bias");
  same_device(residual, x, "residual");
  same_device(scale, x, "scale");
  const bool per_token = !given(scale);
  if (!per_token)
    TORCH_CHECK(scale->scalar_type() == at::kFloat && scale->numel() == 1,
                "fusednorm::norm_quant: scale must be a float32 tensor of one element");
  if (given(residual))
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->strides() == x.strides() &&
                    residual->scalar_type() == x.scalar_type(),
                "fusednorm::norm_quant: residual must have x's dtype, sizes and strides");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = at::empty(x.sizes(), x.options().dtype(dtype));
  at::Tensor scales = per_token ? at::empty(x.sizes().slice(0, axis), x.options().dtype(at::kFloat))
                                : empty0(x, at::kFloat);
  at::Tensor sum =
      given(residual) ? at::empty_strided(x.sizes(), x.strides(), x.options()) : empty0(x, x.scalar_type());
  at::Tensor amax = want_amax ? at::empty({}, x.options().dtype(at::kFloat)) : empty0(x, at::kFloat);
  auto h = handle_for(x);
  auto nd = norm_desc(mode, axis, eps, 0);
  auto xd = desc_of(x, "x");
  auto yd = desc_of(y, "y");
  auto wd = param_desc(weight, bias);
  const auto scaling = per_token ? FNORM_QUANT_SCALING_PER_TOKEN : FNORM_QUANT_SCALING_PER_TENSOR;
  size_t ws_bytes = cached_size(per_token ? 11 : 10, {h, nd, xd, yd}, [&] {
    size_t n = 0;
    check(abi.fnorm_norm_fwd_quant_workspace_size(h, nd, xd, yd, scaling, &n), "fnorm_norm_fwd_quant_workspace_size");
    return n;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  float *scale_ptr = per_token ? static_cast<float *>(mptr(scales)) : static_cast<float *>(mptr(scale));
  check(abi.fnorm_norm_fwd_quant(h, stream_of(x), nd, xd, ptr(x), ptr(residual),
                                 given(residual) ? mptr(sum) : nullptr, wd, ptr(weight), ptr(bias), yd, mptr(y),
                                 scaling, scale_ptr, want_amax ? static_cast<float *>(mptr(amax)) : nullptr, nullptr,
                                 nullptr, mptr(ws), ws_bytes),
        "fnorm_norm_fwd_quant");
  return {y, scales, sum, amax};
}

// dgamma / dbeta undefined where not computed.
std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_bwd_impl(const at::Tensor &dy, const at::Tensor &x,
                                                             const at::Tensor &mean, const at::Tensor &rstd,
                                                             const c10::optional<at::Tensor> &weight,
                                                             const c10::optional<at::Tensor> &bias, int64_t mode,
                                                             int64_t axis, bool need_dgamma, bool need_dbeta,
                                                             int64_t flags,
                                                             const c10::optional<at::Tensor> &dsum = c10::nullopt) {
  TORCH_CHECK(dy.is_cuda(), "fusednorm::norm_bwd: dy must be a CUDA tensor");
  const bool has_dsum = given(dsum);
  if (has_dsum) {
    same_device(dsum, x, "dsum");
    TORCH_CHECK(dsum->sizes() == x.sizes() && dsum->scalar_type() == x.scalar_type(),
                "fusednorm::norm_bwd: dsum must have x's sizes and dtype");
  }
  // dy, x and dsum read through row-wise descriptors (dsum through dy's)
  if (!rowwise(x, axis) || !rowwise(dy, axis) || (has_dsum && dsum->strides() != dy.strides())) {
    c10::optional<at::Tensor> ds;
    if (has_dsum) ds = dsum->contiguous();
    auto r = norm_bwd_impl(dy.contiguous(), x.contiguous(), mean, rstd, weight, bias, mode, axis, need_dgamma,
                           need_dbeta, flags, ds);
    std::get<0>(r) = at::empty_like(x).copy_(std::get<0>(r));
    return r;
  }
  c10::cuda::CUDAGuard guard(x.device());
  bool has_w = given(weight);
  bool has_b = given(bias);
  need_dgamma = need_dgamma && has_w;
  need_dbeta = need_dbeta && mode == FNORM_NORM_LAYERNORM && (has_w || has_b);
  at::Tensor dx = new_like(x);
  const at::Tensor *w = has_w ? &*weight : (has_b ? &*bias : nullptr);
  at::Tensor dgamma = need_dgamma ? new_packed(*w) : at::Tensor();
  at::Tensor dbeta = need_dbeta ? new_packed(*w) : at::Tensor();
  auto h = handle_for(x);
  auto nd = norm_desc(mode, axis, 1e-5, flags);  // backward uses the saved rstd, not epsilon
  auto xd = desc_of(x, "x");
  auto dyd = dy.strides() == x.strides() ? xd : desc_of(dy, "dy");
  auto dxd = dx.strides() == x.strides() ? xd : desc_of(dx, "dx");
  auto wd = (w && (has_w || need_dbeta)) ? desc_of(*w, "weight") : nullptr;
  size_t ws_bytes = cached_size(2, {h, nd, xd, wd}, [&] {
    size_t n = 0;
    check(abi.fnorm_norm_bwd_workspace_size(h, nd, xd, wd, &n), "fnorm_norm_bwd_workspace_size");
    return n;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_norm_bwd(h, stream_of(x), nd, xd, ptr(x), dyd, ptr(dy),
                           mode == FNORM_NORM_LAYERNORM ? static_cast<const float *>(ptr(mean)) : nullptr,
                           static_cast<const float *>(ptr(rstd)), wd, has_w ? ptr(weight) : nullptr,
                           has_dsum ? ptr(dsum) : nullptr, dxd,
                           mptr(dx), need_dgamma ? mptr(dgamma) : nullptr, need_dbeta ? mptr(dbeta) : nullptr,
                           mptr(ws), ws_bytes),
        "fnorm_norm_bwd");
  return {dx, dgamma, dbeta};
}

// The registered op's kernel: every output a tensor.
std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_bwd(const at::Tensor &dy, const at::Tensor &x,
                                                        const at::Tensor &mean, const at::Tensor &rstd,
                                                        const c10::optional<at::Tensor> &weight,
                                                        const c10::optional<at::Tensor> &bias, int64_t mode,
                                                        int64_t axis, bool need_dgamma, bool need_dbeta,
                                                        int64_t flags, const c10::optional<at::Tensor> &dsum) {
  auto r = norm_bwd_impl(dy, x, mean, rstd, weight, bias, mode, axis, need_dgamma, need_dbeta, flags, dsum);
  defined_or_empty(std::get<1>(r), x, x.scalar_type());
  defined_or_empty(std::get<2>(r), x, x.scalar_type());
  return r;
}

at::Tensor call_norm_fwd_y(const at::Tensor &x, const c10::optional<at::Tensor> &w,
                           const c10::optional<at::Tensor> &b, int64_t mode, int64_t axis, double eps,
                           int64_t flags) {
  TORCH_CHECK(x.is_cuda(), "fusednorm::norm: x must be a CUDA tensor");
  same_device(w, x, "weight");
  same_device(b, x, "bias");
  return std::get<0>(norm_fwd_impl(x, w, b, mode, axis, eps, flags, false));
}

// The forward again in ATen's differentiable operators, in fp32 (the library's
// math), rounded to x's dtype: what double backward differentiates.
at::Tensor norm_reference(const at::Tensor &x, const at::Tensor &w, const at::Tensor &b, int64_t mode, int64_t axis,
                          double eps, int64_t flags) {
  at::Tensor xf = x.to(at::kFloat);
  c10::optional<at::Tensor> wf, bf;
  if (w.defined()) wf = (flags & FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA) ? w.to(at::kFloat) + 1 : w.to(at::kFloat);
  if (b.defined()) bf = b.to(at::kFloat);
  auto shape = x.sizes().slice(axis);
  if (flags & FNORM_NORM_FLAG_ROUND_XHAT) {  // x_hat rounded to x's dtype before the scale
    at::Tensor xh = mode == FNORM_NORM_LAYERNORM ? at::layer_norm(xf, shape, c10::nullopt, c10::nullopt, eps)
                                                 : at::rms_norm(xf, shape, c10::nullopt, eps);
    at::Tensor y = xh.to(x.scalar_type()).to(at::kFloat);
    if (wf) y = y * *wf;
    if (bf) y = y + *bf;
    return y.to(x.scalar_type());
  }
  at::Tensor y = mode == FNORM_NORM_LAYERNORM ? at::layer_norm(xf, shape, wf, bf, eps)
                                              : at::rms_norm(xf, shape, wf, eps);
  return y.to(x.scalar_type());
}

// The registered op's autograd kernel: it redispatches (fake tensors under
// torch.compile reach the fake kernels).
class NormFunction : public torch::autograd::Function<NormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x,
                            const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias,
                            int64_t mode, int64_t axis, double eps, int64_t flags) {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::norm_fwd", "")
                         .typed<decltype(norm_fwd)>();
    at::Tensor y, mean, rstd;
    std::tie(y, mean, rstd) = op.call(x, weight, bias, mode, axis, eps, flags);
    ctx->save_for_backward({x, mean, rstd, weight.value_or(at::Tensor()), bias.value_or(at::Tensor())});
    int64_t ew = given(weight) ? 1 : -1;
    int64_t eb = given(bias) ? (given(weight) ? 2 : 1) : -1;
    ctx->saved_data["m"] = SavedCall{mode, axis, flags, ew, eb}.pack();
    ctx->saved_data["e"] = eps;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto [mode, axis, flags, ew, eb] = SavedCall::unpack(ctx->saved_data["m"].toInt());
    bool need_x = ctx->needs_input_grad(0), need_w = needs(ctx, ew), need_b = needs(ctx, eb);
    if (double_backward(false, saved[0])) {  // create_graph: a differentiable gradient
      std::vector<std::pair<size_t, at::Tensor>> wrt;
      if (need_x) wrt.emplace_back(0, saved[0]);
      if (need_w) wrt.emplace_back(1, saved[3]);
      if (need_b) wrt.emplace_back(2, saved[4]);
      at::Tensor ref = norm_reference(saved[0], saved[3], saved[4], mode, axis, ctx->saved_data["e"].toDouble(), flags);
      return grads_with_graph(ref, grads[0], wrt, 7);
    }
    c10::optional<at::Tensor> w, b;
    if (saved[3].defined()) w = saved[3];
    if (saved[4].defined()) b = saved[4];
    at::Tensor dy = grads[0];  // the library reads dy through x's (or its own packed) descriptor
    if (!rowwise(dy, axis)) dy = dy.contiguous();
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::norm_bwd", "")
                         .typed<decltype(norm_bwd)>();
    at::Tensor dx, dgamma, dbeta;
    std::tie(dx, dgamma, dbeta) =
        op.call(dy, saved[0], saved[1], saved[2], w, b, mode, axis, need_w, need_b, flags, c10::nullopt);
    return {need_x ? dx : at::Tensor(), need_w ? dgamma : at::Tensor(), need_b ? dbeta : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The eager entries' autograd nodes (NormBackward; AddNormBackward below,
// both a NormNode), made as torch's generated nodes are (a Node holding its
// saved variables; edges x, weight, bias, an absent one empty) rather than
// through torch::autograd::Function, whose generic
// bookkeeping (the context's dictionary and variable lists, materialized
// zero gradients, the node's demangled name on every call) is host time a
// torch.nn module does not pay. A gradient that is not defined gives none
// (as torch's nodes). Compiled autograd does not take this node: a compiled
// forward takes the registered op's path (NormFunction) instead.
struct NormNode : public torch::autograd::Node {
  // in_: what was normalized (x; the add & norm node's sum, saved as its
  // output); the statistics, the parameters (empty where absent), the call.
  torch::autograd::SavedVariable in_, mean_, rstd_, weight_, bias_;
  int64_t mode = 0, axis = 0, flags = 0;
  double eps = 0;

  void save(const at::Tensor &in, bool in_is_output, const at::Tensor &mean, const at::Tensor &rstd,
            const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias, int64_t mode_,
            int64_t axis_, double eps_, int64_t flags_) {
    in_ = torch::autograd::SavedVariable(in, in_is_output);
    mean_ = torch::autograd::SavedVariable(mean, false);
    rstd_ = torch::autograd::SavedVariable(rstd, false);
    if (given(weight)) weight_ = torch::autograd::SavedVariable(*weight, false);
    if (given(bias)) bias_ = torch::autograd::SavedVariable(*bias, false);
    mode = mode_;
    axis = axis_;
    flags = flags_;
    eps = eps_;
  }

  // The node's mutex, as torch's nodes take it: two backwards through one
  // retained graph may run it from two threads.
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto *v : {&in_, &mean_, &rstd_, &weight_, &bias_}) v->reset_data();
  }
};

struct NormBackward final : public NormNode {
  std::string name() const override { return "fusednorm::NormBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    torch::autograd::variable_list out(3);
    const at::Tensor x = in_.unpack(), mean = mean_.unpack(), rstd = rstd_.unpack();
    const at::Tensor w = weight_.unpack(), b = bias_.unpack();
    const bool need_x = task_should_compute_output(0);
    const bool need_w = w.defined() && task_should_compute_output(1);
    const bool need_b = b.defined() && task_should_compute_output(2);
    if (!grads[0].defined() || !(need_x || need_w || need_b)) return out;
    if (double_backward(true, x)) {  // create_graph: a differentiable gradient
      std::vector<std::pair<size_t, at::Tensor>> wrt;
      if (need_x) wrt.emplace_back(0, x);
      if (need_w) wrt.emplace_back(1, w);
      if (need_b) wrt.emplace_back(2, b);
      return grads_with_graph(norm_reference(x, w, b, mode, axis, eps, flags), grads[0], wrt, 3);
    }
    at::Tensor dy = grads[0];  // the library reads dy through x's (or its own packed) descriptor
    if (!rowwise(dy, axis)) dy = dy.contiguous();
    c10::optional<at::Tensor> wo, bo;
    if (w.defined()) wo = w;
    if (b.defined()) bo = b;
    at::Tensor dx, dgamma, dbeta;
    std::tie(dx, dgamma, dbeta) = norm_bwd_impl(dy, x, mean, rstd, wo, bo, mode, axis, need_w, need_b, flags);
    if (need_x) out[0] = std::move(dx);
    if (need_w) out[1] = std::move(dgamma);
    if (need_b) out[2] = std::move(dbeta);
    return out;
  }
};

// y of the eager entry with its autograd node (some input needs a gradient).
at::Tensor norm_eager_autograd(const at::Tensor &x, const c10::optional<at::Tensor> &weight,
                               const c10::optional<at::Tensor> &bias, int64_t mode, int64_t axis, double eps,
                               int64_t flags) {
  at::Tensor y, mean, rstd;
  std::tie(y, mean, rstd) = norm_fwd_impl(x, weight, bias, mode, axis, eps, flags, true);
  auto node = std::shared_ptr<NormBackward>(new NormBackward(), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
  torch::autograd::set_history(y, node);
  node->save(x, false, mean, rstd, weight, bias, mode, axis, eps, flags);
  return y;
}

at::Tensor norm_autograd(const at::Tensor &x, const c10::optional<at::Tensor> &weight,
                         const c10::optional<at::Tensor> &bias, int64_t mode, int64_t axis, double eps,
                         int64_t flags) {
  return NormFunction::apply(x, weight, bias, mode, axis, eps, flags);
}

// Autocast: layer_norm is on autocast's fp32 list (x, weight and bias run in
// float32, the output is float32); rms_norm is on no list (x's dtype).
at::Tensor norm_autocast(const at::Tensor &x, const c10::optional<at::Tensor> &weight,
                         const c10::optional<at::Tensor> &bias, int64_t mode, int64_t axis, double eps,
                         int64_t flags) {
  // Dispatched here means autocast is on (is_autocast_enabled would read
  // false under the guard below, which excludes this very key).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::norm", "")
                       .typed<decltype(norm_autograd)>();
  if (mode != FNORM_NORM_LAYERNORM) return op.call(x, weight, bias, mode, axis, eps, flags);
  return op.call(at::autocast::cached_cast(at::kFloat, x, c10::DeviceType::CUDA),
                 at::autocast::cached_cast(at::kFloat, weight, c10::DeviceType::CUDA),
                 at::autocast::cached_cast(at::kFloat, bias, c10::DeviceType::CUDA), mode, axis, eps, flags);
}

// The modules' eager entry: norm(x, weight, bias, normalized_shape, eps (None:
// float32's machine epsilon, torch's rule), mode, flags) -> Tensor, or
// None where the module's Python path must run (see the file's text).
// normalized_shape: the module's tuple, checked against x's trailing sizes here
// (torch's error comes from its Python path).
py::object norm_eager(py::handle xo, py::handle wo, py::handle bo, py::handle shape_o, py::handle eps_o,
                      int64_t mode, int64_t flags) {
  if (!THPVariable_CheckExact(xo.ptr())) return py::none();
  const at::Tensor &x0 = THPVariable_Unpack(xo.ptr());
  c10::optional<at::Tensor> w, b;
  if (!plain_cuda(x0) || !unpack(wo.ptr(), w) || !unpack(bo.ptr(), b) || !plain_context()) return py::none();
  if (!PyTuple_Check(shape_o.ptr())) return py::none();
  Py_ssize_t nd = PyTuple_GET_SIZE(shape_o.ptr());
  int64_t dim = x0.dim();
  if (nd < 1 || nd > dim || dim > FNORM_MAX_RANK || x0.numel() == 0) return py::none();
  double eps;
  if (eps_o.ptr() == Py_None) {
    // RMSNorm's default, torch's: the machine epsilon of the type it computes
    // in (float32 for float32, float16 and bfloat16 input), not of x's dtype
    // (bfloat16's 2^-7 moves y by several percent where mean(x^2) is small).
    eps = std::numeric_limits<float>::epsilon();
  } else {
    eps = PyFloat_AsDouble(eps_o.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return py::none();
    }
  }
  if (!(eps >= 0)) return py::none();
  int64_t axis = dim - nd;
  for (Py_ssize_t i = 0; i < nd; ++i) {
    PyObject *s = PyTuple_GET_ITEM(shape_o.ptr(), i);
    if (!PyLong_Check(s) || PyLong_AsLongLong(s) != x0.size(axis + i)) return py::none();
  }
  at::Tensor x = x0;
  if (mode == FNORM_NORM_LAYERNORM && at::autocast::is_autocast_enabled(c10::DeviceType::CUDA)) {
    x = at::autocast::cached_cast(at::kFloat, x, c10::DeviceType::CUDA);
    w = at::autocast::cached_cast(at::kFloat, w, c10::DeviceType::CUDA);
    b = at::autocast::cached_cast(at::kFloat, b, c10::DeviceType::CUDA);
  }
  if (!lib_dtype(x.scalar_type()) || !rowwise(x, axis)) return py::none();
  if (!params_fit(w, b, x, axis)) return py::none();
  // Forward-mode AD (dual tensors): torch's path, which has the tangents.
  if (torch::autograd::isFwGradDefined(x) || torch::autograd::isFwGradDefined(w) ||
      torch::autograd::isFwGradDefined(b))
    return py::none();
  RECORD_FUNCTION("fusednorm::norm", std::vector<c10::IValue>({x}));
  at::Tensor y;
  {
    py::gil_scoped_release no_gil;
    if (needs_grad({&w, &b}) || (at::GradMode::is_enabled() && x.requires_grad()))
      y = norm_eager_autograd(x, w, b, mode, axis, eps, flags);
    else
      y = std::get<0>(norm_fwd_impl(x, w, b, mode, axis, eps, flags, false));
  }
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(y)));
}

// ---- Add & norm ------------------------------------------------------------
// s = x + residual rounded to x's dtype (a pre-norm transformer's residual
// stream), y = norm(s): one pass that reads x and residual and writes y and s.
// The backward takes the gradient that reached s (dsum) into dx, which is
// also the residual's gradient. x and residual: one dtype and sizes; y and s
// come back packed (the fake kernel promises so); inputs that are not packed
// are copied first.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_norm_fwd(
    const at::Tensor &x0, const at::Tensor &r0, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, int64_t mode, int64_t axis, double eps, int64_t flags) {
  TORCH_CHECK(x0.is_cuda(), "fusednorm::add_norm: x must be a CUDA tensor");
  TORCH_CHECK(r0.sizes() == x0.sizes() && r0.scalar_type() == x0.scalar_type(),
              "fusednorm::add_norm: residual must have x's sizes and dtype (x ", x0.sizes(), " ",
              x0.scalar_type(), ", residual ", r0.sizes(), " ", r0.scalar_type(), ")");
  TORCH_CHECK(r0.device() == x0.device(), "fusednorm::add_norm: residual is on ", r0.device(), ", x on ",
              x0.device());
  same_device(weight, x0, "weight");
  same_device(bias, x0, "bias");
  const at::Tensor x = x0.is_contiguous() ? x0 : x0.contiguous();
  const at::Tensor r = r0.is_contiguous() ? r0 : r0.contiguous();
  c10::cuda::CUDAGuard guard(x.device());
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.size(d);
  at::Tensor y = new_like(x), sum = new_like(x);
  at::Tensor rstd = new_vec(rows, at::kFloat, x);
  const bool ln = mode == FNORM_NORM_LAYERNORM;
  at::Tensor mean = ln ? new_vec(rows, at::kFloat, x) : empty0(x, at::kFloat);
  auto h = handle_for(x);
  auto nd = norm_desc(mode, axis, eps, flags);
  auto xd = desc_of(x, "x");
  auto wd = param_desc(weight, bias);
  const size_t ws_bytes = norm_fwd_workspace_bytes(h, nd, xd, xd);
  at::Tensor ws = workspace(ws_bytes, x);
  if (x.numel() > 0)
    check(abi.fnorm_norm_fwd(h, stream_of(x), nd, xd, ptr(x), ptr(r), mptr(sum), wd, ptr(weight), ptr(bias), xd,
                             mptr(y), ln ? static_cast<float *>(mptr(mean)) : nullptr,
                             static_cast<float *>(mptr(rstd)), mptr(ws), ws_bytes),
          "fnorm_norm_fwd");
  return {y, sum, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor> call_add_norm(const at::Tensor &x, const at::Tensor &residual,
                                                 const c10::optional<at::Tensor> &weight,
                                                 const c10::optional<at::Tensor> &bias, int64_t mode, int64_t axis,
                                                 double eps, int64_t flags) {
  auto r = add_norm_fwd(x, residual, weight, bias, mode, axis, eps, flags);
  return {std::get<0>(r), std::get<1>(r)};
}

// The registered op's autograd kernel (it redispatches: fake tensors under
// torch.compile reach the fake kernels). Edges: x 0, residual 1, then weight
// and bias where given.
class AddNormFunction : public torch::autograd::Function<AddNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x,
                                                const at::Tensor &residual, const c10::optional<at::Tensor> &weight,
                                                const c10::optional<at::Tensor> &bias, int64_t mode, int64_t axis,
                                                double eps, int64_t flags) {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::add_norm_fwd", "")
                         .typed<decltype(add_norm_fwd)>();
    at::Tensor y, sum, mean, rstd;
    std::tie(y, sum, mean, rstd) = op.call(x, residual, weight, bias, mode, axis, eps, flags);
    ctx->save_for_backward({sum, mean, rstd, weight.value_or(at::Tensor()), bias.value_or(at::Tensor())});
    int64_t ew = given(weight) ? 2 : -1;
    int64_t eb = given(bias) ? (given(weight) ? 3 : 2) : -1;
    ctx->saved_data["m"] = SavedCall{mode, axis, flags, ew, eb}.pack();
    ctx->saved_data["e"] = eps;
    return {y, sum};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto [mode, axis, flags, ew, eb] = SavedCall::unpack(ctx->saved_data["m"].toInt());
    const bool need_s = ctx->needs_input_grad(0) || ctx->needs_input_grad(1);
    const bool need_w = needs(ctx, ew), need_b = needs(ctx, eb);
    torch::autograd::variable_list out(8);
    at::Tensor dy = grads[0], ds = grads[1];
    const at::Tensor &s = saved[0];
    if (!dy.defined()) {  // only the sum was used
      if (need_s && ds.defined()) out[0] = out[1] = ds;
      return out;
    }
    if (double_backward(false, s)) {  // create_graph: a differentiable gradient
      std::vector<std::pair<size_t, at::Tensor>> wrt;
      wrt.emplace_back(0, s);
      if (need_w) wrt.emplace_back(2, saved[3]);
      if (need_b) wrt.emplace_back(3, saved[4]);
      at::Tensor ref = norm_reference(s, saved[3], saved[4], mode, axis, ctx->saved_data["e"].toDouble(), flags);
      auto g = grads_with_graph(ref, dy, wrt, 4);
      if (need_s) out[0] = out[1] = ds.defined() ? g[0] + ds : g[0];
      if (need_w) out[ew] = g[2];
      if (need_b) out[eb] = g[3];
      return out;
    }
    c10::optional<at::Tensor> w, b, dsum;
    if (saved[3].defined()) w = saved[3];
    if (saved[4].defined()) b = saved[4];
    if (ds.defined()) dsum = ds;
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::norm_bwd", "")
                         .typed<decltype(norm_bwd)>();
    at::Tensor dx, dgamma, dbeta;
    std::tie(dx, dgamma, dbeta) = op.call(dy, s, saved[1], saved[2], w, b, mode, axis, need_w, need_b, flags, dsum);
    if (need_s) out[0] = out[1] = dx;
    if (need_w) out[ew] = dgamma;
    if (need_b) out[eb] = dbeta;
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> add_norm_autograd(const at::Tensor &x, const at::Tensor &residual,
                                                     const c10::optional<at::Tensor> &weight,
                                                     const c10::optional<at::Tensor> &bias, int64_t mode,
                                                     int64_t axis, double eps, int64_t flags) {
  auto r = AddNormFunction::apply(x, residual, weight, bias, mode, axis, eps, flags);
  return {r[0], r[1]};
}

// The eager entry's add & norm node (as NormBackward): edges x, residual,
// weight, bias; outputs y (0) and the sum (1), the sum saved as an output.
struct AddNormBackward final : public NormNode {
  std::string name() const override { return "fusednorm::AddNormBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    torch::autograd::variable_list out(4);
    const at::Tensor s = in_.unpack(shared_from_this()), mean = mean_.unpack(), rstd = rstd_.unpack();
    const at::Tensor w = weight_.unpack(), b = bias_.unpack();
    const bool need_s = task_should_compute_output(0) || task_should_compute_output(1);
    const bool need_w = w.defined() && task_should_compute_output(2);
    const bool need_b = b.defined() && task_should_compute_output(3);
    const at::Tensor &dy = grads[0], &ds = grads[1];
    if (!(need_s || need_w || need_b)) return out;
    if (!dy.defined()) {
      if (need_s && ds.defined()) out[0] = out[1] = ds;
      return out;
    }
    if (double_backward(true, s)) {  // create_graph: a differentiable gradient
      std::vector<std::pair<size_t, at::Tensor>> wrt;
      wrt.emplace_back(0, s);
      if (need_w) wrt.emplace_back(2, w);
      if (need_b) wrt.emplace_back(3, b);
      auto g = grads_with_graph(norm_reference(s, w, b, mode, axis, eps, flags), dy, wrt, 4);
      if (need_s) out[0] = out[1] = ds.defined() ? g[0] + ds : g[0];
      if (need_w) out[2] = g[2];
      if (need_b) out[3] = g[3];
      return out;
    }
    c10::optional<at::Tensor> wo, bo, dso;
    if (w.defined()) wo = w;
    if (b.defined()) bo = b;
    if (ds.defined()) dso = ds;
    at::Tensor dx, dgamma, dbeta;
    std::tie(dx, dgamma, dbeta) = norm_bwd_impl(dy, s, mean, rstd, wo, bo, mode, axis, need_w, need_b, flags, dso);
    if (need_s) out[0] = out[1] = dx;
    if (need_w) out[2] = std::move(dgamma);
    if (need_b) out[3] = std::move(dbeta);
    return out;
  }
};

// The modules' eager add & norm: add_norm(x, residual, weight, bias, eps,
// mode, flags) over the last dimension -> (y, sum), or None where the Python
// path (the registered op, or torch's operators) must run: inputs that are
// not plain packed CUDA tensors of one dtype and shape, parameters that are
// not packed vectors of x's last size, LayerNorm under autocast, dual tensors,
// a dispatch mode or transform.
py::object add_norm_eager(py::handle xo, py::handle ro, py::handle wo, py::handle bo, double eps, int64_t mode,
                          int64_t flags) {
  if (!THPVariable_CheckExact(xo.ptr()) || !THPVariable_CheckExact(ro.ptr())) return py::none();
  const at::Tensor &x = THPVariable_Unpack(xo.ptr());
  const at::Tensor &r = THPVariable_Unpack(ro.ptr());
  c10::optional<at::Tensor> w, b;
  if (!plain_cuda(x) || !plain_cuda(r) || !unpack(wo.ptr(), w) || !unpack(bo.ptr(), b) || !plain_context())
    return py::none();
  const int64_t dim = x.dim();
  if (dim < 1 || dim > FNORM_MAX_RANK || x.numel() == 0 || !(eps >= 0) || !lib_dtype(x.scalar_type()) ||
      r.scalar_type() != x.scalar_type() || r.sizes() != x.sizes() || r.device() != x.device() ||
      !x.is_contiguous() || !r.is_contiguous())
    return py::none();
  if (mode == FNORM_NORM_LAYERNORM && at::autocast::is_autocast_enabled(c10::DeviceType::CUDA)) return py::none();
  const int64_t axis = dim - 1;
  if (!params_fit(w, b, x, axis)) return py::none();
  if (torch::autograd::isFwGradDefined(x) || torch::autograd::isFwGradDefined(r) ||
      torch::autograd::isFwGradDefined(w) || torch::autograd::isFwGradDefined(b))
    return py::none();
  RECORD_FUNCTION("fusednorm::add_norm", std::vector<c10::IValue>({x, r}));
  at::Tensor y, sum, mean, rstd;
  {
    py::gil_scoped_release no_gil;
    std::tie(y, sum, mean, rstd) = add_norm_fwd(x, r, w, b, mode, axis, eps, flags);
    if (needs_grad({&w, &b}) || (at::GradMode::is_enabled() && (x.requires_grad() || r.requires_grad()))) {
      auto node = std::shared_ptr<AddNormBackward>(new AddNormBackward(), torch::autograd::deleteNode);
      node->set_next_edges(torch::autograd::collect_next_edges(x, r, w, b));
      torch::autograd::set_history(y, node);
      torch::autograd::set_history(sum, node);
      node->save(sum, true, mean, rstd, w, b, mode, axis, eps, flags);
    }
  }
  return py::make_tuple(py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(y))),
                        py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(sum))));
}

}  // namespace
}  // namespace fnorm_torch

using namespace fnorm_torch;

TORCH_LIBRARY_FRAGMENT(fusednorm, m) {
  m.def("norm_fwd(Tensor x, Tensor? weight, Tensor? bias, int mode, int axis, float eps, int flags=0)"
        " -> (Tensor y, Tensor mean, Tensor rstd)");
  m.def("norm_bwd(Tensor dy, Tensor x, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, int mode, int axis,"
        " bool need_dgamma, bool need_dbeta, int flags=0, Tensor? dsum=None)"
        " -> (Tensor dx, Tensor dgamma, Tensor dbeta)");
  m.def("add_norm_fwd(Tensor x, Tensor residual, Tensor? weight, Tensor? bias, int mode, int axis, float eps,"
        " int flags=0) -> (Tensor y, Tensor sum, Tensor mean, Tensor rstd)");
  m.def("add_norm(Tensor x, Tensor residual, Tensor? weight, Tensor? bias, int mode, int axis, float eps,"
        " int flags=0) -> (Tensor y, Tensor sum)");
  m.def("norm(Tensor x, Tensor? weight, Tensor? bias, int mode, int axis, float eps, int flags=0) -> Tensor");
  m.def("norm_quant(Tensor x, Tensor? weight, Tensor? bias, Tensor? residual, Tensor? scale, int mode, int axis,"
        " float eps, ScalarType dtype, bool want_amax) -> (Tensor y, Tensor scales, Tensor sum, Tensor amax)");
}

TORCH_LIBRARY_IMPL(fusednorm, CUDA, m) {
  m.impl("norm_fwd", norm_fwd);
  m.impl("norm_bwd", norm_bwd);
  m.impl("norm", call_norm_fwd_y);
  m.impl("add_norm_fwd", add_norm_fwd);
  m.impl("add_norm", call_add_norm);
  m.impl("norm_quant", norm_quant);
}

TORCH_LIBRARY_IMPL(fusednorm, Autograd, m) {
  m.impl("norm", norm_autograd);
  m.impl("add_norm", add_norm_autograd);
}

TORCH_LIBRARY_IMPL(fusednorm, AutocastCUDA, m) {
  m.impl("norm", norm_autocast);
}

const EagerEntries eager_entries_norm([](py::module_ &m) {
  m.def("norm", &norm_eager);
  m.def("add_norm", &add_norm_eager);
});
