/* SPDX-License-Identifier: Apache-2.0 */
// Host (no GPU) tests of the public API and the runtime's choices:
// descriptors, error reporting, validation, size queries, kernel planning.
// White-box: links the library's objects to reach the planner and to build a
// handle without a device.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "fake_handle.hpp"
#include "fusednorm.h"
#include "norm/norm.hpp"

using namespace fnorm_test;

namespace {

struct Norm {
  fnorm_norm_desc_t d = nullptr;
  Norm() { fnorm_norm_desc_create(&d); }
  ~Norm() { fnorm_norm_desc_destroy(d); }
};

void test_version_and_strings() {
  CHECK_EQ(fnorm_get_version(), static_cast<uint32_t>(FNORM_VERSION));
  CHECK_EQ(FNORM_VERSION, FNORM_VERSION_MAJOR * 10000 + FNORM_VERSION_MINOR * 100 + FNORM_VERSION_PATCH);
  const fnorm_status_t all[] = {
      FNORM_STATUS_SUCCESS, FNORM_STATUS_BAD_PARAM, FNORM_STATUS_BAD_PARAM_NULL_POINTER,
      FNORM_STATUS_BAD_PARAM_SHAPE, FNORM_STATUS_INSUFFICIENT_WORKSPACE,
      FNORM_STATUS_NOT_SUPPORTED, FNORM_STATUS_NOT_SUPPORTED_BUILD, FNORM_STATUS_INTERNAL_ERROR,
      FNORM_STATUS_ALLOC_FAILED, FNORM_STATUS_NO_DEVICE, FNORM_STATUS_CUDA_ERROR,
      FNORM_STATUS_CUBLAS_ERROR, FNORM_STATUS_CUDNN_ERROR, FNORM_STATUS_NCCL_ERROR};
  for (fnorm_status_t s : all) {
    const char *str = fnorm_get_error_string(s);
    CHECK(str != nullptr && std::strncmp(str, "FNORM_STATUS_", 13) == 0);
    CHECK(std::string(str) != "FNORM_STATUS_UNKNOWN");
  }
  CHECK_EQ(std::string(fnorm_get_error_string(static_cast<fnorm_status_t>(12345))),
           std::string("FNORM_STATUS_UNKNOWN"));
  CHECK_EQ(fnorm_status_category(FNORM_STATUS_INSUFFICIENT_WORKSPACE), FNORM_STATUS_BAD_PARAM);
  CHECK_EQ(fnorm_status_category(FNORM_STATUS_NOT_SUPPORTED_BUILD), FNORM_STATUS_NOT_SUPPORTED);
  CHECK_EQ(fnorm_status_category(FNORM_STATUS_NCCL_ERROR), FNORM_STATUS_CUDA_ERROR);
  CHECK_EQ(fnorm_status_category(FNORM_STATUS_SUCCESS), FNORM_STATUS_SUCCESS);
}

void test_last_error_buffer() {
  CHECK_STATUS(fnorm_tensor_desc_create(nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  const std::string full = last_error();
  CHECK(full.find("fnorm_tensor_desc_create") != std::string::npos);
  CHECK(full.find("'desc'") != std::string::npos);
  char small[8];
  std::memset(small, 'x', sizeof small);
  const size_t n = fnorm_get_last_error_message(small, sizeof small);
  CHECK_EQ(n, full.size());
  CHECK_EQ(std::strlen(small), static_cast<size_t>(7));  // truncated, NUL-terminated
  CHECK_EQ(fnorm_get_last_error_message(nullptr, 0), full.size());
}

void test_tensor_desc() {
  Desc t;
  int64_t dims[FNORM_MAX_RANK + 1] = {2, 3, 4, 5, 6, 7, 8, 9, 10};
  CHECK_STATUS(fnorm_tensor_desc_get(t.d, nullptr, nullptr, nullptr, nullptr, 0), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("never set"));
  CHECK_STATUS(fnorm_tensor_desc_set(t.d, FNORM_DTYPE_FLOAT16, 0, dims, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'rank'"));
  CHECK_STATUS(fnorm_tensor_desc_set(t.d, FNORM_DTYPE_FLOAT16, FNORM_MAX_RANK + 1, dims, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK_STATUS(fnorm_tensor_desc_set(t.d, static_cast<fnorm_dtype_t>(7), 2, dims, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'dtype'"));
  CHECK_STATUS(fnorm_tensor_desc_set(t.d, FNORM_DTYPE_FLOAT16, 2, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'dims'"));
  const int64_t negative[2] = {3, -1};
  CHECK_STATUS(fnorm_tensor_desc_set(t.d, FNORM_DTYPE_FLOAT16, 2, negative, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("dims[1]"));
  const int64_t huge[3] = {int64_t{1} << 40, int64_t{1} << 30, 2};
  CHECK_STATUS(fnorm_tensor_desc_set(t.d, FNORM_DTYPE_FLOAT16, 3, huge, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("overflows"));
  const int64_t bad_strides[2] = {4, 0};
  CHECK_STATUS(fnorm_tensor_desc_set(t.d, FNORM_DTYPE_FLOAT16, 2, dims, bad_strides), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("strides[1]"));
  // A failed set leaves the descriptor unset.
  CHECK_STATUS(fnorm_tensor_desc_get_elements(t.d, dims), FNORM_STATUS_BAD_PARAM);

  CHECK_STATUS(t.set(FNORM_DTYPE_BFLOAT16, {2, 3, 4}), FNORM_STATUS_SUCCESS);
  fnorm_dtype_t dt;
  int32_t rank = 0;
  int64_t gd[FNORM_MAX_RANK], gs[FNORM_MAX_RANK];
  CHECK_STATUS(fnorm_tensor_desc_get(t.d, &dt, &rank, gd, gs, FNORM_MAX_RANK), FNORM_STATUS_SUCCESS);
  CHECK_EQ(dt, FNORM_DTYPE_BFLOAT16);
  CHECK_EQ(rank, 3);
  CHECK_EQ(gd[0], 2);
  CHECK_EQ(gd[2], 4);
  CHECK_EQ(gs[0], 12);  // packed row-major strides
  CHECK_EQ(gs[1], 4);
  CHECK_EQ(gs[2], 1);
  int64_t n = 0;
  CHECK_STATUS(fnorm_tensor_desc_get_elements(t.d, &n), FNORM_STATUS_SUCCESS);
  CHECK_EQ(n, 24);
  // Explicit strides are kept; a failing set keeps the previous contents.
  CHECK_STATUS(t.set(FNORM_DTYPE_FLOAT32, {2, 3}, {8, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(t.set(FNORM_DTYPE_FLOAT32, {2, 3}, {8, -1}), FNORM_STATUS_BAD_PARAM);
  CHECK_STATUS(fnorm_tensor_desc_get(t.d, &dt, &rank, gd, gs, 1), FNORM_STATUS_SUCCESS);
  CHECK_EQ(gs[0], 8);
  CHECK_EQ(rank, 2);
  CHECK_STATUS(fnorm_tensor_desc_destroy(nullptr), FNORM_STATUS_SUCCESS);
}

void test_norm_desc() {
  Norm n;
  fnorm_norm_mode_t mode;
  int32_t axis;
  double eps;
  CHECK_STATUS(fnorm_norm_desc_get(n.d, &mode, &axis, &eps), FNORM_STATUS_SUCCESS);
  CHECK_EQ(mode, FNORM_NORM_LAYERNORM);
  CHECK_EQ(axis, -1);
  CHECK_EQ(eps, 1e-5);
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, -1.0), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'epsilon'"));
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, NAN), FNORM_STATUS_BAD_PARAM);
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, INFINITY), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'epsilon'"));
  // Not representable in fp32 (the kernels add epsilon in fp32): refused
  // here, as the header says, not at the first size query or launch; the
  // descriptor keeps its previous value.
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, 1e300), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'epsilon'"));
  CHECK(last_error_mentions("fp32"));
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, 1e39), FNORM_STATUS_BAD_PARAM);
  CHECK_STATUS(fnorm_norm_desc_get(n.d, nullptr, nullptr, &eps), FNORM_STATUS_SUCCESS);
  CHECK_EQ(eps, 1e-5);
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, static_cast<double>(FLT_MAX)),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_desc_set(n.d, static_cast<fnorm_norm_mode_t>(9), -1, 1e-5), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'mode'"));
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_RMSNORM, -1, 1e-5), FNORM_STATUS_SUCCESS);
  uint32_t flags = 7;
  CHECK_STATUS(fnorm_norm_desc_get_flags(n.d, &flags), FNORM_STATUS_SUCCESS);
  CHECK_EQ(flags, 0u);
  CHECK_STATUS(fnorm_norm_desc_set_flags(n.d, 0x10), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'flags'"));
  CHECK_STATUS(fnorm_norm_desc_set_flags(n.d, FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_desc_get_flags(n.d, &flags), FNORM_STATUS_SUCCESS);
  CHECK_EQ(flags, static_cast<uint32_t>(FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA));
  CHECK_STATUS(fnorm_norm_desc_set_flags(n.d, FNORM_NORM_FLAG_ROUND_XHAT), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_desc_get_flags(n.d, &flags), FNORM_STATUS_SUCCESS);
  CHECK_EQ(flags, static_cast<uint32_t>(FNORM_NORM_FLAG_ROUND_XHAT));
  const uint32_t both = FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA | FNORM_NORM_FLAG_ROUND_XHAT;
  CHECK_EQ(both, 3u);  // the values are the ABI: never renumbered
  CHECK_STATUS(fnorm_norm_desc_set_flags(n.d, both), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_desc_get_flags(n.d, &flags), FNORM_STATUS_SUCCESS);
  CHECK_EQ(flags, both);
  // The next bit is still unknown; a refused set keeps the flags.
  CHECK_STATUS(fnorm_norm_desc_set_flags(n.d, both | 0x4), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("0x4"));
  CHECK_STATUS(fnorm_norm_desc_set_flags(n.d, 0x80000000u), FNORM_STATUS_BAD_PARAM);
  CHECK_STATUS(fnorm_norm_desc_get_flags(n.d, &flags), FNORM_STATUS_SUCCESS);
  CHECK_EQ(flags, both);
  CHECK_STATUS(fnorm_norm_desc_get_flags(n.d, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, 42, 1e-5), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'begin_norm_axis'"));
  CHECK_STATUS(fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -2, 1e-6), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_desc_get(n.d, nullptr, &axis, &eps), FNORM_STATUS_SUCCESS);
  CHECK_EQ(axis, -2);
  CHECK_EQ(eps, 1e-6);
}

fnorm_status_t fwd(fnorm_handle_t h, fnorm_norm_desc_t n, fnorm_tensor_desc_t x, const void *px,
                   const void *r, void *s, fnorm_tensor_desc_t w, const void *g, const void *b,
                   fnorm_tensor_desc_t y, void *py, float *mean = nullptr, float *rstd = nullptr) {
  return fnorm_norm_fwd(h, nullptr, n, x, px, r, s, w, g, b, y, py, mean, rstd, nullptr, 0);
}

void test_workspace_query_and_validation() {
  Norm n;
  Desc x, y, w;
  size_t ws = 12345;
  fnorm_handle *fake = fake_handle();
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(nullptr, n.d, x.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'handle'"));
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, nullptr, x.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'norm'"));
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("x_desc"));
  CHECK_EQ(ws, static_cast<size_t>(12345));  // untouched on failure

  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  y.set(FNORM_DTYPE_FLOAT32, {4, 8, 768});
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(last_error_mentions("dtype"));
  y.set(FNORM_DTYPE_FLOAT16, {4, 8, 769});
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(last_error_mentions("dims[2]"));
  y.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, static_cast<size_t>(0));

  // Row dimensions that collapse (a slice with padded rows) are accepted ...
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 768}, {8 * 1024, 1024, 1});
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_SUCCESS);
  fnorm::NormProblem v = fnorm::describe_norm_fwd(n.d, x.d, nullptr, y.d, 0);
  CHECK_EQ(v.rows, 32);
  CHECK_EQ(v.cols, 768);
  CHECK_EQ(v.x_row_stride, 1024);
  CHECK_EQ(v.y_row_stride, 768);
  // ... ones that do not collapse, or a strided normalized dimension, are not.
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 768}, {9 * 1024, 1024, 1});
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_NOT_SUPPORTED);
  CHECK(last_error_mentions("collapse"));
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 768}, {8 * 1536, 1536, 2});
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_NOT_SUPPORTED);
  CHECK(last_error_mentions("packed"));
  // Overlapping output rows are a caller error.
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  y.set(FNORM_DTYPE_FLOAT16, {4, 8, 768}, {8 * 512, 512, 1});
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("overlap"));
  y.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});

  // begin_norm_axis = -2 normalizes the last two dimensions together.
  fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -2, 1e-5);
  v = fnorm::describe_norm_fwd(n.d, x.d, nullptr, y.d, 0);
  CHECK_EQ(v.rows, 4);
  CHECK_EQ(v.cols, 8 * 768);
  fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, 0, 1e-5);
  v = fnorm::describe_norm_fwd(n.d, x.d, nullptr, y.d, 0);
  CHECK_EQ(v.rows, 1);
  CHECK_EQ(v.cols, 4 * 8 * 768);
  fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -4, 1e-5);
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, y.d, &ws), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("begin_norm_axis"));
  fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, 1e-5);

  // The launch validates everything before touching the device: the fake
  // handle (no GPU needed) reaches each check in turn.
  alignas(16) static unsigned char buf[1 << 20];  // tensors of 49152 bytes, 64 KiB apart
  void *px = buf, *py = buf + (1 << 16), *pr = buf + (2 << 16), *ps = buf + (3 << 16);
  float *stats = reinterpret_cast<float *>(buf + (4 << 16));
  CHECK_STATUS(fwd(nullptr, n.d, x.d, px, nullptr, nullptr, nullptr, nullptr, nullptr, y.d, py),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'handle'"));
  CHECK_STATUS(fwd(fake, n.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, y.d, py),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'x'"));
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, nullptr, nullptr, nullptr, nullptr, y.d, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'y'"));
  // gamma given without a weight descriptor, or with a wrong one.
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, nullptr, nullptr, px, nullptr, y.d, py),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("w_desc"));
  w.set(FNORM_DTYPE_FLOAT16, {767});
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, nullptr, w.d, px, nullptr, y.d, py), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(last_error_mentions("w_desc"));
  w.set(FNORM_DTYPE_BFLOAT16, {768});
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, nullptr, w.d, nullptr, px, y.d, py), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(last_error_mentions("FLOAT32"));
  // Partially overlapping x and y; y over the sum; sum without residual.
  w.set(FNORM_DTYPE_FLOAT16, {768});
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, nullptr, w.d, nullptr, nullptr, y.d, buf + 64), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("overlap"));
  CHECK_STATUS(fwd(fake, n.d, x.d, px, pr, py, nullptr, nullptr, nullptr, y.d, py), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'sum'"));
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, ps, nullptr, nullptr, nullptr, y.d, py), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("without 'residual'"));
  // RMSNorm takes no beta and saves no mean.
  fnorm_norm_desc_set(n.d, FNORM_NORM_RMSNORM, -1, 1e-6);
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, nullptr, w.d, px, pr, y.d, py), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'beta'"));
  CHECK_STATUS(fwd(fake, n.d, x.d, px, nullptr, nullptr, nullptr, nullptr, nullptr, y.d, py, stats, stats + 64),
               FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'mean'"));

  // Backward validation (the fake handle never reaches the device).
  Desc dy, dx;
  dy.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  dx.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  auto bwd = [&](const float *mean, const float *rstd, const void *dsum, void *pdx, void *dg, void *db) {
    return fnorm_norm_bwd(fake, nullptr, n.d, x.d, px, dy.d, pr, mean, rstd, w.d, nullptr, dsum, dx.d, pdx,
                          dg, db, nullptr, 0);
  };
  CHECK_STATUS(bwd(stats, stats, nullptr, py, nullptr, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'mean'"));
  CHECK_STATUS(bwd(nullptr, stats, nullptr, py, nullptr, ps), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("'dbeta'"));
  fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, 1e-5);
  CHECK_STATUS(bwd(nullptr, stats, nullptr, py, nullptr, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'mean'"));
  CHECK_STATUS(bwd(stats, nullptr, nullptr, py, nullptr, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("'rstd'"));
  CHECK_STATUS(bwd(stats, stats, nullptr, buf + 100, nullptr, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(last_error_mentions("overlap"));
  dy.set(FNORM_DTYPE_FLOAT16, {4, 8, 767});
  CHECK_STATUS(bwd(stats, stats, nullptr, py, nullptr, nullptr), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(last_error_mentions("dy_desc"));
  dy.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  CHECK_STATUS(fnorm_norm_bwd(fake, nullptr, n.d, x.d, px, dy.d, pr, stats, stats, nullptr, nullptr, nullptr,
                              dx.d, py, ps, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(last_error_mentions("w_desc"));
  CHECK_STATUS(fnorm_norm_bwd_workspace_size(fake, n.d, x.d, nullptr, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_norm_bwd_workspace_size(nullptr, n.d, x.d, nullptr, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
}

// Whether this build instantiated `dtype` (meson option 'dtypes'); planner
// cases of a dtype left out are skipped (counted as such), not failed.
bool dtype_built(fnorm_dtype_t dtype) {
  for (size_t i = 0; i < fnorm::kNormFwdInstanceCount; ++i)
    if (fnorm::kNormFwdInstances[i].dtype == dtype) return true;
  return false;
}

fnorm::NormFwdPlan plan_fwd(const fnorm::NormProblem &v, const void *x, const void *y, const void *g,
                            const void *b, const fnorm::DeviceInfo &dev, bool rms = false) {
  const int pack = fnorm::choose_pack(v, {x, y}, {v.x_row_stride, v.y_row_stride}, {g, b}, false);
  // No device: the planner stops before the occupancy-based hand-off.
  return fnorm::plan_norm_fwd(v, pack, fnorm::DeviceContext{dev, nullptr}, rms);
}

void test_plan() {
  alignas(16) static unsigned char buf[256];
  fnorm::NormProblem v;
  v.dtype = FNORM_DTYPE_FLOAT16;
  v.rows = 49152;
  fnorm::DeviceInfo dev;  // an H200
  dev.sm_count = 132;
  dev.max_smem_optin = 227 * 1024;
  dev.max_threads_per_sm = 2048;
  const fnorm::DeviceInfo &smem = dev;
  struct Case {
    fnorm_dtype_t dtype;
    int64_t cols;
    int offset;  // bytes added to x
    int pack;
    fnorm::Tier tier;
  };
  const Case cases[] = {
      {FNORM_DTYPE_FLOAT16, 32, 0, 8, fnorm::Tier::Warp},
      {FNORM_DTYPE_FLOAT16, 1024, 0, 8, fnorm::Tier::BlockRegisters},  // LayerNorm, 128 packs of 16 bytes
      {FNORM_DTYPE_FLOAT16, 1000, 0, 8, fnorm::Tier::Warp},
      {FNORM_DTYPE_FLOAT16, 1000, 2, 1, fnorm::Tier::Warp},  // misaligned x
      {FNORM_DTYPE_FLOAT16, 1000, 4, 2, fnorm::Tier::Warp},
      {FNORM_DTYPE_FLOAT16, 33, 0, 1, fnorm::Tier::Warp},
      {FNORM_DTYPE_FLOAT16, 4096, 0, 8, fnorm::Tier::BlockRegisters},
      {FNORM_DTYPE_FLOAT16, 32768, 0, 8, fnorm::Tier::BlockRegisters},
      {FNORM_DTYPE_FLOAT16, 32768, 2, 1, fnorm::Tier::BlockSmem},  // 32768 packs of 1: too many for registers
      {FNORM_DTYPE_FLOAT16, 40000, 0, 8, fnorm::Tier::BlockSmem},
      {FNORM_DTYPE_FLOAT16, 100000, 0, 8, fnorm::Tier::BlockSmem},
      {FNORM_DTYPE_FLOAT16, 200000, 0, 8, fnorm::Tier::BlockUncached},
      {FNORM_DTYPE_FLOAT32, 1, 0, 1, fnorm::Tier::Warp},
      {FNORM_DTYPE_FLOAT32, 1024, 0, 4, fnorm::Tier::BlockRegisters},  // LayerNorm, 256 packs of 16 bytes
      {FNORM_DTYPE_FLOAT32, 500, 0, 4, fnorm::Tier::Warp},  // 125 packs
      {FNORM_DTYPE_FLOAT32, 1026, 0, 2, fnorm::Tier::BlockRegisters},
      {FNORM_DTYPE_FLOAT32, 32768, 0, 4, fnorm::Tier::BlockRegisters},  // 8 packs of 4 x 1024 threads
      {FNORM_DTYPE_FLOAT32, 40000, 0, 4, fnorm::Tier::BlockSmem},
      {FNORM_DTYPE_FLOAT32, 65536, 0, 4, fnorm::Tier::BlockUncached},
      {FNORM_DTYPE_BFLOAT16, 768, 8, 4, fnorm::Tier::Warp},
  };
  for (const Case &c : cases) {
    if (!dtype_built(c.dtype)) {
      ++fnorm_test::counters().skipped;
      continue;
    }
    v.dtype = c.dtype;
    v.cols = c.cols;
    v.x_row_stride = v.y_row_stride = c.cols;
    const fnorm::NormFwdPlan plan = plan_fwd(v, buf + c.offset, buf, nullptr, nullptr, smem);
    CHECK(!plan.grid_per_row);  // no device: the occupancy-based grid choice is not made
    CHECK_EQ(plan.pack, c.pack);
    CHECK_EQ(static_cast<int>(plan.tier), static_cast<int>(c.tier));
    CHECK(plan.instance != nullptr && plan.instance->pack == c.pack && plan.instance->dtype == c.dtype);
    if (plan.tier == fnorm::Tier::Warp) {
      // The chosen group and packs per thread cover the row, and no smaller
      // instance would.
      const int64_t packs = c.cols / c.pack;
      CHECK((int64_t{plan.npack} << plan.width_log2) >= packs);
      CHECK(plan.width_log2 >= 0 && plan.width_log2 <= 5);
      CHECK((int64_t{1} << plan.width_log2) <= std::max<int64_t>(packs, 1) || plan.width_log2 == 0);
    }
    if (plan.tier == fnorm::Tier::BlockRegisters) {
      const int64_t packs = c.cols / c.pack;
      CHECK_EQ(plan.block_threads % 32, 0);
      CHECK(plan.block_threads <= 1024);
      CHECK(int64_t{plan.block_threads} * plan.npack >= packs);
      CHECK(int64_t{plan.block_threads - 32} * plan.npack < packs);  // no whole idle warp
    }
  }
  // Group width: 4 packs per lane when rows fill the GPU, wider when they do not.
  fnorm::NormFwdPlan pl;
  if (dtype_built(FNORM_DTYPE_FLOAT16)) {
  v.dtype = FNORM_DTYPE_FLOAT16;
  v.cols = 256;  // 32 packs of 8
  v.x_row_stride = v.y_row_stride = 256;
  v.rows = 1 << 20;
  pl = plan_fwd(v, buf, buf, nullptr, nullptr, dev);
  CHECK_EQ(pl.width_log2, 3);
  CHECK_EQ(pl.npack, 4);
  v.rows = 7;
  pl = plan_fwd(v, buf, buf, nullptr, nullptr, dev);
  CHECK_EQ(pl.width_log2, 5);
  CHECK_EQ(pl.npack, 1);
  v.cols = 32;  // 4 packs: never more lanes than packs
  v.x_row_stride = v.y_row_stride = 32;
  v.rows = 49152;
  pl = plan_fwd(v, buf, buf, nullptr, nullptr, dev);
  CHECK_EQ(pl.width_log2, 2);
  CHECK_EQ(pl.npack, 1);
  }
  v.rows = 49152;
  // RMSNorm at 128-256 packs of 16 bytes: a block per row, one pack per
  // thread; LayerNorm from 128 packs of 16 bytes, and longer rows, a block
  // of four packs per thread (one warp at 128 packs).
  if (dtype_built(FNORM_DTYPE_FLOAT16)) {
    for (int64_t cols : {1024, 2048, 4096}) {
      v.cols = cols;
      v.x_row_stride = v.y_row_stride = cols;
      pl = plan_fwd(v, buf, buf, nullptr, nullptr, dev, true);
      CHECK_EQ(static_cast<int>(pl.tier), static_cast<int>(fnorm::Tier::BlockRegisters));
      CHECK_EQ(pl.npack, cols == 4096 ? 4 : 1);
      CHECK_EQ(pl.block_threads, cols == 4096 ? 128 : static_cast<int>(cols / 8));
      const fnorm::NormFwdPlan ln = plan_fwd(v, buf, buf, nullptr, nullptr, dev, false);
      CHECK_EQ(static_cast<int>(ln.tier), static_cast<int>(fnorm::Tier::BlockRegisters));
      CHECK_EQ(ln.npack, 4);
      CHECK_EQ(ln.block_threads, static_cast<int>(cols / 32));
    }
    // LayerNorm rows too few for 4-pack blocks to give the SMs a quarter of
    // their resident threads (132 x 2048 / 4 = 67584): two packs a thread.
    struct FewRows {
      int64_t rows, cols;
      int npack, threads;
    };
    for (const FewRows &c : {FewRows{1024, 2048, 2, 128}, FewRows{1056, 2048, 4, 64}, FewRows{1024, 4096, 4, 128},
                             FewRows{2048, 2048, 4, 64}, FewRows{2000, 1024, 2, 64}, FewRows{8, 8192, 2, 512}}) {
      v.rows = c.rows;
      v.cols = c.cols;
      v.x_row_stride = v.y_row_stride = c.cols;
      const fnorm::NormFwdPlan ln = plan_fwd(v, buf, buf, nullptr, nullptr, dev, false);
      CHECK_EQ(static_cast<int>(ln.tier), static_cast<int>(fnorm::Tier::BlockRegisters));
      CHECK_EQ(ln.npack, c.npack);
      CHECK_EQ(ln.block_threads, c.threads);
      CHECK_EQ(plan_fwd(v, buf, buf, nullptr, nullptr, dev, true).npack, c.cols == 4096 || c.cols == 8192 ? 4 : 1);
    }
    v.rows = 49152;
    v.cols = 1024;  // misaligned: packs of 2 bytes stay on the warp tier, both norms
    v.x_row_stride = v.y_row_stride = 1024;
    for (bool rms : {true, false}) {
      pl = plan_fwd(v, buf + 2, buf, nullptr, nullptr, dev, rms);
      CHECK_EQ(pl.pack, 1);
      CHECK_EQ(static_cast<int>(pl.tier), static_cast<int>(fnorm::Tier::Warp));
    }
    v.cols = 768;  // LayerNorm below 128 packs: the warp tier
    v.x_row_stride = v.y_row_stride = 768;
    pl = plan_fwd(v, buf, buf, nullptr, nullptr, dev, false);
    CHECK_EQ(static_cast<int>(pl.tier), static_cast<int>(fnorm::Tier::Warp));
  }
  // Block per row or one wave: a block per row where 4 or more blocks share
  // an SM, or 2-3 with at least 8 rows per resident block; never at one
  // block per SM (an SM would idle while its next block starts).
  {
    fnorm::NormProblem g = v;
    g.rows = 16384;
    CHECK(fnorm::fwd_grid_per_row(g, 8, dev));
    CHECK(fnorm::fwd_grid_per_row(g, 4, dev));
    g.rows = 4096;  // 2 blocks per SM: 264 resident, 15.5 rows each
    CHECK(fnorm::fwd_grid_per_row(g, 2, dev));
    CHECK(!fnorm::fwd_grid_per_row(g, 2, dev, true));  // add & norm: one wave at 2-3 blocks per SM
    CHECK(fnorm::fwd_grid_per_row(g, 4, dev, true));
    g.rows = 1024;  // 2 blocks per SM, 3.9 rows each (bf16 1024 x 12288)
    CHECK(!fnorm::fwd_grid_per_row(g, 2, dev));
    CHECK(fnorm::fwd_grid_per_row(g, 4, dev));
    g.rows = 1 << 20;
    CHECK(!fnorm::fwd_grid_per_row(g, 1, dev));
  }
  // A row stride that is not a multiple of the pack narrows the pack.
  v.dtype = FNORM_DTYPE_FLOAT16;
  v.cols = 1024;
  v.x_row_stride = 1028;
  v.y_row_stride = 1024;
  CHECK_EQ(fnorm::choose_pack(v, {buf, buf}, {v.x_row_stride, v.y_row_stride}, {}, false), 4);
  // Misaligned gamma narrows it too.
  v.x_row_stride = 1024;
  CHECK_EQ(fnorm::choose_pack(v, {buf, buf}, {v.x_row_stride, v.y_row_stride}, {buf + 2}, false), 1);
  // fp32 parameters with 16-bit data need only 16-byte alignment for pack 8.
  CHECK_EQ(fnorm::choose_pack(v, {buf, buf}, {1024, 1024}, {buf + 16}, true), 8);
  CHECK_EQ(fnorm::choose_pack(v, {buf, buf}, {1024, 1024}, {buf + 8}, true), 2);
  CHECK_EQ(fnorm::choose_pack(v, {buf, buf}, {1024, 1024}, {buf + 16}, false), 8);
  CHECK_EQ(fnorm::choose_pack(v, {buf, buf + 2}, {1024, 1024}, {}, false), 1);

  // Backward tiers: rows of 16-byte packs that a row group of whole warps
  // holds (fp32: two packs a thread, up to 1024 threads; 16-bit at 49152
  // rows on a device of unknown bandwidth: one pack, up to 1024 threads),
  // from 1024 columns of capacity, take the rows tier; other rows registers
  // while a row fits, else column tiles.
  struct BwdCase {
    fnorm_dtype_t dtype;
    int64_t cols;
    int pack;
    fnorm::Tier tier;
  };
  const BwdCase bcases[] = {
      {FNORM_DTYPE_FLOAT16, 32, 8, fnorm::Tier::Warp},
      {FNORM_DTYPE_FLOAT16, 512, 8, fnorm::Tier::Warp},
      {FNORM_DTYPE_FLOAT16, 768, 8, fnorm::Tier::Warp},  // 96 threads of 8 values: narrower than the rows tier
      {FNORM_DTYPE_FLOAT16, 1000, 8, fnorm::Tier::BlockRows},
      {FNORM_DTYPE_FLOAT16, 1024, 8, fnorm::Tier::BlockRows},
      {FNORM_DTYPE_FLOAT16, 1024, 4, fnorm::Tier::Warp},  // 8-byte packs: no rows tier
      {FNORM_DTYPE_FLOAT16, 2048, 8, fnorm::Tier::BlockRows},
      {FNORM_DTYPE_FLOAT16, 8192, 8, fnorm::Tier::BlockRows},
      {FNORM_DTYPE_FLOAT16, 8200, 8, fnorm::Tier::BlockRegisters},  // 1025 packs
      {FNORM_DTYPE_FLOAT16, 12288, 8, fnorm::Tier::BlockRegisters},
      {FNORM_DTYPE_FLOAT16, 16384, 8, fnorm::Tier::BlockRegisters},
      {FNORM_DTYPE_FLOAT16, 32768, 8, fnorm::Tier::ColumnTiled},
      {FNORM_DTYPE_FLOAT32, 768, 4, fnorm::Tier::BlockRegisters},  // 96 threads of 8 values: narrower than the rows tier
      {FNORM_DTYPE_FLOAT32, 1024, 4, fnorm::Tier::BlockRows},
      {FNORM_DTYPE_FLOAT32, 4096, 4, fnorm::Tier::BlockRows},
      {FNORM_DTYPE_FLOAT32, 8192, 4, fnorm::Tier::BlockRows},
      {FNORM_DTYPE_FLOAT32, 16384, 4, fnorm::Tier::ColumnTiled},  // no cluster without sm_90 here
      {FNORM_DTYPE_FLOAT32, 100000, 4, fnorm::Tier::ColumnTiled},
      {FNORM_DTYPE_BFLOAT16, 33, 1, fnorm::Tier::Warp},
      {FNORM_DTYPE_BFLOAT16, 4096, 8, fnorm::Tier::BlockRows},
  };
  v.rows = 49152;
  for (const BwdCase &c : bcases) {
    if (!dtype_built(c.dtype)) {
      ++fnorm_test::counters().skipped;
      continue;
    }
    v.dtype = c.dtype;
    v.cols = c.cols;
    const fnorm::NormBwdPlan bp = fnorm::plan_norm_bwd_tier(v, c.pack, dev);
    CHECK_EQ(static_cast<int>(bp.tier), static_cast<int>(c.tier));
    CHECK(bp.instance != nullptr && bp.instance->pack == c.pack && bp.instance->tier == c.tier);
    if (bp.tier == fnorm::Tier::BlockRegisters) {
      CHECK(bp.block_threads <= 512 && bp.block_threads % 32 == 0);
      CHECK(int64_t{bp.block_threads} * bp.npack * c.pack >= c.cols);
    }
    if (bp.tier == fnorm::Tier::BlockRows) {  // one row group: whole warps, 8 values per thread, none idle
      const int values = bp.npack * c.pack;
      CHECK_EQ(values, 8);
      CHECK(bp.block_threads % 32 == 0 && bp.block_threads * values >= 1024 && bp.block_threads <= 1024);
      CHECK(int64_t{bp.block_threads} * bp.npack * c.pack >= c.cols);
      CHECK(int64_t{bp.block_threads - 32} * bp.npack * c.pack < c.cols);
    }
  }
  // 16-bit rows take two packs a thread (16 values, groups of at most 512
  // threads) where rows are few per SM or the device's DRAM delivers more
  // bytes per SM cycle than one pack a thread can issue for.
  if (dtype_built(FNORM_DTYPE_BFLOAT16)) {
    v.dtype = FNORM_DTYPE_BFLOAT16;
    fnorm::DeviceInfo fast = dev;
    fast.dram_bytes_per_sm_cycle = 18.8;  // an H200
    fnorm::DeviceInfo slow = dev;
    slow.dram_bytes_per_sm_cycle = 12.8;  // an H100
    struct RowsCase {
      int64_t rows, cols;
      const fnorm::DeviceInfo *d;
      int npack;
      int threads;
    };
    const RowsCase rcases[] = {
        {49152, 4096, &slow, 1, 512}, {49152, 4096, &fast, 2, 256}, {16384, 4096, &slow, 2, 256},
        {33792, 4096, &slow, 2, 256},  // 256 rows per SM
        {33793, 4096, &slow, 1, 512},  {1024, 8192, &slow, 2, 512},  {49152, 768, &fast, 2, 64},
        {49152, 768, &slow, 0, 0},     // 96 threads of one pack: the warp tier
    };
    for (const RowsCase &c : rcases) {
      v.rows = c.rows;
      v.cols = c.cols;
      const fnorm::NormBwdPlan bp = fnorm::plan_norm_bwd_tier(v, 8, *c.d);
      CHECK_EQ(static_cast<int>(bp.tier), static_cast<int>(c.npack ? fnorm::Tier::BlockRows : fnorm::Tier::Warp));
      if (c.npack) {
        CHECK_EQ(bp.npack, c.npack);
        CHECK_EQ(bp.block_threads, c.threads);
      }
    }
    v.rows = 49152;
  }
  // The rows tier needs a ring of two stages in shared memory: a device
  // with less goes to the other tiers.
  if (dtype_built(FNORM_DTYPE_FLOAT32)) {
    fnorm::DeviceInfo small = dev;
    small.max_smem_optin = 48 * 1024;
    v.dtype = FNORM_DTYPE_FLOAT32;
    v.cols = 8192;  // 1024 threads x 2 packs of 16 bytes x 2 tensors x 2 stages = 128 KiB
    CHECK(fnorm::plan_norm_bwd_tier(v, 4, small).tier != fnorm::Tier::BlockRows);
    v.cols = 1024;
    CHECK(fnorm::plan_norm_bwd_tier(v, 4, small).tier == fnorm::Tier::BlockRows);
  }
  // sm_90, many rows: a cluster of two blocks per row, then column tiles;
  // few rows: column tiles.
  if (dtype_built(FNORM_DTYPE_FLOAT16)) {
    fnorm::DeviceInfo hopper = dev;
    hopper.cc_major = 9;
    v.dtype = FNORM_DTYPE_FLOAT16;
    v.cols = 32768;
    fnorm::NormBwdPlan bp = fnorm::plan_norm_bwd_tier(v, 8, hopper);
    CHECK_EQ(static_cast<int>(bp.tier), static_cast<int>(fnorm::Tier::BlockRegisters));
    CHECK_EQ(bp.cluster, 2);
    CHECK_EQ(bp.block_threads, 512);
    v.cols = 65536;
    CHECK_EQ(static_cast<int>(fnorm::plan_norm_bwd_tier(v, 8, hopper).tier), static_cast<int>(fnorm::Tier::ColumnTiled));
    v.rows = 1000;
    v.cols = 32768;
    CHECK_EQ(static_cast<int>(fnorm::plan_norm_bwd_tier(v, 8, hopper).tier), static_cast<int>(fnorm::Tier::ColumnTiled));
  }
  // Workspace layout: two 256-byte-aligned partial arrays, then row coefficients.
  v.rows = 1000;
  v.cols = 100;
  const fnorm::BwdWorkspace lay = fnorm::bwd_workspace_layout(v, 3, true, true);
  CHECK_EQ(lay.dgamma_offset, static_cast<size_t>(0));
  CHECK_EQ(lay.dbeta_offset, static_cast<size_t>(1280));  // 3 * 100 * 4 = 1200 -> 1280
  CHECK_EQ(lay.coef_offset, static_cast<size_t>(2560));
  CHECK_EQ(lay.bytes, static_cast<size_t>(2560 + 8192));  // 1000 * 2 * 4 = 8000 -> 8192
  CHECK_EQ(fnorm::bwd_workspace_layout(v, 3, false, false).bytes, static_cast<size_t>(0));
}

void test_dispatch_table() {
  // Sorted, unique, and every entry names its own configuration.
  CHECK(fnorm::kNormFwdInstanceCount > 0);
  CHECK(fnorm::kNormBwdInstanceCount > 0);
  for (size_t i = 0; i < fnorm::kNormBwdInstanceCount; ++i) {
    const fnorm::NormBwdInstance &e = fnorm::kNormBwdInstances[i];
    CHECK(e.launch != nullptr && e.shape != nullptr);
    CHECK((e.tier == fnorm::Tier::ColumnTiled) == (e.npack == 0));
    CHECK(std::string(e.name).find("norm_bwd_") == 0);
  }
  // The codes table pairs each plain instance with one of the same
  // (dtype, pack, tier, npack) in the same order: a quantized plan is the
  // plain plan's kernel writing codes.
  CHECK(fnorm::kNormFwdCodesInstanceCount == fnorm::kNormFwdInstanceCount);
  for (size_t i = 0; i < fnorm::kNormFwdInstanceCount; ++i) {
    const fnorm::NormFwdInstance &e = fnorm::kNormFwdInstances[i];
    const fnorm::NormFwdInstance &q = fnorm::kNormFwdCodesInstances[i];
    CHECK(e.launch != nullptr && e.shape != nullptr && q.launch != nullptr && q.shape != nullptr);
    CHECK(e.pack >= 1 && e.pack * static_cast<int>(fnorm::dtype_size(e.dtype)) <= 16);
    CHECK((e.tier == fnorm::Tier::Warp || e.tier == fnorm::Tier::BlockRegisters) == (e.npack > 0));
    CHECK(q.dtype == e.dtype && q.pack == e.pack && q.tier == e.tier && q.npack == e.npack);
    CHECK(e.launch != q.launch && e.shape != q.shape);
    const std::string name = e.name;
    CHECK(name.find("_p" + std::to_string(e.pack) + "_") != std::string::npos);
    CHECK(std::string(q.name) == name + "_codes");
    if (i > 0) CHECK(std::strcmp(fnorm::kNormFwdInstances[i - 1].name, e.name) != 0);
  }
}

void test_create_without_device() {
  // On a machine with a GPU this creates a handle; without one it must say
  // NO_DEVICE (or a CUDA error) and leave the output untouched.
  fnorm_handle_t h = reinterpret_cast<fnorm_handle_t>(0x1);
  const fnorm_status_t st = fnorm_create(&h);
  if (st == FNORM_STATUS_SUCCESS) {
    int dev = -1;
    CHECK_STATUS(fnorm_get_device(h, &dev), FNORM_STATUS_SUCCESS);
    CHECK(dev >= 0);
    CHECK_STATUS(fnorm_destroy(h), FNORM_STATUS_SUCCESS);
  } else {
    CHECK(st == FNORM_STATUS_NO_DEVICE || st == FNORM_STATUS_CUDA_ERROR);
    CHECK(h == reinterpret_cast<fnorm_handle_t>(0x1));
    CHECK(last_error_mentions("fnorm_create"));
  }
  CHECK_STATUS(fnorm_destroy(nullptr), FNORM_STATUS_SUCCESS);
}

// Sizes whose byte counts exceed size_t are refused (BAD_PARAM_SHAPE, naming
// the argument), never wrapped around (issue 16: one row of 2^62 columns
// answered 256 bytes of backward workspace).
void test_size_overflow() {
  fnorm::NormProblem v;
  v.rows = 1;
  v.cols = int64_t{1} << 62;
  v.x_row_stride = v.y_row_stride = v.dx_row_stride = v.cols;
  v.dtype = FNORM_DTYPE_FLOAT16;
  bool refused = false;
  try {
    (void)fnorm::bwd_workspace_layout(v, 1, true, false);
  } catch (const fnorm::Error &e) {
    refused = e.status == FNORM_STATUS_BAD_PARAM_SHAPE && e.message.find("x_desc") != std::string::npos;
  }
  CHECK(refused);
  // In range: partials * cols * 4 bytes per weight vector, 256-aligned.
  v.cols = 1000;
  const fnorm::BwdWorkspace w = fnorm::bwd_workspace_layout(v, 3, true, true);
  CHECK_EQ(w.dbeta_offset, static_cast<size_t>(12032));
  CHECK_EQ(w.bytes, static_cast<size_t>(2 * 12032 + 256));
  // A launch whose tensors span more than size_t bytes (x [2, 2^61] fp32)
  // is refused before any device work (it reached the device before).
  Norm n;
  Desc x, y;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {2, int64_t{1} << 61}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT32, {2, int64_t{1} << 61}), FNORM_STATUS_SUCCESS);
  static float buf[64];
  CHECK_STATUS(fwd(fake_handle(), n.d, x.d, buf, nullptr, nullptr, nullptr, nullptr, nullptr, y.d, buf + 32),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(last_error_mentions("overflow"));
}

}  // namespace

int main() {
  test_version_and_strings();
  test_last_error_buffer();
  test_tensor_desc();
  test_norm_desc();
  test_workspace_query_and_validation();
  test_size_overflow();
  test_plan();
  test_dispatch_table();
  test_create_without_device();
  return fnorm_test::finish("host api");
}
