/* SPDX-License-Identifier: Apache-2.0 */
// Host (no GPU) tests of the fully-connected layer's API: descriptors,
// validation of every argument before any device work, the aux and
// workspace size queries. White-box: links the library's objects to build a
// handle without a device; every launch below fails validation (or has
// nothing to do) before it would touch the device or create cuBLASLt.
#include <cstring>
#include <string>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "fake_handle.hpp"
#include "fusednorm.h"
#include "core/handle.hpp"
#include "linear/linear_kernels.hpp"

using namespace fnorm_test;

namespace {

struct Lin {
  fnorm_linear_desc_t d = nullptr;
  Lin(fnorm_linear_epilogue_t e = FNORM_LINEAR_EPILOGUE_NONE, fnorm_linear_weight_layout_t l = FNORM_LINEAR_WEIGHT_KN,
      uint32_t flags = 0) {
    fnorm_linear_desc_create(&d);
    fnorm_linear_desc_set(d, e, l, flags);
  }
  ~Lin() { fnorm_linear_desc_destroy(d); }
};

constexpr size_t kCublas = size_t{32} << 20, kSlack = 256;
size_t round256(size_t n) { return (n + 255) / 256 * 256; }

void test_desc() {
  fnorm_linear_desc_t d = nullptr;
  CHECK_STATUS(fnorm_linear_desc_create(nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_linear_desc_create(&d), FNORM_STATUS_SUCCESS);
  fnorm_linear_epilogue_t e;
  fnorm_linear_weight_layout_t l;
  uint32_t f = 7;
  CHECK_STATUS(fnorm_linear_desc_get(d, &e, &l, &f), FNORM_STATUS_SUCCESS);
  CHECK_EQ(e, FNORM_LINEAR_EPILOGUE_NONE);  // defaults
  CHECK_EQ(l, FNORM_LINEAR_WEIGHT_KN);
  CHECK_EQ(f, 0u);
  CHECK_STATUS(fnorm_linear_desc_set(d, FNORM_LINEAR_EPILOGUE_BIAS_GELU, FNORM_LINEAR_WEIGHT_NK,
                                     FNORM_LINEAR_FLAG_ALLOW_TF32),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_desc_set(d, static_cast<fnorm_linear_epilogue_t>(4), FNORM_LINEAR_WEIGHT_KN, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'epilogue'"));
  CHECK_STATUS(fnorm_linear_desc_set(d, static_cast<fnorm_linear_epilogue_t>(-1), FNORM_LINEAR_WEIGHT_KN, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK_STATUS(fnorm_linear_desc_set(d, FNORM_LINEAR_EPILOGUE_BIAS, static_cast<fnorm_linear_weight_layout_t>(2), 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'weight_layout'"));
  CHECK_STATUS(fnorm_linear_desc_set(d, FNORM_LINEAR_EPILOGUE_BIAS, FNORM_LINEAR_WEIGHT_KN, 2), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'flags'"));
  // A failed set leaves the descriptor as it was.
  CHECK_STATUS(fnorm_linear_desc_get(d, &e, &l, &f), FNORM_STATUS_SUCCESS);
  CHECK_EQ(e, FNORM_LINEAR_EPILOGUE_BIAS_GELU);
  CHECK_EQ(l, FNORM_LINEAR_WEIGHT_NK);
  CHECK_EQ(f, static_cast<uint32_t>(FNORM_LINEAR_FLAG_ALLOW_TF32));
  CHECK_STATUS(fnorm_linear_desc_get(d, nullptr, nullptr, nullptr), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_desc_get(nullptr, &e, &l, &f), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_linear_desc_set(nullptr, FNORM_LINEAR_EPILOGUE_BIAS, FNORM_LINEAR_WEIGHT_KN, 0),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_linear_desc_destroy(d), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_desc_destroy(nullptr), FNORM_STATUS_SUCCESS);
}

void test_aux_size() {
  fnorm_handle *h = fake_handle();
  Desc y;
  size_t bytes = 1;
  Lin none, bias(FNORM_LINEAR_EPILOGUE_BIAS), relu(FNORM_LINEAR_EPILOGUE_BIAS_RELU),
      gelu(FNORM_LINEAR_EPILOGUE_BIAS_GELU);
  CHECK_STATUS(fnorm_linear_aux_size(h, relu.d, y.d, &bytes), FNORM_STATUS_BAD_PARAM);  // y never set
  CHECK(mentions("never set"));
  CHECK_STATUS(fnorm_linear_aux_size(nullptr, relu.d, y.d, &bytes), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_linear_aux_size(h, nullptr, y.d, &bytes), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_linear_aux_size(h, relu.d, y.d, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT16, {5, 3}), FNORM_STATUS_SUCCESS);
  // ReLU: a row of y padded to 128 bits = 16 bytes.
  CHECK_STATUS(fnorm_linear_aux_size(h, relu.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{5 * 16});
  // GELU: z in y's dtype, rows padded to 8 elements.
  CHECK_STATUS(fnorm_linear_aux_size(h, gelu.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{5 * 8 * 2});
  CHECK_STATUS(fnorm_linear_aux_size(h, none.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{0});
  CHECK_STATUS(fnorm_linear_aux_size(h, bias.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{0});
  // Rank 3, fp32, n = 129 (two 128-bit words of mask; 136 GELU elements).
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT32, {2, 7, 129}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_aux_size(h, relu.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{14 * 32});
  CHECK_STATUS(fnorm_linear_aux_size(h, gelu.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{14 * 136 * 4});
  // The seed's largest case: m = 8192, n = 1024, bf16.
  CHECK_STATUS(y.set(FNORM_DTYPE_BFLOAT16, {8192, 1024}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_aux_size(h, relu.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{8192} * 128);
  CHECK_STATUS(fnorm_linear_aux_size(h, gelu.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{8192} * 1024 * 2);
}

// Sizes whose byte counts exceed size_t are refused, never wrapped around
// (issue 16: aux of a [2^31, 2^31] fp32 GELU output answered 0 bytes; the
// backward workspace with m * n * 4 = 2^64 answered 8.6 GB).
void test_size_overflow() {
  fnorm_handle *h = fake_handle();
  Lin relu(FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_WEIGHT_NK),
      gelu(FNORM_LINEAR_EPILOGUE_BIAS_GELU, FNORM_LINEAR_WEIGHT_NK);
  Desc y, x, w, dy;
  size_t bytes = 777;
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT32, {int64_t{1} << 31, int64_t{1} << 31}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_aux_size(h, gelu.d, y.d, &bytes), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  CHECK(mentions("overflow"));
  CHECK_EQ(bytes, size_t{777});
  // ReLU's bit mask of the same output fits: 2^31 rows of 2^28 bytes.
  CHECK_STATUS(fnorm_linear_aux_size(h, relu.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{1} << 59);
  const int64_t m = int64_t{1} << 32, n = int64_t{1} << 30;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {m, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(w.set(FNORM_DTYPE_FLOAT32, {n, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(dy.set(FNORM_DTYPE_FLOAT32, {m, n}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, gelu.d, x.d, w.d, dy.d, nullptr, &bytes),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("dy_desc"));
  CHECK_STATUS(fnorm_linear_aux_size(h, gelu.d, dy.d, &bytes), FNORM_STATUS_BAD_PARAM_SHAPE);
}

void test_fwd_validation() {
  fnorm_handle *h = fake_handle();
  Lin kn(FNORM_LINEAR_EPILOGUE_NONE, FNORM_LINEAR_WEIGHT_KN), nk(FNORM_LINEAR_EPILOGUE_NONE, FNORM_LINEAR_WEIGHT_NK);
  Desc x, w, y;
  size_t ws = 0;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT16, {8, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(w.set(FNORM_DTYPE_FLOAT16, {4, 6}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(y.set(FNORM_DTYPE_FLOAT16, {8, 6}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x.d, w.d, y.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, kCublas + kSlack);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(nullptr, kn.d, x.d, w.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'handle'"));
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, nullptr, x.d, w.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'desc'"));
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x.d, w.d, y.d, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, nullptr, w.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'x_desc'"));
  // W [4, 6] read as NK means n = 4, k = 6: k disagrees with x.
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, nk.d, x.d, w.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("NK"));
  Desc wt;
  CHECK_STATUS(wt.set(FNORM_DTYPE_FLOAT16, {6, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, nk.d, x.d, wt.d, y.d, &ws), FNORM_STATUS_SUCCESS);
  // Wrong n in y, wrong rows in y, dtype mismatch, W of rank 3.
  Desc y2;
  CHECK_STATUS(y2.set(FNORM_DTYPE_FLOAT16, {8, 5}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x.d, w.d, y2.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("'y_desc'"));
  CHECK_STATUS(y2.set(FNORM_DTYPE_FLOAT16, {7, 6}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x.d, w.d, y2.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("dims[0]"));
  CHECK_STATUS(y2.set(FNORM_DTYPE_BFLOAT16, {8, 6}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x.d, w.d, y2.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("dtype"));
  Desc w3;
  CHECK_STATUS(w3.set(FNORM_DTYPE_FLOAT16, {1, 4, 6}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x.d, w3.d, y.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("rank"));
  // Layouts: rank-3 x whose rows collapse (and one whose rows do not), a
  // padded x, a non-packed last dimension, overlapping rows.
  Desc x3, y3;
  CHECK_STATUS(x3.set(FNORM_DTYPE_FLOAT16, {2, 4, 4}, {40, 10, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(y3.set(FNORM_DTYPE_FLOAT16, {2, 4, 6}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x3.d, w.d, y3.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(x3.set(FNORM_DTYPE_FLOAT16, {2, 4, 4}, {50, 10, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x3.d, w.d, y3.d, &ws), FNORM_STATUS_NOT_SUPPORTED);
  CHECK(mentions("collapse"));
  Desc xs;
  CHECK_STATUS(xs.set(FNORM_DTYPE_FLOAT16, {8, 4}, {8, 2}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, xs.d, w.d, y.d, &ws), FNORM_STATUS_NOT_SUPPORTED);
  CHECK(mentions("packed"));
  Desc yo;
  CHECK_STATUS(yo.set(FNORM_DTYPE_FLOAT16, {8, 6}, {3, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x.d, w.d, yo.d, &ws), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("overlap"));
  Desc xo;
  CHECK_STATUS(xo.set(FNORM_DTYPE_FLOAT16, {8, 4}, {2, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, xo.d, w.d, y.d, &ws), FNORM_STATUS_NOT_SUPPORTED);
  // A rank-1 x is one row.
  Desc x1, y1;
  CHECK_STATUS(x1.set(FNORM_DTYPE_FLOAT16, {4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(y1.set(FNORM_DTYPE_FLOAT16, {6}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, kn.d, x1.d, w.d, y1.d, &ws), FNORM_STATUS_SUCCESS);

  // The launch checks everything before the device.
  alignas(256) static unsigned char buf[1 << 16];
  unsigned char *px = buf, *pw = buf + 1024, *pb = buf + 2048, *py = buf + 4096, *paux = buf + 8192;
  unsigned char *pws = buf + 16384;  // stands for a big enough workspace
  Lin bias(FNORM_LINEAR_EPILOGUE_BIAS), relu(FNORM_LINEAR_EPILOGUE_BIAS_RELU);
  auto fwd = [&](fnorm_linear_desc_t d, const void *x_, const void *w_, const void *b_, void *y_, void *aux,
                 size_t aux_bytes, size_t ws_bytes) {
    return fnorm_linear_fwd(h, nullptr, d, x.d, x_, w.d, w_, b_, y.d, y_, aux, aux_bytes, pws, ws_bytes);
  };
  const size_t big = kCublas + kSlack;
  CHECK_STATUS(fwd(kn.d, nullptr, pw, nullptr, py, nullptr, 0, big), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'x'"));
  CHECK_STATUS(fwd(kn.d, px, nullptr, nullptr, py, nullptr, 0, big), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fwd(kn.d, px, pw, nullptr, nullptr, nullptr, 0, big), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fwd(bias.d, px, pw, nullptr, py, nullptr, 0, big), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'bias'"));
  CHECK_STATUS(fwd(kn.d, px, pw, pb, py, nullptr, 0, big), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'bias' must be NULL"));
  CHECK_STATUS(fwd(bias.d, px, pw, pb, py, paux, 4096, big), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'aux' must be NULL"));
  CHECK_STATUS(fwd(relu.d, px, pw, pb, py, paux, 8 * 16 - 1, big), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("aux_bytes"));
  CHECK_STATUS(fwd(relu.d, px, pw, pb, py, buf + 8193, 8 * 16, big), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("16-byte"));
  CHECK_STATUS(fwd(bias.d, px, pw, pb, px, nullptr, 0, big), FNORM_STATUS_BAD_PARAM);  // y == x
  CHECK(mentions("overlap"));
  CHECK_STATUS(fwd(bias.d, px, pw, pb, buf + 2050, nullptr, 0, big), FNORM_STATUS_BAD_PARAM);  // y over bias
  CHECK_STATUS(fwd(relu.d, px, pw, pb, py, py + 64, 8 * 16, big), FNORM_STATUS_BAD_PARAM);  // aux over y
  CHECK_STATUS(fwd(bias.d, px, pw, pb, py, nullptr, 0, big - 1), FNORM_STATUS_INSUFFICIENT_WORKSPACE);
  CHECK(mentions("fnorm_linear_fwd_workspace_size"));
  CHECK_STATUS(fnorm_linear_fwd(h, nullptr, bias.d, x.d, px, w.d, pw, pb, y.d, py, nullptr, 0, nullptr, big),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'workspace'"));
}

void test_bwd() {
  fnorm_handle *h = fake_handle();
  const int64_t m = 1000, n = 300, k = 17;
  Desc x, w, dy, dx;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT16, {m, k}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(w.set(FNORM_DTYPE_FLOAT16, {n, k}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(dy.set(FNORM_DTYPE_FLOAT16, {m, n}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(dx.set(FNORM_DTYPE_FLOAT16, {m, k}), FNORM_STATUS_SUCCESS);
  Lin none(FNORM_LINEAR_EPILOGUE_NONE, FNORM_LINEAR_WEIGHT_NK), bias(FNORM_LINEAR_EPILOGUE_BIAS, FNORM_LINEAR_WEIGHT_NK),
      relu(FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_WEIGHT_NK), gelu(FNORM_LINEAR_EPILOGUE_BIAS_GELU,
                                                                           FNORM_LINEAR_WEIGHT_NK);
  // Sizes: cuBLASLt's budget; + per-slice column sums with a bias; + dz
  // (m x n in the dtype) with an activation; + the producer's column sums.
  const int splits_n = fnorm::linear_colsum_splits(m, n, 132), splits_k = fnorm::linear_colsum_splits(m, k, 132);
  CHECK_CMP(splits_n, >=, 1);
  CHECK_CMP(splits_n, <=, 512);
  CHECK_CMP(splits_n * 16, <=, m);
  size_t ws = 0;
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, none.d, x.d, w.d, dy.d, nullptr, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, kSlack + kCublas);
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, bias.d, x.d, w.d, dy.d, nullptr, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, kSlack + kCublas + round256(size_t(splits_n) * n * 4));
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, gelu.d, x.d, w.d, dy.d, nullptr, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, kSlack + kCublas + round256(size_t(m) * n * 2) + round256(size_t(splits_n) * n * 4));
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, none.d, x.d, w.d, dy.d, relu.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, kSlack + kCublas + round256(size_t(splits_k) * k * 4));
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, none.d, x.d, w.d, dy.d, bias.d, &ws), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'x_producer'"));
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, none.d, x.d, w.d, x.d, nullptr, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("'dy_desc'"));
  // Splits: at least one, never more slices than 16-row chunks, at most
  // 512, about 8 blocks per SM.
  CHECK_EQ(fnorm::linear_colsum_splits(1, 1, 132), 1);
  CHECK_EQ(fnorm::linear_colsum_splits(8192, 1, 132), 512);
  CHECK_EQ(fnorm::linear_colsum_splits(8192, 1024, 132), 132);
  CHECK_EQ(fnorm::linear_colsum_splits(64, 100000, 132), 2);

  alignas(256) static unsigned char buf[1 << 22];
  unsigned char *px = buf, *pw = buf + (1 << 16), *pdy = buf + (1 << 17), *pdx = buf + (3 << 19),
                *pdw = buf + (2 << 20), *pdb = buf + (2 << 20) + (1 << 16), *paux = buf + (3 << 20),
                *pws = buf + (3 << 20) + (1 << 19);
  const size_t big = size_t{1} << 30;  // stands for a big enough workspace
  auto bwd = [&](fnorm_linear_desc_t d, const void *aux, size_t aux_bytes, fnorm_linear_desc_t prod,
                 const void *x_aux, size_t x_aux_bytes, void *dx_, void *dw_, void *db_, void *x_db,
                 size_t ws_bytes) {
    return fnorm_linear_bwd(h, nullptr, d, x.d, px, w.d, pw, dy.d, pdy, aux, aux_bytes, prod, x_aux, x_aux_bytes,
                            dx.d, dx_, dw_, db_, x_db, pws, ws_bytes);
  };
  // Nothing asked for: valid, and nothing to do (no device needed).
  CHECK_STATUS(bwd(bias.d, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr, big),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(bwd(none.d, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr, pdb, nullptr, big), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'db'"));
  CHECK_STATUS(bwd(relu.d, nullptr, 0, nullptr, nullptr, 0, pdx, nullptr, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'aux'"));
  CHECK_STATUS(bwd(relu.d, paux, m * 16, nullptr, nullptr, 0, pdx, nullptr, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM);  // n = 300: 384 bits = 48 bytes a row
  CHECK(mentions("aux_bytes"));
  CHECK_STATUS(bwd(bias.d, paux, 64, nullptr, nullptr, 0, pdx, nullptr, nullptr, nullptr, big), FNORM_STATUS_BAD_PARAM);
  CHECK_STATUS(bwd(none.d, nullptr, 0, nullptr, paux, 64, pdx, nullptr, nullptr, nullptr, big), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("x_producer"));
  CHECK_STATUS(bwd(none.d, nullptr, 0, relu.d, nullptr, 0, pdx, nullptr, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'x_aux'"));
  CHECK_STATUS(bwd(none.d, nullptr, 0, relu.d, paux, m * 16, nullptr, pdw, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'dx'"));
  CHECK_STATUS(bwd(none.d, nullptr, 0, relu.d, paux, m * 16 - 1, pdx, nullptr, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("x_aux_bytes"));
  CHECK_STATUS(bwd(none.d, nullptr, 0, gelu.d, paux, m * 16, pdx, nullptr, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM);  // GELU's aux: m x 24 halves
  CHECK_STATUS(bwd(bias.d, nullptr, 0, nullptr, nullptr, 0, pdx, pdx + 2, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM);  // dw over dx
  CHECK(mentions("overlap"));
  CHECK_STATUS(bwd(bias.d, nullptr, 0, nullptr, nullptr, 0, pdy, nullptr, nullptr, nullptr, big),
               FNORM_STATUS_BAD_PARAM);  // dx == dy
  CHECK_STATUS(bwd(bias.d, nullptr, 0, nullptr, nullptr, 0, nullptr, pdw, pw, nullptr, big),
               FNORM_STATUS_BAD_PARAM);  // db over w
  CHECK_STATUS(bwd(bias.d, nullptr, 0, nullptr, nullptr, 0, pdx, pdw, pdb, nullptr, 1024),
               FNORM_STATUS_INSUFFICIENT_WORKSPACE);
  CHECK(mentions("fnorm_linear_bwd_workspace_size"));
  // dx_desc must describe x's shape; dx_desc is needed only with dx.
  Desc dxw;
  CHECK_STATUS(dxw.set(FNORM_DTYPE_FLOAT16, {m, k + 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_bwd(h, nullptr, bias.d, x.d, px, w.d, pw, dy.d, pdy, nullptr, 0, nullptr, nullptr, 0,
                                dxw.d, pdx, nullptr, nullptr, nullptr, pws, big),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("'dx_desc'"));
  CHECK_STATUS(fnorm_linear_bwd(h, nullptr, bias.d, x.d, px, w.d, pw, dy.d, pdy, nullptr, 0, nullptr, nullptr, 0,
                                nullptr, pdx, nullptr, nullptr, nullptr, pws, big),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  // x is needed only for dw, w only for dx.
  CHECK_STATUS(fnorm_linear_bwd(h, nullptr, bias.d, x.d, nullptr, w.d, pw, dy.d, pdy, nullptr, 0, nullptr, nullptr,
                                0, nullptr, nullptr, pdw, nullptr, nullptr, pws, big),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'x'"));
  CHECK_STATUS(fnorm_linear_bwd(h, nullptr, bias.d, x.d, px, w.d, nullptr, dy.d, pdy, nullptr, 0, nullptr, nullptr,
                                0, dx.d, pdx, nullptr, nullptr, nullptr, pws, big),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'w'"));
}

}  // namespace

int main() {
  fnorm_linear_desc_t probe = nullptr;
  const fnorm_status_t st = fnorm_linear_desc_create(&probe);
  if (st == FNORM_STATUS_NOT_SUPPORTED_BUILD) {
    // A build without cuBLASLt: every entry point says so, destroy excepted.
    CHECK(mentions("cuBLASLt"));
    size_t bytes = 0;
    CHECK_STATUS(fnorm_linear_aux_size(fake_handle(), nullptr, nullptr, &bytes), FNORM_STATUS_NOT_SUPPORTED_BUILD);
    CHECK_STATUS(fnorm_linear_fwd(fake_handle(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                  nullptr, nullptr, nullptr, 0, nullptr, 0),
                 FNORM_STATUS_NOT_SUPPORTED_BUILD);
    CHECK_STATUS(fnorm_linear_desc_destroy(nullptr), FNORM_STATUS_SUCCESS);
    return fnorm_test::finish("host linear (no cuBLASLt in this build)");
  }
  fnorm_linear_desc_destroy(probe);
  test_desc();
  test_aux_size();
  test_size_overflow();
  test_fwd_validation();
  test_bwd();
  return fnorm_test::finish("host linear");
}
