/* SPDX-License-Identifier: Apache-2.0 */
// Host (no GPU) tests of the GroupNorm API: the descriptor, the size
// queries, and every refusal of the launches (status, a message naming the
// argument, nothing written: the "device" buffers here are host memory with
// a pattern that must survive). White-box: a handle built without a device
// (132 SMs, like an H100/H200).
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "fake_handle.hpp"
#include "fusednorm.h"
#include "groupnorm/groupnorm.hpp"

using namespace fnorm_test;

namespace {

struct Gn {
  fnorm_groupnorm_desc_t d = nullptr;
  Gn() { fnorm_groupnorm_desc_create(&d); }
  ~Gn() { fnorm_groupnorm_desc_destroy(d); }
};

void test_desc() {
  Gn gn;
  int64_t g = 0;
  double eps = 0;
  fnorm_gn_activation_t act = FNORM_GN_ACTIVATION_SILU;
  CHECK_STATUS(fnorm_groupnorm_desc_get(gn.d, &g, &eps, &act), FNORM_STATUS_SUCCESS);
  CHECK(g == 32 && eps == 1e-5 && act == FNORM_GN_ACTIVATION_NONE);
  CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 8, 1e-6, FNORM_GN_ACTIVATION_SILU), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_desc_get(gn.d, &g, &eps, &act), FNORM_STATUS_SUCCESS);
  CHECK(g == 8 && eps == 1e-6 && act == FNORM_GN_ACTIVATION_SILU);
  CHECK_STATUS(fnorm_groupnorm_desc_get(gn.d, nullptr, nullptr, nullptr), FNORM_STATUS_SUCCESS);
  // Bad values name the argument and leave the descriptor as it was.
  CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 0, 1e-5, FNORM_GN_ACTIVATION_NONE), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("groups"));
  CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, -3, 1e-5, FNORM_GN_ACTIVATION_NONE), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("groups"));
  for (double bad : {-1.0, 1e39, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 4, bad, FNORM_GN_ACTIVATION_NONE), FNORM_STATUS_BAD_PARAM);
    CHECK(mentions("epsilon"));
  }
  CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 4, 1e-5, static_cast<fnorm_gn_activation_t>(2)), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("activation"));
  CHECK_STATUS(fnorm_groupnorm_desc_get(gn.d, &g, &eps, &act), FNORM_STATUS_SUCCESS);
  CHECK(g == 8 && eps == 1e-6 && act == FNORM_GN_ACTIVATION_SILU);
  CHECK_STATUS(fnorm_groupnorm_desc_set(nullptr, 4, 1e-5, FNORM_GN_ACTIVATION_NONE), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_groupnorm_desc_get(nullptr, &g, &eps, &act), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_groupnorm_desc_create(nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_groupnorm_desc_destroy(nullptr), FNORM_STATUS_SUCCESS);
}

