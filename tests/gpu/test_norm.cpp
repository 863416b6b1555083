/* SPDX-License-Identifier: Apache-2.0 */
// GPU test of LayerNorm / RMSNorm forward and backward against the
// double-precision host reference. Fresh random inputs every run (seed
// printed; FNORM_TEST_SEED repeats one), outputs poisoned with NaN before each
// launch, every dtype, fp32 or x-dtype parameters, zero-centred gamma,
// residual add, awkward shapes, misaligned pointers, padded rows, in place,
// and > 2^31 elements; backward's dgamma/dbeta checked bit-identical across
// two runs.
// Black-box: links only the shared library (plus the test's device helpers).
//
// Tolerances (|y - ref| <= atol + rtol * |ref|, the reference computed in
// double from the inputs as stored in the tested dtype):
//   fp32: 5e-5 / 5e-5   (fp32 arithmetic; inputs have |mean| up to 4)
//   fp16: 1e-3 / 1e-3   (half an fp16 ulp is 4.9e-4 relative)
//   bf16: 8e-3 / 8e-3   (half a bf16 ulp is 3.9e-3 relative)
// plus, for every dtype, the fp32 conditioning term 8 * eps32 * max|x| * rstd
// * |scale| (x - mean is only as exact as max|x| allows in fp32);
// mean: 2e-5 * (mean |x| of the row); rstd: 1e-4 relative. NaN never passes.
// The residual sum s = x + r must match the host's fp32 add rounded to the
// dtype bit for bit (the device does the same two roundings).
// Backward, per element, with `mag` the sum of the magnitudes of dx's terms:
//   dx:     atol_T * rstd + rtol_T * |ref| + 2e-5 * mag   (atol/rtol as above)
//   dgamma, dbeta: rtol_W * |ref| + 1e-5 * (sum over rows of |term|) + 1e-6
//   (fp32 accumulation over up to 4096 rows, then rounding to W's dtype).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "check.hpp"
#include "dtype_io.hpp"
#include "fusednorm.h"
#include "gpu_util.hpp"
#include "halfbits.hpp"
#include "norm_tolerance.hpp"
#include "reference.hpp"

using namespace fnorm_test;

