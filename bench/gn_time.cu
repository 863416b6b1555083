/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm timing harness (tuning aid, not a test): CUDA-graph replays of
// fnorm_groupnorm_fwd / _bwd over buffer sets rotated past L2 (>= 8x L2 in
// total), beside a device-to-device copy of the same bytes in the same
// process. Bytes counted (issue 38): forward read x + write y; backward
// read x, dy + write dx (the backward also computes dgamma, dbeta and, with
// scale/shift, dscale and dshift, as training does; their bytes are not
// counted). bf16, 32 groups, gamma/beta bf16; epilogues: none, silu,
// silu + scale/shift (strided temb halves).
// Usage: gn_time [reps [shape index [layout 0|1 [epilogue 0|1|2]]]]
// (prints one line per shape, layout, pass, epilogue; -1 or absent: all)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fusednorm.h"

#define CK(call)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)
#define FK(call)                                                                        \
  do {                                                                                  \
    fnorm_status_t s_ = (call);                                                         \
    if (s_ != FNORM_STATUS_SUCCESS) {                                                   \
      char m_[512];                                                                     \
      fnorm_get_last_error_message(m_, sizeof m_);                                      \
      std::fprintf(stderr, "%s:%d %s: %d %s\n", __FILE__, __LINE__, #call, (int)s_, m_); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

namespace {

__global__ void fill(unsigned short *p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float f = (h & 0xffff) / 32768.f - 1.f;
    unsigned u;
    memcpy(&u, &f, 4);
    p[i] = (unsigned short)(u >> 16);
  }
}

struct Set {
  void *x, *y, *dy, *dx, *ss;
  float *mean, *rstd;
};

// Median-free simple timing: total time of `replays` graph launches, each
// graph holding one call per buffer set, over the calls made.
template <class F>
double time_graph(cudaStream_t st, int sets, int replays, F call) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < sets; ++i) call(i);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, st));  // warm-up
  CK(cudaStreamSynchronize(st));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, st));
  for (int r = 0; r < replays; ++r) CK(cudaGraphLaunch(ge, st));
  CK(cudaEventRecord(b, st));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return 1e3 * ms / (replays * sets);  // us per call
}

}  // namespace