void test_size_queries() {
  fnorm_handle *h = fake_handle();
  Gn gn;
  Desc x, w, ss, bad;
  size_t ws = 7;
  CHECK_STATUS(x.set(FNORM_DTYPE_BFLOAT16, {2, 64, 9, 9}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK(ws > 0 && ws % 16 == 0);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(nullptr, gn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("handle"));
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, nullptr, x.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("gn"));
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, nullptr, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("x_desc"));
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("workspace_bytes"));
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, bad.d, &ws), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("x_desc"));
  // Channels-last, [N, C, L], [N, C], NCDHW.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT16, {2, 64, 9, 9}, {64 * 81, 1, 64 * 9, 64}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK(ws > 0);
  for (auto dims : std::vector<std::vector<int64_t>>{{3, 64, 17}, {3, 64}, {1, 32, 3, 4, 5}}) {
    CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, dims), FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK(ws > 0);
  }
  // Empty tensors need nothing; C = 0 is a shape error.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {0, 64, 4, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, size_t{0});
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {2, 64, 0, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, nullptr, nullptr, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, size_t{0});
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {2, 0, 4, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("x_desc"));
  // Groups must divide C; rank >= 2; layouts other than the two refused.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {2, 48, 4, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("groups = 32"));
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {64}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("rank"));
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {2, 64, 4, 4}, {2048, 16, 4, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_NOT_SUPPORTED);
  CHECK(mentions("x_desc"));
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT8_E4M3, {2, 64, 4, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("x_desc"));
  // Backward: asking for no parameter gradients needs no more (the
  // persistent kernel: less, its per-line sums; the streaming schedule
  // keeps the channel sums for dx either way).
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT16, {4, 64, 16, 16}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(w.set(FNORM_DTYPE_FLOAT32, {64}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(ss.set(FNORM_DTYPE_FLOAT16, {4, 64}, {128, 1}), FNORM_STATUS_SUCCESS);
  size_t plain = 0, with_w = 0, with_ss = 0;
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, nullptr, nullptr, &plain), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, w.d, nullptr, &with_w), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, nullptr, ss.d, &with_ss), FNORM_STATUS_SUCCESS);
  CHECK(plain > 0 && with_w >= plain && with_ss == with_w);
  h->tuning.gn_schedule = fnorm::Tuning::GnSchedule::Persistent;
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, nullptr, nullptr, &plain), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, w.d, nullptr, &with_w), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, nullptr, ss.d, &with_ss), FNORM_STATUS_SUCCESS);
  CHECK(plain > 0 && with_w > plain && with_ss == with_w);
  h->tuning.gn_schedule = fnorm::Tuning::GnSchedule::Planner;
  CHECK_STATUS(w.set(FNORM_DTYPE_FLOAT32, {32}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, w.d, nullptr, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("w_desc"));
  CHECK_STATUS(ss.set(FNORM_DTYPE_FLOAT16, {4, 64, 2}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, nullptr, ss.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("ss_desc"));
  CHECK_STATUS(ss.set(FNORM_DTYPE_BFLOAT16, {4, 64}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, nullptr, ss.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("ss_desc"));
}

// Host memory standing in for device buffers: a refusal must leave it as it was.
struct Buffers {
  std::vector<unsigned char> mem = std::vector<unsigned char>(1 << 20, 0xA5);
  unsigned char *at(size_t off) { return mem.data() + off; }
  bool intact() const {
    for (unsigned char b : mem)
      if (b != 0xA5) return false;
    return true;
  }
};

void test_fwd_refusals() {
  fnorm_handle *h = fake_handle();
  Gn gn;
  Desc x, y, w, ss, ybad;
  Buffers b;
  x.set(FNORM_DTYPE_FLOAT16, {2, 64, 8, 8});
  y.set(FNORM_DTYPE_FLOAT16, {2, 64, 8, 8});
  w.set(FNORM_DTYPE_FLOAT32, {64});
  ss.set(FNORM_DTYPE_FLOAT16, {2, 64}, {128, 1});
  void *X = b.at(0), *Y = b.at(65536), *G = b.at(131072), *B = b.at(131072 + 256);
  void *S = b.at(135168), *T = b.at(135168 + 128);
  float *M = reinterpret_cast<float *>(b.at(139264)), *R = reinterpret_cast<float *>(b.at(139264 + 256));
  void *W = b.at(262144);
  const size_t WB = 65536;
  auto fwd = [&](fnorm_tensor_desc_t xd, const void *x_, fnorm_tensor_desc_t wd, const void *g_, const void *b_,
                 fnorm_tensor_desc_t sd, const void *s_, const void *t_, fnorm_tensor_desc_t yd, void *y_, float *m_,
                 float *r_, void *w_, size_t wb) {
    return fnorm_groupnorm_fwd(h, nullptr, gn.d, xd, x_, wd, g_, b_, sd, s_, t_, yd, y_, m_, r_, w_, wb);
  };
  CHECK_STATUS(fnorm_groupnorm_fwd(nullptr, nullptr, gn.d, x.d, X, w.d, G, B, ss.d, S, T, y.d, Y, M, R, W, WB),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("handle"));
  CHECK_STATUS(fwd(x.d, nullptr, w.d, G, B, ss.d, S, T, y.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'x'"));
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, y.d, nullptr, M, R, W, WB), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'y'"));
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, nullptr, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("y_desc"));
  CHECK_STATUS(fwd(x.d, X, nullptr, G, nullptr, ss.d, S, T, y.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("w_desc"));
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, nullptr, nullptr, T, y.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("ss_desc"));
  // y: other sizes, dtype, layout.
  ybad.set(FNORM_DTYPE_FLOAT16, {2, 64, 8, 9});
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, ybad.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  ybad.set(FNORM_DTYPE_BFLOAT16, {2, 64, 8, 8});
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, ybad.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  ybad.set(FNORM_DTYPE_FLOAT16, {2, 64, 8, 8}, {4096, 1, 512, 64});
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, ybad.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  // Element alignment.
  CHECK_STATUS(fwd(x.d, b.at(1), w.d, G, B, ss.d, S, T, y.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'x'"));
  CHECK_STATUS(fwd(x.d, X, w.d, b.at(131074), B, ss.d, S, T, y.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'gamma'"));
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, b.at(135169), T, y.d, Y, M, R, W, WB), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'scale'"));
  // The overlap rule: y may be x exactly, nothing else.
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, y.d, b.at(2), M, R, W, WB), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'x'") && mentions("'y'"));
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, y.d, Y, M, M + 1, W, WB), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'mean'") && mentions("'rstd'"));
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, y.d, Y, M, R, X, WB), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'workspace'"));
  CHECK_STATUS(fwd(x.d, X, w.d, G, B, ss.d, S, T, y.d, Y, reinterpret_cast<float *>(G), R, W, WB),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'mean'") && mentions("'gamma'"));
  // An empty tensor: nothing to do, nothing written (valid arguments).
  Desc xe, ye;
  xe.set(FNORM_DTYPE_FLOAT16, {0, 64, 8, 8});
  ye.set(FNORM_DTYPE_FLOAT16, {0, 64, 8, 8});
  CHECK_STATUS(fwd(xe.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, ye.d, nullptr, nullptr,
                   nullptr, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  CHECK(b.intact());
}

void test_bwd_refusals() {
  fnorm_handle *h = fake_handle();
  Gn gn;
  Desc x, dy, dx, w, ss;
  Buffers b;
  x.set(FNORM_DTYPE_BFLOAT16, {2, 64, 8, 8});
  dy.set(FNORM_DTYPE_BFLOAT16, {2, 64, 8, 8});
  dx.set(FNORM_DTYPE_BFLOAT16, {2, 64, 8, 8});
  w.set(FNORM_DTYPE_BFLOAT16, {64});
  ss.set(FNORM_DTYPE_FLOAT32, {2, 64}, {128, 1});  // a half of temb.chunk(2, 1)
  void *X = b.at(0), *DY = b.at(32768), *DX = b.at(65536);
  float *M = reinterpret_cast<float *>(b.at(98304)), *R = reinterpret_cast<float *>(b.at(98304 + 256));
  void *G = b.at(102400), *B = b.at(102400 + 128), *DG = b.at(102400 + 256), *DB = b.at(102400 + 384);
  void *S = b.at(106496), *T = b.at(106496 + 256), *DS = b.at(131072), *DT = b.at(131072 + 1024);
  void *W = b.at(262144);
  const size_t WB = 65536;
  auto bwd = [&](const void *x_, const void *dy_, const float *m_, const float *r_, void *dx_, void *dg_, void *db_,
                 void *ds_, void *dt_, fnorm_tensor_desc_t wd, fnorm_tensor_desc_t sd) {
    return fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, x_, dy.d, dy_, m_, r_, wd, G, B, sd, S, T, dx.d, dx_, dg_,
                               db_, ds_, dt_, W, WB);
  };
  for (const char *arg : {"x", "dy", "mean", "rstd", "dx"}) {
    const std::string a = arg;
    CHECK_STATUS(bwd(a == "x" ? nullptr : X, a == "dy" ? nullptr : DY, a == "mean" ? nullptr : M,
                     a == "rstd" ? nullptr : R, a == "dx" ? nullptr : DX, DG, DB, DS, DT, w.d, ss.d),
                 FNORM_STATUS_BAD_PARAM_NULL_POINTER);
    CHECK(mentions(("'" + a + "'").c_str()));
  }
  CHECK_STATUS(bwd(X, DY, M, R, DX, DG, DB, nullptr, nullptr, nullptr, ss.d), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("w_desc"));
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, X, dy.d, DY, M, R, nullptr, nullptr, nullptr, ss.d, S, T,
                                   dx.d, DX, DG, nullptr, DS, DT, W, WB),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'dgamma'"));
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, X, dy.d, DY, M, R, w.d, G, B, nullptr, nullptr, nullptr,
                                   dx.d, DX, DG, DB, DS, nullptr, W, WB),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'dscale'"));
  // dx may be dy or x exactly; a partial overlap, or dgamma over dbeta, is refused.
  CHECK_STATUS(bwd(X, DY, M, R, b.at(32770), DG, DB, DS, DT, w.d, ss.d), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dx'") && mentions("'dy'"));
  CHECK_STATUS(bwd(X, DY, M, R, DX, DG, b.at(102400 + 258), DS, DT, w.d, ss.d), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dgamma'") && mentions("'dbeta'"));
  CHECK_STATUS(bwd(X, DY, M, R, DX, DG, DB, S, DT, w.d, ss.d), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'scale'") && mentions("'dscale'"));
  CHECK_STATUS(bwd(X, DY, M, R, DX, b.at(102401), DB, DS, DT, w.d, ss.d), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dgamma'"));
  // An output [N, C] whose elements overlap each other.
  Desc ssov;
  ssov.set(FNORM_DTYPE_FLOAT32, {2, 64}, {32, 1});
  CHECK_STATUS(bwd(X, DY, M, R, DX, DG, DB, DS, nullptr, w.d, ssov.d), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dscale'"));
  // dy / dx descriptors must match x.
  Desc bad;
  bad.set(FNORM_DTYPE_BFLOAT16, {2, 64, 8, 8}, {4096, 1, 512, 64});
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, X, bad.d, DY, M, R, w.d, G, B, ss.d, S, T, dx.d, DX, DG,
                                   DB, DS, DT, W, WB),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("dy_desc"));
  bad.set(FNORM_DTYPE_FLOAT16, {2, 64, 8, 8});
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, X, dy.d, DY, M, R, w.d, G, B, ss.d, S, T, bad.d, DX, DG,
                                   DB, DS, DT, W, WB),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("dx_desc"));
  CHECK(b.intact());
}

}  // namespace

int main() {
  test_desc();
  test_size_queries();
  test_fwd_refusals();
  test_bwd_refusals();
  return finish("test_groupnorm_api");
}
