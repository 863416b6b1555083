/* SPDX-License-Identifier: Apache-2.0 */
/* libfusednorm demo: BatchNorm + ReLU training step from C (NCHW fp32).
 *
 * Shows the workspace / reserve-space flow: ask each size, allocate, run the
 * training forward (which writes the 1-bit ReLU mask into the reserve space),
 * keep the reserve space and the saved statistics, run the backward. Checks
 * the saved mean against a plain C computation, that y >= 0, and that dbeta
 * equals the sum of dy over the positions where y > 0.
 * Exit status: 0 on success, 1 on a wrong result or error, 77 when there is
 * no usable GPU (with a message saying so).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fusednorm.h"

#define N 8
#define C 16
#define H 13
#define W 11
#define ELEMS (N * C * H * W)

static int report(fnorm_status_t st, const char *what) {
  char msg[512];
  fnorm_get_last_error_message(msg, sizeof msg);
  fprintf(stderr, "%s failed: %s\n  %s\n", what, fnorm_get_error_string(st), msg);
  return 1;
}

#define TRY(call)                      \
  do {                                 \
    fnorm_status_t st_ = (call);       \
    if (st_ != FNORM_STATUS_SUCCESS) { \
      rc = report(st_, #call);         \
      goto done;                       \
    }                                  \
  } while (0)

#define TRY_CUDA(call)                                                   \
  do {                                                                   \
    cudaError_t e_ = (call);                                             \
    if (e_ != cudaSuccess) {                                             \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_)); \
      rc = 1;                                                            \
      goto done;                                                         \
    }                                                                    \
  } while (0)

int main(void) {
  int rc = 0, ndev = 0, i, c;
  fnorm_handle_t handle = NULL;
  fnorm_tensor_desc_t x_desc = NULL;
  fnorm_batchnorm_desc_t bn = NULL;
  cudaStream_t stream = NULL;
  float *x = NULL, *y = NULL, *dy = NULL, *dx = NULL, *vec = NULL;
  void *fwd_ws = NULL, *bwd_ws = NULL, *reserve = NULL;
  size_t fwd_ws_bytes = 0, bwd_ws_bytes = 0, reserve_bytes = 0;
  static float hx[ELEMS], hy[ELEMS], hdy[ELEMS], hvec[8 * C];
  const int64_t dims[4] = {N, C, H, W}; /* NCHW, packed: strides may be NULL */
  double max_err = 0.0;

  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device; the demo needs one\n");
    return 77;
  }
  for (i = 0; i < ELEMS; ++i) {
    c = (i / (H * W)) % C;
    hx[i] = (float)(c - 8) + (float)((i * 7919) % 1000) / 250.0f - 2.0f;
    hdy[i] = (float)((i * 104729) % 2001) / 1000.0f - 1.0f;
  }
  for (c = 0; c < C; ++c) {
    hvec[c] = 1.0f + 0.05f * (float)c;  /* gamma */
    hvec[C + c] = 0.1f * (float)(c % 3); /* beta */
    hvec[2 * C + c] = 0.0f;             /* running mean */
    hvec[3 * C + c] = 1.0f;             /* running var */
  }

  TRY(fnorm_create(&handle));
  TRY(fnorm_tensor_desc_create(&x_desc));
  TRY(fnorm_tensor_desc_set(x_desc, FNORM_DTYPE_FLOAT32, 4, dims, NULL));
  TRY(fnorm_batchnorm_desc_create(&bn));
  TRY(fnorm_batchnorm_desc_set(bn, FNORM_BN_EPILOGUE_RELU, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1));

  /* 1. Ask the sizes (no GPU work), 2. allocate them once. */
  TRY(fnorm_batchnorm_fwd_train_workspace_size(handle, bn, x_desc, &fwd_ws_bytes));
  TRY(fnorm_batchnorm_bwd_workspace_size(handle, bn, x_desc, &bwd_ws_bytes));
  TRY(fnorm_batchnorm_reserve_space_size(handle, bn, x_desc, &reserve_bytes));
  printf("workspace: forward %zu bytes, backward %zu bytes; reserve space (ReLU mask) %zu bytes for %d "
         "elements\n", fwd_ws_bytes, bwd_ws_bytes, reserve_bytes, ELEMS);
  TRY_CUDA(cudaStreamCreate(&stream));
  TRY_CUDA(cudaMalloc((void **)&x, sizeof hx));
  TRY_CUDA(cudaMalloc((void **)&y, sizeof hx));
  TRY_CUDA(cudaMalloc((void **)&dy, sizeof hx));
  TRY_CUDA(cudaMalloc((void **)&dx, sizeof hx));
  TRY_CUDA(cudaMalloc((void **)&vec, sizeof hvec));
  TRY_CUDA(cudaMalloc(&fwd_ws, fwd_ws_bytes));
  TRY_CUDA(cudaMalloc(&bwd_ws, bwd_ws_bytes));
  TRY_CUDA(cudaMalloc(&reserve, reserve_bytes));
  TRY_CUDA(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
  TRY_CUDA(cudaMemcpy(dy, hdy, sizeof hdy, cudaMemcpyHostToDevice));
  TRY_CUDA(cudaMemcpy(vec, hvec, sizeof hvec, cudaMemcpyHostToDevice));

  /* 3. Training forward: y = relu(bn(x)); saves mean / invstd and the mask. */
  TRY(fnorm_batchnorm_fwd_train(handle, stream, bn, x_desc, x, NULL, vec, vec + C, vec + 2 * C, vec + 3 * C,
                                NULL, x_desc, y, vec + 4 * C, vec + 5 * C, fwd_ws, fwd_ws_bytes, reserve,
                                reserve_bytes));
  /* 4. Backward from the saved statistics and the mask (y is not read). */
  TRY(fnorm_batchnorm_bwd(handle, stream, bn, x_desc, x, x_desc, dy, NULL, vec, NULL, vec + 4 * C, vec + 5 * C,
                          reserve, reserve_bytes, x_desc, dx, NULL, vec + 6 * C, vec + 7 * C, bwd_ws,
                          bwd_ws_bytes));
  TRY_CUDA(cudaStreamSynchronize(stream));
  TRY_CUDA(cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost));
  TRY_CUDA(cudaMemcpy(hvec, vec, sizeof hvec, cudaMemcpyDeviceToHost));

  for (c = 0; c < C; ++c) {
    double mean = 0.0, dbeta = 0.0;
    int n, s;
    for (n = 0; n < N; ++n)
      for (s = 0; s < H * W; ++s) {
        i = (n * C + c) * H * W + s;
        mean += hx[i];
        if (hy[i] > 0.0f) dbeta += hdy[i];
        if (!(hy[i] >= 0.0f)) {
          fprintf(stderr, "y[%d] = %g is not >= 0\n", i, hy[i]);
          rc = 1;
        }
      }
    mean /= N * H * W;
    max_err = fmax(max_err, fabs(hvec[4 * C + c] - mean) / (1.0 + fabs(mean)));
    max_err = fmax(max_err, fabs(hvec[7 * C + c] - dbeta) / (1.0 + fabs(dbeta)));
  }
  printf("BatchNorm + ReLU [%d, %d, %d, %d] fp32: saved mean and dbeta within %.2g of the host (relative)\n", N,
         C, H, W, max_err);
  if (!(max_err < 1e-4)) rc = 1;
  printf("%s\n", rc == 0 ? "OK" : "FAILED");

done:
  cudaFree(x);
  cudaFree(y);
  cudaFree(dy);
  cudaFree(dx);
  cudaFree(vec);
  cudaFree(fwd_ws);
  cudaFree(bwd_ws);
  cudaFree(reserve);
  if (stream) cudaStreamDestroy(stream);
  fnorm_batchnorm_desc_destroy(bn);
  fnorm_tensor_desc_destroy(x_desc);
  fnorm_destroy(handle);
  return rc;
}
