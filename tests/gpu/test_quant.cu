/* SPDX-License-Identifier: Apache-2.0 */
// GPU test of the quantized forward (fnorm_norm_fwd_quant).
//
// 1. The conversion over every fp32 input (2^32 values): the device's
//    conversion as the kernels run it (the hardware's saturating cvt on
//    sm_89+, two values per instruction) against the portable one and the
//    float64 reference (tests/common/quant_reference.hpp), for E4M3, E5M2
//    and INT8.
// 2. The launch against the float64 reference of the norm quantized with the
//    header's rules, every dtype, both modes, every output format and
//    scaling, the shape classes of the suite (one row, odd columns, padded
//    rows, misaligned pointers, residual add with the sum in place, the
//    shared-memory and uncached tiers, > 2^31 elements), outputs poisoned
//    first. A code must equal the reference's wherever the reference value
//    is farther from a rounding boundary than fp32 arithmetic can move it
//    (the tolerance of test_norm.cpp); within that band either neighbour
//    passes (counted). Per-token scales and amax within the same tolerance.
//    For fp32 input the check is exact: the library's own fp32 forward (same
//    plan) gives v, and codes, scales and amax must be the rules applied to
//    those very values, bit for bit.
// 3. All-zero and NaN rows; a CUDA graph replaying the launch (the amax
//    reset is captured with it).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "core/quant.hpp"
#include "dtype_io.hpp"
#include "fusednorm.h"
#include "gpu_util.hpp"
#include "quant_reference.hpp"
#include "reference.hpp"

using namespace fnorm_test;

namespace {

// ---- 1. every fp32 input ------------------------------------------------------

struct SweepResult {
  unsigned long long bad[3];
  uint32_t first[3];
};

__global__ void sweep_kernel(uint64_t begin, uint64_t count, SweepResult *res) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const uint32_t u = static_cast<uint32_t>(begin + i);
    const float f = __uint_as_float(u);
    const float g = __uint_as_float(u ^ 0x80000000u);  // -f in the pair's high half
    bool ok[3];
    {
      const uint16_t hw = fnorm::quant_fp8x2<3>(f, g);
      const uint8_t sw = fnorm::e4m3_from_float(f), swg = fnorm::e4m3_from_float(g);
      ok[0] = (hw & 0xff) == sw && (hw >> 8) == swg && fp8_matches(sw, static_cast<double>(f), kE4M3) &&
              (f == f || sw == 0x7f);
    }
    {
      const uint16_t hw = fnorm::quant_fp8x2<2>(f, g);
      const uint8_t sw = fnorm::e5m2_from_float(f), swg = fnorm::e5m2_from_float(g);
      ok[1] = (hw & 0xff) == sw && (hw >> 8) == swg && fp8_matches(sw, static_cast<double>(f), kE5M2) &&
              (f == f || sw == 0x7f);
    }
    ok[2] = fnorm::int8_from_float(f) == int8_round(static_cast<double>(f));
    for (int k = 0; k < 3; ++k) {
      if (!ok[k]) {
        if (atomicAdd(&res->bad[k], 1ull) == 0) res->first[k] = u;
      }
    }
  }
}

void test_every_fp32_input() {
  SweepResult *d = nullptr;
  CUDA_OK(cudaMalloc(&d, sizeof(SweepResult)));
  CUDA_OK(cudaMemset(d, 0, sizeof(SweepResult)));
  const uint64_t total = uint64_t{1} << 32, chunk = uint64_t{1} << 30;
  for (uint64_t b = 0; b < total; b += chunk) sweep_kernel<<<132 * 16, 256>>>(b, chunk, d);
  CUDA_OK(cudaGetLastError());
  SweepResult h;
  CUDA_OK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  cudaFree(d);
  const char *names[3] = {"e4m3", "e5m2", "int8"};
  for (int k = 0; k < 3; ++k) {
    std::printf("every fp32 input, %s: %llu mismatches (hardware conversion, portable one, float64 reference)\n",
                names[k], h.bad[k]);
    if (h.bad[k]) std::fprintf(stderr, "  first: bits %08x\n", h.first[k]);
    CHECK_EQ(h.bad[k], 0ull);
  }
}

