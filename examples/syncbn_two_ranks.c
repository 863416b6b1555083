/* SPDX-License-Identifier: Apache-2.0 */
/* libfusednorm demo: SyncBatchNorm on two GPUs, one process each.
 *
 * The library never creates processes or communicators: here the program
 * forks two ranks (before any CUDA call), rank 0 makes an ncclUniqueId and
 * hands it to rank 1 through a pipe, each rank makes its communicator with
 * ncclCommInitRank and attaches it to a BatchNorm descriptor. Any launcher
 * works the same way (MPI, torchrun, your own). The ranks hold different
 * batch sizes (3 and 5 samples); the saved mean must be the mean over both.
 * Exit status: 0 on success, 1 on a wrong result or error, 77 with fewer
 * than two GPUs (with a message saying so).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fusednorm.h"

#define C 8
#define HW 25
static const int kBatch[2] = {3, 5};

/* Sample n (of the whole batch), channel c, position s. */
static float value(int n, int c, int s) { return (float)(c * 10) + (float)((n * 31 + s * 7) % 17) / 4.0f; }

static int fail_fnorm(fnorm_status_t st, const char *what, int rank) {
  char msg[512];
  fnorm_get_last_error_message(msg, sizeof msg);
  fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, what, fnorm_get_error_string(st), msg);
  return 1;
}

#define TRY(call)                                     \
  do {                                                \
    fnorm_status_t st_ = (call);                      \
    if (st_ != FNORM_STATUS_SUCCESS) {                \
      rc = fail_fnorm(st_, #call, rank);              \
      goto done;                                      \
    }                                                 \
  } while (0)

static int run_rank(int rank, int pipe_fd[2]) {
  int rc = 0, ndev = 0, n, c, s;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  fnorm_handle_t handle = NULL;
  fnorm_tensor_desc_t x_desc = NULL;
  fnorm_batchnorm_desc_t bn = NULL;
  float *x = NULL, *y = NULL, *vec = NULL;
  void *ws = NULL;
  size_t ws_bytes = 0;
  const int first = rank == 0 ? 0 : kBatch[0], count = kBatch[rank];
  const int64_t dims[4] = {count, C, 5, 5};
  static float hx[5 * C * HW], hvec[2 * C];

  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
    if (rank == 0) printf("SKIP: SyncBatchNorm needs two GPUs; %d visible\n", ndev);
    return 77;
  }
  cudaSetDevice(rank);
  /* The ncclUniqueId: made by rank 0, handed over by the caller's own means. */
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess || write(pipe_fd[1], &id, sizeof id) != (ssize_t)sizeof id) return 1;
  } else if (read(pipe_fd[0], &id, sizeof id) != (ssize_t)sizeof id) {
    return 1;
  }
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommInitRank failed\n", rank);
    return 1;
  }

  TRY(fnorm_create(&handle));
  TRY(fnorm_tensor_desc_create(&x_desc));
  TRY(fnorm_tensor_desc_set(x_desc, FNORM_DTYPE_FLOAT32, 4, dims, NULL));
  TRY(fnorm_batchnorm_desc_create(&bn));
  TRY(fnorm_batchnorm_desc_set_comm(bn, comm, FNORM_BN_SYNC_NONE)); /* this is all it takes */
  TRY(fnorm_batchnorm_fwd_train_workspace_size(handle, bn, x_desc, &ws_bytes));
  for (n = 0; n < count; ++n)
    for (c = 0; c < C; ++c)
      for (s = 0; s < HW; ++s) hx[(n * C + c) * HW + s] = value(first + n, c, s);
  if (cudaMalloc((void **)&x, sizeof(float) * count * C * HW) != cudaSuccess ||
      cudaMalloc((void **)&y, sizeof(float) * count * C * HW) != cudaSuccess ||
      cudaMalloc((void **)&vec, sizeof hvec) != cudaSuccess || cudaMalloc(&ws, ws_bytes) != cudaSuccess) {
    rc = 1;
    goto done;
  }
  cudaMemcpy(x, hx, sizeof(float) * count * C * HW, cudaMemcpyHostToDevice);
  /* Statistics over both ranks' samples: one all-reduce on the stream. */
  TRY(fnorm_batchnorm_fwd_train(handle, NULL, bn, x_desc, x, NULL, NULL, NULL, NULL, NULL, NULL, x_desc, y, vec,
                                vec + C, ws, ws_bytes, NULL, 0));
  cudaMemcpy(hvec, vec, sizeof hvec, cudaMemcpyDeviceToHost); /* waits for the stream */
  for (c = 0; c < C; ++c) {
    double mean = 0.0;
    for (n = 0; n < kBatch[0] + kBatch[1]; ++n)
      for (s = 0; s < HW; ++s) mean += value(n, c, s);
    mean /= (kBatch[0] + kBatch[1]) * HW;
    if (!(fabs(hvec[c] - mean) <= 1e-5 * (1.0 + fabs(mean)))) {
      fprintf(stderr, "rank %d: channel %d mean %.7g, expected %.7g (both ranks' samples)\n", rank, c, hvec[c], mean);
      rc = 1;
    }
  }
  printf("rank %d: %d local samples, global mean of %d samples per channel: %s\n", rank, count,
         kBatch[0] + kBatch[1], rc == 0 ? "OK" : "WRONG");

done:
  cudaFree(x);
  cudaFree(y);
  cudaFree(vec);
  cudaFree(ws);
  fnorm_batchnorm_desc_destroy(bn);
  fnorm_tensor_desc_destroy(x_desc);
  fnorm_destroy(handle);
  if (comm != NULL) ncclCommDestroy(comm);
  return rc;
}

int main(void) {
  int pipe_fd[2], r, status, rc = 0, skipped = 0;
  pid_t pid[2];
  if (pipe(pipe_fd) != 0) return 1;
  for (r = 0; r < 2; ++r) {
    pid[r] = fork(); /* before any CUDA call: a child may not inherit a CUDA context */
    if (pid[r] < 0) return 1;
    if (pid[r] == 0) {
      const int code = run_rank(r, pipe_fd);
      fflush(NULL); /* _exit does not flush stdio */
      _exit(code);
    }
  }
  for (r = 0; r < 2; ++r) {
    if (waitpid(pid[r], &status, 0) < 0 || !WIFEXITED(status)) {
      rc = 1;
      continue;
    }
    if (WEXITSTATUS(status) == 77) skipped = 1;
    else if (WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc != 0 ? 1 : skipped ? 77 : 0;
}
