/* SPDX-License-Identifier: Apache-2.0 */
// libfusednorm's ops for PyTorch: custom ops registered with TORCH_LIBRARY
// (schema, a CUDA kernel calling the C ABI, autograd in C++, autocast rules),
// and the modules' eager entry points (pybind11), which take the module's
// tensors as Python objects and either run the op or answer None: the module
// then takes its Python path (torch.compile, FX, export, fake or wrapped
// tensors, layouts that need a copy, empty tensors, torch's fallback). The fake
// (meta) kernels are registered from Python (fusednorm/torch/_ops.py), where the
// size queries are reachable.
//
// The C ABI is reached through function pointers handed over by the Python
// binding (fusednorm::_bind_abi): the very library the binding loaded
// ($FNORM_LIB or the build tree), never a second copy, and no link step.
//
// Host time: an eager call is one pybind11 call taking Python objects (no
// argument casters), plain-tensor checks on dispatch keys, one hashed lookup
// of a plan (descriptors and workspace sizes per layout, built once), the
// output allocations from the caching allocator, and the launch; the
// dispatcher is skipped (a RecordFunction keeps the call visible to the
// profiler). Without gradients the LayerNorm/RMSNorm statistics are not
// written (the library takes NULL there).
//
// Double backward: when a graph of the gradient is asked for (create_graph,
// i.e. grad mode on inside backward), each backward recomputes its forward
// with ATen's differentiable operators and differentiates that, so the
// gradient is itself differentiable (torch's formula). Never None.
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

