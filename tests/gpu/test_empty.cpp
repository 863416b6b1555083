/* SPDX-License-Identifier: Apache-2.0 */
// Tensors with no elements on the GPU (api/fusednorm.h, "Empty tensors"):
// every launch over an empty tensor returns SUCCESS and enqueues nothing
// (counted in a stream capture) but what the header names: the zeros of
// outputs that are sums over no values (LayerNorm/RMSNorm dgamma / dbeta
// over zero rows, BatchNorm's dgamma / dbeta over an empty batch, the
// linear layer's dw / db over m = 0 and dx over n = 0), y = act(bias) of a
// linear layer with k = 0, and the BatchNorm training counter, which
// torch.nn's modules also advance on an empty batch. Outputs are poisoned
// first: an output that must not be written keeps its poison, running
// statistics keep their values. Black-box: links only the shared library.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "dtype_io.hpp"
#include "fusednorm.h"

using namespace fnorm_test;

namespace {

struct DevBuf {
  void *p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) {
    if (cudaMalloc(&p, n) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  float *f() const { return static_cast<float *>(p); }
  void poison() const { cudaMemset(p, 0xff, bytes); }  // NaN in every float type
  std::vector<unsigned char> bytes_back() const {
    std::vector<unsigned char> h(bytes);
    cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
  bool all(unsigned char v) const {
    for (unsigned char b : bytes_back())
      if (b != v) return false;
    return true;
  }
  void set(const std::vector<float> &v) const { cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice); }
  std::vector<float> floats() const {
    std::vector<float> h(bytes / 4);
    cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
};

struct Norm {
  fnorm_norm_desc_t d = nullptr;
  Norm() { fnorm_norm_desc_create(&d); }
  ~Norm() { fnorm_norm_desc_destroy(d); }
};
struct Bn {
  fnorm_batchnorm_desc_t d = nullptr;
  Bn() { fnorm_batchnorm_desc_create(&d); }
  ~Bn() { fnorm_batchnorm_desc_destroy(d); }
};

// The nodes a call enqueues on a stream being captured, and its status.
size_t captured_nodes(const std::function<fnorm_status_t(cudaStream_t)> &call, fnorm_status_t *status) {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  *status = call(s);
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(s, &g);
  size_t n = 0;
  if (g != nullptr) cudaGraphGetNodes(g, nullptr, &n);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return n;
}

void test_norm(fnorm_handle_t h) {
  Norm n;
  Desc x, w, wf;
  w.set(FNORM_DTYPE_FLOAT16, {768});
  wf.set(FNORM_DTYPE_FLOAT32, {768});
  DevBuf gamma(768 * 4), mean(64), rstd(64), dg(768 * 4), db(768 * 4);
  // Zero rows, and rows of zero columns: nothing enqueued, NULL data pointers.
  for (const std::vector<int64_t> &dims : {std::vector<int64_t>{0, 768}, {2, 0, 768}, {4, 0}}) {
    x.set(FNORM_DTYPE_FLOAT16, dims);
    mean.poison();
    rstd.poison();
    fnorm_status_t st;
    const bool rows0 = dims.back() != 0;
    const size_t nodes = captured_nodes(
        [&](cudaStream_t s) {
          return fnorm_norm_fwd(h, s, n.d, x.d, nullptr, nullptr, nullptr, rows0 ? w.d : nullptr,
                                rows0 ? gamma.p : nullptr, nullptr, x.d, nullptr, mean.f(), rstd.f(), nullptr, 0);
        },
        &st);
    CHECK_EQ(st, FNORM_STATUS_SUCCESS);
    CHECK_EQ(nodes, size_t{0});
    CHECK(mean.all(0xff) && rstd.all(0xff));  // nothing written
  }
  // Backward over zero rows: dx has no elements; dgamma / dbeta are sums
  // over no rows, 0 (as torch returns), in the weight descriptor's dtype.
  x.set(FNORM_DTYPE_FLOAT16, {0, 768});
  for (const Desc *wd : {&w, &wf}) {
    dg.poison();
    db.poison();
    fnorm_status_t st;
    const size_t nodes = captured_nodes(
        [&](cudaStream_t s) {
          return fnorm_norm_bwd(h, s, n.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, wd->d, gamma.p, nullptr, x.d,
                                nullptr, dg.p, db.p, nullptr, 0);
        },
        &st);
    CHECK_EQ(st, FNORM_STATUS_SUCCESS);
    CHECK_EQ(nodes, size_t{2});  // the two zero fills
    CHECK_STATUS(fnorm_norm_bwd(h, nullptr, n.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, wd->d, gamma.p, nullptr,
                                x.d, nullptr, dg.p, db.p, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
    cudaDeviceSynchronize();
    const size_t used = 768 * (wd == &w ? 2 : 4);
    const std::vector<unsigned char> g = dg.bytes_back(), b = db.bytes_back();
    bool zeros = true, rest = true;
    for (size_t i = 0; i < g.size(); ++i) {
      if (i < used) zeros = zeros && g[i] == 0 && b[i] == 0;
      else rest = rest && g[i] == 0xff && b[i] == 0xff;
    }
    CHECK(zeros);
    CHECK(rest);  // nothing past the vector
  }
  // RMSNorm: dgamma only.
  fnorm_norm_desc_set(n.d, FNORM_NORM_RMSNORM, -1, 1e-6);
  dg.poison();
  CHECK_STATUS(fnorm_norm_bwd(h, nullptr, n.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, wf.d, nullptr, nullptr,
                              x.d, nullptr, dg.p, nullptr, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  cudaDeviceSynchronize();
  CHECK(dg.all(0));
}

void test_batchnorm(fnorm_handle_t h) {
  for (const std::vector<int64_t> &dims : {std::vector<int64_t>{0, 8, 3, 3}, {4, 8, 0}, {0, 8}}) {
    for (fnorm_bn_average_t avg : {FNORM_BN_AVERAGE_EXPONENTIAL, FNORM_BN_AVERAGE_CUMULATIVE}) {
      Bn bn;
      fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_RELU, 1e-5, avg, 0.1);
      Desc x;
      x.set(FNORM_DTYPE_FLOAT16, dims);
      DevBuf rm(32), rv(32), sm(32), si(32), nbt(8), dg(32), dbeta(32), gamma(32);
      const std::vector<float> mean0 = {1, 2, 3, 4, 5, 6, 7, 8}, var0 = {2, 2, 2, 2, 3, 3, 3, 3};
      rm.set(mean0);
      rv.set(var0);
      sm.poison();
      si.poison();
      const int64_t five = 5;
      cudaMemcpy(nbt.p, &five, 8, cudaMemcpyHostToDevice);
      size_t ws = 99, rs = 99;
      CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
      CHECK_STATUS(fnorm_batchnorm_reserve_space_size(h, bn.d, x.d, &rs), FNORM_STATUS_SUCCESS);
      CHECK(ws == 0 && rs == 0);
      fnorm_status_t st;
      const size_t nodes = captured_nodes(
          [&](cudaStream_t s) {
            return fnorm_batchnorm_fwd_train(h, s, bn.d, x.d, nullptr, nullptr, gamma.f(), nullptr, rm.f(), rv.f(),
                                             static_cast<int64_t *>(nbt.p), x.d, nullptr, sm.f(), si.f(), nullptr, 0,
                                             nullptr, 0);
          },
          &st);
      CHECK_EQ(st, FNORM_STATUS_SUCCESS);
      CHECK_EQ(nodes, size_t{1});  // the counter
      CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, nullptr, nullptr, gamma.f(), nullptr, rm.f(), rv.f(),
                                             static_cast<int64_t *>(nbt.p), x.d, nullptr, sm.f(), si.f(), nullptr, 0,
                                             nullptr, 0),
                   FNORM_STATUS_SUCCESS);
      cudaDeviceSynchronize();
      int64_t count = 0;
      cudaMemcpy(&count, nbt.p, 8, cudaMemcpyDeviceToHost);
      CHECK_EQ(count, int64_t{6});  // torch.nn's modules count an empty batch too
      CHECK(rm.floats() == mean0 && rv.floats() == var0);  // running statistics unchanged
      CHECK(sm.all(0xff) && si.all(0xff));                 // saved statistics not written
      CHECK_STATUS(fnorm_batchnorm_fwd_infer(h, nullptr, bn.d, x.d, nullptr, nullptr, gamma.f(), nullptr, rm.f(),
                                             rv.f(), x.d, nullptr, nullptr, 0),
                   FNORM_STATUS_SUCCESS);
      // Backward: dgamma / dbeta are sums over no values.
      dg.poison();
      dbeta.poison();
      const size_t bnodes = captured_nodes(
          [&](cudaStream_t s) {
            return fnorm_batchnorm_bwd(h, s, bn.d, x.d, nullptr, x.d, nullptr, nullptr, gamma.f(), nullptr, sm.f(),
                                       si.f(), nullptr, 0, x.d, nullptr, nullptr, dg.f(), dbeta.f(), nullptr, 0);
          },
          &st);
      CHECK_EQ(st, FNORM_STATUS_SUCCESS);
      CHECK_EQ(bnodes, size_t{2});
      CHECK_STATUS(fnorm_batchnorm_bwd(h, nullptr, bn.d, x.d, nullptr, x.d, nullptr, nullptr, gamma.f(), nullptr, sm.f(),
                                       si.f(), nullptr, 0, x.d, nullptr, nullptr, dg.f(), dbeta.f(), nullptr, 0),
                   FNORM_STATUS_SUCCESS);
      cudaDeviceSynchronize();
      CHECK(dg.all(0) && dbeta.all(0));
    }
  }
}

void test_linear(fnorm_handle_t h) {
  fnorm_linear_desc_t desc = nullptr;
  if (fnorm_linear_desc_create(&desc) != FNORM_STATUS_SUCCESS) {
    ++counters().skipped;
    std::printf("SKIP linear: built without cuBLASLt\n");
    return;
  }
  fnorm_linear_desc_set(desc, FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_WEIGHT_NK, 0);
  const int64_t m = 5, n = 6, k = 4;
  Desc x, w, y;
  // k = 0: y = relu(bias) in every row, aux the mask; the backward's db is
  // the column sums of dz = dy * (bias > 0).
  x.set(FNORM_DTYPE_FLOAT32, {m, 0});
  w.set(FNORM_DTYPE_FLOAT32, {n, 0});
  y.set(FNORM_DTYPE_FLOAT32, {m, n});
  const std::vector<float> bias = {1.5f, -2.f, 0.25f, -0.5f, 3.f, 0.f};
  DevBuf b(n * 4), yb(m * n * 4), dy(m * n * 4), db(n * 4), dx(64), dw(n * k * 4);
  b.set(bias);
  yb.poison();
  size_t aux_bytes = 0, ws = 99;
  CHECK_STATUS(fnorm_linear_aux_size(h, desc, y.d, &aux_bytes), FNORM_STATUS_SUCCESS);
  DevBuf aux(aux_bytes);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, desc, x.d, w.d, y.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, size_t{0});
  CHECK_STATUS(fnorm_linear_fwd(h, nullptr, desc, x.d, nullptr, w.d, nullptr, b.p, y.d, yb.p, aux.p, aux_bytes,
                                nullptr, 0),
               FNORM_STATUS_SUCCESS);
  cudaDeviceSynchronize();
  const std::vector<float> got = yb.floats();
  bool ok = true;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) ok = ok && got[r * n + c] == std::max(bias[c], 0.f);
  CHECK(ok);
  std::vector<float> dyh(m * n);
  for (size_t i = 0; i < dyh.size(); ++i) dyh[i] = 0.5f * static_cast<float>(i % 7) - 1.f;
  dy.set(dyh);
  db.poison();
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, desc, x.d, w.d, y.d, nullptr, &ws), FNORM_STATUS_SUCCESS);
  DevBuf wsb(ws > 0 ? ws : 1);
  CHECK_STATUS(fnorm_linear_bwd(h, nullptr, desc, x.d, nullptr, w.d, nullptr, y.d, dy.p, aux.p, aux_bytes, nullptr,
                                nullptr, 0, x.d, nullptr, nullptr, db.p, nullptr, wsb.p, ws),
               FNORM_STATUS_SUCCESS);
  cudaDeviceSynchronize();
  const std::vector<float> dbh = db.floats();
  ok = true;
  for (int64_t c = 0; c < n; ++c) {
    double want = 0;
    for (int64_t r = 0; r < m; ++r) want += bias[c] > 0 ? dyh[r * n + c] : 0.0;
    ok = ok && std::fabs(dbh[c] - want) <= 1e-6;
  }
  CHECK(ok);
  // m = 0: y empty, nothing enqueued; dw and db sums over no rows.
  x.set(FNORM_DTYPE_FLOAT32, {0, k});
  w.set(FNORM_DTYPE_FLOAT32, {n, k});
  y.set(FNORM_DTYPE_FLOAT32, {0, n});
  fnorm_status_t st;
  size_t nodes = captured_nodes(
      [&](cudaStream_t s) {
        return fnorm_linear_fwd(h, s, desc, x.d, nullptr, w.d, dw.p, b.p, y.d, nullptr, nullptr, 0, nullptr, 0);
      },
      &st);
  CHECK_EQ(st, FNORM_STATUS_SUCCESS);
  CHECK_EQ(nodes, size_t{0});
  dw.poison();
  db.poison();
  CHECK_STATUS(fnorm_linear_bwd(h, nullptr, desc, x.d, nullptr, w.d, nullptr, y.d, nullptr, nullptr, 0, nullptr,
                                nullptr, 0, x.d, nullptr, dw.p, db.p, nullptr, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  cudaDeviceSynchronize();
  CHECK(dw.all(0) && db.all(0));
  // n = 0: dx = dz W^T over no columns: 0.
  fnorm_linear_desc_set(desc, FNORM_LINEAR_EPILOGUE_NONE, FNORM_LINEAR_WEIGHT_NK, 0);
  x.set(FNORM_DTYPE_FLOAT32, {2, 8});
  w.set(FNORM_DTYPE_FLOAT32, {0, 8});
  y.set(FNORM_DTYPE_FLOAT32, {2, 0});
  dx.poison();
  CHECK_STATUS(fnorm_linear_bwd(h, nullptr, desc, x.d, nullptr, w.d, nullptr, y.d, nullptr, nullptr, 0, nullptr,
                                nullptr, 0, x.d, dx.p, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  cudaDeviceSynchronize();
  CHECK(dx.all(0));
  fnorm_linear_desc_destroy(desc);
}

}  // namespace

int main() {
  if (skip_without_gpu()) return 77;
  fnorm_handle_t h = nullptr;
  CHECK_STATUS(fnorm_create(&h), FNORM_STATUS_SUCCESS);
  if (h == nullptr) return fnorm_test::finish("gpu empty tensors");
  test_norm(h);
  test_batchnorm(h);
  test_linear(h);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  fnorm_destroy(h);
  return fnorm_test::finish("gpu empty tensors");
}
