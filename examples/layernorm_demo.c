/* SPDX-License-Identifier: Apache-2.0 */
/* libfusednorm demo: LayerNorm forward from C.
 *
 * Creates a handle, describes a [rows, cols] fp32 tensor, asks for the
 * workspace, runs LayerNorm with gamma/beta on a stream of its own, and checks
 * the result against a plain C computation in double precision.
 * Exit status: 0 on success, 1 on a wrong result or error, 77 when there is
 * no usable GPU (with a message saying so).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "fusednorm.h"

#define ROWS 512
#define COLS 1000

static int report(fnorm_status_t st, const char *what) {
  char msg[512];
  fnorm_get_last_error_message(msg, sizeof msg);
  fprintf(stderr, "%s failed: %s\n  %s\n", what, fnorm_get_error_string(st), msg);
  return 1;
}

#define TRY(call)                                  \
  do {                                             \
    fnorm_status_t st_ = (call);                   \
    if (st_ != FNORM_STATUS_SUCCESS) {             \
      rc = report(st_, #call);                     \
      goto done;                                   \
    }                                              \
  } while (0)

#define TRY_CUDA(call)                                                        \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e_));      \
      rc = 1;                                                                 \
      goto done;                                                              \
    }                                                                         \
  } while (0)

int main(void) {
  int rc = 0;
  fnorm_handle_t handle = NULL;
  fnorm_tensor_desc_t x_desc = NULL, w_desc = NULL;
  fnorm_norm_desc_t norm = NULL;
  cudaStream_t stream = NULL;
  float *x = NULL, *y = NULL, *gamma = NULL, *beta = NULL, *mean = NULL, *rstd = NULL;
  void *workspace = NULL;
  size_t workspace_bytes = 0;
  static float hx[ROWS * COLS], hy[ROWS * COLS], hg[COLS], hb[COLS], hmean[ROWS], hrstd[ROWS];
  const int64_t dims[2] = {ROWS, COLS};
  const int64_t wdims[1] = {COLS};
  const double eps = 1e-5;
  double max_err = 0.0;
  int i, r;

  {
    const unsigned v = fnorm_get_version(); /* major * 10000 + minor * 100 + patch */
    printf("libfusednorm %u.%u.%u\n", v / 10000, v / 100 % 100, v % 100);
  }
  {
    fnorm_status_t st = fnorm_create(&handle);
    if (st == FNORM_STATUS_NO_DEVICE) {
      char msg[512];
      fnorm_get_last_error_message(msg, sizeof msg);
      printf("No usable CUDA GPU here, so the demo cannot run: %s\n", msg);
      return 77;
    }
    if (st != FNORM_STATUS_SUCCESS) return report(st, "fnorm_create");
  }

  srand(12345);
  for (i = 0; i < ROWS * COLS; ++i) hx[i] = 3.0f + (float)rand() / RAND_MAX * 2.0f - 1.0f;
  for (i = 0; i < COLS; ++i) {
    hg[i] = 0.5f + (float)rand() / RAND_MAX;
    hb[i] = (float)rand() / RAND_MAX - 0.5f;
  }

  TRY(fnorm_tensor_desc_create(&x_desc));
  TRY(fnorm_tensor_desc_set(x_desc, FNORM_DTYPE_FLOAT32, 2, dims, NULL));
  TRY(fnorm_tensor_desc_create(&w_desc));
  TRY(fnorm_tensor_desc_set(w_desc, FNORM_DTYPE_FLOAT32, 1, wdims, NULL));
  TRY(fnorm_norm_desc_create(&norm));
  TRY(fnorm_norm_desc_set(norm, FNORM_NORM_LAYERNORM, -1, eps));

  /* The caller owns all memory: query, allocate, launch. */
  TRY(fnorm_norm_fwd_workspace_size(handle, norm, x_desc, x_desc, &workspace_bytes));
  TRY_CUDA(cudaStreamCreate(&stream));
  TRY_CUDA(cudaMalloc((void **)&x, sizeof hx));
  TRY_CUDA(cudaMalloc((void **)&y, sizeof hy));
  TRY_CUDA(cudaMalloc((void **)&gamma, sizeof hg));
  TRY_CUDA(cudaMalloc((void **)&beta, sizeof hb));
  TRY_CUDA(cudaMalloc((void **)&mean, sizeof hmean));
  TRY_CUDA(cudaMalloc((void **)&rstd, sizeof hrstd));
  if (workspace_bytes > 0) TRY_CUDA(cudaMalloc(&workspace, workspace_bytes));
  TRY_CUDA(cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice));
  TRY_CUDA(cudaMemcpy(gamma, hg, sizeof hg, cudaMemcpyHostToDevice));
  TRY_CUDA(cudaMemcpy(beta, hb, sizeof hb, cudaMemcpyHostToDevice));

  TRY(fnorm_norm_fwd(handle, stream, norm, x_desc, x, /*residual=*/NULL, /*sum=*/NULL, w_desc, gamma,
                     beta, x_desc, y, mean, rstd, workspace, workspace_bytes));
  TRY_CUDA(cudaStreamSynchronize(stream));
  TRY_CUDA(cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost));
  TRY_CUDA(cudaMemcpy(hmean, mean, sizeof hmean, cudaMemcpyDeviceToHost));
  TRY_CUDA(cudaMemcpy(hrstd, rstd, sizeof hrstd, cudaMemcpyDeviceToHost));

  for (r = 0; r < ROWS; ++r) {
    const float *xr = hx + (size_t)r * COLS;
    double m = 0.0, v = 0.0, s;
    for (i = 0; i < COLS; ++i) m += xr[i];
    m /= COLS;
    for (i = 0; i < COLS; ++i) v += (xr[i] - m) * (xr[i] - m);
    s = 1.0 / sqrt(v / COLS + eps);
    for (i = 0; i < COLS; ++i) {
      const double ref = (xr[i] - m) * s * hg[i] + hb[i];
      const double err = fabs(hy[(size_t)r * COLS + i] - ref);
      if (!(err <= max_err)) max_err = err; /* NaN propagates as a failure */
    }
    if (!(fabs(hmean[r] - m) < 1e-5 && fabs(hrstd[r] - s) < 1e-4 * s)) max_err = INFINITY;
  }
  printf("LayerNorm [%d, %d] fp32 on the GPU: max |y - reference| = %.3g\n", ROWS, COLS, max_err);
  if (!(max_err < 1e-4)) {
    fprintf(stderr, "result does not match the reference\n");
    rc = 1;
  } else {
    printf("OK\n");
  }

done:
  cudaFree(x);
  cudaFree(y);
  cudaFree(gamma);
  cudaFree(beta);
  cudaFree(mean);
  cudaFree(rstd);
  cudaFree(workspace);
  if (stream) cudaStreamDestroy(stream);
  fnorm_tensor_desc_destroy(x_desc);
  fnorm_tensor_desc_destroy(w_desc);
  fnorm_norm_desc_destroy(norm);
  fnorm_destroy(handle);
  return rc;
}
