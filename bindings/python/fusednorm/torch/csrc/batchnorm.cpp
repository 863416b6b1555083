/* SPDX-License-Identifier: Apache-2.0 */
// The torch glue of BatchNorm / SyncBatchNorm: its ops' schemas and CUDA, autograd and
// autocast kernels, and its eager entry points (common.hpp, ops.cpp).
#include "common.hpp"

namespace fnorm_torch {
namespace {

fnorm_batchnorm_desc_t bn_desc(int64_t epilogue, double eps, double momentum, int64_t comm, int64_t sync_flags) {
  static std::unordered_map<Key, fnorm_batchnorm_desc_t, KeyHash> cache;
  Key key;
  key.add(epilogue);
  key.add_double(eps);
  key.add_double(momentum);
  key.add(comm);
  key.add(sync_flags);
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  fnorm_batchnorm_desc_t d = nullptr;
  check(abi.fnorm_batchnorm_desc_create(&d), "fnorm_batchnorm_desc_create");
  bool cumulative = momentum < 0;
  check(abi.fnorm_batchnorm_desc_set(d, static_cast<fnorm_bn_epilogue_t>(epilogue), eps,
                                     cumulative ? FNORM_BN_AVERAGE_CUMULATIVE
                                                : FNORM_BN_AVERAGE_EXPONENTIAL,
                                     cumulative ? 0.0 : momentum),
        "fnorm_batchnorm_desc_set (eps, momentum)");
  if (comm) {
    check(abi.fnorm_batchnorm_desc_set_comm(d, reinterpret_cast<struct ncclComm *>(static_cast<uintptr_t>(comm)),
                                            static_cast<uint32_t>(sync_flags)),
          "fnorm_batchnorm_desc_set_comm");
  }
  cache.emplace(key, d);
  return d;
}

// ---- BatchNorm ------------------------------------------------------------
// x: NCHW-packed or channels-last (the callers make it so); z, y, dy,
// dx, dz in x's layout. Per-channel vectors fp32. momentum < 0: cumulative.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_fwd_train(
    const at::Tensor &x, const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias,
    const c10::optional<at::Tensor> &running_mean, const c10::optional<at::Tensor> &running_var,
    const c10::optional<at::Tensor> &num_batches_tracked, const c10::optional<at::Tensor> &z, double momentum,
    double eps, int64_t epilogue, int64_t comm, int64_t sync_flags) {
  TORCH_CHECK(x.is_cuda(), "fusednorm::bn_fwd_train: x must be a CUDA tensor");
  same_device(weight, x, "weight");
  same_device(bias, x, "bias");
  same_device(running_mean, x, "running_mean");
  same_device(running_var, x, "running_var");
  same_device(num_batches_tracked, x, "num_batches_tracked");
  same_device(z, x, "z");
  c10::cuda::CUDAGuard guard(x.device());
  int64_t c = x.size(1);
  at::Tensor y = new_like(x);
  at::Tensor saved_mean = new_vec(c, at::kFloat, x);
  at::Tensor saved_invstd = new_vec(c, at::kFloat, x);
  auto h = handle_for(x);
  auto bd = bn_desc(epilogue, eps, momentum, comm, sync_flags);
  fnorm_tensor_desc_t xd;
  if (x.size(0) == 0) {  // a SyncBatchNorm rank without samples: [1, C, ...] with x's strides
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes[0] = 1;
    xd = desc_of(x, "x", sizes);
  } else {
    xd = desc_of(x, "x");
  }
  size_t ws_bytes = cached_size(3, {h, bd, xd}, [&] {
    size_t n = 0;
    check(abi.fnorm_batchnorm_fwd_train_workspace_size(h, bd, xd, &n), "fnorm_batchnorm_fwd_train_workspace_size");
    return n;
  });
  size_t rs_bytes = cached_size(4, {h, bd, xd}, [&] {
    size_t n = 0;
    check(abi.fnorm_batchnorm_reserve_space_size(h, bd, xd, &n), "fnorm_batchnorm_reserve_space_size");
    return n;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  at::Tensor reserve = new_vec(static_cast<int64_t>(rs_bytes), at::kByte, x);
  check(abi.fnorm_batchnorm_fwd_train(
            h, stream_of(x), bd, xd, ptr(x), ptr(z), static_cast<const float *>(ptr(weight)),
            static_cast<const float *>(ptr(bias)), static_cast<float *>(mptr(running_mean)),
            static_cast<float *>(mptr(running_var)), static_cast<int64_t *>(mptr(num_batches_tracked)), xd, mptr(y),
            static_cast<float *>(mptr(saved_mean)), static_cast<float *>(mptr(saved_invstd)), mptr(ws), ws_bytes,
            mptr(reserve), rs_bytes),
        "fnorm_batchnorm_fwd_train");
  return {y, saved_mean, saved_invstd, reserve};
}

at::Tensor bn_fwd_infer(const at::Tensor &x, const c10::optional<at::Tensor> &weight,
                        const c10::optional<at::Tensor> &bias, const at::Tensor &running_mean,
                        const at::Tensor &running_var, const c10::optional<at::Tensor> &z, double eps,
                        int64_t epilogue) {
  TORCH_CHECK(x.is_cuda(), "fusednorm::bn_fwd_infer: x must be a CUDA tensor");
  same_device(weight, x, "weight");
  same_device(bias, x, "bias");
  same_device(running_mean, x, "running_mean");
  same_device(running_var, x, "running_var");
  same_device(z, x, "z");
  c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = new_like(x);
  auto h = handle_for(x);
  auto bd = bn_desc(epilogue, eps, 0.1, 0, 0);
  auto xd = desc_of(x, "x");
  size_t ws_bytes = cached_size(5, {h, bd, xd}, [&] {
    size_t n = 0;
    check(abi.fnorm_batchnorm_fwd_infer_workspace_size(h, bd, xd, &n), "fnorm_batchnorm_fwd_infer_workspace_size");
    return n;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_batchnorm_fwd_infer(h, stream_of(x), bd, xd, ptr(x), ptr(z),
                                      static_cast<const float *>(ptr(weight)), static_cast<const float *>(ptr(bias)),
                                      static_cast<const float *>(ptr(running_mean)),
                                      static_cast<const float *>(ptr(running_var)), xd, mptr(y), mptr(ws), ws_bytes),
        "fnorm_batchnorm_fwd_infer");
  return y;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_bwd(
    const at::Tensor &dy, const at::Tensor &x, const c10::optional<at::Tensor> &weight, const at::Tensor &saved_mean,
    const at::Tensor &saved_invstd, const at::Tensor &reserve, double eps, int64_t epilogue, int64_t comm,
    int64_t sync_flags, bool need_dz, bool need_weight_grads) {
  c10::cuda::CUDAGuard guard(x.device());
  int64_t c = x.size(1);
  // dy is read through x's descriptor: give it x's layout.
  at::Tensor dy1 = (x.numel() > 0 && dy.strides() != x.strides()) ? at::empty_like(x).copy_(dy) : dy;
  at::Tensor dx = new_like(x);
  at::Tensor dz = need_dz ? new_like(x) : empty0(x, x.scalar_type());
  at::Tensor dgamma = need_weight_grads ? new_vec(c, at::kFloat, x) : empty0(x, at::kFloat);
  at::Tensor dbeta = need_weight_grads ? new_vec(c, at::kFloat, x) : empty0(x, at::kFloat);
  auto h = handle_for(x);
  auto bd = bn_desc(epilogue, eps, 0.1, comm, sync_flags);  // momentum is not used by the backward
  fnorm_tensor_desc_t xd;
  if (x.size(0) == 0) {
    std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
    sizes[0] = 1;
    xd = desc_of(x, "x", sizes);
  } else {
    xd = desc_of(x, "x");
  }
  size_t ws_bytes = cached_size(6, {h, bd, xd}, [&] {
    size_t n = 0;
    check(abi.fnorm_batchnorm_bwd_workspace_size(h, bd, xd, &n), "fnorm_batchnorm_bwd_workspace_size");
    return n;
  });
  at::Tensor ws = workspace(ws_bytes, x);
  check(abi.fnorm_batchnorm_bwd(h, stream_of(x), bd, xd, ptr(x), xd, ptr(dy1), nullptr,
                                static_cast<const float *>(ptr(weight)), nullptr,
                                static_cast<const float *>(ptr(saved_mean)),
                                static_cast<const float *>(ptr(saved_invstd)), ptr(reserve),
                                static_cast<size_t>(reserve.numel()), xd, mptr(dx), need_dz ? mptr(dz) : nullptr,
                                need_weight_grads ? static_cast<float *>(mptr(dgamma)) : nullptr,
                                need_weight_grads ? static_cast<float *>(mptr(dbeta)) : nullptr, mptr(ws), ws_bytes),
        "fnorm_batchnorm_bwd");
  return {dx, dgamma, dbeta, dz};
}

at::Tensor batch_norm_cuda(const at::Tensor &x, const c10::optional<at::Tensor> &weight,
                           const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &running_mean,
                           const c10::optional<at::Tensor> &running_var,
                           const c10::optional<at::Tensor> &num_batches_tracked, const c10::optional<at::Tensor> &z,
                           double momentum, double eps, int64_t epilogue, int64_t comm, int64_t sync_flags) {
  return std::get<0>(bn_fwd_train(x, weight, bias, running_mean, running_var, num_batches_tracked, z, momentum, eps,
                                  epilogue, comm, sync_flags));
}

template <bool Direct>
class BatchNormFunction : public torch::autograd::Function<BatchNormFunction<Direct>> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &x,
                            const c10::optional<at::Tensor> &weight, const c10::optional<at::Tensor> &bias,
                            const c10::optional<at::Tensor> &running_mean,
                            const c10::optional<at::Tensor> &running_var,
                            const c10::optional<at::Tensor> &num_batches_tracked, const c10::optional<at::Tensor> &z,
                            double momentum, double eps, int64_t epilogue, int64_t comm, int64_t sync_flags) {
    at::Tensor y, saved_mean, saved_invstd, reserve;
    if (Direct) {
      std::tie(y, saved_mean, saved_invstd, reserve) = bn_fwd_train(
          x, weight, bias, running_mean, running_var, num_batches_tracked, z, momentum, eps, epilogue, comm,
          sync_flags);
    } else {
      static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::bn_fwd_train", "")
                           .typed<decltype(bn_fwd_train)>();
      std::tie(y, saved_mean, saved_invstd, reserve) = op.call(
          x, weight, bias, running_mean, running_var, num_batches_tracked, z, momentum, eps, epilogue, comm,
          sync_flags);
    }
    // The output is kept for a double backward through a ReLU epilogue (its
    // mask is y > 0); the next layer keeps it alive anyway.
    ctx->save_for_backward({x, weight.value_or(at::Tensor()), saved_mean, saved_invstd, reserve,
                            bias.value_or(at::Tensor()), epilogue != FNORM_BN_EPILOGUE_NONE ? y : at::Tensor()});
    int64_t edge = 1;
    int64_t ew = given(weight) ? edge++ : -1;
    int64_t eb = given(bias) ? edge++ : -1;
    edge += given(running_mean) + given(running_var) + given(num_batches_tracked);
    int64_t ez = given(z) ? edge++ : -1;
    ctx->saved_data["m"] = epilogue | ((ew + 1) << 4) | ((eb + 1) << 8) | ((ez + 1) << 12) | (sync_flags << 16);
    ctx->saved_data["e"] = eps;
    ctx->saved_data["c"] = comm;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0];
    int64_t m = ctx->saved_data["m"].toInt();
    int64_t epilogue = m & 0xf, ew = ((m >> 4) & 0xf) - 1, eb = ((m >> 8) & 0xf) - 1, ez = ((m >> 12) & 0xf) - 1;
    int64_t sync_flags = m >> 16, comm = ctx->saved_data["c"].toInt();
    double eps = ctx->saved_data["e"].toDouble();
    bool need_dz = needs(ctx, ez), need_dw = needs(ctx, ew), need_db = needs(ctx, eb);
    bool need_x = ctx->needs_input_grad(0);
    if (double_backward(Direct, x)) {  // create_graph: a differentiable gradient
      TORCH_CHECK(comm == 0, "fusednorm: double backward through SyncBatchNorm's cross-rank statistics is not "
                             "supported (nor is it by torch.nn.SyncBatchNorm)");
      // relu'(v) is the mask y > 0; its derivative is 0 almost everywhere.
      at::Tensor mask;
      if (epilogue != FNORM_BN_EPILOGUE_NONE) mask = (saved[6] > 0).to(grads[0].scalar_type());
      at::Tensor dy = mask.defined() ? grads[0] * mask : grads[0];
      std::vector<std::pair<size_t, at::Tensor>> wrt;
      if (need_x) wrt.emplace_back(0, x);
      if (need_dw) wrt.emplace_back(1, saved[1]);
      if (need_db) wrt.emplace_back(2, saved[5]);
      c10::optional<at::Tensor> w, b;
      if (saved[1].defined()) w = saved[1];
      if (saved[5].defined()) b = saved[5];
      at::Tensor ref = at::batch_norm(x, w, b, {}, {}, /*training=*/true, 0.0, eps, /*cudnn_enabled=*/true);
      auto res = grads_with_graph(ref, dy, wrt, 12);
      if (need_dz) res[6] = dy;
      return res;
    }
    c10::optional<at::Tensor> w;
    if (saved[1].defined()) w = saved[1];
    const at::Tensor &dy = grads[0];  // bn_bwd gives it x's layout
    bool need_w = need_dw || need_db;
    at::Tensor dx, dgamma, dbeta, dz;
    if (Direct) {
      std::tie(dx, dgamma, dbeta, dz) = bn_bwd(dy, x, w, saved[2], saved[3], saved[4], eps, epilogue, comm,
                                               sync_flags, need_dz, need_w);
    } else {
      static auto op =
          c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::bn_bwd", "").typed<decltype(bn_bwd)>();
      std::tie(dx, dgamma, dbeta, dz) = op.call(dy, x, w, saved[2], saved[3], saved[4], eps, epilogue, comm,
                                                sync_flags, need_dz, need_w);
    }
    return {need_x ? dx : at::Tensor(),
            need_dw ? dgamma : at::Tensor(),
            need_db ? dbeta : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(),
            need_dz ? dz : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor batch_norm_autograd(const at::Tensor &x, const c10::optional<at::Tensor> &weight,
                               const c10::optional<at::Tensor> &bias, const c10::optional<at::Tensor> &running_mean,
                               const c10::optional<at::Tensor> &running_var,
                               const c10::optional<at::Tensor> &num_batches_tracked,
                               const c10::optional<at::Tensor> &z, double momentum, double eps, int64_t epilogue,
                               int64_t comm, int64_t sync_flags) {
  return BatchNormFunction<false>::apply(x, weight, bias, running_mean, running_var, num_batches_tracked, z,
                                         momentum, eps, epilogue, comm, sync_flags);
}

// x in a layout the library takes: packed channels-first, or channels-last (C
// innermost, then the spatial dimensions, then N).
bool bn_layout_ok(const at::Tensor &x) {
  if (x.is_contiguous()) return true;
  if (x.dim() == 4) return x.is_contiguous(at::MemoryFormat::ChannelsLast);
  if (x.dim() == 5) return x.is_contiguous(at::MemoryFormat::ChannelsLast3d);
  return false;
}

// The modules' eager entry: bn(x, weight, bias, running_mean, running_var,
// num_batches_tracked, z, momentum (None: cumulative), eps, relu, training,
// track_running_stats, comm) -> Tensor or None (the module's Python path).
// relu: the ReLU epilogue (with z: BN+Add+ReLU); z without relu: bn(x) + z.
py::object bn_eager(py::handle xo, py::handle wo, py::handle bo, py::handle rmo, py::handle rvo, py::handle nbto,
                    py::handle zo, py::handle momentum_o, double eps, bool relu, bool training, bool track,
                    int64_t comm) {
  if (!THPVariable_CheckExact(xo.ptr())) return py::none();
  const at::Tensor &x = THPVariable_Unpack(xo.ptr());
  c10::optional<at::Tensor> w, b, rm, rv, nbt, z;
  if (!plain_cuda(x) || !unpack(wo.ptr(), w) || !unpack(bo.ptr(), b) || !unpack(rmo.ptr(), rm) ||
      !unpack(rvo.ptr(), rv) || !unpack(zo.ptr(), z) || !plain_context())
    return py::none();
  if (nbto.ptr() != Py_None) {
    if (!unpack(nbto.ptr(), nbt) || nbt->scalar_type() != at::kLong) return py::none();
  }
  if (!lib_dtype(x.scalar_type()) || x.numel() == 0 || x.dim() < 2 || x.dim() > FNORM_MAX_RANK || !(eps > 0) ||
      !bn_layout_ok(x))
    return py::none();
  int64_t c = x.size(1);
  for (auto *t : {&w, &b, &rm, &rv})
    if (t->has_value() && ((*t)->scalar_type() != at::kFloat || (*t)->numel() != c || (*t)->dim() != 1 ||
                           (*t)->device() != x.device()))
      return py::none();
  if (w.has_value() != b.has_value()) return py::none();
  if (z.has_value() && (z->scalar_type() != x.scalar_type() || z->sizes() != x.sizes())) return py::none();
  double momentum = -1.0;
  if (momentum_o.ptr() != Py_None) {
    momentum = PyFloat_AsDouble(momentum_o.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return py::none();
    }
  }
  bool bn_training = training || (!rm.has_value() && !rv.has_value());
  bool grad = at::GradMode::is_enabled() &&
              (x.requires_grad() || (w.has_value() && (w->requires_grad() || b->requires_grad())) ||
               (z.has_value() && z->requires_grad()));
  if (bn_training) {
    int64_t per_channel = x.size(0);
    for (int64_t d = 2; d < x.dim(); ++d) per_channel *= x.size(d);
    if (per_channel == 1) return py::none();  // torch's ValueError, from the Python path
  } else if (grad || !rm.has_value() || !rv.has_value()) {
    return py::none();  // no inference backward in the library: torch's
  }
  RECORD_FUNCTION("fusednorm::batch_norm", std::vector<c10::IValue>({x}));
  at::Tensor y;
  {
    py::gil_scoped_release no_gil;
    c10::optional<at::Tensor> zz;
    if (z.has_value() && relu) zz = z->strides() == x.strides() ? *z : at::empty_like(x).copy_(*z);
    int64_t epi = relu ? (zz.has_value() ? FNORM_BN_EPILOGUE_ADD_RELU : FNORM_BN_EPILOGUE_RELU)
                       : FNORM_BN_EPILOGUE_NONE;
    if (!bn_training) {
      y = bn_fwd_infer(x, w, b, *rm, *rv, zz, eps, epi);
    } else {
      bool upd = training && track;
      c10::optional<at::Tensor> none;
      const auto &rm1 = upd ? rm : none;
      const auto &rv1 = upd ? rv : none;
      const auto &nbt1 = upd ? nbt : none;
      if (grad)
        y = BatchNormFunction<true>::apply(x, w, b, rm1, rv1, nbt1, zz, momentum, eps, epi, comm, 0);
      else
        y = std::get<0>(bn_fwd_train(x, w, b, rm1, rv1, nbt1, zz, momentum, eps, epi, comm, 0));
    }
    if (z.has_value() && !relu) y = at::add(y, *z);
  }
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(y)));
}

}  // namespace
}  // namespace fnorm_torch

using namespace fnorm_torch;

TORCH_LIBRARY_FRAGMENT(fusednorm, m) {
  m.def("bn_fwd_train(Tensor x, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, Tensor(b!)? running_var,"
        " Tensor(c!)? num_batches_tracked, Tensor? z, float momentum, float eps, int epilogue, int comm,"
        " int sync_flags) -> (Tensor y, Tensor saved_mean, Tensor saved_invstd, Tensor reserve)");
  m.def("bn_fwd_infer(Tensor x, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, Tensor? z,"
        " float eps, int epilogue) -> Tensor");
  m.def("bn_bwd(Tensor dy, Tensor x, Tensor? weight, Tensor saved_mean, Tensor saved_invstd, Tensor reserve,"
        " float eps, int epilogue, int comm, int sync_flags, bool need_dz, bool need_weight_grads)"
        " -> (Tensor dx, Tensor dgamma, Tensor dbeta, Tensor dz)");
  m.def("batch_norm(Tensor x, Tensor? weight, Tensor? bias, Tensor(a!)? running_mean, Tensor(b!)? running_var,"
        " Tensor(c!)? num_batches_tracked, Tensor? z, float momentum, float eps, int epilogue, int comm,"
        " int sync_flags) -> Tensor");
}

TORCH_LIBRARY_IMPL(fusednorm, CUDA, m) {
  m.impl("bn_fwd_train", bn_fwd_train);
  m.impl("bn_fwd_infer", bn_fwd_infer);
  m.impl("bn_bwd", bn_bwd);
  m.impl("batch_norm", batch_norm_cuda);
}

TORCH_LIBRARY_IMPL(fusednorm, Autograd, m) {
  m.impl("batch_norm", batch_norm_autograd);
}

const EagerEntries eager_entries_batchnorm([](py::module_ &m) {
  m.def("bn", &bn_eager);
});
