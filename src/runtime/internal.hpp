// Internal runtime: the API guard, argument checks, and the objects behind
// the opaque handles. Nothing here is exported.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdarg>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <initializer_list>
#include <tuple>

#include "fusednorm.h"
#include "params.hpp"

namespace fnorm {

// An error on its way to the API boundary. Thrown only on failure paths;
// api_guard() turns it into a status and the thread's last-error message.
struct Error {
  fnorm_status_t status;
  std::string message;
};

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fail(fnorm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Record `message` as the calling thread's last error.
void set_last_error(const std::string &message);

// Turn a failed CUDA call into an Error naming what was being done.
[[noreturn]] void fail_cuda(cudaError_t err, const char *what);
inline void check_cuda(cudaError_t err, const char *what) {
  if (err != cudaSuccess) fail_cuda(err, what);
}

// Runs `body` (which returns nothing and throws Error on failure) and turns
// every failure into a status, prefixing the message with the function name.
// Nothing but a status crosses the ABI.
template <class Body>
fnorm_status_t api_guard(const char *func, Body &&body) noexcept {
  try {
    body();
    return FNORM_STATUS_SUCCESS;
  } catch (const Error &e) {
    set_last_error(std::string(func) + ": " + e.message);
    return e.status;
  } catch (const std::bad_alloc &) {
    set_last_error(std::string(func) + ": host memory allocation failed");
    return FNORM_STATUS_ALLOC_FAILED;
  } catch (...) {
    set_last_error(std::string(func) + ": unexpected internal exception");
    return FNORM_STATUS_INTERNAL_ERROR;
  }
}

// Argument checks: the message names the argument and the failed condition.
#define FNORM_REQUIRE_NOT_NULL(arg)                                                     \
  do {                                                                                  \
    if ((arg) == nullptr)                                                               \
      ::fnorm::fail(FNORM_STATUS_BAD_PARAM_NULL_POINTER, "argument '%s' is NULL", #arg); \
  } while (0)

#define FNORM_REQUIRE(cond, status, ...) \
  do {                                   \
    if (!(cond)) ::fnorm::fail(status, __VA_ARGS__); \
  } while (0)

const char *dtype_name(fnorm_dtype_t dtype);
// Bytes per element, 0 for an unknown dtype.
size_t dtype_size(fnorm_dtype_t dtype);

// Makes the handle's device current for its lifetime, then restores the
// caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard &) = delete;
  DeviceGuard &operator=(const DeviceGuard &) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

class KernelCache {
 public:
  cudaError_t occupancy(const void *func, int block, size_t smem, int *blocks_per_sm);

 private:
  std::mutex mutex_;
  std::map<std::tuple<const void *, int, size_t>, int> occupancy_;
};

}  // namespace fnorm

namespace fnorm {
// Library states a handle creates on first use (each defined by its op's
// source file, which also defines the destroy function, NULL-safe).
struct LinearState;  // cuBLASLt handle + algorithm cache (src/linear/)
void linear_state_destroy(LinearState *state) noexcept;
struct CudnnState;  // cuDNN handle for the BatchNorm cuDNN engine
void cudnn_state_destroy(CudnnState *state) noexcept;
}  // namespace fnorm

struct fnorm_handle {
  int device = 0;
  fnorm::DeviceInfo info;
  fnorm::KernelCache cache;
  std::mutex lazy_mutex;                  // guards creation of the states below
  fnorm::LinearState *linear = nullptr;   // owned; see linear_state_destroy
  fnorm::CudnnState *cudnn = nullptr;     // owned; see cudnn_state_destroy
  ~fnorm_handle() {
    fnorm::linear_state_destroy(linear);
    fnorm::cudnn_state_destroy(cudnn);
  }
};

struct fnorm_tensor_desc {
  bool is_set = false;
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  int32_t rank = 0;
  int64_t dims[FNORM_MAX_RANK] = {};
  int64_t strides[FNORM_MAX_RANK] = {};
};

struct fnorm_norm_desc {
  fnorm_norm_mode_t mode = FNORM_NORM_LAYERNORM;
  int32_t begin_norm_axis = -1;
  double epsilon = 1e-5;
  uint32_t flags = 0;
};

namespace fnorm {

// The [rows, cols] view of a normalization problem, after validation.
struct RowView {
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t axis = 0;           // first normalized dimension of x
  int64_t x_row_stride = 0;   // x (and residual / sum in the forward)
  int64_t y_row_stride = 0;   // forward: y; backward: dy (and dsum)
  int64_t dx_row_stride = 0;  // backward only
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
};

// Validates the descriptors of a forward (everything the size query sees)
// and returns the row view. Throws Error.
RowView check_norm_fwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *y_desc);
// Backward: x, dy, dx descriptors (dy_desc/dx_desc may be null in the size
// query, which then assumes x's layout).
RowView check_norm_bwd_descs(const fnorm_norm_desc *norm, const fnorm_tensor_desc *x_desc,
                             const fnorm_tensor_desc *dy_desc, const fnorm_tensor_desc *dx_desc);

// Validates the weight descriptor against x when `needed`; returns whether
// the parameters are fp32 while x is not. Throws Error.
bool check_weight_desc(const fnorm_tensor_desc *w_desc, const fnorm_tensor_desc *x_desc,
                       const RowView &view, bool needed);

// Normalized begin axis in [0, rank), or throws naming `arg`.
int32_t resolve_axis(int32_t axis, int32_t rank, const char *arg);

// The widest pack (elements, <= 16 bytes) that every given data pointer, the
// row length and the row strides allow. fp32 parameter pointers need only
// 4 * min(pack, 4) bytes of alignment.
int choose_pack(const RowView &v, std::initializer_list<const void *> data,
                std::initializer_list<int64_t> strides, std::initializer_list<const void *> params,
                bool param_f32);

// The chosen kernel instance and the launch shape it needs.
template <class Instance>
struct Plan {
  const Instance *instance = nullptr;
  int pack = 1;
  Tier tier = Tier::Warp;
  int npack = 0;
  int width_log2 = 0;     // warp tier
  int block_threads = 0;  // block-register tier
  int cluster = 1;        // backward block-register tier: blocks per row (a cluster)
};
using NormFwdPlan = Plan<NormFwdInstance>;
using NormBwdPlan = Plan<NormBwdInstance>;

// Picks tier and instance for a forward (RMSNorm when `rms`) with the given
// pack. Throws NOT_SUPPORTED_BUILD when no instance fits.
NormFwdPlan plan_norm_fwd(const RowView &view, int pack, const DeviceInfo &dev, bool rms);

NormBwdPlan plan_norm_bwd(const RowView &view, int pack, const DeviceInfo &dev);

// Workspace layout of a backward with `partials` partial rows.
struct BwdWorkspace {
  size_t dgamma_offset = 0, dbeta_offset = 0, coef_offset = 0, bytes = 0;
};
BwdWorkspace bwd_workspace_layout(const RowView &v, int partials, bool want_partials, bool coef);

}  // namespace fnorm