// ---- 2. the launch ---------------------------------------------------------------

enum class Out { E4M3, E5M2, Int8 };
const char *out_str(Out o) { return o == Out::E4M3 ? "e4m3" : o == Out::E5M2 ? "e5m2" : "int8"; }
fnorm_dtype_t out_dtype(Out o) {
  return o == Out::E4M3 ? FNORM_DTYPE_FLOAT8_E4M3 : o == Out::E5M2 ? FNORM_DTYPE_FLOAT8_E5M2 : FNORM_DTYPE_INT8;
}
double out_max(Out o) { return o == Out::E4M3 ? 448.0 : o == Out::E5M2 ? 57344.0 : 127.0; }
fnorm::QuantKind out_kind(Out o) {
  return o == Out::E4M3 ? fnorm::QuantKind::E4M3 : o == Out::E5M2 ? fnorm::QuantKind::E5M2 : fnorm::QuantKind::Int8;
}

struct QCase {
  fnorm_dtype_t dtype;
  int64_t rows, cols;
  bool rms;
  Out out;
  bool per_token;
  bool residual = false;
  bool sum_in_place = false;  // sum == residual
  int x_off = 0;              // elements: misaligned x (and residual, sum)
  int y_off = 0;              // bytes: misaligned y
  int64_t x_pad = 0, y_pad = 0;
  bool param_f32 = false;
  bool zero_row = false;  // row 0 of s all zero (RMSNorm: v = 0 there)
  bool nan_row = false;   // a NaN in row rows / 2
  bool amax = true;
  std::string str() const {
    char b[320];
    std::snprintf(b, sizeof b, "%s %s -> %s %s rows=%lld cols=%lld x_off=%d y_off=%d pad=%lld/%lld%s%s%s%s%s",
                  rms ? "rms" : "ln", dtype_str(dtype), out_str(out), per_token ? "per-token" : "static",
                  static_cast<long long>(rows), static_cast<long long>(cols), x_off, y_off,
                  static_cast<long long>(x_pad), static_cast<long long>(y_pad), residual ? " residual" : "",
                  sum_in_place ? " sum=residual" : "", param_f32 ? " w=fp32" : "", zero_row ? " zero-row" : "",
                  nan_row ? " nan-row" : "");
    return b;
  }
};

struct Ctx {
  fnorm_handle_t handle = nullptr;
  fnorm_norm_desc_t norm = nullptr;
  uint64_t seed = 0;
  long cases = 0, failures = 0, band = 0, band_other = 0, codes = 0;
};

struct Descs {
  fnorm_tensor_desc_t x = nullptr, y = nullptr, w = nullptr, y32 = nullptr;
  Descs() {
    fnorm_tensor_desc_create(&x);
    fnorm_tensor_desc_create(&y);
    fnorm_tensor_desc_create(&w);
    fnorm_tensor_desc_create(&y32);
  }
  ~Descs() {
    fnorm_tensor_desc_destroy(x);
    fnorm_tensor_desc_destroy(y);
    fnorm_tensor_desc_destroy(w);
    fnorm_tensor_desc_destroy(y32);
  }
};

void set2(fnorm_tensor_desc_t d, fnorm_dtype_t t, int64_t rows, int64_t cols, int64_t stride) {
  const int64_t dims[2] = {rows, cols}, strides[2] = {stride, 1};
  CHECK_STATUS(fnorm_tensor_desc_set(d, t, 2, dims, strides), FNORM_STATUS_SUCCESS);
}

// s = x + r as the device computes it: fp32 add, rounded to the dtype.
void host_residual_sum(fnorm_dtype_t t, const unsigned char *x, const unsigned char *r, unsigned char *s,
                       int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    store_host(s, t, i, static_cast<float>(load_host(x, t, i)) + static_cast<float>(load_host(r, t, i)));
}

// The code the rules give for t (double): FP8 code value or INT8 integer, as
// a double (NaN for NaN codes), for comparison.
double rule_value(Out o, double t) {
  if (o == Out::Int8) return int8_round(t);
  return fp8_round(t, o == Out::E4M3 ? kE4M3 : kE5M2);
}
double code_value(Out o, uint8_t c) {
  if (o == Out::Int8) return static_cast<int8_t>(c);
  return fp8_value(c, o == Out::E4M3 ? kE4M3 : kE5M2);
}
bool same_value(double a, double b) { return (a != a && b != b) || a == b; }

