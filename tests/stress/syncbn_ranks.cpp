/* SPDX-License-Identifier: Apache-2.0 */
// SyncBatchNorm forward + backward on two GPUs, one forked process per rank,
// small enough to run under compute-sanitizer's tools (scripts/gpu-sanitize
// --two-gpus). Rank 0 holds 3 samples, rank 1 holds 5; then rank 0 holds
// none. Each step runs the training forward and the backward with every
// epilogue (NONE, RELU, ADD_RELU), fp32 and fp16, NCHW and NHWC, with
// FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS, and checks what both ranks must agree
// on against a host reference over the whole batch: the saved mean, and
// (epilogue NONE) dbeta = the sum of dy over every rank's samples.
// Exit 0 when both ranks pass, 1 on a failure, 77 with fewer than 2 GPUs.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fusednorm.h"
#include "halfbits.hpp"

namespace {

constexpr int C = 8, H = 5, W = 3, HW = H * W;

// Sample n of the whole batch, channel c, position s: the same on any rank.
float xval(int n, int c, int s) { return static_cast<float>(c) + static_cast<float>((n * 31 + s * 7 + c) % 17) / 8.0f; }
float dyval(int n, int c, int s) { return static_cast<float>((n * 13 + s * 5 + c * 3) % 11) / 5.0f - 1.0f; }
float zval(int n, int c, int s) { return static_cast<float>((n + s + c) % 5) / 4.0f - 0.5f; }

int failures = 0;
#define EXPECT(cond, ...)                                   \
  do {                                                      \
    if (!(cond)) {                                          \
      std::fprintf(stderr, "rank %d: ", rank);              \
      std::fprintf(stderr, __VA_ARGS__);                    \
      std::fprintf(stderr, "\n");                           \
      ++failures;                                           \
    }                                                       \
  } while (0)
#define FN(call)                                                                                    \
  do {                                                                                              \
    fnorm_status_t st_ = (call);                                                                    \
    if (st_ != FNORM_STATUS_SUCCESS) {                                                              \
      char m_[512];                                                                                 \
      fnorm_get_last_error_message(m_, sizeof m_);                                                  \
      std::fprintf(stderr, "rank %d: %s: %s\n  %s\n", rank, #call, fnorm_get_error_string(st_), m_); \
      return 1;                                                                                     \
    }                                                                                               \
  } while (0)
#define CU(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_));         \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

// One forward + backward step with `counts` samples per rank.
int step(int rank, fnorm_handle_t h, ncclComm_t comm, const int counts[2], fnorm_dtype_t dt, bool cl,
         fnorm_bn_epilogue_t epi) {
  const int n_local = counts[rank], n0 = rank == 0 ? 0 : counts[0], n_all = counts[0] + counts[1];
  const size_t es = dt == FNORM_DTYPE_FLOAT32 ? 4 : 2;
  const int n_desc = n_local > 0 ? n_local : 1;  // a rank without samples describes [1, C, ...]
  const int64_t dims[4] = {n_desc, C, H, W};
  const int64_t cf[4] = {C * HW, HW, W, 1}, nhwc[4] = {HW * C, 1, W * C, C};
  fnorm_tensor_desc_t xd = nullptr;
  FN(fnorm_tensor_desc_create(&xd));
  FN(fnorm_tensor_desc_set(xd, dt, 4, dims, cl ? nhwc : cf));
  fnorm_batchnorm_desc_t bn = nullptr;
  FN(fnorm_batchnorm_desc_create(&bn));
  FN(fnorm_batchnorm_desc_set(bn, epi, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1));
  FN(fnorm_batchnorm_desc_set_comm(bn, comm, FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS));

  const size_t elems = static_cast<size_t>(n_local) * C * HW;
  std::vector<unsigned char> hx(elems * es), hdy(elems * es), hz(elems * es);
  for (int n = 0; n < n_local; ++n)
    for (int c = 0; c < C; ++c)
      for (int s = 0; s < HW; ++s) {
        const size_t i = cl ? (static_cast<size_t>(n) * HW + s) * C + c : (static_cast<size_t>(n) * C + c) * HW + s;
        const float v[3] = {xval(n0 + n, c, s), dyval(n0 + n, c, s), zval(n0 + n, c, s)};
        unsigned char *dst[3] = {hx.data(), hdy.data(), hz.data()};
        for (int k = 0; k < 3; ++k) {
          if (es == 4) {
            std::memcpy(dst[k] + i * 4, &v[k], 4);
          } else {
            const uint16_t b = fnorm_test::float_to_half(v[k]);
            std::memcpy(dst[k] + i * 2, &b, 2);
          }
        }
      }
  void *x = nullptr, *y = nullptr, *z = nullptr, *dy = nullptr, *dx = nullptr, *dz = nullptr, *ws = nullptr,
       *rs = nullptr;
  float *vec = nullptr;  // gamma, beta, rmean, rvar, smean, sinvstd, dgamma, dbeta
  size_t ws_f = 0, ws_b = 0, rs_bytes = 0;
  FN(fnorm_batchnorm_fwd_train_workspace_size(h, bn, xd, &ws_f));
  FN(fnorm_batchnorm_bwd_workspace_size(h, bn, xd, &ws_b));
  FN(fnorm_batchnorm_reserve_space_size(h, bn, xd, &rs_bytes));
  const bool add = epi == FNORM_BN_EPILOGUE_ADD_RELU;
  if (n_local > 0) {
    for (void **p : {&x, &y, &dy, &dx}) CU(cudaMalloc(p, elems * es));
    if (add) {
      CU(cudaMalloc(&z, elems * es));
      CU(cudaMalloc(&dz, elems * es));
      CU(cudaMemcpy(z, hz.data(), elems * es, cudaMemcpyHostToDevice));
    }
    CU(cudaMemcpy(x, hx.data(), elems * es, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dy, hdy.data(), elems * es, cudaMemcpyHostToDevice));
  }
  CU(cudaMalloc(&ws, std::max(ws_f, ws_b) + 16));
  if (rs_bytes) CU(cudaMalloc(&rs, rs_bytes));
  CU(cudaMalloc(reinterpret_cast<void **>(&vec), 8 * C * sizeof(float)));
  std::vector<float> init(8 * C, 0.0f);
  for (int c = 0; c < C; ++c) {
    init[c] = 1.0f + 0.1f * c;     // gamma
    init[C + c] = 0.05f * c;       // beta
    init[3 * C + c] = 1.0f;        // running var
  }
  CU(cudaMemcpy(vec, init.data(), init.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t st = nullptr;
  CU(cudaStreamCreate(&st));
  FN(fnorm_batchnorm_fwd_train(h, st, bn, xd, x, z, vec, vec + C, vec + 2 * C, vec + 3 * C, nullptr, xd, y,
                               vec + 4 * C, vec + 5 * C, ws, ws_f, rs, rs_bytes));
  FN(fnorm_batchnorm_bwd(h, st, bn, xd, x, xd, dy, nullptr, vec, nullptr, vec + 4 * C, vec + 5 * C, rs, rs_bytes, xd,
                         dx, dz, vec + 6 * C, vec + 7 * C, ws, ws_b));
  CU(cudaStreamSynchronize(st));
  std::vector<float> out(8 * C);
  CU(cudaMemcpy(out.data(), vec, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  // Host reference over the whole batch (every rank's samples).
  for (int c = 0; c < C; ++c) {
    double sx = 0, sdy = 0;
    for (int n = 0; n < n_all; ++n)
      for (int s = 0; s < HW; ++s) {
        double xv = xval(n, c, s), gv = dyval(n, c, s);
        if (es == 2) {
          xv = fnorm_test::half_to_float(fnorm_test::float_to_half(static_cast<float>(xv)));
          gv = fnorm_test::half_to_float(fnorm_test::float_to_half(static_cast<float>(gv)));
        }
        sx += xv;
        sdy += gv;
      }
    const double mean = sx / (static_cast<double>(n_all) * HW);
    EXPECT(std::fabs(out[4 * C + c] - mean) <= 1e-4 * (1 + std::fabs(mean)), "channel %d saved mean %.7g, expected %.7g",
           c, out[4 * C + c], mean);
    if (epi == FNORM_BN_EPILOGUE_NONE)
      EXPECT(std::fabs(out[7 * C + c] - sdy) <= 1e-4 * (1 + std::fabs(sdy)), "channel %d dbeta %.7g, expected %.7g", c,
             out[7 * C + c], sdy);
    EXPECT(std::isfinite(out[6 * C + c]), "channel %d dgamma not finite", c);
  }
  cudaStreamDestroy(st);
  for (void *p : {x, y, z, dy, dx, dz, ws, rs, static_cast<void *>(vec)}) cudaFree(p);
  fnorm_batchnorm_desc_destroy(bn);
  fnorm_tensor_desc_destroy(xd);
  return 0;
}

int run_rank(int rank, int fds[2]) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
    if (rank == 0) std::printf("SKIP: SyncBatchNorm needs two GPUs; %d visible\n", ndev);
    return 77;
  }
  CU(cudaSetDevice(rank));
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    if (write(fds[1], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) return 1;
  } else if (read(fds[0], &id, sizeof id) != static_cast<ssize_t>(sizeof id)) {
    return 1;
  }
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    std::fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
    return 1;
  }
  fnorm_handle_t h = nullptr;
  FN(fnorm_create(&h));
  int steps = 0;
  const int uneven[2] = {3, 5}, empty0[2] = {0, 4};
  for (const int *counts : {uneven, empty0})
    for (fnorm_dtype_t dt : {FNORM_DTYPE_FLOAT32, FNORM_DTYPE_FLOAT16})
      for (bool cl : {false, true})
        for (fnorm_bn_epilogue_t epi : {FNORM_BN_EPILOGUE_NONE, FNORM_BN_EPILOGUE_RELU, FNORM_BN_EPILOGUE_ADD_RELU}) {
          if (step(rank, h, comm, counts, dt, cl, epi) != 0) {
            ++failures;
            goto done;
          }
          ++steps;
        }
done:
  fnorm_destroy(h);
  ncclCommDestroy(comm);
  std::printf("rank %d: %d SyncBatchNorm forward+backward steps, %d failures\n", rank, steps, failures);
  return failures ? 1 : 0;
}

}  // namespace

int main() {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) _exit(run_rank(1, fds));
  const int rc0 = run_rank(0, fds);
  int status = 0;
  waitpid(child, &status, 0);
  const int rc1 = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (rc0 == 77) return 77;
  std::printf("syncbn ranks: %s\n", rc0 == 0 && rc1 == 0 ? "both ranks pass" : "FAILED");
  return rc0 == 0 && rc1 == 0 ? 0 : 1;
}
