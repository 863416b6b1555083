/* SPDX-License-Identifier: Apache-2.0 */
// Checked mode (FNORM_CHECK_POINTERS=1 at fnorm_create; issue 16 item 4):
// every launch verifies that each pointer is memory the handle's device can
// access and, where the driver can tell, that its allocation holds what the
// descriptors say; otherwise BAD_PARAM naming the argument, nothing enqueued
// and outputs untouched. Black-box: links only the shared library.
//
// The unchecked behaviour (a host pointer faults in the kernel and poisons
// the context) is documented, not run: it would end the process's CUDA use.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "dtype_io.hpp"
#include "fusednorm.h"
#include "gpu_util.hpp"

using namespace fnorm_test;

namespace {

// A device buffer (cudaMalloc) of `bytes`, freed at scope end.
struct DevBuf {
  void *p = nullptr;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  float *f() const { return static_cast<float *>(p); }
};

struct Norm {
  fnorm_norm_desc_t d = nullptr;
  Norm() { fnorm_norm_desc_create(&d); }
  ~Norm() { fnorm_norm_desc_destroy(d); }
};

bool device_equals(const void *dev, const std::vector<float> &host) {
  std::vector<float> back(host.size());
  if (cudaMemcpy(back.data(), dev, host.size() * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  return std::memcmp(back.data(), host.data(), host.size() * sizeof(float)) == 0;
}

fnorm_status_t ln_fwd(fnorm_handle_t h, const Desc &x, const void *px, const Desc &w, const void *g,
                      const Desc &y, void *py) {
  Norm n;
  return fnorm_norm_fwd(h, nullptr, n.d, x.d, px, nullptr, nullptr, g ? w.d : nullptr, g, nullptr, y.d, py,
                        nullptr, nullptr, nullptr, 0);
}

void test_norm(fnorm_handle_t checked, fnorm_handle_t plain) {
  const int64_t rows = 1024, cols = 4096;
  const size_t bytes = static_cast<size_t>(rows * cols) * sizeof(float);
  Desc x, y, w;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {rows, cols}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT32, {rows, cols}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(w.set(FNORM_DTYPE_FLOAT32, {cols}), FNORM_STATUS_SUCCESS);
  DevBuf dx(bytes), dy(bytes), dg(cols * sizeof(float));
  CHECK(dx.p && dy.p && dg.p);
  CHECK_EQ(cudaMemset(dx.p, 0, bytes), cudaSuccess);
  CHECK_EQ(cudaMemset(dg.p, 0, cols * sizeof(float)), cudaSuccess);
  // Device memory: accepted in both modes.
  CHECK_STATUS(ln_fwd(checked, x, dx.p, w, dg.p, y, dy.p), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(ln_fwd(plain, x, dx.p, w, dg.p, y, dy.p), FNORM_STATUS_SUCCESS);
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // y poisoned: a refused launch must leave it as it was.
  std::vector<float> poison(static_cast<size_t>(rows * cols), 12345.f);
  CHECK_EQ(cudaMemcpy(dy.p, poison.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);

  // Pageable host memory as x: refused, naming x.
  std::vector<float> host(static_cast<size_t>(rows * cols), 1.f);
  CHECK_STATUS(ln_fwd(checked, x, host.data(), w, dg.p, y, dy.p), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'x'"));
  CHECK(mentions("pageable"));
  // ... and as gamma.
  std::vector<float> host_gamma(static_cast<size_t>(cols), 1.f);
  CHECK_STATUS(ln_fwd(checked, x, dx.p, w, host_gamma.data(), y, dy.p), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'gamma'"));

  // y in an allocation half the size its descriptor needs: refused, naming y.
  DevBuf half(bytes / 2);
  CHECK_STATUS(ln_fwd(checked, x, dx.p, w, dg.p, y, half.p), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'y'"));
  CHECK(mentions("allocation holds"));
  // A pointer near the end of a large enough allocation: what is left is short.
  CHECK_STATUS(ln_fwd(checked, x, static_cast<char *>(dx.p) + 4096, w, dg.p, y, dy.p), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'x'"));
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  CHECK(device_equals(dy.p, poison));  // nothing was enqueued

  // Mapped pinned host memory and managed memory are device-accessible.
  void *pinned = nullptr, *managed = nullptr;
  CHECK_EQ(cudaMallocHost(&pinned, cols * sizeof(float)), cudaSuccess);
  CHECK_EQ(cudaMallocManaged(&managed, bytes), cudaSuccess);
  std::memset(pinned, 0, cols * sizeof(float));
  CHECK_EQ(cudaMemset(managed, 0, bytes), cudaSuccess);
  CHECK_STATUS(ln_fwd(checked, x, managed, w, pinned, y, dy.p), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(ln_fwd(plain, x, managed, w, pinned, y, dy.p), FNORM_STATUS_SUCCESS);
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int64_t bad = -1;
  CHECK_EQ(count_nonfinite(FNORM_DTYPE_FLOAT32, dy.p, rows * cols, &bad), cudaSuccess);
  CHECK_EQ(bad, int64_t{0});
  cudaFreeHost(pinned);
  cudaFree(managed);

  // Backward: a workspace smaller than the workspace_bytes it is passed with.
  Norm n;
  size_t need = 0;
  CHECK_STATUS(fnorm_norm_bwd_workspace_size(checked, n.d, x.d, w.d, &need), FNORM_STATUS_SUCCESS);
  DevBuf ws(need), dgrad(bytes), dgam(cols * sizeof(float)), mean(rows * sizeof(float)), rstd(rows * sizeof(float));
  CHECK_STATUS(fnorm_norm_fwd(checked, nullptr, n.d, x.d, dx.p, nullptr, nullptr, w.d, dg.p, nullptr, y.d, dy.p,
                              mean.f(), rstd.f(), nullptr, 0),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_bwd(checked, nullptr, n.d, x.d, dx.p, y.d, dy.p, mean.f(), rstd.f(), w.d, dg.p, nullptr,
                              x.d, dgrad.p, dgam.p, nullptr, ws.p, need),
               FNORM_STATUS_SUCCESS);
  if (need > 0) {
    const size_t claimed = need + (size_t{64} << 20);  // 64 MiB more than the allocation holds
    CHECK_STATUS(fnorm_norm_bwd(checked, nullptr, n.d, x.d, dx.p, y.d, dy.p, mean.f(), rstd.f(), w.d, dg.p,
                                nullptr, x.d, dgrad.p, dgam.p, nullptr, ws.p, claimed),
                 FNORM_STATUS_BAD_PARAM);
    CHECK(mentions("'workspace'"));
  }
  std::vector<float> host_mean(static_cast<size_t>(rows), 0.f);
  CHECK_STATUS(fnorm_norm_bwd(checked, nullptr, n.d, x.d, dx.p, y.d, dy.p, host_mean.data(), rstd.f(), w.d, dg.p,
                              nullptr, x.d, dgrad.p, dgam.p, nullptr, ws.p, need),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'mean'"));
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

void test_batchnorm(fnorm_handle_t checked) {
  const int64_t n = 64, c = 64, hw = 32 * 32;  // 16 MiB: far above any allocation granularity
  Desc x, y;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {n, c, 32, 32}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT32, {n, c, 32, 32}), FNORM_STATUS_SUCCESS);
  fnorm_batchnorm_desc_t bn = nullptr;
  CHECK_STATUS(fnorm_batchnorm_desc_create(&bn), FNORM_STATUS_SUCCESS);
  size_t need = 0;
  CHECK_STATUS(fnorm_batchnorm_fwd_infer_workspace_size(checked, bn, x.d, &need), FNORM_STATUS_SUCCESS);
  const size_t bytes = static_cast<size_t>(n * c * hw) * sizeof(float);
  DevBuf dx(bytes), dy(bytes), ws(need > 0 ? need : 1), rm(c * sizeof(float)), rv(c * sizeof(float)),
      g(c * sizeof(float)), b(c * sizeof(float));
  CHECK_EQ(cudaMemset(dx.p, 0, bytes), cudaSuccess);
  CHECK_EQ(cudaMemset(g.p, 0, c * sizeof(float)), cudaSuccess);
  CHECK_EQ(cudaMemset(b.p, 0, c * sizeof(float)), cudaSuccess);
  CHECK_EQ(cudaMemset(rm.p, 0, c * sizeof(float)), cudaSuccess);
  CHECK_EQ(cudaMemset(rv.p, 0, c * sizeof(float)), cudaSuccess);
  CHECK_STATUS(fnorm_batchnorm_fwd_infer(checked, nullptr, bn, x.d, dx.p, nullptr, g.f(), b.f(), rm.f(), rv.f(),
                                         y.d, dy.p, ws.p, need),
               FNORM_STATUS_SUCCESS);
  std::vector<float> host_mean(static_cast<size_t>(c), 0.f);
  CHECK_STATUS(fnorm_batchnorm_fwd_infer(checked, nullptr, bn, x.d, dx.p, nullptr, g.f(), b.f(),
                                         host_mean.data(), rv.f(), y.d, dy.p, ws.p, need),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'running_mean'"));
  DevBuf short_y(bytes / 4);
  CHECK_STATUS(fnorm_batchnorm_fwd_infer(checked, nullptr, bn, x.d, dx.p, nullptr, g.f(), b.f(), rm.f(), rv.f(),
                                         y.d, short_y.p, ws.p, need),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'y'"));
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  fnorm_batchnorm_desc_destroy(bn);
}

void test_linear(fnorm_handle_t checked) {
  fnorm_linear_desc_t lin = nullptr;
  const fnorm_status_t st = fnorm_linear_desc_create(&lin);
  if (st == FNORM_STATUS_NOT_SUPPORTED_BUILD) {
    std::printf("SKIP linear: the library was built without cuBLASLt\n");
    ++counters().skipped;
    return;
  }
  CHECK_STATUS(st, FNORM_STATUS_SUCCESS);
  const int64_t m = 256, k = 128, n = 64;
  Desc x, w, y;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {m, k}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(w.set(FNORM_DTYPE_FLOAT32, {k, n}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT32, {m, n}), FNORM_STATUS_SUCCESS);
  size_t need = 0;
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(checked, lin, x.d, w.d, y.d, &need), FNORM_STATUS_SUCCESS);
  DevBuf dx(m * k * 4), dw(k * n * 4), dy(m * n * 4), ws(need);
  CHECK_EQ(cudaMemset(dx.p, 0, m * k * 4), cudaSuccess);
  CHECK_EQ(cudaMemset(dw.p, 0, k * n * 4), cudaSuccess);
  CHECK_STATUS(fnorm_linear_fwd(checked, nullptr, lin, x.d, dx.p, w.d, dw.p, nullptr, y.d, dy.p, nullptr, 0, ws.p,
                                need),
               FNORM_STATUS_SUCCESS);
  std::vector<float> host_w(static_cast<size_t>(k * n), 0.f);
  CHECK_STATUS(fnorm_linear_fwd(checked, nullptr, lin, x.d, dx.p, w.d, host_w.data(), nullptr, y.d, dy.p, nullptr,
                                0, ws.p, need),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'w'"));
  DevBuf small_ws(need / 2);
  CHECK_STATUS(fnorm_linear_fwd(checked, nullptr, lin, x.d, dx.p, w.d, dw.p, nullptr, y.d, dy.p, nullptr, 0,
                                small_ws.p, need),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'workspace'"));
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  fnorm_linear_desc_destroy(lin);
}

}  // namespace

int main() {
  if (skip_without_gpu()) return 77;
  setenv("FNORM_CHECK_POINTERS", "1", 1);
  fnorm_handle_t checked = nullptr, plain = nullptr;
  CHECK_STATUS(fnorm_create(&checked), FNORM_STATUS_SUCCESS);
  unsetenv("FNORM_CHECK_POINTERS");
  CHECK_STATUS(fnorm_create(&plain), FNORM_STATUS_SUCCESS);
  if (checked == nullptr || plain == nullptr) return fnorm_test::finish("gpu checked mode");
  test_norm(checked, plain);
  test_batchnorm(checked);
  test_linear(checked);
  fnorm_destroy(checked);
  fnorm_destroy(plain);
  return fnorm_test::finish("gpu checked mode");
}
