/* SPDX-License-Identifier: Apache-2.0 */
// Host (no GPU) tests of the quantized-output API: the one-byte dtypes are
// accepted by descriptors and refused by every op but
// fnorm_norm_fwd_quant's y; that entry point's size queries and the
// validation of each of its arguments (the fake handle reaches every check
// before any device work).
#include <cstdint>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "fake_handle.hpp"
#include "fusednorm.h"

using namespace fnorm_test;

namespace {

struct Norm {
  fnorm_norm_desc_t d = nullptr;
  Norm() { fnorm_norm_desc_create(&d); }
  ~Norm() { fnorm_norm_desc_destroy(d); }
};

const fnorm_dtype_t kQuantized[] = {FNORM_DTYPE_FLOAT8_E4M3, FNORM_DTYPE_FLOAT8_E5M2, FNORM_DTYPE_INT8};

void test_descriptors() {
  Desc t;
  for (fnorm_dtype_t q : kQuantized) {
    CHECK_STATUS(t.set(q, {3, 5}), FNORM_STATUS_SUCCESS);
    fnorm_dtype_t back = FNORM_DTYPE_FLOAT32;
    CHECK_STATUS(fnorm_tensor_desc_get(t.d, &back, nullptr, nullptr, nullptr, 0), FNORM_STATUS_SUCCESS);
    CHECK_EQ(static_cast<int>(back), static_cast<int>(q));
    CHECK_EQ(fnorm::dtype_size(q), size_t{1});
    CHECK(fnorm::is_quantized_dtype(q));
  }
  CHECK(!fnorm::is_quantized_dtype(FNORM_DTYPE_BFLOAT16));
  CHECK_STATUS(t.set(static_cast<fnorm_dtype_t>(6), {3}), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("dtype"));
}

// Every other op refuses a one-byte dtype wherever a descriptor goes.
void test_other_ops_refuse() {
  fnorm_handle *fake = fake_handle();
  Norm n;
  Desc x, q, w;
  x.set(FNORM_DTYPE_BFLOAT16, {4, 64});
  q.set(FNORM_DTYPE_FLOAT8_E4M3, {4, 64});
  size_t ws = 0;
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, x.d, q.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc") && mentions("fnorm_norm_fwd_quant"));
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(fake, n.d, q.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("x_desc"));
  CHECK_STATUS(fnorm_norm_bwd_workspace_size(fake, n.d, q.d, nullptr, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  w.set(FNORM_DTYPE_INT8, {64});
  CHECK_STATUS(fnorm_norm_bwd_workspace_size(fake, n.d, x.d, w.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("w_desc"));

  fnorm_batchnorm_desc_t bn = nullptr;
  fnorm_batchnorm_desc_create(&bn);
  Desc b;
  b.set(FNORM_DTYPE_FLOAT8_E5M2, {8, 16, 4, 4});
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(fake, bn, b.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("fnorm_norm_fwd_quant"));
  fnorm_batchnorm_desc_destroy(bn);

  fnorm_linear_desc_t lin = nullptr;
  if (fnorm_linear_desc_create(&lin) == FNORM_STATUS_SUCCESS) {
    Desc lx, lw, ly;
    lx.set(FNORM_DTYPE_INT8, {4, 8});
    lw.set(FNORM_DTYPE_INT8, {8, 8});
    ly.set(FNORM_DTYPE_INT8, {4, 8});
    CHECK_STATUS(fnorm_linear_fwd_workspace_size(fake, lin, lx.d, lw.d, ly.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
    fnorm_linear_desc_destroy(lin);
  }
}

void test_size_queries() {
  fnorm_handle *fake = fake_handle();
  Norm n;
  Desc x, y;
  x.set(FNORM_DTYPE_BFLOAT16, {3, 5, 64});
  size_t ws = 7, sb = 7;
  for (fnorm_dtype_t q : kQuantized) {
    y.set(q, {3, 5, 64});
    CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, n.d, x.d, y.d, FNORM_QUANT_SCALING_PER_TOKEN, &ws),
                 FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    const fnorm_status_t st = q == FNORM_DTYPE_INT8 ? FNORM_STATUS_NOT_SUPPORTED : FNORM_STATUS_SUCCESS;
    CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, n.d, x.d, y.d, FNORM_QUANT_SCALING_PER_TENSOR, &ws), st);
  }
  CHECK(mentions("INT8"));
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(fake, n.d, x.d, FNORM_QUANT_SCALING_PER_TENSOR, &sb),
               FNORM_STATUS_SUCCESS);
  CHECK_EQ(sb, sizeof(float));
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(fake, n.d, x.d, FNORM_QUANT_SCALING_PER_TOKEN, &sb),
               FNORM_STATUS_SUCCESS);
  CHECK_EQ(sb, 15 * sizeof(float));  // rows = 3 * 5
  fnorm_norm_desc_set(n.d, FNORM_NORM_RMSNORM, -2, 1e-6);
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(fake, n.d, x.d, FNORM_QUANT_SCALING_PER_TOKEN, &sb),
               FNORM_STATUS_SUCCESS);
  CHECK_EQ(sb, 3 * sizeof(float));  // two normalized dimensions: 3 rows
  fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, 1e-5);

  // Refusals, each naming its argument.
  const auto bad = static_cast<fnorm_quant_scaling_t>(2);
  y.set(FNORM_DTYPE_FLOAT8_E4M3, {3, 5, 64});
  CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, n.d, x.d, y.d, bad, &ws), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("scaling"));
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(fake, n.d, x.d, bad, &sb), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("scaling"));
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(fake, n.d, x.d, FNORM_QUANT_SCALING_PER_TOKEN, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(nullptr, n.d, x.d, FNORM_QUANT_SCALING_PER_TOKEN, &sb),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, n.d, x.d, x.d, FNORM_QUANT_SCALING_PER_TOKEN, &ws),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("not a quantized"));
  y.set(FNORM_DTYPE_FLOAT8_E4M3, {3, 5, 63});
  CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, n.d, x.d, y.d, FNORM_QUANT_SCALING_PER_TOKEN, &ws),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  // y padded rows (a slice of a wider tensor): strides in its own elements.
  y.set(FNORM_DTYPE_FLOAT8_E4M3, {3, 5, 64}, {5 * 80, 80, 1});
  CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, n.d, x.d, y.d, FNORM_QUANT_SCALING_PER_TOKEN, &ws),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, n.d, y.d, y.d, FNORM_QUANT_SCALING_PER_TOKEN, &ws),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("x_desc"));
  CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(fake, nullptr, x.d, y.d, FNORM_QUANT_SCALING_PER_TOKEN, &ws),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
}