namespace {

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
Abi abi;

// The names, in the order _bind_abi takes the addresses (Python asks for it).
std::vector<std::string> abi_names() {
  return {
#define FNORM_TORCH_NAME(name) #name,
      FNORM_TORCH_ABI(FNORM_TORCH_NAME)
#undef FNORM_TORCH_NAME
  };
}

void bind_abi(std::vector<int64_t> addrs) {
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

void check(fnorm_status_t st, const char *what) {
  if (st == FNORM_STATUS_SUCCESS) return;
  char msg[1024] = {0};
  abi.fnorm_get_last_error_message(msg, sizeof msg);
  TORCH_CHECK(false, "fusednorm: ", what, ": ", abi.fnorm_get_error_string(st), ": ", msg);
}

std::mutex cache_mutex;

fnorm_handle_t handle_for(const at::Tensor &t) {
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

fnorm_dtype_t dtype_of(const at::Tensor &t, const char *what) {
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

bool lib_dtype(at::ScalarType t) { return t == at::kFloat || t == at::kHalf || t == at::kBFloat16; }

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
fnorm_tensor_desc_t desc_of(const at::Tensor &t, const char *what, at::IntArrayRef sizes = {}) {
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

// Size queries, cached per (query, handle, descriptors): the descriptors are
// unique per layout, so their addresses are the key.
template <typename F>
size_t cached_size(int query, std::initializer_list<const void *> ptrs, F ask) {
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

const void *ptr(const c10::optional<at::Tensor> &t) {
  return t.has_value() && t->defined() && t->numel() > 0 ? t->data_ptr() : nullptr;
}
const void *ptr(const at::Tensor &t) { return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr; }
void *mptr(const at::Tensor &t) { return t.defined() && t.numel() > 0 ? t.data_ptr() : nullptr; }
void *mptr(const c10::optional<at::Tensor> &t) {
  return t.has_value() && t->defined() && t->numel() > 0 ? t->data_ptr() : nullptr;
}

// Allocations straight from the CUDA caching allocator (the dispatcher's
// at::empty would add a dispatch per tensor); empty_like's layout rule kept.
at::Tensor new_like(const at::Tensor &x) {
  if (x.is_contiguous()) return at::Tensor(at::detail::empty_cuda(x.sizes(), x.scalar_type(), x.device(), c10::nullopt));
  return at::empty_like(x);
}
at::Tensor new_vec(int64_t n, at::ScalarType dt, const at::Tensor &like) {
  return at::Tensor(at::detail::empty_cuda({n}, dt, like.device(), c10::nullopt));
}

at::Tensor workspace(size_t bytes, const at::Tensor &like) {
  if (!bytes) return at::Tensor();
  return new_vec(static_cast<int64_t>(bytes), at::kByte, like);
}

cudaStream_t stream_of(const at::Tensor &t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

void same_device(const c10::optional<at::Tensor> &t, const at::Tensor &x, const char *what) {
  if (t.has_value() && t->defined())
    TORCH_CHECK(t->device() == x.device(), "fusednorm: ", what, " is on ", t->device(), ", x is on ", x.device());
}

at::Tensor empty0(const at::Tensor &like, at::ScalarType dt) { return new_vec(0, dt, like); }

// A registered op returns a tensor in every output: an empty one where the
// implementation left it undefined (the eager entries take undefined ones and
// skip those allocations).
void defined_or_empty(at::Tensor &t, const at::Tensor &like, at::ScalarType dt) {
  if (!t.defined()) t = empty0(like, dt);
}

// A packed tensor of t's sizes and dtype, on its device.
at::Tensor new_packed(const at::Tensor &t) {
  return at::Tensor(at::detail::empty_cuda(t.sizes(), t.scalar_type(), t.device(), c10::nullopt));
}

bool given(const c10::optional<at::Tensor> &t) { return t.has_value() && t->defined(); }

// ---- the eager entry points' gate --------------------------------------------
// A tensor the library may read directly: a dense CUDA tensor with no Python
// subclass behaviour, functorch wrapper, lazy conjugation/negation or
// functionalization. Anything else goes through the dispatcher (Python path).
bool plain_cuda(const at::Tensor &t) {
  static const c10::DispatchKeySet odd({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot,
                                        c10::DispatchKey::FuncTorchBatched, c10::DispatchKey::FuncTorchGradWrapper,
                                        c10::DispatchKey::Functionalize, c10::DispatchKey::Conjugate,
                                        c10::DispatchKey::Negative, c10::DispatchKey::ZeroTensor});
  return t.is_cuda() && t.layout() == at::kStrided && !t.key_set().has_any(odd);
}

// No dispatch mode, functorch transform or TorchScript trace is active: they
// must see the op, so the call goes through the dispatcher.
bool plain_context() {
  static const c10::DispatchKeySet odd(
      {c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot, c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
       c10::DispatchKey::FuncTorchDynamicLayerBackMode, c10::DispatchKey::Functionalize,
       c10::DispatchKey::FuncTorchVmapMode});
  return !c10::impl::tls_local_dispatch_key_set().included_.has_any(odd) && !torch::jit::tracer::isTracing();
}

// A Python argument: None, or a plain tensor (torch.Tensor or Parameter, not a
// subclass). false: decline.
bool unpack(PyObject *o, c10::optional<at::Tensor> &out) {
  if (o == Py_None) return true;
  if (!THPVariable_CheckExact(o)) return false;
  const at::Tensor &t = THPVariable_Unpack(o);
  if (!plain_cuda(t)) return false;
  out = t;
  return true;
}

bool needs_grad(std::initializer_list<const c10::optional<at::Tensor> *> ts) {
  if (!at::GradMode::is_enabled()) return false;
  for (auto t : ts)
    if (t->has_value() && (*t)->requires_grad()) return true;
  return false;
}

// The dimensions from `axis` packed and the ones before it collapsing into one
// row stride >= cols (what the row-wise ops take without a copy).
bool rowwise(const at::Tensor &t, int64_t axis) {
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
bool double_backward(bool direct, const at::Tensor &x) {
  return at::GradMode::is_enabled() && (direct || plain_cuda(x));
}

// The dimensions of the given autograd inputs that need a gradient, and
// torch::autograd::grad of `out` with respect to them with a graph (double
// backward). `which` are the indexes in the backward's result.
torch::autograd::variable_list grads_with_graph(const at::Tensor &out, const at::Tensor &dy,
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
  const at::Tensor *w = given(weight) ? &*weight : (given(bias) ? &*bias : nullptr);
  auto wd = w ? desc_of(*w, "weight") : nullptr;
  size_t ws_bytes = cached_size(1, {h, nd, xd, yd}, [&] {
    size_t n = 0;
    check(abi.fnorm_norm_fwd_workspace_size(h, nd, xd, yd, &n), "fnorm_norm_fwd_workspace_size");
    return n;
  });
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
  const at::Tensor *w = given(weight) ? &*weight : (given(bias) ? &*bias : nullptr);
  auto wd = w ? desc_of(*w, "weight") : nullptr;
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

// needs_input_grad counts the autograd edges: only the tensors actually given
// (an absent optional takes no index). Edge index of each argument, -1 absent.
bool needs(torch::autograd::AutogradContext *ctx, int64_t i) {
  return i >= 0 && ctx->needs_input_grad(static_cast<size_t>(i));
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
    // mode, axis, flags and the edges of weight and bias packed in one value
    ctx->saved_data["m"] = mode | (axis << 4) | (flags << 20) | ((ew + 1) << 28) | ((eb + 1) << 32);
    ctx->saved_data["e"] = eps;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    int64_t m = ctx->saved_data["m"].toInt();
    int64_t mode = m & 0xf, axis = (m >> 4) & 0xffff, flags = (m >> 20) & 0xff;
    int64_t ew = ((m >> 28) & 0xf) - 1, eb = ((m >> 32) & 0xf) - 1;
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

// The eager entry's autograd node, made as torch's generated nodes are (a
// Node holding its saved variables; edges x, weight, bias, an absent one
// empty) rather than through torch::autograd::Function, whose generic
// bookkeeping (the context's dictionary and variable lists, materialized
// zero gradients, the node's demangled name on every call) is host time a
// torch.nn module does not pay. A gradient that is not defined gives none
// (as torch's nodes). Compiled autograd does not take this node: a compiled
// forward takes the registered op's path (NormFunction) instead.
struct NormBackward final : public torch::autograd::Node {
  torch::autograd::SavedVariable x_, mean_, rstd_, weight_, bias_;
  int64_t mode = 0, axis = 0, flags = 0;
  double eps = 0;

  std::string name() const override { return "fusednorm::NormBackward"; }

  // The node's mutex, as torch's nodes take it: two backwards through one
  // retained graph may run it from two threads.
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto *v : {&x_, &mean_, &rstd_, &weight_, &bias_}) v->reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    torch::autograd::variable_list out(3);
    const at::Tensor x = x_.unpack(), mean = mean_.unpack(), rstd = rstd_.unpack();
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
  node->x_ = torch::autograd::SavedVariable(x, false);
  node->mean_ = torch::autograd::SavedVariable(mean, false);
  node->rstd_ = torch::autograd::SavedVariable(rstd, false);
  if (given(weight)) node->weight_ = torch::autograd::SavedVariable(*weight, false);
  if (given(bias)) node->bias_ = torch::autograd::SavedVariable(*bias, false);
  node->mode = mode;
  node->axis = axis;
  node->flags = flags;
  node->eps = eps;
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
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::norm", "")
                       .typed<decltype(norm_autograd)>();
  if (mode != FNORM_NORM_LAYERNORM || !at::autocast::is_autocast_enabled(c10::DeviceType::CUDA))
    return op.call(x, weight, bias, mode, axis, eps, flags);
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
  const c10::optional<at::Tensor> &p = w.has_value() ? w : b;
  if (p.has_value()) {
    auto pt = p->scalar_type();
    if ((pt != x.scalar_type() && pt != at::kFloat) || (w.has_value() && b.has_value() && b->scalar_type() != pt))
      return py::none();
    for (auto *t : {&w, &b})
      if (t->has_value() && ((*t)->device() != x.device() || (*t)->sizes() != x.sizes().slice(axis) ||
                             !(*t)->is_contiguous()))
        return py::none();
  }
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
  const at::Tensor *w = given(weight) ? &*weight : (given(bias) ? &*bias : nullptr);
  auto wd = w ? desc_of(*w, "weight") : nullptr;
  size_t ws_bytes = cached_size(1, {h, nd, xd, xd}, [&] {
    size_t n = 0;
    check(abi.fnorm_norm_fwd_workspace_size(h, nd, xd, xd, &n), "fnorm_norm_fwd_workspace_size");
    return n;
  });
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
    ctx->saved_data["m"] = mode | (axis << 4) | (flags << 20) | ((ew + 1) << 28) | ((eb + 1) << 32);
    ctx->saved_data["e"] = eps;
    return {y, sum};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    int64_t m = ctx->saved_data["m"].toInt();
    int64_t mode = m & 0xf, axis = (m >> 4) & 0xffff, flags = (m >> 20) & 0xff;
    int64_t ew = ((m >> 28) & 0xf) - 1, eb = ((m >> 32) & 0xf) - 1;
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
struct AddNormBackward final : public torch::autograd::Node {
  torch::autograd::SavedVariable sum_, mean_, rstd_, weight_, bias_;
  int64_t mode = 0, axis = 0, flags = 0;
  double eps = 0;

  std::string name() const override { return "fusednorm::AddNormBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto *v : {&sum_, &mean_, &rstd_, &weight_, &bias_}) v->reset_data();
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    torch::autograd::variable_list out(4);
    const at::Tensor s = sum_.unpack(shared_from_this()), mean = mean_.unpack(), rstd = rstd_.unpack();
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
  const int64_t cols = x.size(dim - 1), axis = dim - 1;
  const c10::optional<at::Tensor> &p = w.has_value() ? w : b;
  if (p.has_value()) {
    auto pt = p->scalar_type();
    if ((pt != x.scalar_type() && pt != at::kFloat) || (w.has_value() && b.has_value() && b->scalar_type() != pt))
      return py::none();
    for (auto *t : {&w, &b})
      if (t->has_value() && ((*t)->device() != x.device() || (*t)->dim() != 1 || (*t)->size(0) != cols ||
                             !(*t)->is_contiguous()))
        return py::none();
  }
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
      node->sum_ = torch::autograd::SavedVariable(sum, true);
      node->mean_ = torch::autograd::SavedVariable(mean, false);
      node->rstd_ = torch::autograd::SavedVariable(rstd, false);
      if (given(w)) node->weight_ = torch::autograd::SavedVariable(*w, false);
      if (given(b)) node->bias_ = torch::autograd::SavedVariable(*b, false);
      node->mode = mode;
      node->axis = axis;
      node->flags = flags;
      node->eps = eps;
    }
  }
  return py::make_tuple(py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(y))),
                        py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(sum))));
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
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::linear", "").typed<decltype(linear_autograd)>();
  if (!at::autocast::is_autocast_enabled(c10::DeviceType::CUDA)) return op.call(x, w, b, act);
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
  at::Tensor y = new_like(x);
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
  at::Tensor dx = new_like(x);
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
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCUDA);
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("fusednorm::group_norm", "")
                       .typed<decltype(group_norm_autograd)>();
  if (!at::autocast::is_autocast_enabled(c10::DeviceType::CUDA))
    return op.call(x, groups, weight, bias, scale, shift, eps, act);
  auto f32 = [](const c10::optional<at::Tensor> &t) {
    return at::autocast::cached_cast(at::kFloat, t, c10::DeviceType::CUDA);
  };
  return op.call(at::autocast::cached_cast(at::kFloat, x, c10::DeviceType::CUDA), groups, f32(weight), f32(bias),
                 f32(scale), f32(shift), eps, act);
}

}  // namespace

TORCH_LIBRARY(fusednorm, m) {
  m.def("_bind_abi(int[] addrs) -> ()", &bind_abi);
  m.def("_abi_names() -> str[]", &abi_names);
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
  m.def("linear_fwd(Tensor x, Tensor weight, Tensor? bias, int act, bool save_aux) -> (Tensor y, Tensor aux)");
  m.def("linear_bwd(Tensor dy, Tensor x, Tensor weight, Tensor aux, bool has_bias, int act, bool need_dx,"
        " bool need_dw, bool need_db) -> (Tensor dx, Tensor dw, Tensor db)");
  m.def("linear(Tensor x, Tensor weight, Tensor? bias, int act) -> Tensor");
  m.def("group_norm_fwd(Tensor x, int groups, Tensor? weight, Tensor? bias, Tensor? scale, Tensor? shift, float eps,"
        " int act) -> (Tensor y, Tensor mean, Tensor rstd)");
  m.def("group_norm_bwd(Tensor dy, Tensor x, Tensor mean, Tensor rstd, int groups, Tensor? weight, Tensor? bias,"
        " Tensor? scale, Tensor? shift, int act, bool need_dweight, bool need_dbias, bool need_dscale,"
        " bool need_dshift) -> (Tensor dx, Tensor dweight, Tensor dbias, Tensor dscale, Tensor dshift)");
  m.def("group_norm(Tensor x, int groups, Tensor? weight, Tensor? bias, Tensor? scale, Tensor? shift, float eps,"
        " int act) -> Tensor");
}

TORCH_LIBRARY_IMPL(fusednorm, CUDA, m) {
  m.impl("norm_fwd", norm_fwd);
  m.impl("norm_bwd", norm_bwd);
  m.impl("norm", call_norm_fwd_y);
  m.impl("add_norm_fwd", add_norm_fwd);
  m.impl("add_norm", call_add_norm);
  m.impl("norm_quant", norm_quant);
  m.impl("bn_fwd_train", bn_fwd_train);
  m.impl("bn_fwd_infer", bn_fwd_infer);
  m.impl("bn_bwd", bn_bwd);
  m.impl("batch_norm", batch_norm_cuda);
  m.impl("linear_fwd", linear_fwd);
  m.impl("linear_bwd", linear_bwd);
  m.impl("linear", linear_cuda);
  m.impl("group_norm_fwd", group_norm_fwd);
  m.impl("group_norm_bwd", group_norm_bwd);
  m.impl("group_norm", group_norm_cuda);
}

TORCH_LIBRARY_IMPL(fusednorm, Autograd, m) {
  m.impl("norm", norm_autograd);
  m.impl("add_norm", add_norm_autograd);
  m.impl("batch_norm", batch_norm_autograd);
  m.impl("linear", linear_autograd);
  m.impl("group_norm", group_norm_autograd);
}

TORCH_LIBRARY_IMPL(fusednorm, AutocastCUDA, m) {
  m.impl("norm", norm_autocast);
  m.impl("linear", linear_autocast);
  m.impl("group_norm", group_norm_autocast);
}

// The modules' eager entry points (see norm_eager, bn_eager, linear_eager);
// under torch.compile, FX and export the modules call torch.ops.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("norm", &norm_eager);
  m.def("add_norm", &add_norm_eager);
  m.def("bn", &bn_eager);
  m.def("linear", &linear_eager);
}
