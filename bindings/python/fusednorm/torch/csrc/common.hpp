/* SPDX-License-Identifier: Apache-2.0 */
// What every op's torch glue shares (ops.cpp says how the glue is built):
// the C ABI by pointer, the handle per device, descriptor and size caches,
// allocations, the eager entry points' gate, and autograd helpers; and the
// registry through which each op's file adds its eager entry points to the
// extension module.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/cuda/EmptyTensor.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "fusednorm.h"

#include <functional>
#include <pybind11/pybind11.h>

namespace fnorm_torch {

namespace py = pybind11;

// ---- the C ABI, by pointer ------------------------------------------------
#define FNORM_TORCH_ABI(X)                                                                   \
  X(fnorm_get_error_string) X(fnorm_get_last_error_message) X(fnorm_create)                  \
  X(fnorm_tensor_desc_create) X(fnorm_tensor_desc_set) X(fnorm_norm_desc_create)             \
  X(fnorm_norm_desc_set) X(fnorm_norm_desc_set_flags) X(fnorm_norm_fwd_workspace_size)       \
  X(fnorm_norm_fwd) X(fnorm_norm_bwd_workspace_size) X(fnorm_norm_bwd)                       \
  X(fnorm_norm_fwd_quant_workspace_size) X(fnorm_norm_fwd_quant)                             \
  X(fnorm_batchnorm_desc_create) X(fnorm_batchnorm_desc_set) X(fnorm_batchnorm_desc_set_comm) \
  X(fnorm_batchnorm_fwd_train_workspace_size) X(fnorm_batchnorm_reserve_space_size)          \
  X(fnorm_batchnorm_fwd_train) X(fnorm_batchnorm_fwd_infer_workspace_size)                   \
  X(fnorm_batchnorm_fwd_infer) X(fnorm_batchnorm_bwd_workspace_size) X(fnorm_batchnorm_bwd)  \
  X(fnorm_linear_desc_create) X(fnorm_linear_desc_set) X(fnorm_linear_aux_size)              \
  X(fnorm_linear_fwd_workspace_size) X(fnorm_linear_fwd) X(fnorm_linear_bwd_workspace_size)  \
  X(fnorm_linear_bwd) X(fnorm_groupnorm_desc_create) X(fnorm_groupnorm_desc_set)              \
  X(fnorm_groupnorm_fwd_workspace_size) X(fnorm_groupnorm_fwd)                                \
  X(fnorm_groupnorm_bwd_workspace_size) X(fnorm_groupnorm_bwd)

struct Abi {
#define FNORM_TORCH_FIELD(name) decltype(&::name) name = nullptr;
  FNORM_TORCH_ABI(FNORM_TORCH_FIELD)
#undef FNORM_TORCH_FIELD
};
inline Abi abi;

// The names, in the order _bind_abi takes the addresses (Python asks for it).
inline std::vector<std::string> abi_names() {
  return {
#define FNORM_TORCH_NAME(name) #name,
      FNORM_TORCH_ABI(FNORM_TORCH_NAME)
#undef FNORM_TORCH_NAME
  };
}

inline void bind_abi(std::vector<int64_t> addrs) {
  auto names = abi_names();
  TORCH_CHECK(addrs.size() == names.size(), "fusednorm::_bind_abi: ", names.size(), " addresses expected, got ",
              addrs.size());
  size_t i = 0;
#define FNORM_TORCH_SET(name)                                                        \
  TORCH_CHECK(addrs[i] != 0, "fusednorm::_bind_abi: no address for " #name);         \
  abi.name = reinterpret_cast<decltype(&::name)>(static_cast<uintptr_t>(addrs[i++]));
  FNORM_TORCH_ABI(FNORM_TORCH_SET)
#undef FNORM_TORCH_SET
}

inline void check(fnorm_status_t st, const char *what) {
  if (st == FNORM_STATUS_SUCCESS) return;
  char msg[1024] = {0};
  abi.fnorm_get_last_error_message(msg, sizeof msg);
  TORCH_CHECK(false, "fusednorm: ", what, ": ", abi.fnorm_get_error_string(st), ": ", msg);
}

inline std::mutex cache_mutex;

inline fnorm_handle_t handle_for(const at::Tensor &t) {
  static std::array<std::atomic<fnorm_handle_t>, 64> handles{};
  int dev = t.get_device();
  TORCH_CHECK(dev >= 0 && dev < 64, "fusednorm: device index ", dev, " out of range");
  fnorm_handle_t h = handles[dev].load(std::memory_order_acquire);
  if (h) return h;
  std::lock_guard<std::mutex> lock(cache_mutex);
  h = handles[dev].load(std::memory_order_relaxed);
  if (!h) {
    c10::cuda::CUDAGuard guard(t.device());  // fnorm_create binds the current device
    check(abi.fnorm_create(&h), "fnorm_create");
    handles[dev].store(h, std::memory_order_release);
  }
  return h;
}

inline fnorm_dtype_t dtype_of(const at::Tensor &t, const char *what) {
  switch (t.scalar_type()) {
    case at::kFloat: return FNORM_DTYPE_FLOAT32;
    case at::kHalf: return FNORM_DTYPE_FLOAT16;
    case at::kBFloat16: return FNORM_DTYPE_BFLOAT16;
    case at::kFloat8_e4m3fn: return FNORM_DTYPE_FLOAT8_E4M3;  // quantized outputs (y of norm_quant)
    case at::kFloat8_e5m2: return FNORM_DTYPE_FLOAT8_E5M2;
    case at::kChar: return FNORM_DTYPE_INT8;
    default: TORCH_CHECK(false, "fusednorm: ", what, ": dtype ", t.scalar_type(), " is not float32, float16 or bfloat16");
  }
}

inline bool lib_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

// ---- cache keys: a fixed array of int64 (no allocation), FNV-1a hashed -----
struct Key {
  std::array<int64_t, 56> v;
  int n = 0;
  void add(int64_t a) { v[n++] = a; }
  void add_double(double d) {
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    add(bits);
  }
  // dtype, rank, sizes, strides (rank <= FNORM_MAX_RANK: 2 + 16 entries)
  void add_tensor(const at::Tensor &t, at::IntArrayRef sizes = {}) {
    if (!t.defined()) {
      add(-1);
      return;
    }
    if (sizes.empty()) sizes = t.sizes();
    auto strides = t.strides();
    add(static_cast<int64_t>(t.scalar_type()));
    add(static_cast<int64_t>(sizes.size()));
    for (auto s : sizes) add(s);
    for (auto s : strides) add(s);
  }
  bool operator==(const Key &o) const {
    return n == o.n && std::memcmp(v.data(), o.v.data(), sizeof(int64_t) * static_cast<size_t>(n)) == 0;
  }
};
struct KeyHash {
  size_t operator()(const Key &k) const {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < k.n; ++i) h = (h ^ static_cast<uint64_t>(k.v[i])) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// A tensor descriptor per (dtype, sizes, strides); `sizes` may replace t's.
inline fnorm_tensor_desc_t desc_of(const at::Tensor &t, const char *what, at::IntArrayRef sizes = {}) {
  static std::unordered_map<Key, fnorm_tensor_desc_t, KeyHash> cache;
  if (sizes.empty()) sizes = t.sizes();
  TORCH_CHECK(sizes.size() >= 1 && sizes.size() <= FNORM_MAX_RANK, "fusednorm: ", what, ": rank ", sizes.size(),
              " is not in 1..", FNORM_MAX_RANK);
  Key key;
  key.add_tensor(t, sizes);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  fnorm_tensor_desc_t d = nullptr;
  check(abi.fnorm_tensor_desc_create(&d), "fnorm_tensor_desc_create");
  fnorm_status_t st = abi.fnorm_tensor_desc_set(d, dtype_of(t, what), static_cast<int32_t>(sizes.size()),
                                                sizes.data(), t.strides().data());
  if (st != FNORM_STATUS_SUCCESS) check(st, what);  // the descriptor leaks: a refused layout is rare
  std::lock_guard<std::mutex> lock(cache_mutex);
  return cache.emplace(key, d).first->second;
}

// Size queries, cached per (query, handle, descriptors): the descriptors are
// unique per layout, so their addresses are the key.
template <typename F>
inline size_t cached_size(int query, std::initializer_list<const void *> ptrs, F ask) {
  static std::unordered_map<Key, size_t, KeyHash> cache;
  Key key;
  key.add(query);
  for (auto p : ptrs) key.add(static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)));
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  size_t n = ask();
  std::lock_guard<std::mutex> lock(cache_mutex);
  cache.emplace(key, n);
  return n;
}

inline const void *ptr(const c10::optional<at::Tensor> &t) {
  return t.has_value() && t->defined() && t->numel() > 0 ? t->data_ptr() : nullptr;
}
inline const void *ptr(const at::Tensor &t) { return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr; }
inline void *mptr(const at::Tensor &t) { return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr; }
inline void *mptr(const c10::optional<at::Tensor> &t) {
  return t.has_value() && t->defined() && t->numel() > 0 ? t->data_ptr() : nullptr;
}

// Allocations straight from the CUDA caching allocator (the dispatcher's
// at::empty would add a dispatch per tensor); empty_like's layout rule kept.
inline at::Tensor new_like(const at::Tensor &x) {
  if (x.is_contiguous()) return at::Tensor(at::detail::empty_cuda(x.sizes(), x.scalar_type(), x.device(), c10::nullopt));
  return at::empty_like(x);
}
inline at::Tensor new_vec(int64_t n, at::ScalarType dt, const at::Tensor &like) {
  return at::Tensor(at::detail::empty_cuda({n}, dt, like.device(), c10::nullopt));
}

inline at::Tensor workspace(size_t bytes, const at::Tensor &like) {
  if (!bytes) return at::Tensor();
  return new_vec(static_cast<int64_t>(bytes), at::kByte, like);
}

inline cudaStream_t stream_of(const at::Tensor &t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

inline void same_device(const c10::optional<at::Tensor> &t, const at::Tensor &x, const char *what) {
  if (t.has_value() && t->defined())
    TORCH_CHECK(t->device() == x.device(), "fusednorm: ", what, " is on ", t->device(), ", x is on ", x.device());
}

inline at::Tensor empty0(const at::Tensor &like, at::ScalarType dt) { return new_vec(0, dt, like); }

// A registered op returns a tensor in every output: an empty one where the
// implementation left it undefined (the eager entries take undefined ones and
// skip those allocations).
inline void defined_or_empty(at::Tensor &t, const at::Tensor &like, at::ScalarType dt) {
  if (!t.defined()) t = empty0(like, dt);
}

// A packed tensor of t's sizes and dtype, on its device.
inline at::Tensor new_packed(const at::Tensor &t) {
  return at::Tensor(at::detail::empty_cuda(t.sizes(), t.scalar_type(), t.device(), c10::nullopt));
}

inline bool given(const c10::optional<at::Tensor> &t) { return t.has_value() && t->defined(); }

// ---- the eager entry points' gate --------------------------------------------
// A tensor the library may read directly: a dense CUDA tensor with no Python
// subclass behaviour, functorch wrapper, lazy conjugation/negation or
// functionalization. Anything else goes through the dispatcher (Python path).
inline bool plain_cuda(const at::Tensor &t) {
  static const c10::DispatchKeySet odd({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                                        c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper,
                                        c10::DispatchKey::Functionalize, c10::DispatchKey::Conjugate,
                                        c10::DispatchKey::Negative, c10::DispatchKey::ZeroTensor});
  return t.is_cuda() && t.layout() == at::kStrided && !t.key_set().has_any(odd);
}

// No dispatch mode, functorch transform or TorchScript trace is active: they
// must see the op, so the call goes through the dispatcher.
inline bool plain_context() {
  static const c10::DispatchKeySet odd(
      {c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot, c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
       c10::DispatchKey::FuncTorchDynamicLayerBackMode, c10::DispatchKey::Functionalize,
       c10::DispatchKey::FuncTorchVmapMode});
  return !c10::impl::tls_local_dispatch_key_set().included_.has_any(odd) && !torch::jit::tracer::isTracing();
}

// A Python argument: None, or a plain tensor (torch.Tensor or Parameter, not a
// subclass). false: decline.
inline bool unpack(PyObject *o, c10::optional<at::Tensor> &out) {
  if (o == Py_None) return true;
  if (!THPVariable_CheckExact(o)) return false;
  const at::Tensor &t = THPVariable_Unpack(o);
  if (!plain_cuda(t)) return false;
  out = t;
  return true;
}

inline bool needs_grad(std::initializer_list<const c10::optional<at::Tensor> *> ts) {
  if (!at::GradMode::is_enabled()) return false;
  for (auto t : ts)
    if (t->has_value() && (*t)->requires_grad()) return true;
  return false;
}

// The dimensions from `axis` packed and the ones before it collapsing into one
// row stride >= cols (what the row-wise ops take without a copy).
inline bool rowwise(const at::Tensor &t, int64_t axis) {
  auto shape = t.sizes();
  auto stride = t.strides();
  int64_t dim = t.dim(), expect = 1;
  for (int64_t d = dim - 1; d >= axis; --d) {
    if (shape[d] != 1 && stride[d] != expect) return false;
    expect *= shape[d];
  }
  int64_t cols = expect;
  bool first = true;
  for (int64_t d = axis - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (first) {
      if (stride[d] < cols) return false;
      first = false;
    } else if (stride[d] != expect) {
      return false;
    }
    expect = stride[d] * shape[d];
  }
  return true;
}

// Grad mode inside a backward means create_graph=True. The recomputed formula
// is used only on real tensors: never while AOTAutograd traces the backward
// with fake or functional tensors (torch.compile has no double backward).
inline bool double_backward(bool direct, const at::Tensor &x) {
  return at::GradMode::is_enabled() && (direct || plain_cuda(x));
}

// The dimensions of the given autograd inputs that need a gradient, and
// torch::autograd::grad of `out` with respect to them with a graph (double
// backward). `which` are the indexes in the backward's result.
inline torch::autograd::variable_list grads_with_graph(const at::Tensor &out, const at::Tensor &dy,
                                                const std::vector<std::pair<size_t, at::Tensor>> &wrt,
                                                size_t n_results) {
  torch::autograd::variable_list result(n_results);
  if (wrt.empty()) return result;
  torch::autograd::variable_list inputs;
  for (auto &p : wrt) inputs.push_back(p.second);
  auto g = torch::autograd::grad({out}, inputs, {dy}, /*retain_graph=*/true, /*create_graph=*/true,
                                 /*allow_unused=*/true);
  for (size_t i = 0; i < wrt.size(); ++i) {
    at::Tensor gi = g[i];
    if (!gi.defined()) gi = at::zeros_like(wrt[i].second);
    result[wrt[i].first] = gi;
  }
  return result;
}

// needs_input_grad counts the autograd edges: only the tensors actually given
// (an absent optional takes no index). Edge index of each argument, -1 absent.
inline bool needs(torch::autograd::AutogradContext *ctx, int64_t i) {
  return i >= 0 && ctx->needs_input_grad(static_cast<size_t>(i));
}

// The eager entry points: each op's file adds its own (EagerEntries) and the
// extension module binds them all at import (ops.cpp).
using EagerInit = std::function<void(py::module_ &)>;
inline std::vector<EagerInit> &eager_entries() {
  static std::vector<EagerInit> entries;
  return entries;
}
struct EagerEntries {
  explicit EagerEntries(EagerInit init) { eager_entries().push_back(std::move(init)); }
};

}  // namespace fnorm_torch
