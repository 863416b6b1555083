/* SPDX-License-Identifier: Apache-2.0 */
/* Host time per call of each op's C entry point (validation, plan lookup,
 * launch), against a bare cudaLaunchKernel of an empty kernel, at
 * decode-sized shapes where host time is the step time.
 *
 * Each call is made BATCH times back to back and timed on the host
 * (CLOCK_MONOTONIC); the stream is drained between batches, outside the
 * timing, so that the launch queue never fills (a full queue would time the
 * GPU instead). The figure is the median over ROUNDS batches, after a
 * warm-up (the first call of a description plans it). "launches" is what one
 * call enqueues (kernel and memset nodes, counted in a stream capture);
 * "over_launches_us" = us - launches * bare_us, the library's own cost.
 * Built with cuBLASLt linked (FNORM_BENCH_CUBLASLT), a row for a bare
 * cublasLtMatmul of linear_fwd's GEMM (bias epilogue, descriptors and
 * algorithm made once, outside the timing) gives that call its anchor:
 * linear_fwd's "over_cublaslt_us" = us - the bare matmul's us.
 *
 * Usage: host_overhead OUTDIR [LABEL]
 * writes OUTDIR/rows_host_overhead_c.json (rows "op": "host_overhead_c",
 * merged by bench/merge_results.py) and its .md section; LABEL (e.g. the
 * build's name in an A/B run) goes into each row as "build". */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "fusednorm.h"

#ifdef FNORM_BENCH_CUBLASLT
#include <cublasLt.h>
#endif

const void *fnorm_bench_empty_kernel(void);