namespace {


enum Affine { kNone = 0, kGammaBeta = 1, kGammaOnly = 2, kBetaOnly = 3 };

struct Case {
  fnorm_dtype_t dtype;
  int64_t rows;
  int64_t cols;
  Affine affine;
  int x_offset = 0;  // elements: makes x misaligned
  int y_offset = 0;
  int64_t x_pad = 0;  // elements between rows of x (row stride = cols + pad)
  bool inplace = false;
  bool rank3 = false;  // describe x as [rows, 2, cols / 2] normalized over the last two dims
  bool rms = false;
  bool residual = false;
  bool param_f32 = false;
  bool zero_centered = false;
  std::string str() const {
    char b[320];
    std::snprintf(b, sizeof b, "%s %s rows=%lld cols=%lld affine=%d x_off=%d y_off=%d pad=%lld%s%s%s%s%s",
                  rms ? "rms" : "ln", dtype_str(dtype), static_cast<long long>(rows), static_cast<long long>(cols),
                  static_cast<int>(affine), x_offset, y_offset, static_cast<long long>(x_pad),
                  inplace ? " inplace" : "", rank3 ? " rank3" : "", residual ? " residual" : "",
                  param_f32 ? " w=fp32" : "", zero_centered ? " zc" : "");
    return b;
  }
};

struct Ctx {
  fnorm_handle_t handle = nullptr;
  fnorm_norm_desc_t norm = nullptr;
  uint64_t seed = 0;
  long cases = 0;
  long failures = 0;
};


struct RowResult {
  double worst = 0;  // max over elements of |err| / allowed
  int64_t worst_col = -1;
  double got = 0, ref = 0;
  bool stats_ok = true;
};

void set_norm(Ctx &ctx, bool rms, int32_t axis, double eps, bool zc) {
  fnorm_norm_desc_set(ctx.norm, rms ? FNORM_NORM_RMSNORM : FNORM_NORM_LAYERNORM, axis, eps);
  fnorm_norm_desc_set_flags(ctx.norm, zc ? FNORM_NORM_FLAG_ZERO_CENTERED_GAMMA : 0);
}

// Compares the listed rows (hx holds x, or s with a residual, row k at
// k * x_stride) of y/mean/rstd against the reference.
bool check_rows(const Case &c, const std::vector<int64_t> &rows, const unsigned char *hx,
                int64_t x_stride, const unsigned char *hy, int64_t y_stride,
                const unsigned char *hg, const unsigned char *hb, fnorm_dtype_t wdt,
                const float *hmean, const float *hrstd, double eps) {
  const Tolerance tol = norm_tolerance(c.dtype);
  std::vector<RowResult> res(rows.size());
  std::vector<double> g(c.cols), b(c.cols);
  for (int64_t j = 0; j < c.cols; ++j) {
    if (hg) g[j] = load_host(hg, wdt, j);
    if (hb) b[j] = load_host(hb, wdt, j);
  }
  parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t k) {
    const int64_t r = rows[k];
    std::vector<double> xr(c.cols), yr(c.cols);
    double abs_sum = 0;
    for (int64_t j = 0; j < c.cols; ++j) {
      xr[j] = load_host(hx, c.dtype, static_cast<int64_t>(k) * x_stride + j);
      abs_sum += std::fabs(xr[j]);
    }
    double mean, rstd, max_abs = 0;
    norm_row_reference(c.rms, xr.data(), c.cols, hg ? g.data() : nullptr, hb ? b.data() : nullptr,
                       c.zero_centered, eps, yr.data(), &mean, &rstd);
    for (int64_t j = 0; j < c.cols; ++j) max_abs = std::max(max_abs, std::fabs(xr[j]));
    // fp32 conditioning: x - mean carries an error of a few ulps of max|x|,
    // which rstd amplifies; it matters only for rows whose spread is tiny
    // next to their values (e.g. 3 values near 4 within 0.01).
    const double cond = 8 * 1.2e-7 * max_abs * rstd;
    RowResult &rr = res[k];
    for (int64_t j = 0; j < c.cols; ++j) {
      const double got = load_host(hy, c.dtype, static_cast<int64_t>(k) * y_stride + j);
      const double sc = hg ? std::fabs(scale_at(g.data(), c.zero_centered, j)) : 1.0;
      const double allowed = tol.atol + tol.rtol * std::fabs(yr[j]) + cond * sc;
      const double ratio = std::isfinite(got) ? std::fabs(got - yr[j]) / allowed : INFINITY;
      if (!(ratio <= rr.worst)) {
        rr.worst = ratio;
        rr.worst_col = j;
        rr.got = got;
        rr.ref = yr[j];
      }
    }
    if (hmean) rr.stats_ok = rr.stats_ok && within(hmean[k], mean, {2e-5 * (abs_sum / c.cols) + 1e-30, 0});
    if (hrstd) rr.stats_ok = rr.stats_ok && within(hrstd[k], rstd, {0, 1e-4});
    if (!rr.stats_ok)
      std::fprintf(stderr, "  row %lld: mean %.9g (ref %.9g) rstd %.9g (ref %.9g)\n", static_cast<long long>(r),
                   hmean ? hmean[k] : 0.f, mean, hrstd ? hrstd[k] : 0.f, rstd);
  });
  bool ok = true;
  for (size_t k = 0; k < rows.size(); ++k) {
    if (res[k].worst > 1.0 || !res[k].stats_ok) {
      if (ok)
        std::fprintf(stderr, "FAIL %s: row %lld col %lld got %.9g ref %.9g (%.2fx the tolerance)%s\n",
                     c.str().c_str(), static_cast<long long>(rows[k]), static_cast<long long>(res[k].worst_col),
                     res[k].got, res[k].ref, res[k].worst, res[k].stats_ok ? "" : ", stats wrong");
      ok = false;
    }
  }
  return ok;
}

void set_desc(fnorm_tensor_desc_t d, const Case &c, int64_t row_stride) {
  if (c.rank3) {
    const int64_t dims[3] = {c.rows, 2, c.cols / 2};
    const int64_t strides[3] = {row_stride, c.cols / 2, 1};
    CHECK_STATUS(fnorm_tensor_desc_set(d, c.dtype, 3, dims, strides), FNORM_STATUS_SUCCESS);
  } else {
    const int64_t dims[2] = {c.rows, c.cols};
    const int64_t strides[2] = {row_stride, 1};
    CHECK_STATUS(fnorm_tensor_desc_set(d, c.dtype, 2, dims, strides), FNORM_STATUS_SUCCESS);
  }
}

struct Descs {
  fnorm_tensor_desc_t x = nullptr, y = nullptr, w = nullptr;
  Descs() {
    fnorm_tensor_desc_create(&x);
    fnorm_tensor_desc_create(&y);
    fnorm_tensor_desc_create(&w);
  }
  ~Descs() {
    fnorm_tensor_desc_destroy(x);
    fnorm_tensor_desc_destroy(y);
    fnorm_tensor_desc_destroy(w);
  }
};

// s = x + r as the device computes it: fp32 add, rounded to the dtype.
void host_residual_sum(fnorm_dtype_t t, const unsigned char *x, const unsigned char *r, unsigned char *s,
                       int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(load_host(x, t, i)) + static_cast<float>(load_host(r, t, i));
    if (t == FNORM_DTYPE_FLOAT32) {
      std::memcpy(s + 4 * i, &v, 4);
    } else {
      const uint16_t h = t == FNORM_DTYPE_FLOAT16 ? float_to_half(v) : float_to_bf16(v);
      std::memcpy(s + 2 * i, &h, 2);
    }
  }
}

