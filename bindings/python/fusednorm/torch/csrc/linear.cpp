/* SPDX-License-Identifier: Apache-2.0 */
// The torch glue of the fully-connected layer: its ops' schemas and CUDA, autograd and
// autocast kernels, and its eager entry points (common.hpp, ops.cpp).
#include "common.hpp"

namespace fnorm_torch {
namespace {

fnorm_linear_desc_t linear_desc(int64_t epilogue) {
  static std::array<std::atomic<fnorm_linear_desc_t>, 16> cache{};
  TORCH_CHECK(epilogue >= 0 && epilogue < 16, "fusednorm: linear epilogue ", epilogue);
  fnorm_linear_desc_t d = cache[epilogue].load(std::memory_order_acquire);
  if (d) return d;
  std::lock_guard<std::mutex> lock(cache_mutex);
  d = cache[epilogue].load(std::memory_order_relaxed);
  if (d) return d;
  check(abi.fnorm_linear_desc_create(&d), "fnorm_linear_desc_create");
  check(abi.fnorm_linear_desc_set(d, static_cast<fnorm_linear_epilogue_t>(epilogue), FNORM_LINEAR_WEIGHT_NK, 0),
        "fnorm_linear_desc_set");
  cache[epilogue].store(d, std::memory_order_release);
  return d;
}

// ---- Linear -----------------------------------------------------------------
// act: 0 none, 1 relu, 2 gelu (tanh). Epilogue NONE without bias (act 0 only),
// BIAS / BIAS_RELU / BIAS_GELU with one. Weight [n, k] (nn.Linear's).
int64_t linear_epilogue(bool has_bias, int64_t act) {
  if (!has_bias) {
    TORCH_CHECK(act == 0, "fusednorm::linear: an activation needs a bias");
    return FNORM_LINEAR_EPILOGUE_NONE;
  }
  return act == 1 ? FNORM_LINEAR_EPILOGUE_BIAS_RELU
                  : (act == 2 ? FNORM_LINEAR_EPILOGUE_BIAS_GELU : FNORM_LINEAR_EPILOGUE_BIAS);
}

std::tuple<at::Tensor, at::Tensor> linear_fwd(const at::Tensor &x, const at::Tensor &w,
                                              const c10::optional<at::Tensor> &b, int64_t act, bool save_aux) {
  TORCH_CHECK(x.is_cuda(), "fusednorm::linear_fwd: x must be a CUDA tensor");
  same_device(w, x, "weight");
  same_device(b, x, "bias");
  c10::cuda::CUDAGuard guard(x.device());
  bool has_bias = given(b);
  auto epi = linear_epilogue(has_bias, act);
  c10::SmallVector<int64_t, 8> ysz(x.sizes().begin(), x.sizes().end());
  ysz.back() = w.size(0);
  at::Tensor y(at::detail::empty_cuda(ysz, x.scalar_type(), x.device(), c10::nullopt));
  auto h = handle_for(x);
  auto ld = linear_desc(epi);
  auto xd = desc_of(x, "x");
  auto wd = desc_of(w, "weight");
  auto yd = desc_of(y, "y");
  size_t aux_bytes = 0;
  if (save_aux && act != 0) {
    aux_bytes = cached_size(7, {h, ld, yd}, [&] {
      size_t n = 0;
      check(abi.fnorm_linear_aux_size(h, ld, yd, &n), "fnorm_linear_aux_size");
      return n;
    });
  }
  at::Tensor aux = new_vec(static_cast<int64_t>(aux_bytes), at::kByte, x);
  size_t ws_bytes = cached_size(8, {h, ld, xd, wd, yd}, [&] {
    size_t n = 0;
    check(abi.fnorm_linear_fwd_workspace_size(h, ld, xd, wd, yd, &n), "fnorm_linear_fwd_workspace_size");
    return n;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_linear_fwd(h, stream_of(x), ld, xd, ptr(x), wd, ptr(w), ptr(b), yd, mptr(y),
                             aux_bytes ? mptr(aux) : nullptr, aux_bytes, mptr(ws), ws_bytes),
        "fnorm_linear_fwd");
  return {y, aux};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> linear_bwd(const at::Tensor &dy, const at::Tensor &x,
                                                          const at::Tensor &w, const at::Tensor &aux, bool has_bias,
                                                          int64_t act, bool need_dx, bool need_dw, bool need_db) {
  c10::cuda::CUDAGuard guard(x.device());
  auto epi = linear_epilogue(has_bias, act);
  at::Tensor dx = need_dx ? at::Tensor(at::detail::empty_cuda(x.sizes(), x.scalar_type(), x.device(), c10::nullopt))
                          : empty0(x, x.scalar_type());
  at::Tensor dw = need_dw ? at::empty_like(w) : empty0(x, w.scalar_type());
  bool want_db = need_db && has_bias;
  at::Tensor db = want_db ? new_vec(dy.size(-1), dy.scalar_type(), x) : empty0(x, dy.scalar_type());
  auto h = handle_for(x);
  auto ld = linear_desc(epi);
  auto xd = desc_of(x, "x");
  auto wd = desc_of(w, "weight");
  auto dyd = desc_of(dy, "dy");
  auto dxd = need_dx ? desc_of(dx, "dx") : nullptr;
  size_t ws_bytes = cached_size(9, {h, ld, xd, wd, dyd}, [&] {
    size_t n = 0;
    check(abi.fnorm_linear_bwd_workspace_size(h, ld, xd, wd, dyd, nullptr, &n), "fnorm_linear_bwd_workspace_size");
    return n;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_linear_bwd(h, stream_of(x), ld, xd, ptr(x), wd, ptr(w), dyd, ptr(dy), ptr(aux),
                             static_cast<size_t>(aux.numel()), nullptr, nullptr, 0, dxd, need_dx ? mptr(dx) : nullptr,
                             need_dw ? mptr(dw) : nullptr, want_db ? mptr(db) : nullptr, nullptr, mptr(ws), ws_bytes),
        "fnorm_linear_bwd");
  return {dx, dw, db};
}

at::Tensor linear_cuda(const at::Tensor &x, const at::Tensor &w, const c10::optional<at::Tensor> &b, int64_t act) {
  return std::get<0>(linear_fwd(x, w, b, act, false));
}

at::Tensor linear_reference(const at::Tensor &x, const at::Tensor &w, const at::Tensor &b, int64_t act) {
  c10::optional<at::Tensor> bb;
  if (b.defined()) bb = b;
  at::Tensor y = at::linear(x, w, bb);
  if (act == 1) return at::relu(y);
  if (act == 2) return at::gelu(y, "tanh");
  return y;
}

template <bool Direct>
class LinearFunction : public torch::autograd::Function<LinearFunction<Direct>> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x, const at::Tensor &w,
                            const c10::optional<at::Tensor> &b, int64_t act) {
    at::Tensor y, aux;
    if (Direct) {
      std::tie(y, aux) = linear_fwd(x, w, b, act, true);
    } else {
      static auto op =
          c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::linear_fwd", "").typed<decltype(linear_fwd)>();
      std::tie(y, aux) = op.call(x, w, b, act, true);
    }
    ctx->save_for_backward({x, w, aux, b.value_or(at::Tensor())});
    ctx->saved_data["m"] = act | (int64_t{given(b)} << 4);
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    int64_t m = ctx->saved_data["m"].toInt();
    int64_t act = m & 0xf;
    bool has_bias = (m >> 4) & 1;
    bool need_x = ctx->needs_input_grad(0), need_w = ctx->needs_input_grad(1);
    bool need_db = has_bias && ctx->needs_input_grad(2);
    if (double_backward(Direct, saved[0])) {  // create_graph: a differentiable gradient
      std::vector<std::pair<size_t, at::Tensor>> wrt;
      if (need_x) wrt.emplace_back(0, saved[0]);
      if (need_w) wrt.emplace_back(1, saved[1]);
      if (need_db) wrt.emplace_back(2, saved[3]);
      return grads_with_graph(linear_reference(saved[0], saved[1], saved[3], act), grads[0], wrt, 4);
    }
    // aux was written for y's packed layout: dy in the same.
    at::Tensor dy = grads[0].contiguous();
    at::Tensor dx, dw, db;
    if (Direct) {
      std::tie(dx, dw, db) = linear_bwd(dy, saved[0], saved[1], saved[2], has_bias, act, need_x, need_w, need_db);
    } else {
      static auto op =
          c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::linear_bwd", "").typed<decltype(linear_bwd)>();
      std::tie(dx, dw, db) = op.call(dy, saved[0], saved[1], saved[2], has_bias, act, need_x, need_w, need_db);
    }
    return {need_x ? dx : at::Tensor(), need_w ? dw : at::Tensor(), need_db ? db : at::Tensor(), at::Tensor()};
  }
};

at::Tensor linear_autograd(const at::Tensor &x, const at::Tensor &w, const c10::optional<at::Tensor> &b,
                           int64_t act) {
  return LinearFunction<false>::apply(x, w, b, act);
}

// Autocast: linear is on autocast's lower-precision list (x, weight and bias
// cast to the autocast dtype, weights cached for the region, as torch's).
at::Tensor linear_autocast(const at::Tensor &x, const at::Tensor &w, const c10::optional<at::Tensor> &b,
                           int64_t act) {
  // Dispatched here means autocast is on (is_autocast_enabled would read
  // false under the guard below, which excludes this very key).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::linear", "").typed<decltype(linear_autograd)>();
  auto dt = at::autocast::get_autocast_dtype(c10::DeviceType::CUDA);
  return op.call(at::autocast::cached_cast(dt, x, c10::DeviceType::CUDA),
                 at::autocast::cached_cast(dt, w, c10::DeviceType::CUDA),
                 at::autocast::cached_cast(dt, b, c10::DeviceType::CUDA), act);
}

// The modules' eager entry: linear(x, weight, bias, act) -> Tensor or None.
py::object linear_eager(py::handle xo, py::handle wo, py::handle bo, int64_t act) {
  if (!THPVariable_CheckExact(xo.ptr()) || !THPVariable_CheckExact(wo.ptr())) return py::none();
  at::Tensor x = THPVariable_Unpack(xo.ptr());
  at::Tensor w = THPVariable_Unpack(wo.ptr());
  c10::optional<at::Tensor> b;
  if (!plain_cuda(x) || !plain_cuda(w) || !unpack(bo.ptr(), b) || !plain_context()) return py::none();
  if (x.dim() < 2 || x.dim() > FNORM_MAX_RANK || x.numel() == 0 || w.numel() == 0 || w.dim() != 2 ||
      x.size(-1) != w.size(1) || (act != 0 && !b.has_value()) || w.device() != x.device())
    return py::none();
  if (at::autocast::is_autocast_enabled(c10::DeviceType::CUDA)) {
    auto dt = at::autocast::get_autocast_dtype(c10::DeviceType::CUDA);
    x = at::autocast::cached_cast(dt, x, c10::DeviceType::CUDA);
    w = at::autocast::cached_cast(dt, w, c10::DeviceType::CUDA);
    b = at::autocast::cached_cast(dt, b, c10::DeviceType::CUDA);
  }
  auto dt = x.scalar_type();
  if (!lib_dtype(dt) || w.scalar_type() != dt || (b.has_value() && (b->scalar_type() != dt || b->dim() != 1 ||
                                                                      b->size(0) != w.size(0) ||
                                                                      b->device() != x.device())))
    return py::none();
  RECORD_FUNCTION("fusednorm::linear", std::vector<c10::IValue>({x}));
  at::Tensor y;
  {
    py::gil_scoped_release no_gil;
    if (!rowwise(x, x.dim() - 1)) x = x.contiguous();
    if (!w.is_contiguous()) w = w.contiguous();
    bool grad = at::GradMode::is_enabled() &&
                (x.requires_grad() || w.requires_grad() || (b.has_value() && b->requires_grad()));
    if (grad)
      y = LinearFunction<true>::apply(x, w, b, act);
    else
      y = std::get<0>(linear_fwd(x, w, b, act, false));
  }
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(y)));
}

}  // namespace
}  // namespace fnorm_torch

using namespace fnorm_torch;

TORCH_LIBRARY_FRAGMENT(fusednorm, m) {
  m.def("linear_fwd(Tensor x, Tensor weight, Tensor? bias, int act, bool save_aux) -> (Tensor y, Tensor aux)");
  m.def("linear_bwd(Tensor dy, Tensor x, Tensor weight, Tensor aux, bool has_bias, int act, bool need_dx,"
        " bool need_dw, bool need_db) -> (Tensor dx, Tensor dw, Tensor db)");
  m.def("linear(Tensor x, Tensor weight, Tensor? bias, int act) -> Tensor");
}

TORCH_LIBRARY_IMPL(fusednorm, CUDA, m) {
  m.impl("linear_fwd", linear_fwd);
  m.impl("linear_bwd", linear_bwd);
  m.impl("linear", linear_cuda);
}

TORCH_LIBRARY_IMPL(fusednorm, Autograd, m) {
  m.impl("linear", linear_autograd);
}

TORCH_LIBRARY_IMPL(fusednorm, AutocastCUDA, m) {
  m.impl("linear", linear_autocast);
}

const EagerEntries eager_entries_linear([](py::module_ &m) {
  m.def("linear", &linear_eager);
});