// The launch: every argument checked before any device work.
void test_launch_validation() {
  fnorm_handle *fake = fake_handle();
  Norm n;
  Desc x, y, w;
  x.set(FNORM_DTYPE_BFLOAT16, {64, 256});
  y.set(FNORM_DTYPE_FLOAT8_E4M3, {64, 256});
  w.set(FNORM_DTYPE_BFLOAT16, {256});
  alignas(16) static unsigned char buf[1 << 20];
  unsigned char *px = buf, *pr = buf + (1 << 16), *ps = buf + (2 << 16), *py = buf + (3 << 16),
                *pg = buf + (4 << 16);
  float *scale = reinterpret_cast<float *>(buf + (5 << 16));
  float *amax = reinterpret_cast<float *>(buf + (6 << 16));
  float *mean = reinterpret_cast<float *>(buf + (7 << 16));
  float *rstd = reinterpret_cast<float *>(buf + (8 << 16));
  const auto tok = FNORM_QUANT_SCALING_PER_TOKEN;
  auto q = [&](fnorm_handle_t h, const void *x_, const void *r, void *s, const void *g, const void *b, void *y_,
               fnorm_quant_scaling_t sc, float *scale_, float *amax_, float *mean_, float *rstd_) {
    return fnorm_norm_fwd_quant(h, nullptr, n.d, x.d, x_, r, s, w.d, g, b, y.d, y_, sc, scale_, amax_, mean_, rstd_,
                                nullptr, 0);
  };
  CHECK_STATUS(q(nullptr, px, nullptr, nullptr, nullptr, nullptr, py, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'handle'"));
  CHECK_STATUS(q(fake, nullptr, nullptr, nullptr, nullptr, nullptr, py, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'x'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, nullptr, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'y'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, nullptr, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'scale'"));
  CHECK_STATUS(q(fake, px, nullptr, ps, nullptr, nullptr, py, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("without 'residual'"));
  // y never in place of an input, nor over any other buffer.
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, px, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'y'") && mentions("'x'"));
  CHECK_STATUS(q(fake, px, pr, ps, nullptr, nullptr, ps + 100, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'sum'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, pg, nullptr, pg, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'gamma'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, reinterpret_cast<float *>(py + 64), nullptr,
                 nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'scale'"));
  // scale, amax, mean, rstd: no two overlap, none over an input.
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, scale, scale + 63, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'amax'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, scale, amax, amax, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'amax'") && mentions("'mean'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, scale, nullptr, scale, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'mean'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, scale, reinterpret_cast<float *>(px), nullptr,
                 nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'amax'") && mentions("'x'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, scale, nullptr, nullptr,
                 reinterpret_cast<float *>(py + 256)),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'y'") && mentions("'rstd'"));
  (void)rstd;
  // The per-token scale spans rows (64) floats.
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, mean - 63, nullptr, mean, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'scale'") && mentions("'mean'"));
  // RMSNorm: no beta, no mean.
  fnorm_norm_desc_set(n.d, FNORM_NORM_RMSNORM, -1, 1e-6);
  CHECK_STATUS(q(fake, px, nullptr, nullptr, pg, pg + 1024, py, tok, scale, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'beta'"));
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, tok, scale, nullptr, mean, nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'mean'"));
  fnorm_norm_desc_set(n.d, FNORM_NORM_LAYERNORM, -1, 1e-5);
  // INT8 with a static scale.
  y.set(FNORM_DTYPE_INT8, {64, 256});
  CHECK_STATUS(q(fake, px, nullptr, nullptr, nullptr, nullptr, py, FNORM_QUANT_SCALING_PER_TENSOR, scale, nullptr,
                 nullptr, nullptr),
               FNORM_STATUS_NOT_SUPPORTED);
  CHECK(mentions("INT8"));
  // y described in x's dtype: the plain forward's job.
  CHECK_STATUS(fnorm_norm_fwd_quant(fake, nullptr, n.d, x.d, px, nullptr, nullptr, nullptr, nullptr, nullptr, x.d, py,
                                    tok, scale, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
}

// Tensors with no elements: validated, nothing enqueued (amax, the one
// output then written, is left out here: it needs a device).
void test_empty() {
  fnorm_handle *fake = fake_handle();
  Norm n;
  Desc x, y;
  x.set(FNORM_DTYPE_BFLOAT16, {0, 64});
  y.set(FNORM_DTYPE_FLOAT8_E4M3, {0, 64});
  size_t sb = 7;
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(fake, n.d, x.d, FNORM_QUANT_SCALING_PER_TOKEN, &sb),
               FNORM_STATUS_SUCCESS);
  CHECK_EQ(sb, size_t{0});
  for (fnorm_quant_scaling_t sc : {FNORM_QUANT_SCALING_PER_TENSOR, FNORM_QUANT_SCALING_PER_TOKEN})
    CHECK_STATUS(fnorm_norm_fwd_quant(fake, nullptr, n.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                      y.d, nullptr, sc, nullptr, nullptr, nullptr, nullptr, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
}

}  // namespace

int main() {
  test_descriptors();
  test_other_ops_refuse();
  test_size_queries();
  test_launch_validation();
  test_empty();
  return finish("host-quant-api");
}