int main(int argc, char **argv) {
  const int replays = argc > 1 ? std::atoi(argv[1]) : 20;
  const int only_shape = argc > 2 ? std::atoi(argv[2]) : -1, only_cl = argc > 3 ? std::atoi(argv[3]) : -1;
  const int only_ep = argc > 4 ? std::atoi(argv[4]) : -1;
  int dev = 0, l2 = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %s, L2 %d MB\n", prop.name, l2 >> 20);
  fnorm_handle_t h;
  FK(fnorm_create(&h));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int64_t shapes[][4] = {{1, 512, 128, 128}, {1, 512, 256, 256}, {1, 256, 512, 512},
                               {4, 128, 512, 512}, {8, 320, 64, 64},   {2, 1280, 32, 32}};
  std::printf("%-20s %-5s %-4s %-9s %9s %9s %7s %9s\n", "shape", "lay", "pass", "epilogue", "us", "GB/s", "%copy",
              "copyGB/s");
  for (const auto &sh : shapes) {
    if (only_shape >= 0 && &sh - shapes != only_shape) continue;
    const int64_t N = sh[0], C = sh[1], H = sh[2], W = sh[3], E = N * C * H * W, G = 32;
    const size_t X = E * 2;
    const int sets = std::max<int>(2, (int)((8.0 * l2) / (2.0 * X)) + 1);
    std::vector<Set> bufs(sets);
    void *w, *dw, *dss;
    CK(cudaMalloc(&w, 2 * C * 2));
    CK(cudaMalloc(&dw, 2 * C * 2));
    CK(cudaMalloc(&dss, 2 * N * 2 * C * 2));
    fill<<<64, 256, 0, st>>>((unsigned short *)w, 2 * C, 7);
    for (auto &b : bufs) {
      CK(cudaMalloc(&b.x, X));
      CK(cudaMalloc(&b.y, X));
      CK(cudaMalloc(&b.dy, X));
      CK(cudaMalloc(&b.dx, X));
      CK(cudaMalloc(&b.ss, N * 2 * C * 2));
      CK(cudaMalloc(&b.mean, N * G * 4));
      CK(cudaMalloc(&b.rstd, N * G * 4));
      fill<<<1024, 256, 0, st>>>((unsigned short *)b.x, E, 1);
      fill<<<1024, 256, 0, st>>>((unsigned short *)b.dy, E, 2);
      fill<<<64, 256, 0, st>>>((unsigned short *)b.ss, N * 2 * C, 3);
    }
    // Copy of the same bytes (read X + write X), rotated alike.
    const double copy_us = time_graph(st, sets, replays, [&](int i) {
      CK(cudaMemcpyAsync(bufs[i].y, bufs[i].x, X, cudaMemcpyDeviceToDevice, st));
    });
    const double copy_gbs = 2.0 * X / copy_us / 1e3;
    for (int cl = 0; cl < 2; ++cl) {
      if (only_cl >= 0 && cl != only_cl) continue;
      const int64_t dims[4] = {N, C, H, W};
      const int64_t cls[4] = {H * W * C, 1, W * C, C};
      fnorm_tensor_desc_t xd, wd, ssd;
      FK(fnorm_tensor_desc_create(&xd));
      FK(fnorm_tensor_desc_create(&wd));
      FK(fnorm_tensor_desc_create(&ssd));
      FK(fnorm_tensor_desc_set(xd, FNORM_DTYPE_BFLOAT16, 4, dims, cl ? cls : nullptr));
      FK(fnorm_tensor_desc_set(wd, FNORM_DTYPE_BFLOAT16, 1, &C, nullptr));
      const int64_t ssdims[2] = {N, C}, ssstr[2] = {2 * C, 1};
      FK(fnorm_tensor_desc_set(ssd, FNORM_DTYPE_BFLOAT16, 2, ssdims, ssstr));
      for (int ep = 0; ep < 3; ++ep) {
        if (only_ep >= 0 && ep != only_ep) continue;
        const char *epn = ep == 0 ? "none" : ep == 1 ? "silu" : "silu+ss";
        fnorm_groupnorm_desc_t gn;
        FK(fnorm_groupnorm_desc_create(&gn));
        FK(fnorm_groupnorm_desc_set(gn, G, 1e-6, ep ? FNORM_GN_ACTIVATION_SILU : FNORM_GN_ACTIVATION_NONE));
        fnorm_tensor_desc_t ssp = ep == 2 ? ssd : nullptr;
        size_t wsf = 0, wsb = 0;
        FK(fnorm_groupnorm_fwd_workspace_size(h, gn, xd, &wsf));
        FK(fnorm_groupnorm_bwd_workspace_size(h, gn, xd, wd, ssp, &wsb));
        void *ws;
        CK(cudaMalloc(&ws, std::max<size_t>(std::max(wsf, wsb), 16)));
        auto fwd = [&](int i) {
          const Set &b = bufs[i];
          FK(fnorm_groupnorm_fwd(h, st, gn, xd, b.x, wd, w, (char *)w + 2 * C, ssp, ep == 2 ? b.ss : nullptr,
                                 ep == 2 ? (char *)b.ss + 2 * C : nullptr, xd, b.y, b.mean, b.rstd, ws, wsf));
        };
        auto bwd = [&](int i) {
          const Set &b = bufs[i];
          FK(fnorm_groupnorm_bwd(h, st, gn, xd, b.x, xd, b.dy, b.mean, b.rstd, wd, w, (char *)w + 2 * C, ssp,
                                 ep == 2 ? b.ss : nullptr, ep == 2 ? (char *)b.ss + 2 * C : nullptr, xd, b.dx,
                                 dw, (char *)dw + 2 * C, ep == 2 ? dss : nullptr,
                                 ep == 2 ? (char *)dss + N * 2 * C * 2 : nullptr, ws, wsb));
        };
        const double fus = time_graph(st, sets, replays, fwd);
        const double bus = time_graph(st, sets, replays, bwd);
        char shs[32];
        std::snprintf(shs, sizeof shs, "[%lld,%lld,%lld,%lld]", (long long)N, (long long)C, (long long)H, (long long)W);
        const double fg = 2.0 * X / fus / 1e3, bg = 3.0 * X / bus / 1e3;
        std::printf("%-20s %-5s %-4s %-9s %9.1f %9.0f %6.1f%% %9.0f\n", shs, cl ? "nhwc" : "nchw", "fwd", epn, fus, fg,
                    100 * fg / copy_gbs, copy_gbs);
        std::printf("%-20s %-5s %-4s %-9s %9.1f %9.0f %6.1f%% %9.0f\n", shs, cl ? "nhwc" : "nchw", "bwd", epn, bus, bg,
                    100 * bg / copy_gbs, copy_gbs);
        std::fflush(stdout);
        CK(cudaFree(ws));
        fnorm_groupnorm_desc_destroy(gn);
      }
      fnorm_tensor_desc_destroy(xd);
      fnorm_tensor_desc_destroy(wd);
      fnorm_tensor_desc_destroy(ssd);
    }
    for (auto &b : bufs) {
      cudaFree(b.x);
      cudaFree(b.y);
      cudaFree(b.dy);
      cudaFree(b.dx);
      cudaFree(b.ss);
      cudaFree(b.mean);
      cudaFree(b.rstd);
    }
    cudaFree(w);
    cudaFree(dw);
    cudaFree(dss);
  }
  fnorm_destroy(h);
  return 0;
}
