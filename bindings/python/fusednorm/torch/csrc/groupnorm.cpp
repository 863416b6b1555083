/* SPDX-License-Identifier: Apache-2.0 */
// The torch glue of GroupNorm (+ SiLU, + per-sample scale / shift): its ops' schemas and CUDA, autograd and
// autocast kernels, and its eager entry points (common.hpp, ops.cpp).
#include <c10/util/strides.h>

#include "common.hpp"

namespace fnorm_torch {
namespace {

// ---- GroupNorm (+ SiLU, + per-sample scale / shift) ------------------------
// x: [N, C, spatial...], packed channels-first or channels-last (anything else
// is made contiguous first); y in x's layout. weight/bias: [C], x's dtype or
// float32. scale/shift: N * C values ([N, C] or [N, C, 1, ...]), any strides
// that view as [N, C], x's dtype or float32. act: fnorm_gn_activation_t.
fnorm_groupnorm_desc_t gn_desc(int64_t groups, double eps, int64_t act) {
  static std::unordered_map<Key, fnorm_groupnorm_desc_t, KeyHash> cache;
  Key key;
  key.add(groups);
  key.add_double(eps);
  key.add(act);
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  fnorm_groupnorm_desc_t d = nullptr;
  check(abi.fnorm_groupnorm_desc_create(&d), "fnorm_groupnorm_desc_create");
  check(abi.fnorm_groupnorm_desc_set(d, groups, eps, static_cast<fnorm_gn_activation_t>(act)),
        "fnorm_groupnorm_desc_set (num_groups, eps)");
  cache.emplace(key, d);
  return d;
}

// One of the library's two layouts, as it is or made contiguous.
at::Tensor gn_layout(const at::Tensor &t) {
  if (t.is_contiguous() || (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
      (t.dim() == 5 && t.is_contiguous(at::MemoryFormat::ChannelsLast3d)))
    return t;
  return t.contiguous();
}

// y and dx: x's very strides, as torch's group_norm gives them (a
// channels-last [N, C, 1, 1] is also contiguous, and its strides (C, 1, C, C)
// steer the next convolution's layout); the fast allocation where they are
// the contiguous ones.
at::Tensor gn_like(const at::Tensor &x) {
  const c10::DimVector plain = c10::contiguous_strides(x.sizes());
  return x.strides() == c10::IntArrayRef(plain) ? new_like(x) : at::empty_like(x);
}

// scale and shift as [N, C] views with one stride pair (ss_desc describes
// both), packed when `packed` (the backward writes dscale/dshift through it).
std::pair<at::Tensor, at::Tensor> gn_modulation(const c10::optional<at::Tensor> &scale,
                                                const c10::optional<at::Tensor> &shift, int64_t n, int64_t c,
                                                bool packed) {
  at::Tensor sc, sh;
  if (given(scale)) {
    TORCH_CHECK(scale->numel() == n * c, "fusednorm::group_norm: scale must hold N * C = ", n * c, " values");
    sc = scale->reshape({n, c});
  }
  if (given(shift)) {
    TORCH_CHECK(shift->numel() == n * c, "fusednorm::group_norm: shift must hold N * C = ", n * c, " values");
    sh = shift->reshape({n, c});
  }
  if (sc.defined() && sh.defined() && sc.scalar_type() != sh.scalar_type()) sh = sh.to(sc.scalar_type());
  bool strided_apart = sc.defined() && sh.defined() && sc.strides() != sh.strides();
  if (packed || strided_apart) {
    if (sc.defined()) sc = sc.contiguous();
    if (sh.defined()) sh = sh.contiguous();
  }
  return {sc, sh};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_fwd_impl(
    const at::Tensor &x_in, int64_t groups, const c10::optional<at::Tensor> &weight,
    const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &scale,
    const c10::optional<at::Tensor> &shift, double eps, int64_t act, bool stats) {
  TORCH_CHECK(x_in.is_cuda(), "fusednorm::group_norm: x must be a CUDA tensor");
  TORCH_CHECK(x_in.dim() >= 2, "fusednorm::group_norm: x must have at least 2 dimensions [N, C, ...]");
  for (auto *t : {&weight, &bias, &scale, &shift}) same_device(*t, x_in, "a parameter");
  c10::cuda::CUDAGuard guard(x_in.device());
  at::Tensor x = gn_layout(x_in);
  const int64_t n = x.size(0), c = x.size(1);
  at::Tensor y = gn_like(x);
  at::Tensor mean = stats ? new_vec(n * groups, at::kFloat, x) : at::Tensor();
  at::Tensor rstd = stats ? new_vec(n * groups, at::kFloat, x) : at::Tensor();
  auto h = handle_for(x);
  auto gd = gn_desc(groups, eps, act);
  auto xd = desc_of(x, "x");
  const at::Tensor *w = given(weight) ? &*weight : (given(bias) ? &*bias : nullptr);
  auto wd = w ? desc_of(*w, "weight", {c}) : nullptr;
  at::Tensor sc, sh;
  std::tie(sc, sh) = gn_modulation(scale, shift, n, c, false);
  const at::Tensor *s = sc.defined() ? &sc : (sh.defined() ? &sh : nullptr);
  auto sd = s ? desc_of(*s, "scale") : nullptr;
  size_t ws_bytes = cached_size(20, {h, gd, xd}, [&] {
    size_t b = 0;
    check(abi.fnorm_groupnorm_fwd_workspace_size(h, gd, xd, &b), "fnorm_groupnorm_fwd_workspace_size");
    return b;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_groupnorm_fwd(h, stream_of(x), gd, xd, ptr(x), wd, ptr(weight), ptr(bias), sd, ptr(sc), ptr(sh),
                                xd, mptr(y), stats ? static_cast<float *>(mptr(mean)) : nullptr,
                                stats ? static_cast<float *>(mptr(rstd)) : nullptr, mptr(ws), ws_bytes),
        "fnorm_groupnorm_fwd");
  return {y, mean, rstd};
}

// The registered forward: y in the layout the fake promises (x's when it is
// one of the two, else contiguous), the statistics always.
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_fwd(const at::Tensor &x, int64_t groups,
                                                              const c10::optional<at::Tensor> &weight,
                                                              const c10::optional<at::Tensor> &bias,
                                                              const c10::optional<at::Tensor> &scale,
                                                              const c10::optional<at::Tensor> &shift, double eps,
                                                              int64_t act) {
  return group_norm_fwd_impl(x, groups, weight, bias, scale, shift, eps, act, true);
}

at::Tensor group_norm_cuda(const at::Tensor &x, int64_t groups, const c10::optional<at::Tensor> &weight,
                           const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &scale,
                           const c10::optional<at::Tensor> &shift, double eps, int64_t act) {
  return std::get<0>(group_norm_fwd_impl(x, groups, weight, bias, scale, shift, eps, act, false));
}

// dx in x's layout; dgamma/dbeta packed in the weight's dtype; dscale/dshift
// packed [N, C] in scale's dtype; an output not asked for is empty.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_norm_bwd(
    const at::Tensor &dy_in, const at::Tensor &x_in, const at::Tensor &mean, const at::Tensor &rstd, int64_t groups,
    const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias,
    const c10::optional<at::Tensor> &scale, const c10::optional<at::Tensor> &shift, int64_t act, bool need_dw,
    bool need_db, bool need_dscale, bool need_dshift) {
  TORCH_CHECK(dy_in.is_cuda() && x_in.is_cuda(), "fusednorm::group_norm_bwd: dy and x must be CUDA tensors");
  TORCH_CHECK(dy_in.sizes() == x_in.sizes() && dy_in.scalar_type() == x_in.scalar_type(),
              "fusednorm::group_norm_bwd: dy must have x's sizes and dtype");
  c10::cuda::CUDAGuard guard(x_in.device());
  at::Tensor x = gn_layout(x_in);
  at::Tensor dy = dy_in.strides() == x.strides() ? dy_in : at::empty_like(x).copy_(dy_in);
  const int64_t n = x.size(0), c = x.size(1);
  const bool has_w = given(weight), has_b = given(bias);
  need_dw = need_dw && has_w;
  need_db = need_db && has_b;
  need_dscale = need_dscale && given(scale);
  need_dshift = need_dshift && given(shift);
  at::Tensor dx = gn_like(x);
  const at::Tensor *w = has_w ? &*weight : (has_b ? &*bias : nullptr);
  at::Tensor dgamma = need_dw ? new_vec(c, w->scalar_type(), x) : at::Tensor();
  at::Tensor dbeta = need_db ? new_vec(c, w->scalar_type(), x) : at::Tensor();
  at::Tensor sc, sh;
  std::tie(sc, sh) = gn_modulation(scale, shift, n, c, need_dscale || need_dshift);
  const at::Tensor *s = sc.defined() ? &sc : (sh.defined() ? &sh : nullptr);
  at::Tensor dscale = need_dscale ? at::empty_like(*s) : at::Tensor();
  at::Tensor dshift = need_dshift ? at::empty_like(*s) : at::Tensor();
  auto h = handle_for(x);
  auto gd = gn_desc(groups, 1e-5, act);  // the backward uses the saved rstd, not epsilon
  auto xd = desc_of(x, "x");
  auto wd = w ? desc_of(*w, "weight", {c}) : nullptr;
  auto sd = s ? desc_of(*s, "scale") : nullptr;
  size_t ws_bytes = cached_size(21, {h, gd, xd, wd, sd}, [&] {
    size_t b = 0;
    check(abi.fnorm_groupnorm_bwd_workspace_size(h, gd, xd, wd, sd, &b), "fnorm_groupnorm_bwd_workspace_size");
    return b;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_groupnorm_bwd(h, stream_of(x), gd, xd, ptr(x), xd, ptr(dy), static_cast<const float *>(ptr(mean)),
                                static_cast<const float *>(ptr(rstd)), wd, ptr(weight), ptr(bias), sd, ptr(sc),
                                ptr(sh), xd, mptr(dx), mptr(dgamma), mptr(dbeta), mptr(dscale), mptr(dshift),
                                mptr(ws), ws_bytes),
        "fnorm_groupnorm_bwd");
  defined_or_empty(dgamma, x, x.scalar_type());
  defined_or_empty(dbeta, x, x.scalar_type());
  defined_or_empty(dscale, x, x.scalar_type());
  defined_or_empty(dshift, x, x.scalar_type());
  return {dx, dgamma, dbeta, dscale, dshift};
}

// The forward in ATen's differentiable operators (fp32, rounded once): what
// double backward differentiates.
at::Tensor group_norm_reference(const at::Tensor &x, int64_t groups, const at::Tensor &w, const at::Tensor &b,
                                const at::Tensor &sc, const at::Tensor &sh, double eps, int64_t act) {
  c10::optional<at::Tensor> wf, bf;
  if (w.defined()) wf = w.to(at::kFloat);
  if (b.defined()) bf = b.to(at::kFloat);
  at::Tensor y = at::group_norm(x.to(at::kFloat), groups, wf, bf, eps);
  std::vector<int64_t> nc(static_cast<size_t>(x.dim()), 1);
  nc[0] = x.size(0);
  nc[1] = x.size(1);
  if (sc.defined()) y = y * (sc.to(at::kFloat).reshape(nc) + 1);
  if (sh.defined()) y = y + sh.to(at::kFloat).reshape(nc);
  if (act == FNORM_GN_ACTIVATION_SILU) y = at::silu(y);
  return y.to(x.scalar_type());
}

class GroupNormFunction : public torch::autograd::Function<GroupNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x, int64_t groups,
                            const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias,
                            const c10::optional<at::Tensor> &scale, const c10::optional<at::Tensor> &shift,
                            double eps, int64_t act) {
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::group_norm_fwd", "")
                         .typed<decltype(group_norm_fwd)>();
    at::Tensor y, mean, rstd;
    std::tie(y, mean, rstd) = op.call(x, groups, weight, bias, scale, shift, eps, act);
    ctx->save_for_backward({x, mean, rstd, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()),
                            scale.value_or(at::Tensor()), shift.value_or(at::Tensor())});
    // The autograd edge of each optional tensor (absent ones take none).
    int64_t edge = 1, packed = 0;
    int k = 0;
    for (auto *t : {&weight, &bias, &scale, &shift}) {
      packed |= (given(*t) ? edge++ : 0) << (8 * k++);
    }
    ctx->saved_data["edges"] = packed;
    ctx->saved_data["g"] = groups;
    ctx->saved_data["a"] = act;
    ctx->saved_data["e"] = eps;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const int64_t packed = ctx->saved_data["edges"].toInt(), groups = ctx->saved_data["g"].toInt();
    const int64_t act = ctx->saved_data["a"].toInt();
    auto edge = [&](int k) { return ((packed >> (8 * k)) & 0xff) ? ((packed >> (8 * k)) & 0xff) : int64_t(-1); };
    const bool need_x = ctx->needs_input_grad(0);
    bool need[4];
    for (int k = 0; k < 4; ++k) need[k] = needs(ctx, edge(k));
    if (double_backward(false, saved[0])) {
      std::vector<std::pair<size_t, at::Tensor>> wrt;
      if (need_x) wrt.emplace_back(0, saved[0]);
      for (int k = 0; k < 4; ++k)
        if (need[k]) wrt.emplace_back(static_cast<size_t>(2 + k), saved[3 + k]);
      at::Tensor ref = group_norm_reference(saved[0], groups, saved[3], saved[4], saved[5], saved[6],
                                            ctx->saved_data["e"].toDouble(), act);
      return grads_with_graph(ref, grads[0], wrt, 8);
    }
    auto opt = [&](int i) { return saved[i].defined() ? c10::optional<at::Tensor>(saved[i]) : c10::nullopt; };
    static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::group_norm_bwd", "")
                         .typed<decltype(group_norm_bwd)>();
    auto r = op.call(grads[0], saved[0], saved[1], saved[2], groups, opt(3), opt(4), opt(5), opt(6), act, need[0],
                     need[1], need[2], need[3]);
    torch::autograd::variable_list out(8);
    if (need_x) out[0] = std::get<0>(r);
    if (need[0]) out[2] = std::get<1>(r);
    if (need[1]) out[3] = std::get<2>(r);
    if (need[2]) out[4] = std::get<3>(r).reshape(saved[5].sizes());
    if (need[3]) out[5] = std::get<4>(r).reshape(saved[6].sizes());
    return out;
  }
};

at::Tensor group_norm_autograd(const at::Tensor &x, int64_t groups, const c10::optional<at::Tensor> &weight,
                               const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &scale,
                               const c10::optional<at::Tensor> &shift, double eps, int64_t act) {
  return GroupNormFunction::apply(x, groups, weight, bias, scale, shift, eps, act);
}

// Autocast: group_norm is on autocast's fp32 list (it runs in float32 and
// returns float32), and so does this op.
at::Tensor group_norm_autocast(const at::Tensor &x, int64_t groups, const c10::optional<at::Tensor> &weight,
                               const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &scale,
                               const c10::optional<at::Tensor> &shift, double eps, int64_t act) {
  // Dispatched here means autocast is on (is_autocast_enabled would read
  // false under the guard below, which excludes this very key).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::group_norm", "")
                       .typed<decltype(group_norm_autograd)>();
  auto f32 = [](const c10::optional<at::Tensor> &t) {
    return at::autocast::cached_cast(at::kFloat, t, c10::DeviceType::CUDA);
  };
  return op.call(at::autocast::cached_cast(at::kFloat, x, c10::DeviceType::CUDA), groups, f32(weight), f32(bias),
                 f32(scale), f32(shift), eps, act);
}

}  // namespace
}  // namespace fnorm_torch