// v is fp32 arithmetic whatever x's dtype: test_norm.cpp's fp32 tolerance.
Tolerance tol_for_fp32() { return {5e-5, 5e-5}; }

void run_quant_case(Ctx &ctx, const QCase &c) {
  ++ctx.cases;
  const size_t es = elem_size(c.dtype);
  const fnorm_dtype_t wdt = c.param_f32 ? FNORM_DTYPE_FLOAT32 : c.dtype;
  const size_t wsz = elem_size(wdt);
  const int64_t xs = c.cols + c.x_pad, ys = c.cols + c.y_pad;
  const size_t x_elems = static_cast<size_t>((c.rows - 1) * xs + c.cols);
  const size_t y_elems = static_cast<size_t>((c.rows - 1) * ys + c.cols);
  const double M = out_max(c.out);
  DeviceBuffer xbuf((x_elems + 16) * es), rbuf((x_elems + 16) * es), sbuf((x_elems + 16) * es);
  DeviceBuffer ybuf(y_elems + 64), wbuf(2 * (c.cols + 16) * wsz), y32buf((y_elems + 16) * 4);
  DeviceBuffer scalebuf((c.rows + 4) * 4), amaxbuf(16), stats(2 * c.rows * 4);
  void *x = xbuf.at(c.x_off * es);
  void *r = c.residual ? rbuf.at(c.x_off * es) : nullptr;
  void *sum = c.residual ? (c.sum_in_place ? r : sbuf.at(c.x_off * es)) : nullptr;
  void *y = ybuf.at(16 + c.y_off);
  void *gamma = wbuf.at(0);
  void *beta = c.rms ? nullptr : wbuf.at((c.cols + 8) * wsz);
  float *scale = static_cast<float *>(scalebuf.p);
  float *amax = c.amax ? static_cast<float *>(amaxbuf.p) : nullptr;
  float *mean = c.rms ? nullptr : static_cast<float *>(stats.p);
  float *rstd = static_cast<float *>(stats.p) + c.rows;
  const uint64_t seed = ctx.seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(ctx.cases));
  CUDA_OK(fill_uniform(c.dtype, xbuf.p, static_cast<int64_t>(x_elems + 16), seed, -1.f, 1.f, xs, 4.f, nullptr));
  if (c.residual)
    CUDA_OK(fill_uniform(c.dtype, rbuf.p, static_cast<int64_t>(x_elems + 16), seed + 3, -1.f, 1.f, xs, 1.f, nullptr));
  CUDA_OK(fill_uniform(wdt, wbuf.p, c.cols + 16, seed + 1, 0.25f, 1.75f, c.cols + 16, 0.f, nullptr));
  CUDA_OK(fill_uniform(wdt, wbuf.at((c.cols + 8) * wsz), c.cols + 8, seed + 2, -0.5f, 0.5f, c.cols + 8, 0.f, nullptr));
  if (c.zero_row) {
    CUDA_OK(cudaMemset(x, 0, c.cols * es));
    if (c.residual) CUDA_OK(cudaMemset(r, 0, c.cols * es));
  }
  if (c.nan_row) {
    std::vector<unsigned char> nan(es, 0xff);  // NaN in every dtype
    CUDA_OK(cudaMemcpy(static_cast<unsigned char *>(x) + ((c.rows / 2) * xs + 3) * es, nan.data(), es,
                       cudaMemcpyHostToDevice));
  }
  // A static scale that saturates the largest magnitudes (|v| reaches about 8).
  const float static_scale = static_cast<float>(5.0 / M);
  if (!c.per_token) CUDA_OK(cudaMemcpy(scale, &static_scale, 4, cudaMemcpyHostToDevice));
  else CUDA_OK(cudaMemset(scalebuf.p, 0xff, scalebuf.bytes));
  CUDA_OK(cudaMemset(ybuf.p, 0xff, ybuf.bytes));
  CUDA_OK(cudaMemset(amaxbuf.p, 0xff, amaxbuf.bytes));
  CUDA_OK(cudaMemset(stats.p, 0xff, stats.bytes));
  if (!c.sum_in_place) CUDA_OK(cudaMemset(sbuf.p, 0xff, sbuf.bytes));

  // s as the reference sees it, before an in-place sum overwrites r.
  std::vector<unsigned char> hs(x_elems * es);
  CUDA_OK(cudaMemcpy(hs.data(), x, hs.size(), cudaMemcpyDeviceToHost));
  if (c.residual) {
    std::vector<unsigned char> hr(x_elems * es), tmp(x_elems * es);
    CUDA_OK(cudaMemcpy(hr.data(), r, hr.size(), cudaMemcpyDeviceToHost));
    host_residual_sum(c.dtype, hs.data(), hr.data(), tmp.data(), static_cast<int64_t>(x_elems));
    hs.swap(tmp);
  }
  // fp32: the library's own fp32 forward first (before an in-place sum
  // changes r), on the same plan: y32 at the same alignment class as y.
  const bool exact = c.dtype == FNORM_DTYPE_FLOAT32;
  float *y32 = static_cast<float *>(y32buf.p) + c.y_off;
  Descs d;
  set2(d.x, c.dtype, c.rows, c.cols, xs);
  set2(d.y, out_dtype(c.out), c.rows, c.cols, ys);
  set2(d.y32, FNORM_DTYPE_FLOAT32, c.rows, c.cols, ys);
  const int64_t wdims[1] = {c.cols};
  fnorm_tensor_desc_set(d.w, wdt, 1, wdims, nullptr);
  fnorm_norm_desc_set(ctx.norm, c.rms ? FNORM_NORM_RMSNORM : FNORM_NORM_LAYERNORM, -1, 1e-5);
  if (exact) {
    CHECK_STATUS(fnorm_norm_fwd(ctx.handle, nullptr, ctx.norm, d.x, x, r, nullptr, d.w, gamma, beta, d.y32, y32,
                                nullptr, nullptr, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
  }
  const fnorm_quant_scaling_t scaling = c.per_token ? FNORM_QUANT_SCALING_PER_TOKEN : FNORM_QUANT_SCALING_PER_TENSOR;
  size_t wsb = 7, sb = 0;
  CHECK_STATUS(fnorm_norm_fwd_quant_workspace_size(ctx.handle, ctx.norm, d.x, d.y, scaling, &wsb),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_fwd_quant_scale_size(ctx.handle, ctx.norm, d.x, scaling, &sb), FNORM_STATUS_SUCCESS);
  CHECK_EQ(sb, static_cast<size_t>(c.per_token ? 4 * c.rows : 4));
  const fnorm_status_t st = fnorm_norm_fwd_quant(ctx.handle, nullptr, ctx.norm, d.x, x, r, sum, d.w, gamma, beta,
                                                 d.y, y, scaling, scale, amax, mean, rstd, nullptr, wsb);
  CHECK_STATUS(st, FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  if (st != FNORM_STATUS_SUCCESS) {
    ++ctx.failures;
    return;
  }
  std::vector<unsigned char> hy(ybuf.bytes), hg(c.cols * wsz), hb(c.cols * wsz);
  CUDA_OK(cudaMemcpy(hy.data(), ybuf.p, hy.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hg.data(), gamma, hg.size(), cudaMemcpyDeviceToHost));
  if (beta) CUDA_OK(cudaMemcpy(hb.data(), beta, hb.size(), cudaMemcpyDeviceToHost));
  std::vector<float> hscale(c.per_token ? c.rows : 1), hy32(exact ? y_elems : 0);
  CUDA_OK(cudaMemcpy(hscale.data(), scale, hscale.size() * 4, cudaMemcpyDeviceToHost));
  if (exact) CUDA_OK(cudaMemcpy(hy32.data(), y32, y_elems * 4, cudaMemcpyDeviceToHost));
  float hamax = 0;
  if (amax) CUDA_OK(cudaMemcpy(&hamax, amax, 4, cudaMemcpyDeviceToHost));
  const unsigned char *codes = hy.data() + 16 + c.y_off;
  std::vector<double> g(c.cols), b(c.cols, 0.0);
  for (int64_t j = 0; j < c.cols; ++j) {
    g[j] = load_host(hg.data(), wdt, j);
    if (beta) b[j] = load_host(hb.data(), wdt, j);
  }

  const Tolerance tol = tol_for_fp32();
  struct RowOut {
    long bad = 0, band = 0, band_other = 0;
    double amax_ref = 0, amax_tol = 0;
    bool nan = false;
    std::string first;
  };
  std::vector<RowOut> ro(c.rows);
  parallel_for(c.rows, [&](int64_t row) {
    RowOut &o = ro[row];
    std::vector<double> xr(c.cols), v(c.cols), allowed(c.cols);
    double max_abs = 0;
    for (int64_t j = 0; j < c.cols; ++j) {
      xr[j] = load_host(hs.data(), c.dtype, row * xs + j);
      max_abs = std::max(max_abs, std::fabs(xr[j]));
    }
    double mu, rs;
    norm_row_reference(c.rms, xr.data(), c.cols, g.data(), beta ? b.data() : nullptr, false, 1e-5, v.data(), &mu,
                       &rs);
    const double cond = 8 * 1.2e-7 * max_abs * rs;
    for (int64_t j = 0; j < c.cols; ++j) {
      allowed[j] = tol.atol + tol.rtol * std::fabs(v[j]) + cond * std::fabs(g[j]);
      if (std::fabs(v[j]) > o.amax_ref) {
        o.amax_ref = std::fabs(v[j]);
        o.amax_tol = allowed[j];
      }
      o.nan = o.nan || v[j] != v[j];
    }
    auto fail = [&](const std::string &what) {
      if (o.bad++ == 0) o.first = "row " + std::to_string(row) + ": " + what;
    };
    float s = c.per_token ? hscale[row] : static_scale;
    if (c.per_token) {
      const double sref = o.nan ? NAN : std::max(o.amax_ref / M, static_cast<double>(fnorm::quant_min_scale(out_kind(c.out))));
      const double stol = o.amax_tol / M;
      if (!(same_value(s, sref) || std::fabs(s - sref) <= stol))
        fail("scale " + std::to_string(s) + " vs reference " + std::to_string(sref));
    }
    // Exact, from the library's fp32 values (fp32 input only).
    if (exact) {
      float a = 0;
      bool vnan = false;
      for (int64_t j = 0; j < c.cols; ++j) {
        const float vv = hy32[row * ys + j];
        a = std::max(a, std::fabs(vv));
        vnan = vnan || vv != vv;
      }
      if (c.per_token) {
        const float want = vnan ? NAN : fnorm::quant_row_scale(fnorm::abs_bits(a), out_kind(c.out));
        if (!(same_value(s, want)))
          fail("scale " + std::to_string(s) + " != the rule on the fp32 values " + std::to_string(want));
      }
      for (int64_t j = 0; j < c.cols; ++j) {
        const float t = hy32[row * ys + j] / s;
        const uint8_t got = codes[row * ys + j];
        const bool ok = c.out == Out::Int8 ? static_cast<int8_t>(got) == int8_round(t)
                                           : fp8_matches(got, t, c.out == Out::E4M3 ? kE4M3 : kE5M2) &&
                                                 (t == t || got == 0x7f);
        if (!ok) fail("col " + std::to_string(j) + ": code " + std::to_string(got) + " != the rule on v = " +
                      std::to_string(hy32[row * ys + j]));
      }
    }
    // Against the float64 reference, with the fp32 band.
    for (int64_t j = 0; j < c.cols; ++j) {
      const uint8_t got = codes[row * ys + j];
      const double gv = code_value(c.out, got);
      if (o.nan) {
        const bool ok = c.out == Out::Int8 ? got == 0 : got == 0x7f;
        if (!ok) fail("col " + std::to_string(j) + ": a NaN row gave code " + std::to_string(got));
        continue;
      }
      const double want = rule_value(c.out, v[j] / s);
      if (same_value(gv, want) && (c.out == Out::Int8 || std::signbit(gv) == std::signbit(want) || want == 0)) continue;
      const double lo = rule_value(c.out, (v[j] - allowed[j]) / s), hi = rule_value(c.out, (v[j] + allowed[j]) / s);
      if (lo != hi && ((gv >= std::min(lo, hi) && gv <= std::max(lo, hi)))) {
        ++o.band;
        continue;
      }
      fail("col " + std::to_string(j) + ": code " + std::to_string(got) + " (" + std::to_string(gv) +
           ") vs reference " + std::to_string(want) + " (v " + std::to_string(v[j]) + ", s " + std::to_string(s) + ")");
    }
    // y's padding columns are never written.
    for (int64_t j = c.cols; row + 1 < c.rows && j < ys; ++j)
      if (codes[row * ys + j] != 0xff) fail("padding byte written at col " + std::to_string(j));
  });
  long bad = 0;
  double amax_ref = 0, amax_tol = 0;
  bool any_nan = false;
  for (int64_t row = 0; row < c.rows; ++row) {
    if (ro[row].bad && !bad) std::fprintf(stderr, "FAIL %s: %s\n", c.str().c_str(), ro[row].first.c_str());
    bad += ro[row].bad;
    ctx.band += ro[row].band;
    any_nan = any_nan || ro[row].nan;
    if (ro[row].amax_ref > amax_ref) {
      amax_ref = ro[row].amax_ref;
      amax_tol = ro[row].amax_tol;
    }
  }
  ctx.codes += c.rows * c.cols;
  if (amax) {
    bool ok = any_nan ? hamax != hamax : std::fabs(hamax - amax_ref) <= amax_tol;
    if (exact && !any_nan) {
      float a = 0;
      for (int64_t row = 0; row < c.rows; ++row)
        for (int64_t j = 0; j < c.cols; ++j) a = std::max(a, std::fabs(hy32[row * ys + j]));
      ok = ok && hamax == a;
    }
    if (!ok) {
      std::fprintf(stderr, "FAIL %s: amax %.9g vs reference %.9g\n", c.str().c_str(), hamax, amax_ref);
      ++bad;
    }
  }
  // Bytes before and after y untouched.
  for (int i = 0; i < 16 + c.y_off; ++i) bad += hy[i] != 0xff;
  for (size_t i = 16 + c.y_off + y_elems; i < hy.size(); ++i) bad += hy[i] != 0xff;
  if (c.residual) {
    std::vector<unsigned char> got(x_elems * es);
    CUDA_OK(cudaMemcpy(got.data(), sum, got.size(), cudaMemcpyDeviceToHost));
    for (int64_t row = 0; row < c.rows; ++row)
      if (std::memcmp(got.data() + row * xs * es, hs.data() + row * xs * es, c.cols * es) != 0) {
        std::fprintf(stderr, "FAIL %s: sum row %lld differs from x + r\n", c.str().c_str(), static_cast<long long>(row));
        ++bad;
        break;
      }
  }
  CHECK_CMP(bad, ==, 0L);
  if (bad) ++ctx.failures;
}

// Rows past 2^31 elements: the last rows of a bf16 [524289, 4096] tensor
// (2^31 + 4096 elements), per-token E4M3, against the float64 reference.
void run_huge_case(Ctx &ctx) {
  const int64_t rows = 524289, cols = 4096;
  const size_t n = static_cast<size_t>(rows * cols);
  size_t free_b = 0, total_b = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  if (free_b < 3 * n + (size_t{1} << 30)) {
    std::printf("SKIP > 2^31 elements: %zu MiB free\n", free_b >> 20);
    ++counters().skipped;
    return;
  }
  ++ctx.cases;
  DeviceBuffer xb(2 * n), yb(n), sb(4 * rows), gb(2 * cols);
  CUDA_OK(fill_uniform(FNORM_DTYPE_BFLOAT16, xb.p, static_cast<int64_t>(n), ctx.seed + 77, -1.f, 1.f, cols, 4.f, nullptr));
  CUDA_OK(fill_uniform(FNORM_DTYPE_BFLOAT16, gb.p, cols, ctx.seed + 78, 0.5f, 1.5f, cols, 0.f, nullptr));
  yb.poison();
  Descs d;
  set2(d.x, FNORM_DTYPE_BFLOAT16, rows, cols, cols);
  set2(d.y, FNORM_DTYPE_FLOAT8_E4M3, rows, cols, cols);
  const int64_t wdims[1] = {cols};
  fnorm_tensor_desc_set(d.w, FNORM_DTYPE_BFLOAT16, 1, wdims, nullptr);
  fnorm_norm_desc_set(ctx.norm, FNORM_NORM_RMSNORM, -1, 1e-6);
  CHECK_STATUS(fnorm_norm_fwd_quant(ctx.handle, nullptr, ctx.norm, d.x, xb.p, nullptr, nullptr, d.w, gb.p, nullptr,
                                    d.y, yb.p, FNORM_QUANT_SCALING_PER_TOKEN, static_cast<float *>(sb.p), nullptr,
                                    nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<unsigned char> hg(2 * cols);
  CUDA_OK(cudaMemcpy(hg.data(), gb.p, hg.size(), cudaMemcpyDeviceToHost));
  std::vector<double> g(cols);
  for (int64_t j = 0; j < cols; ++j) g[j] = load_host(hg.data(), FNORM_DTYPE_BFLOAT16, j);
  long bad = 0;
  for (int64_t row : {int64_t{0}, rows / 2, rows - 2, rows - 1}) {
    std::vector<unsigned char> hx(2 * cols), hy(cols);
    float s = 0;
    CUDA_OK(cudaMemcpy(hx.data(), static_cast<unsigned char *>(xb.p) + 2 * row * cols, hx.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hy.data(), static_cast<unsigned char *>(yb.p) + row * cols, hy.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(&s, static_cast<float *>(sb.p) + row, 4, cudaMemcpyDeviceToHost));
    std::vector<double> xr(cols), v(cols);
    for (int64_t j = 0; j < cols; ++j) xr[j] = load_host(hx.data(), FNORM_DTYPE_BFLOAT16, j);
    double mu, rs, a = 0;
    norm_row_reference(true, xr.data(), cols, g.data(), nullptr, false, 1e-6, v.data(), &mu, &rs);
    for (double vv : v) a = std::max(a, std::fabs(vv));
    bad += std::fabs(s - a / 448.0) > 1e-4 * a / 448.0;
    for (int64_t j = 0; j < cols; ++j) {
      const double want = fp8_round(v[j] / s, kE4M3), got = fp8_value(hy[j], kE4M3);
      if (got != want) {
        const double lo = fp8_round(v[j] * (1 - 1e-4) / s, kE4M3), hi = fp8_round(v[j] * (1 + 1e-4) / s, kE4M3);
        bad += !(got >= std::min(lo, hi) && got <= std::max(lo, hi));
      }
    }
  }
  if (bad) std::fprintf(stderr, "FAIL > 2^31 elements: %ld mismatches\n", bad);
  CHECK_EQ(bad, 0L);
  if (bad) ++ctx.failures;
}

// ---- 3. graph capture ---------------------------------------------------------

// The launch captured in a graph and replayed on two inputs: amax is reset
// by the captured memset, so the second replay reports its own input's max.
void run_graph_case(Ctx &ctx) {
  ++ctx.cases;
  const int64_t rows = 64, cols = 1024;
  DeviceBuffer x1(4 * rows * cols), x2(4 * rows * cols), xin(4 * rows * cols), y(rows * cols), sc(4 * rows), am(4);
  CUDA_OK(fill_uniform(FNORM_DTYPE_FLOAT32, x1.p, rows * cols, ctx.seed + 5, -1.f, 1.f, cols, 0.f, nullptr));
  CUDA_OK(fill_uniform(FNORM_DTYPE_FLOAT32, x2.p, rows * cols, ctx.seed + 6, -1.f, 1.f, cols, 0.f, nullptr));
  // x1 has one large outlier: its amax dwarfs x2's.
  const float big = 1000.f;
  CUDA_OK(cudaMemcpy(static_cast<float *>(x1.p) + 5, &big, 4, cudaMemcpyHostToDevice));
  Descs d;
  set2(d.x, FNORM_DTYPE_FLOAT32, rows, cols, cols);
  set2(d.y, FNORM_DTYPE_FLOAT8_E4M3, rows, cols, cols);
  fnorm_norm_desc_set(ctx.norm, FNORM_NORM_RMSNORM, -1, 1e-6);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const fnorm_status_t st =
      fnorm_norm_fwd_quant(ctx.handle, s, ctx.norm, d.x, xin.p, nullptr, nullptr, nullptr, nullptr, nullptr, d.y, y.p,
                           FNORM_QUANT_SCALING_PER_TOKEN, static_cast<float *>(sc.p), static_cast<float *>(am.p),
                           nullptr, nullptr, nullptr, 0);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  CHECK_STATUS(st, FNORM_STATUS_SUCCESS);
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  float a1 = 0, a2 = 0;
  CUDA_OK(cudaMemcpyAsync(xin.p, x1.p, x1.bytes, cudaMemcpyDeviceToDevice, s));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaMemcpyAsync(&a1, am.p, 4, cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaMemcpyAsync(xin.p, x2.p, x2.bytes, cudaMemcpyDeviceToDevice, s));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaMemcpyAsync(&a2, am.p, 4, cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::printf("graph replays: amax %.6g then %.6g\n", a1, a2);
  CHECK(a1 > 20.f);             // the outlier row's normalized maximum (~sqrt(1024))
  CHECK(a2 > 1.f && a2 < 8.f);  // reset by the captured memset, not max(a1, a2)
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace

int main() {
  if (skip_without_gpu()) return 77;
  Ctx ctx;
  ctx.seed = test_seed();
  CHECK_STATUS(fnorm_create(&ctx.handle), FNORM_STATUS_SUCCESS);
  fnorm_norm_desc_create(&ctx.norm);

  test_every_fp32_input();

  const fnorm_dtype_t dts[] = {FNORM_DTYPE_FLOAT32, FNORM_DTYPE_FLOAT16, FNORM_DTYPE_BFLOAT16};
  struct Shape {
    int64_t rows, cols;
    int x_off, y_off;
    int64_t x_pad, y_pad;
  };
  // one row; odd columns; padded rows; misaligned x and y; the register,
  // block-register, shared-memory and (cols * elem > 227 KiB) uncached tiers.
  const Shape shapes[] = {{1, 4096, 0, 0, 0, 0},   {37, 203, 0, 0, 0, 0},  {5, 1029, 0, 0, 3, 5},
                          {33, 768, 1, 3, 0, 0},    {64, 8192, 0, 0, 0, 0}, {3, 20480, 0, 0, 0, 0},
                          {2, 131072, 0, 0, 0, 0}, {300, 64, 1, 1, 2, 1}};
  for (fnorm_dtype_t dt : dts)
    for (bool rms : {false, true})
      for (Out out : {Out::E4M3, Out::E5M2, Out::Int8})
        for (bool per_token : {false, true}) {
          if (out == Out::Int8 && !per_token) continue;
          for (const Shape &sh : shapes) {
            QCase c{dt, sh.rows, sh.cols, rms, out, per_token};
            c.x_off = sh.x_off;
            c.y_off = sh.y_off;
            c.x_pad = sh.x_pad;
            c.y_pad = sh.y_pad;
            run_quant_case(ctx, c);
          }
          // add & norm: sum written, and in place of the residual; fp32 parameters.
          QCase a{dt, 17, 4096, rms, out, per_token};
          a.residual = true;
          run_quant_case(ctx, a);
          a.sum_in_place = true;
          a.param_f32 = dt != FNORM_DTYPE_FLOAT32;
          a.x_off = 1;
          run_quant_case(ctx, a);
          // An all-zero row (RMSNorm: v = 0: the floor scale, zero codes) and a NaN row.
          QCase z{dt, 9, 1000, true, out, per_token};
          z.zero_row = true;
          z.nan_row = true;
          run_quant_case(ctx, z);
        }
  run_huge_case(ctx);
  run_graph_case(ctx);
  std::printf("quantized forward: %ld cases, %ld failed; %ld codes, %ld within the fp32 band of a rounding "
              "boundary (either neighbour accepted)\n",
              ctx.cases, ctx.failures, ctx.codes, ctx.band);
  fnorm_norm_desc_destroy(ctx.norm);
  fnorm_destroy(ctx.handle);
  return finish("gpu-quant");
}