enum { BATCH = 64, ROUNDS = 41, WARMUP = 32, MAX_BUF = 16 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define CUDA_OK(call)                                                             \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* One benchmarked call: its descriptors and buffers, set up once. */
typedef struct Case {
  const char *name;
  const char *dtype;
  int rank;
  int64_t shape[4];
  fnorm_status_t (*call)(struct Case *c, cudaStream_t s);
  fnorm_tensor_desc_t t[4];
  fnorm_norm_desc_t norm;
  fnorm_batchnorm_desc_t bn;
  fnorm_linear_desc_t lin;
  void *buf[MAX_BUF];
  size_t ws_bytes;
} Case;

static fnorm_handle_t g_handle;

static void *dev(size_t bytes) {
  void *p = NULL;
  CUDA_OK(cudaMalloc(&p, bytes));
  CUDA_OK(cudaMemset(p, 0, bytes));
  return p;
}

static fnorm_tensor_desc_t tensor(fnorm_dtype_t dt, int rank, const int64_t *dims, const int64_t *strides) {
  fnorm_tensor_desc_t d = NULL;
  fnorm_tensor_desc_create(&d);
  if (fnorm_tensor_desc_set(d, dt, rank, dims, strides) != FNORM_STATUS_SUCCESS) {
    char msg[512];
    fnorm_get_last_error_message(msg, sizeof msg);
    fprintf(stderr, "tensor: %s\n", msg);
    exit(1);
  }
  return d;
}

/* ---- the calls ------------------------------------------------------------ */

static fnorm_status_t norm_fwd(Case *c, cudaStream_t s) {
  const int ln = strcmp(c->name, "layernorm_fwd") == 0;
  return fnorm_norm_fwd(g_handle, s, c->norm, c->t[0], c->buf[0], NULL, NULL, c->t[1], c->buf[2],
                        ln ? c->buf[3] : NULL, c->t[0], c->buf[1], ln ? (float *)c->buf[4] : NULL,
                        (float *)c->buf[5], NULL, 0);
}

static fnorm_status_t norm_bwd(Case *c, cudaStream_t s) {
  const int ln = strcmp(c->name, "layernorm_bwd") == 0;  /* RMSNorm: no mean, no dbeta */
  return fnorm_norm_bwd(g_handle, s, c->norm, c->t[0], c->buf[0], c->t[0], c->buf[1],
                        ln ? (const float *)c->buf[4] : NULL, (const float *)c->buf[5], c->t[1], c->buf[2], NULL,
                        c->t[0], c->buf[6], c->buf[7], ln ? c->buf[8] : NULL, c->buf[9], c->ws_bytes);
}

static fnorm_status_t bn_train(Case *c, cudaStream_t s) {
  return fnorm_batchnorm_fwd_train(g_handle, s, c->bn, c->t[0], c->buf[0], NULL, (const float *)c->buf[2],
                                   (const float *)c->buf[3], (float *)c->buf[4], (float *)c->buf[5], NULL, c->t[0],
                                   c->buf[1], (float *)c->buf[6], (float *)c->buf[7], c->buf[9], c->ws_bytes, NULL,
                                   0);
}

static fnorm_status_t bn_infer(Case *c, cudaStream_t s) {
  return fnorm_batchnorm_fwd_infer(g_handle, s, c->bn, c->t[0], c->buf[0], NULL, (const float *)c->buf[2],
                                   (const float *)c->buf[3], (const float *)c->buf[4], (const float *)c->buf[5],
                                   c->t[0], c->buf[1], c->buf[9], c->ws_bytes);
}

static fnorm_status_t bn_bwd(Case *c, cudaStream_t s) {
  return fnorm_batchnorm_bwd(g_handle, s, c->bn, c->t[0], c->buf[0], c->t[0], c->buf[1], NULL,
                             (const float *)c->buf[2], NULL, (const float *)c->buf[6], (const float *)c->buf[7], NULL, 0,
                             c->t[0], c->buf[8], NULL, (float *)c->buf[10], (float *)c->buf[11], c->buf[9],
                             c->ws_bytes);
}

static fnorm_status_t linear_fwd(Case *c, cudaStream_t s) {
  return fnorm_linear_fwd(g_handle, s, c->lin, c->t[0], c->buf[0], c->t[1], c->buf[1], c->buf[2], c->t[2],
                          c->buf[3], NULL, 0, c->buf[9], c->ws_bytes);
}

/* ---- setup ---------------------------------------------------------------- */

static void setup_norm(Case *c, fnorm_norm_mode_t mode, int bwd) {
  const int64_t rows = c->shape[0], cols = c->shape[1];
  c->t[0] = tensor(FNORM_DTYPE_BFLOAT16, 2, c->shape, NULL);
  c->t[1] = tensor(FNORM_DTYPE_BFLOAT16, 1, &c->shape[1], NULL);
  fnorm_norm_desc_create(&c->norm);
  fnorm_norm_desc_set(c->norm, mode, -1, 1e-5);
  const size_t data = (size_t)(rows * cols) * 2, vec = (size_t)cols * 2, stat = (size_t)rows * 4;
  c->buf[0] = dev(data);
  c->buf[1] = dev(data);
  c->buf[2] = dev(vec);
  c->buf[3] = dev(vec);
  c->buf[4] = dev(stat);
  c->buf[5] = dev(stat);
  if (bwd) {
    c->buf[6] = dev(data);
    c->buf[7] = dev(vec);
    c->buf[8] = mode == FNORM_NORM_LAYERNORM ? dev(vec) : NULL;
    fnorm_norm_bwd_workspace_size(g_handle, c->norm, c->t[0], c->t[1], &c->ws_bytes);
    c->buf[9] = c->ws_bytes ? dev(c->ws_bytes) : NULL;
  }
}

/* [N, C, H, W] bf16 channels-last. */
static void setup_bn(Case *c, int pass) {
  const int64_t n = c->shape[0], ch = c->shape[1], hh = c->shape[2], ww = c->shape[3];
  const int64_t strides[4] = {ch * hh * ww, 1, ww * ch, ch};
  c->t[0] = tensor(FNORM_DTYPE_BFLOAT16, 4, c->shape, strides);
  fnorm_batchnorm_desc_create(&c->bn);
  const size_t data = (size_t)(n * ch * hh * ww) * 2, vec = (size_t)ch * 4;
  c->buf[0] = dev(data);
  c->buf[1] = dev(data);
  for (int i = 2; i <= 7; ++i) c->buf[i] = dev(vec);
  c->buf[8] = dev(data);
  c->buf[10] = dev(vec);
  c->buf[11] = dev(vec);
  if (pass == 0) fnorm_batchnorm_fwd_train_workspace_size(g_handle, c->bn, c->t[0], &c->ws_bytes);
  if (pass == 1) fnorm_batchnorm_fwd_infer_workspace_size(g_handle, c->bn, c->t[0], &c->ws_bytes);
  if (pass == 2) fnorm_batchnorm_bwd_workspace_size(g_handle, c->bn, c->t[0], &c->ws_bytes);
  c->buf[9] = c->ws_bytes ? dev(c->ws_bytes) : NULL;
  /* running variance 1, saved inverse std 1: finite statistics */
  float ones[4096];
  for (int i = 0; i < 4096 && i < ch; ++i) ones[i] = 1.f;
  CUDA_OK(cudaMemcpy(c->buf[5], ones, vec, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(c->buf[7], ones, vec, cudaMemcpyHostToDevice));
}

/* x [m, k], W [n, k] (torch.nn.Linear's), bias, bf16. */
static int setup_linear(Case *c) {
  const int64_t m = c->shape[0], n = c->shape[1], k = c->shape[2];
  if (fnorm_linear_desc_create(&c->lin) != FNORM_STATUS_SUCCESS) return 0;
  fnorm_linear_desc_set(c->lin, FNORM_LINEAR_EPILOGUE_BIAS, FNORM_LINEAR_WEIGHT_NK, 0);
  const int64_t xd[2] = {m, k}, wd[2] = {n, k}, yd[2] = {m, n};
  c->t[0] = tensor(FNORM_DTYPE_BFLOAT16, 2, xd, NULL);
  c->t[1] = tensor(FNORM_DTYPE_BFLOAT16, 2, wd, NULL);
  c->t[2] = tensor(FNORM_DTYPE_BFLOAT16, 2, yd, NULL);
  c->buf[0] = dev((size_t)(m * k) * 2);
  c->buf[1] = dev((size_t)(n * k) * 2);
  c->buf[2] = dev((size_t)n * 2);
  c->buf[3] = dev((size_t)(m * n) * 2);
  fnorm_linear_fwd_workspace_size(g_handle, c->lin, c->t[0], c->t[1], c->t[2], &c->ws_bytes);
  c->buf[9] = dev(c->ws_bytes);
  return 1;
}

#ifdef FNORM_BENCH_CUBLASLT
/* linear_fwd's GEMM straight through cuBLASLt: y[m, n] = x[m, k] W[n, k]^T +
 * b, bf16, fp32 compute; column-major D[n, m] = A^T B with A = W (k x n) and
 * B = x (k x m). Everything but the cublasLtMatmul call is made here, once. */
typedef struct BareLt {
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
  size_t ws;
} BareLt;
static BareLt g_lt;
static void destroy_bare_cublaslt(void);

static int setup_bare_cublaslt(Case *c) {
  const int64_t m = c->shape[0], n = c->shape[1], k = c->shape[2];
  if (cublasLtCreate(&g_lt.lt) != CUBLAS_STATUS_SUCCESS) return 0;
  cublasLtMatmulDescCreate(&g_lt.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
  cublasLtMatmulDescSetAttribute(g_lt.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(g_lt.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtMatmulDescSetAttribute(g_lt.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  cublasLtMatmulDescSetAttribute(g_lt.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &c->buf[2], sizeof c->buf[2]);
  cublasLtMatrixLayoutCreate(&g_lt.a, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k);
  cublasLtMatrixLayoutCreate(&g_lt.b, CUDA_R_16BF, (uint64_t)k, (uint64_t)m, k);
  cublasLtMatrixLayoutCreate(&g_lt.d, CUDA_R_16BF, (uint64_t)n, (uint64_t)m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  g_lt.ws = c->ws_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g_lt.ws, sizeof g_lt.ws);
  cublasLtMatmulHeuristicResult_t r;
  int returned = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(g_lt.lt, g_lt.op, g_lt.a, g_lt.b, g_lt.d, g_lt.d, pref, 1, &r, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || returned == 0) {
    destroy_bare_cublaslt();
    return 0;
  }
  g_lt.algo = r.algo;
  return 1;
}

static void destroy_bare_cublaslt(void) {
  cublasLtMatrixLayoutDestroy(g_lt.a);
  cublasLtMatrixLayoutDestroy(g_lt.b);
  cublasLtMatrixLayoutDestroy(g_lt.d);
  cublasLtMatmulDescDestroy(g_lt.op);
  cublasLtDestroy(g_lt.lt);
}

static fnorm_status_t bare_cublaslt(Case *c, cudaStream_t s) {
  const float alpha = 1.f, beta = 0.f;
  return cublasLtMatmul(g_lt.lt, g_lt.op, &alpha, c->buf[1], g_lt.a, c->buf[0], g_lt.b, &beta, c->buf[3], g_lt.d,
                        c->buf[3], g_lt.d, &g_lt.algo, c->buf[9], g_lt.ws, s) == CUBLAS_STATUS_SUCCESS
             ? FNORM_STATUS_SUCCESS
             : FNORM_STATUS_CUBLAS_ERROR;
}
#endif

/* ---- measurement ------------------------------------------------------------ */

typedef fnorm_status_t (*Fn)(Case *c, cudaStream_t s);

static fnorm_status_t bare_launch(Case *c, cudaStream_t s) {
  (void)c;
  const dim3 one = {1, 1, 1};
  return cudaLaunchKernel(fnorm_bench_empty_kernel(), one, one, NULL, 0, s) == cudaSuccess ? FNORM_STATUS_SUCCESS
                                                                                      : FNORM_STATUS_CUDA_ERROR;
}

/* Median host microseconds per call; *launches: nodes one call enqueues. */
static double measure(Fn fn, Case *c, cudaStream_t s, size_t *launches, double *best) {
  for (int i = 0; i < WARMUP; ++i) {
    if (fn(c, s) != FNORM_STATUS_SUCCESS) {
      char msg[512];
      fnorm_get_last_error_message(msg, sizeof msg);
      fprintf(stderr, "%s: %s\n", c ? c->name : "bare", msg);
      return -1;
    }
  }
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGraph_t g = NULL;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  fn(c, s);
  CUDA_OK(cudaStreamEndCapture(s, &g));
  *launches = 0;
  CUDA_OK(cudaGraphGetNodes(g, NULL, launches));
  CUDA_OK(cudaGraphDestroy(g));
  double t[ROUNDS];
  for (int r = 0; r < ROUNDS; ++r) {
    const double t0 = now_us();
    for (int i = 0; i < BATCH; ++i) fn(c, s);
    t[r] = (now_us() - t0) / BATCH;
    CUDA_OK(cudaStreamSynchronize(s));
  }
  qsort(t, ROUNDS, sizeof t[0], cmp_double);
  *best = t[0];
  return t[ROUNDS / 2];
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUTDIR [LABEL]\n", argv[0]);
    return 2;
  }
  const char *out = argv[1], *label = argc > 2 ? argv[2] : NULL;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  char tag[32] = "gpu";
  {
    char lower[256];
    size_t i = 0;
    for (; prop.name[i] && i + 1 < sizeof lower; ++i) lower[i] = (char)tolower((unsigned char)prop.name[i]);
    lower[i] = '\0';
    const char *known[] = {"h200", "h100", "a100", "l40s", "b200"};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; ++k)
      if (strstr(lower, known[k])) snprintf(tag, sizeof tag, "%s", known[k]);
  }
  if (fnorm_create(&g_handle) != FNORM_STATUS_SUCCESS) {
    fprintf(stderr, "fnorm_create failed\n");
    return 1;
  }
  cudaStream_t s = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  Case cases[] = {
      {.name = "layernorm_fwd", .dtype = "bf16", .rank = 2, .shape = {8, 4096}, .call = norm_fwd},
      {.name = "rmsnorm_fwd", .dtype = "bf16", .rank = 2, .shape = {1, 4096}, .call = norm_fwd},
      {.name = "layernorm_bwd", .dtype = "bf16", .rank = 2, .shape = {8, 4096}, .call = norm_bwd},
      {.name = "rmsnorm_bwd", .dtype = "bf16", .rank = 2, .shape = {1, 4096}, .call = norm_bwd},
      {.name = "batchnorm_fwd_train", .dtype = "bf16", .rank = 4, .shape = {32, 64, 8, 8}, .call = bn_train},
      {.name = "batchnorm_fwd_infer", .dtype = "bf16", .rank = 4, .shape = {32, 64, 8, 8}, .call = bn_infer},
      {.name = "batchnorm_bwd", .dtype = "bf16", .rank = 4, .shape = {32, 64, 8, 8}, .call = bn_bwd},
      {.name = "linear_fwd", .dtype = "bf16", .rank = 3, .shape = {8, 1024, 1024}, .call = linear_fwd},
  };
  const size_t ncases = sizeof cases / sizeof cases[0];
  size_t bare_launches = 0;
  double bare_best = 0;
  const double bare = measure(bare_launch, NULL, s, &bare_launches, &bare_best);

  char path[4096];
  snprintf(path, sizeof path, "%s/rows_host_overhead_c.json", out);
  FILE *js = fopen(path, "w");
  snprintf(path, sizeof path, "%s/rows_host_overhead_c.md", out);
  FILE *md = fopen(path, "w");
  if (!js || !md) {
    fprintf(stderr, "cannot write to %s\n", out);
    return 1;
  }
  fprintf(js, "{\"gpu\": \"%s\", \"gpu_name\": \"%s\", \"note\": \"C ABI host time per call%s%s\", \"rows\": [\n", tag,
          prop.name, label ? ", build " : "", label ? label : "");
  fprintf(md, "## Host time per C call (%s%s%s)\n\n", prop.name, label ? ", build " : "", label ? label : "");
  fprintf(md, "Median of %d batches of %d calls, host microseconds per call; a bare cudaLaunchKernel of an empty "
              "kernel took %.2f us (best batch %.2f).\n\n",
          ROUNDS, BATCH, bare, bare_best);
  fprintf(md, "| call | dtype | shape | us | launches | us - launches x bare |\n|---|---|---|---|---|---|\n");
  printf("bare cudaLaunchKernel: %.2f us (best %.2f)\n", bare, bare_best);
  int first = 1, rc = 0;
  for (size_t i = 0; i < ncases; ++i) {
    Case *c = &cases[i];
    if (c->call == norm_fwd || c->call == norm_bwd) {
      setup_norm(c, strncmp(c->name, "rms", 3) == 0 ? FNORM_NORM_RMSNORM : FNORM_NORM_LAYERNORM,
                 c->call == norm_bwd);
    } else if (c->call == linear_fwd) {
      if (!setup_linear(c)) {
        printf("%-22s SKIP: built without cuBLASLt\n", c->name);
        continue;
      }
    } else {
      setup_bn(c, c->call == bn_train ? 0 : c->call == bn_infer ? 1 : 2);
    }
    size_t launches = 0;
    double best = 0;
    const double us = measure(c->call, c, s, &launches, &best);
    if (us < 0) {
      rc = 1;
      continue;
    }
    const double over = us - (double)launches * bare;
    char shape[64];
    int n = 0;
    for (int d = 0; d < c->rank; ++d)
      n += snprintf(shape + n, sizeof shape - (size_t)n, d ? ", %lld" : "%lld", (long long)c->shape[d]);
    printf("%-22s %-5s [%s]  %6.2f us (best %.2f)  %zu launches  %+.2f us over %zu bare\n", c->name, c->dtype, shape,
           us, best, launches, over, launches);
    char anchor[160] = "";
    double lt_us = -1, lt_best = 0;
    size_t lt_launches = 0;
#ifdef FNORM_BENCH_CUBLASLT
    if (c->call == linear_fwd && setup_bare_cublaslt(c)) {
      lt_us = measure(bare_cublaslt, c, s, &lt_launches, &lt_best);
      CUDA_OK(cudaStreamSynchronize(s));
      destroy_bare_cublaslt();
      if (lt_us > 0)
        snprintf(anchor, sizeof anchor, ", \"cublaslt_us\": %.3f, \"over_cublaslt_us\": %.3f", lt_us, us - lt_us);
    }
#endif
    fprintf(js, "%s {\"op\": \"host_overhead_c\", \"call\": \"%s\", \"dtype\": \"%s\", \"shape\": [%s], \"us\": %.3f, "
                "\"best_us\": %.3f, \"launches\": %zu, \"bare_us\": %.3f, \"over_launches_us\": %.3f%s%s%s%s}",
            first ? "" : ",\n", c->name, c->dtype, shape, us, best, launches, bare, over, anchor,
            label ? ", \"build\": \"" : "", label ? label : "", label ? "\"" : "");
    fprintf(md, "| %s | %s | [%s] | %.2f | %zu | %+.2f |\n", c->name, c->dtype, shape, us, launches, over);
    first = 0;
    if (lt_us > 0) {
      const double lt_over = lt_us - (double)lt_launches * bare;
      printf("%-22s %-5s [%s]  %6.2f us (best %.2f)  %zu launches  %+.2f us over %zu bare; linear_fwd %+.2f us over it\n",
             "cublasLtMatmul (bare)", c->dtype, shape, lt_us, lt_best, lt_launches, lt_over, lt_launches, us - lt_us);
      fprintf(js, ",\n {\"op\": \"host_overhead_c\", \"call\": \"cublasLtMatmul_bare\", \"dtype\": \"%s\", "
                  "\"shape\": [%s], \"us\": %.3f, \"best_us\": %.3f, \"launches\": %zu, \"bare_us\": %.3f, "
                  "\"over_launches_us\": %.3f%s%s%s}",
              c->dtype, shape, lt_us, lt_best, lt_launches, bare, lt_over, label ? ", \"build\": \"" : "",
              label ? label : "", label ? "\"" : "");
      fprintf(md, "| cublasLtMatmul, bare (linear_fwd's GEMM; linear_fwd %+.2f over it) | %s | [%s] | %.2f | %zu | %+.2f |\n",
              us - lt_us, c->dtype, shape, lt_us, lt_launches, lt_over);
    }
  }
  fprintf(js, "\n]}\n");
  fclose(js);
  fclose(md);
  fnorm_destroy(g_handle);
  return rc;
}