using namespace fnorm_torch;

TORCH_LIBRARY_FRAGMENT(fusednorm, m) {
  m.def("group_norm_fwd(Tensor x, int groups, Tensor? weight, Tensor? bias, Tensor? scale, Tensor? shift, float eps,"
        " int act) -> (Tensor y, Tensor mean, Tensor rstd)");
  m.def("group_norm_bwd(Tensor dy, Tensor x, Tensor mean, Tensor rstd, int groups, Tensor? weight, Tensor? bias,"
        " Tensor? scale, Tensor? shift, int act, bool need_dweight, bool need_dbias, bool need_dscale,"
        " bool need_dshift) -> (Tensor dx, Tensor dweight, Tensor dbias, Tensor dscale, Tensor dshift)");
  m.def("group_norm(Tensor x, int groups, Tensor? weight, Tensor? bias, Tensor? scale, Tensor? shift, float eps,"
        " int act) -> Tensor");
}

TORCH_LIBRARY_IMPL(fusednorm, CUDA, m) {
  m.impl("group_norm_fwd", group_norm_fwd);
  m.impl("group_norm_bwd", group_norm_bwd);
  m.impl("group_norm", group_norm_cuda);
}

TORCH_LIBRARY_IMPL(fusednorm, Autograd, m) {
  m.impl("group_norm", group_norm_autograd);
}

TORCH_LIBRARY_IMPL(fusednorm, AutocastCUDA, m) {
  m.impl("group_norm", group_norm_autocast);
}