void run_case(Ctx &ctx, const Case &c) {
  ++ctx.cases;
  const size_t es = elem_size(c.dtype);
  const fnorm_dtype_t wdt = c.param_f32 ? FNORM_DTYPE_FLOAT32 : c.dtype;
  const size_t ws = elem_size(wdt);
  const int64_t xs = c.cols + c.x_pad;
  const int64_t ys = c.inplace ? xs : c.cols;
  const size_t x_elems = static_cast<size_t>((c.rows - 1) * xs + c.cols);
  const size_t y_elems = static_cast<size_t>((c.rows - 1) * ys + c.cols);
  DeviceBuffer xbuf((x_elems + 16) * es), ybuf((y_elems + 16) * es), wbuf(2 * (c.cols + 16) * ws);
  DeviceBuffer rbuf(c.residual ? (x_elems + 16) * es : 16), sbuf(c.residual ? (x_elems + 16) * es : 16);
  DeviceBuffer stats(2 * c.rows * sizeof(float));
  void *x = xbuf.at(c.x_offset * es);
  void *r = c.residual ? rbuf.at(c.x_offset * es) : nullptr;
  void *sum = c.residual ? sbuf.at(c.x_offset * es) : nullptr;
  void *y = c.inplace ? x : ybuf.at(c.y_offset * es);
  const bool has_gamma = c.affine == kGammaBeta || c.affine == kGammaOnly;
  const bool has_beta = c.affine == kGammaBeta || c.affine == kBetaOnly;
  void *gamma = has_gamma ? wbuf.at((c.param_f32 ? 0 : c.x_offset) * ws) : nullptr;
  void *beta = has_beta ? wbuf.at((c.cols + 8) * ws) : nullptr;
  float *mean = c.rms ? nullptr : static_cast<float *>(stats.p);
  float *rstd = static_cast<float *>(stats.p) + c.rows;
  const uint64_t seed = ctx.seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(ctx.cases));
  // Rows shifted by up to +-4 with spread 2: catches E[x^2]-E[x]^2 cancellation.
  CUDA_OK(fill_uniform(c.dtype, xbuf.p, static_cast<int64_t>(x_elems + 16), seed, -1.f, 1.f, xs, 4.f, nullptr));
  if (c.residual)
    CUDA_OK(fill_uniform(c.dtype, rbuf.p, static_cast<int64_t>(x_elems + 16), seed + 3, -1.f, 1.f, xs, 1.f, nullptr));
  // gamma near 1, or near 0 when zero-centred (the scale is then 1 + gamma).
  const float glo = c.zero_centered ? -0.5f : 0.5f;
  CUDA_OK(fill_uniform(wdt, wbuf.p, c.cols + 16, seed + 1, glo, glo + 1.f, c.cols + 16, 0.f, nullptr));
  CUDA_OK(fill_uniform(wdt, wbuf.at((c.cols + 8) * ws), c.cols + 8, seed + 2, -0.5f, 0.5f, c.cols + 8, 0.f, nullptr));
  if (!c.inplace) CUDA_OK(cudaMemset(ybuf.p, 0xFF, ybuf.bytes));  // NaN in every dtype
  CUDA_OK(cudaMemset(sbuf.p, 0xFF, sbuf.bytes));
  CUDA_OK(cudaMemset(stats.p, 0xFF, stats.bytes));
  // x (and r) as the reference sees them, before an in-place run overwrites x.
  std::vector<unsigned char> hx = to_host(x, x_elems * es);
  if (c.residual) {
    const std::vector<unsigned char> hr = to_host(r, x_elems * es);
    std::vector<unsigned char> hs(hx.size());
    host_residual_sum(c.dtype, hx.data(), hr.data(), hs.data(), static_cast<int64_t>(x_elems));
    hx.swap(hs);  // the reference normalizes s
  }

  Descs d;
  set_desc(d.x, c, xs);
  set_desc(d.y, c, ys);
  const int64_t wdims[1] = {c.cols};
  fnorm_tensor_desc_set(d.w, wdt, 1, wdims, nullptr);
  set_norm(ctx, c.rms, c.rank3 ? -2 : -1, 1e-5, c.zero_centered);
  size_t wsb = 1;
  CHECK_STATUS(fnorm_norm_fwd_workspace_size(ctx.handle, ctx.norm, d.x, d.y, &wsb), FNORM_STATUS_SUCCESS);
  CHECK_EQ(wsb, static_cast<size_t>(0));
  const fnorm_status_t st = fnorm_norm_fwd(ctx.handle, nullptr, ctx.norm, d.x, x, r, sum, d.w, gamma, beta, d.y,
                                           y, mean, rstd, nullptr, 0);
  CHECK_STATUS(st, FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  if (st != FNORM_STATUS_SUCCESS) {
    ++ctx.failures;
    std::fprintf(stderr, "FAIL %s: launch failed\n", c.str().c_str());
    return;
  }
  const std::vector<unsigned char> hy = to_host(y, y_elems * es);
  const std::vector<unsigned char> hg = gamma ? to_host(gamma, c.cols * ws) : std::vector<unsigned char>();
  const std::vector<unsigned char> hb = beta ? to_host(beta, c.cols * ws) : std::vector<unsigned char>();
  std::vector<float> hm(c.rows), hr(c.rows);
  if (mean) CUDA_OK(cudaMemcpy(hm.data(), mean, c.rows * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hr.data(), rstd, c.rows * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<int64_t> rows(c.rows);
  for (int64_t i = 0; i < c.rows; ++i) rows[i] = i;
  bool ok = check_rows(c, rows, hx.data(), xs, hy.data(), ys, gamma ? hg.data() : nullptr,
                       beta ? hb.data() : nullptr, wdt, mean ? hm.data() : nullptr, hr.data(), 1e-5);
  if (c.residual) {
    // s is written bit for bit as an unfused fp32 add rounded to the dtype.
    const std::vector<unsigned char> hs = to_host(sum, x_elems * es);
    bool same = true;
    for (int64_t row = 0; row < c.rows && same; ++row)
      same = std::memcmp(hs.data() + row * xs * es, hx.data() + row * xs * es, c.cols * es) == 0;
    if (!same) std::fprintf(stderr, "FAIL %s: residual sum differs from x + r\n", c.str().c_str());
    ok = ok && same;
  }
  // The bytes around y stay poisoned.
  if (!c.inplace && c.y_offset > 0) {
    const std::vector<unsigned char> before = to_host(ybuf.p, c.y_offset * es);
    bool untouched = std::all_of(before.begin(), before.end(), [](unsigned char v) { return v == 0xFF; });
    const std::vector<unsigned char> after = to_host(ybuf.at((c.y_offset + y_elems) * es), 8 * es);
    untouched = untouched && std::all_of(after.begin(), after.end(), [](unsigned char v) { return v == 0xFF; });
    CHECK(untouched);
  }
  CHECK(ok);
  if (!ok) ++ctx.failures;
}

struct BwdCase {
  fnorm_dtype_t dtype;
  int64_t rows;
  int64_t cols;
  bool rms;
  bool gamma;
  bool param_f32;
  bool zero_centered;
  bool dsum;
  int offset;  // elements added to every data pointer (misalignment)
  std::string str() const {
    char b[256];
    std::snprintf(b, sizeof b, "bwd %s %s rows=%lld cols=%lld%s%s%s%s off=%d", rms ? "rms" : "ln", dtype_str(dtype),
                  static_cast<long long>(rows), static_cast<long long>(cols), gamma ? " gamma" : "",
                  param_f32 ? " w=fp32" : "", zero_centered ? " zc" : "", dsum ? " dsum" : "", offset);
    return b;
  }
};

void run_bwd_case(Ctx &ctx, const BwdCase &c) {
  ++ctx.cases;
  const size_t es = elem_size(c.dtype);
  const fnorm_dtype_t wdt = c.param_f32 ? FNORM_DTYPE_FLOAT32 : c.dtype;
  const size_t wsz = elem_size(wdt);
  const int64_t n = c.rows * c.cols;
  DeviceBuffer xb((n + 16) * es), dyb((n + 16) * es), dsb((n + 16) * es), dxb((n + 16) * es);
  DeviceBuffer wb((c.cols + 16) * wsz), dgb((c.cols + 16) * wsz), dbb((c.cols + 16) * wsz);
  DeviceBuffer stats(2 * c.rows * sizeof(float));
  void *x = xb.at(c.offset * es), *dy = dyb.at(c.offset * es), *dx = dxb.at(c.offset * es);
  void *dsum = c.dsum ? dsb.at(c.offset * es) : nullptr;
  void *gamma = c.gamma ? wb.p : nullptr;
  const uint64_t seed = ctx.seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(ctx.cases));
  CUDA_OK(fill_uniform(c.dtype, xb.p, n + 16, seed, -1.f, 1.f, c.cols, 4.f, nullptr));
  CUDA_OK(fill_uniform(c.dtype, dyb.p, n + 16, seed + 1, -1.f, 1.f, c.cols, 0.5f, nullptr));
  CUDA_OK(fill_uniform(c.dtype, dsb.p, n + 16, seed + 2, -1.f, 1.f, c.cols, 0.f, nullptr));
  const float glo = c.zero_centered ? -0.5f : 0.5f;
  CUDA_OK(fill_uniform(wdt, wb.p, c.cols + 16, seed + 3, glo, glo + 1.f, c.cols + 16, 0.f, nullptr));
  CUDA_OK(cudaMemset(dxb.p, 0xFF, dxb.bytes));
  CUDA_OK(cudaMemset(dgb.p, 0xFF, dgb.bytes));
  CUDA_OK(cudaMemset(dbb.p, 0xFF, dbb.bytes));
  const std::vector<unsigned char> hx = to_host(x, n * es), hdy = to_host(dy, n * es);
  const std::vector<unsigned char> hds = c.dsum ? to_host(dsum, n * es) : std::vector<unsigned char>();
  const std::vector<unsigned char> hw = to_host(wb.p, c.cols * wsz);
  std::vector<double> g(c.cols);
  for (int64_t j = 0; j < c.cols; ++j) g[j] = load_host(hw.data(), wdt, j);
  // Forward statistics in double, stored as fp32 as a forward would save them;
  // the reference then uses exactly the fp32 values the kernel reads.
  std::vector<float> hmean(c.rows), hrstd(c.rows);
  parallel_for(c.rows, [&](int64_t r) {
    std::vector<double> xr(c.cols), yr(c.cols);
    for (int64_t j = 0; j < c.cols; ++j) xr[j] = load_host(hx.data(), c.dtype, r * c.cols + j);
    double m, s;
    norm_row_reference(c.rms, xr.data(), c.cols, nullptr, nullptr, false, 1e-5, yr.data(), &m, &s);
    hmean[r] = static_cast<float>(m);
    hrstd[r] = static_cast<float>(s);
  });
  float *mean = static_cast<float *>(stats.p), *rstd = mean + c.rows;
  CUDA_OK(cudaMemcpy(mean, hmean.data(), c.rows * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(rstd, hrstd.data(), c.rows * 4, cudaMemcpyHostToDevice));

  Descs d;
  const int64_t dims[2] = {c.rows, c.cols};
  fnorm_tensor_desc_set(d.x, c.dtype, 2, dims, nullptr);
  fnorm_tensor_desc_set(d.w, wdt, 1, &c.cols, nullptr);
  set_norm(ctx, c.rms, -1, 1e-5, c.zero_centered);
  size_t ws_bytes = 0;
  CHECK_STATUS(fnorm_norm_bwd_workspace_size(ctx.handle, ctx.norm, d.x, d.w, &ws_bytes), FNORM_STATUS_SUCCESS);
  DeviceBuffer wsbuf(ws_bytes + 16);
  // dgamma needs partial sums: no workspace is refused before any work. (The
  // query answers for the worst alignment, so a launch may need less than it.)
  CHECK(ws_bytes > 0);
  CHECK_STATUS(fnorm_norm_bwd(ctx.handle, nullptr, ctx.norm, d.x, x, d.x, dy, c.rms ? nullptr : mean, rstd, d.w,
                              gamma, dsum, d.x, dx, dgb.p, c.rms ? nullptr : dbb.p, nullptr, 0),
               FNORM_STATUS_INSUFFICIENT_WORKSPACE);
  std::vector<unsigned char> first_dg, first_db;
  bool ok = true;
  for (int run = 0; run < 2; ++run) {
    CUDA_OK(cudaMemset(wsbuf.p, 0xFF, wsbuf.bytes));  // stale partials must not matter
    const fnorm_status_t st =
        fnorm_norm_bwd(ctx.handle, nullptr, ctx.norm, d.x, x, d.x, dy, c.rms ? nullptr : mean, rstd, d.w, gamma,
                       dsum, d.x, dx, dgb.p, c.rms ? nullptr : dbb.p, wsbuf.p, ws_bytes);
    CHECK_STATUS(st, FNORM_STATUS_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    if (st != FNORM_STATUS_SUCCESS) {
      ++ctx.failures;
      return;
    }
    const std::vector<unsigned char> dgv = to_host(dgb.p, c.cols * wsz), dbv = to_host(dbb.p, c.cols * wsz);
    if (run == 0) {
      first_dg = dgv;
      first_db = dbv;
    } else if (dgv != first_dg || (!c.rms && dbv != first_db)) {
      std::fprintf(stderr, "FAIL %s: dgamma/dbeta differ between two runs\n", c.str().c_str());
      ok = false;
    }
  }
  const std::vector<unsigned char> hdx = to_host(dx, n * es);
  // Reference: dx per row; dgamma/dbeta summed over rows with their |terms|.
  std::vector<double> dg_ref(c.cols, 0.0), db_ref(c.cols, 0.0), dg_abs(c.cols, 0.0), db_abs(c.cols, 0.0);
  std::vector<double> worst(c.rows, 0.0);
  std::vector<std::vector<double>> dg_parts(std::thread::hardware_concurrency() + 1);
  const Tolerance tol = norm_tolerance(c.dtype);
  std::mutex mu;
  parallel_for(c.rows, [&](int64_t r) {
    std::vector<double> xr(c.cols), dyr(c.cols), dsr(c.cols), dxr(c.cols), mag(c.cols);
    std::vector<double> dgr(c.cols, 0.0), dbr(c.cols, 0.0);
    for (int64_t j = 0; j < c.cols; ++j) {
      xr[j] = load_host(hx.data(), c.dtype, r * c.cols + j);
      dyr[j] = load_host(hdy.data(), c.dtype, r * c.cols + j);
      if (c.dsum) dsr[j] = load_host(hds.data(), c.dtype, r * c.cols + j);
    }
    norm_row_backward_reference(c.rms, xr.data(), dyr.data(), c.cols, hmean[r], hrstd[r],
                                c.gamma ? g.data() : nullptr, c.zero_centered, c.dsum ? dsr.data() : nullptr,
                                dxr.data(), mag.data(), dgr.data(), dbr.data());
    double w = 0;
    for (int64_t j = 0; j < c.cols; ++j) {
      const double got = load_host(hdx.data(), c.dtype, r * c.cols + j);
      const double allowed = tol.atol * hrstd[r] + tol.rtol * std::fabs(dxr[j]) + 2e-5 * mag[j];
      const double ratio = std::isfinite(got) ? std::fabs(got - dxr[j]) / allowed : INFINITY;
      w = std::max(w, ratio);
      if (!(ratio <= 1.0) && w == ratio && r < 3)
        std::fprintf(stderr, "  %s: dx[%lld][%lld] = %.9g, ref %.9g\n", c.str().c_str(), static_cast<long long>(r),
                     static_cast<long long>(j), got, dxr[j]);
    }
    worst[r] = w;
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t j = 0; j < c.cols; ++j) {
      dg_ref[j] += dgr[j];
      db_ref[j] += dbr[j];
      dg_abs[j] += std::fabs(dgr[j]);
      db_abs[j] += std::fabs(dbr[j]);
    }
  });
  const double worst_dx = *std::max_element(worst.begin(), worst.end());
  if (!(worst_dx <= 1.0)) {
    std::fprintf(stderr, "FAIL %s: dx off by %.2fx the tolerance\n", c.str().c_str(), worst_dx);
    ok = false;
  }
  const Tolerance wtol = norm_tolerance(wdt);
  double worst_w = 0;
  for (int64_t j = 0; j < c.cols; ++j) {
    const double gdg = load_host(first_dg.data(), wdt, j);
    const double a1 = wtol.rtol * std::fabs(dg_ref[j]) + 1e-5 * dg_abs[j] + 1e-6;
    worst_w = std::max(worst_w, std::isfinite(gdg) ? std::fabs(gdg - dg_ref[j]) / a1 : INFINITY);
    if (!c.rms) {
      const double gdb = load_host(first_db.data(), wdt, j);
      const double a2 = wtol.rtol * std::fabs(db_ref[j]) + 1e-5 * db_abs[j] + 1e-6;
      worst_w = std::max(worst_w, std::isfinite(gdb) ? std::fabs(gdb - db_ref[j]) / a2 : INFINITY);
    }
  }
  if (!(worst_w <= 1.0)) {
    std::fprintf(stderr, "FAIL %s: dgamma/dbeta off by %.2fx the tolerance\n", c.str().c_str(), worst_w);
    ok = false;
  }
  CHECK(ok);
  if (!ok) ++ctx.failures;
}

// > 2^31 elements: every element of y is checked for being written (no NaN
// poison left), and rows at the start, around element 2^31 and at the end are
// checked against the reference.
void run_huge_case(Ctx &ctx, fnorm_dtype_t dtype, int64_t cols) {
  const int64_t rows = (int64_t{1} << 31) / cols + 3;
  Case c{dtype, rows, cols, kGammaBeta};
  ++ctx.cases;
  const size_t es = elem_size(dtype);
  const int64_t n = rows * cols;
  size_t free_b = 0, total_b = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  if (2 * n * es + (64u << 20) > free_b) {
    std::printf("SKIP %s: needs %.1f GB of device memory, %.1f GB free\n", c.str().c_str(),
                2.0 * n * es / 1e9, free_b / 1e9);
    ++counters().skipped;
    return;
  }
  DeviceBuffer xbuf(n * es), ybuf(n * es), wbuf(2 * cols * es), stats(2 * rows * sizeof(float));
  CUDA_OK(fill_uniform(dtype, xbuf.p, n, ctx.seed + 7, -1.f, 1.f, cols, 4.f, nullptr));
  CUDA_OK(fill_uniform(dtype, wbuf.p, 2 * cols, ctx.seed + 8, 0.5f, 1.5f, 2 * cols, 0.f, nullptr));
  CUDA_OK(cudaMemset(ybuf.p, 0xFF, ybuf.bytes));
  CUDA_OK(cudaMemset(stats.p, 0xFF, stats.bytes));
  Descs d;
  const int64_t dims[2] = {rows, cols};
  fnorm_tensor_desc_set(d.x, dtype, 2, dims, nullptr);
  fnorm_tensor_desc_set(d.w, dtype, 1, &cols, nullptr);
  set_norm(ctx, false, -1, 1e-5, false);
  float *mean = static_cast<float *>(stats.p), *rstd = mean + rows;
  CHECK_STATUS(fnorm_norm_fwd(ctx.handle, nullptr, ctx.norm, d.x, xbuf.p, nullptr, nullptr, d.w, wbuf.p,
                              wbuf.at(cols * es), d.x, ybuf.p, mean, rstd, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  int64_t bad = -1;
  CUDA_OK(count_nonfinite(dtype, ybuf.p, n, &bad));
  CHECK_EQ(bad, int64_t{0});
  int64_t bad_stats = -1;
  CUDA_OK(count_nonfinite(FNORM_DTYPE_FLOAT32, stats.p, 2 * rows, &bad_stats));
  CHECK_EQ(bad_stats, int64_t{0});
  const int64_t mid = (int64_t{1} << 31) / cols;
  std::vector<int64_t> sample = {0, 1, mid - 1, mid, mid + 1, rows - 1};
  std::vector<unsigned char> hx(sample.size() * cols * es), hy(sample.size() * cols * es);
  std::vector<float> hm(sample.size()), hr(sample.size());
  for (size_t k = 0; k < sample.size(); ++k) {
    CUDA_OK(cudaMemcpy(hx.data() + k * cols * es, xbuf.at(sample[k] * cols * es), cols * es, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hy.data() + k * cols * es, ybuf.at(sample[k] * cols * es), cols * es, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&hm[k], mean + sample[k], 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&hr[k], rstd + sample[k], 4, cudaMemcpyDeviceToHost));
  }
  const std::vector<unsigned char> hw = to_host(wbuf.p, 2 * cols * es);
  const bool ok = check_rows(c, sample, hx.data(), cols, hy.data(), cols, hw.data(), hw.data() + cols * es, dtype,
                             hm.data(), hr.data(), 1e-5);
  CHECK(ok);
  if (!ok || bad != 0) ++ctx.failures;
  std::printf("huge %s: %lld elements, %lld non-finite outputs, sampled rows %s\n", c.str().c_str(),
              static_cast<long long>(n), static_cast<long long>(bad), ok ? "match" : "MISMATCH");
}

// Two handles in one process share the kernels: a second handle that asks
// a kernel for less dynamic shared memory must not lower the limit under the
// first handle's launches (the first call on each handle opens it; the
// third call is the first handle's again, after the second's).
void run_two_handles(Ctx &ctx, int sm_count) {
  fnorm_handle_t first = ctx.handle, second = nullptr;
  CHECK_STATUS(fnorm_create(&second), FNORM_STATUS_SUCCESS);
  if (second == nullptr) {
    ++ctx.failures;
    return;
  }
  const long before = ctx.failures;
  // Forward, shared-memory tier: one kernel, a row of 128 KiB then 80 KiB.
  for (int64_t cols : {65536, 40000, 65536}) {
    ctx.handle = cols == 40000 ? second : first;
    run_case(ctx, Case{FNORM_DTYPE_FLOAT16, 17, cols, kGammaBeta});
  }
  // Backward, one block per row (many rows), 4 packs per thread: a ring of
  // 512 threads at 16384 columns, 384 at 12288.
  const int64_t rows = 8 * int64_t{sm_count};
  for (int64_t cols : {16384, 12288, 16384}) {
    ctx.handle = cols == 12288 ? second : first;
    run_bwd_case(ctx, {FNORM_DTYPE_FLOAT16, rows, cols, false, true, false, false, false, 0});
  }
  ctx.handle = first;
  CHECK_STATUS(fnorm_destroy(second), FNORM_STATUS_SUCCESS);
  std::printf("two handles: %s\n", ctx.failures == before ? "all cases match" : "FAILURES");
}

}  // namespace

int main() {
  if (skip_without_gpu()) return 77;
  Ctx ctx;
  ctx.seed = test_seed();
  CHECK_STATUS(fnorm_create(&ctx.handle), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_desc_create(&ctx.norm), FNORM_STATUS_SUCCESS);
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  // FNORM_TEST_QUICK=1: a reduced list (every tier and edge kind, few rows)
  // for slow tools such as compute-sanitizer.
  const bool quick = std::getenv("FNORM_TEST_QUICK") != nullptr;
  const fnorm_dtype_t dtypes[] = {FNORM_DTYPE_FLOAT32, FNORM_DTYPE_FLOAT16, FNORM_DTYPE_BFLOAT16};
  const std::vector<int64_t> cols_list =
      quick ? std::vector<int64_t>{1, 3, 33, 1000, 5000, 12288, 32768}
            : std::vector<int64_t>{1, 3, 31, 32, 33, 127, 768, 1000, 1024, 1536, 4096, 5000, 32768};
  const std::vector<int64_t> rows_list = quick ? std::vector<int64_t>{1, 7} : std::vector<int64_t>{1, 7, 4096};
  const std::vector<int64_t> big_cols = quick ? std::vector<int64_t>{12288, 100000}
                                              : std::vector<int64_t>{12288, 24576, 40000, 65536, 100000, 131072, 262144};
  const std::vector<int64_t> bwd_cols = quick ? std::vector<int64_t>{1, 33, 1000, 5000, 12288}
                                              : std::vector<int64_t>{1, 3, 32, 33, 127, 768, 1000, 1024, 4096, 5000, 8192, 12288, 32768};
  const std::vector<int64_t> bwd_rows = quick ? std::vector<int64_t>{1, 7} : std::vector<int64_t>{1, 7, 1024};
  for (fnorm_dtype_t dt : dtypes) {
    const long before = ctx.failures;
    for (bool rms : {false, true}) {
      const Affine full = rms ? kGammaOnly : kGammaBeta;
      for (int64_t cols : cols_list) {
        for (int64_t rows : rows_list) {
          for (Affine a : {kNone, full}) {
            Case c{dt, rows, cols, a};
            c.rms = rms;
            run_case(ctx, c);
            c.x_offset = c.y_offset = 1;  // x, y, gamma misaligned by one element
            run_case(ctx, c);
          }
          Case g{dt, rows, cols, kGammaOnly};
          g.rms = rms;
          g.y_offset = 3;
          run_case(ctx, g);
          Case r{dt, rows, cols, full};  // add & norm, fp32 parameters, zero-centred gamma
          r.rms = rms;
          r.residual = true;
          r.param_f32 = dt != FNORM_DTYPE_FLOAT32;
          r.zero_centered = true;
          r.x_offset = rows == 7 ? 2 : 0;
          run_case(ctx, r);
          if (!rms) {
            Case b{dt, rows, cols, kBetaOnly};
            b.x_offset = 2;
            run_case(ctx, b);
          }
        }
      }
      // Padded rows (a slice of a wider tensor), in place, rank 3 over two
      // dims, and the large-row tiers (block registers, smem, uncached).
      for (int64_t cols : quick ? std::vector<int64_t>{64, 4096} : std::vector<int64_t>{64, 1000, 4096, 32768}) {
        Case c{dt, quick ? 9 : 513, cols, full};
        c.rms = rms;
        c.x_pad = 8;
        run_case(ctx, c);
        c.x_pad = 3;
        run_case(ctx, c);
        c.x_pad = 0;
        c.inplace = true;
        run_case(ctx, c);
        c.inplace = false;
        c.rank3 = true;
        c.rows = 65;
        run_case(ctx, c);
      }
      for (int64_t cols : big_cols) {
        Case c{dt, 17, cols, full};
        c.rms = rms;
        run_case(ctx, c);
        c.residual = true;
        run_case(ctx, c);
        // Misaligned: pack 1, so the row goes to shared memory sooner (fp32
        // 12288 is exactly 48 KiB: the case that needs the opt-in).
        c.residual = false;
        c.x_offset = c.y_offset = 1;
        run_case(ctx, c);
      }
    }
    // Backward: every tier (rows, warp, block registers, column tiles), both norms.
    for (bool rms : {false, true}) {
      for (int64_t cols : bwd_cols) {
        for (int64_t rows : bwd_rows) {
          if (rows * cols > (int64_t{1} << 24)) continue;
          run_bwd_case(ctx, {dt, rows, cols, rms, true, false, false, false, 0});
          run_bwd_case(ctx, {dt, rows, cols, rms, false, false, false, true, 1});
          run_bwd_case(ctx, {dt, rows, cols, rms, true, dt != FNORM_DTYPE_FLOAT32, true, true, 0});
        }
      }
      if (!quick) run_bwd_case(ctx, {dt, 4096, 1024, rms, true, false, false, false, 0});
      // Rows tier: several row groups per block with the last step part
      // empty (4099 rows in groups of 4 at 2048 columns), one group of 1024
      // threads striding over many rows (1029 x 8192).
      if (!quick) {
        run_bwd_case(ctx, {dt, 4099, 2048, rms, true, dt != FNORM_DTYPE_FLOAT32, true, true, 0});
        run_bwd_case(ctx, {dt, 1029, 8192, rms, true, false, false, false, 0});
      }
      run_bwd_case(ctx, {dt, 3, 100000, rms, true, false, false, true, 0});
    }
    std::printf("%s: %s\n", dtype_str(dt), ctx.failures == before ? "all cases match" : "FAILURES");
  }
  run_two_handles(ctx, prop.multiProcessorCount);
  // Backward with many rows (8 per SM) longer than a cluster of two blocks
  // holds: the column tiles.
  if (!quick) run_bwd_case(ctx, {FNORM_DTYPE_BFLOAT16, 8 * int64_t{prop.multiProcessorCount}, 65536, false, true, false, false, true, 0});
  if (!quick) {
    run_huge_case(ctx, FNORM_DTYPE_FLOAT16, 1024);   // register tier
    run_huge_case(ctx, FNORM_DTYPE_FLOAT16, 32768);  // block-register tier
  }
  std::printf("%ld cases, %ld failed\n", ctx.cases, ctx.failures);
  fnorm_norm_desc_destroy(ctx.norm);
  fnorm_destroy(ctx.handle);
  return finish("gpu norm");
}
