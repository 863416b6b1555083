/* SPDX-License-Identifier: Apache-2.0 */
// GPU test of the fully-connected layer (fnorm_linear_fwd / _bwd) against a
// double-precision host reference, on small shapes: m, n, k in {1, 3, 17, 64}
// (every combination) plus a few with 1000, both weight layouts, every
// epilogue and dtype, fp32 with and without TF32; misaligned pointers (one
// element off), padded row strides, a rank-3 x; the library's own epilogue
// kernels (FNORM_LINEAR_UNFUSED handle) beside cuBLASLt's fused ones; the
// A/B hooks' handles (legacy: cuBLASLt's aux epilogues and GEMMs at n = 1;
// own: our activation passes everywhere); n = 1 with k over
// several column tiles; the aux our passes write against cuBLASLt's, bit for
// bit (run_aux_format); two threads on two handles and on one handle.
// Fresh random inputs every run
// (seed printed; FNORM_TEST_SEED repeats one). Outputs are poisoned (NaN)
// and followed by guard elements that must stay poisoned; input padding is
// NaN, so reading it shows.
// Black-box: links only the shared library.
//
// Tolerances. Inputs are U(-1, 1) (bias U(-0.5, 0.5)), rounded to the dtype;
// the reference uses those rounded values in double. For an output that is
// a sum of `inner` products, with mag = sum of |products| (+ |bias|):
//   |got - ref| <= 2 u |ref| + (2 u + 2 inner 2^-24 + t) mag + prop
// u = the dtype's unit roundoff (fp32 2^-24, fp16 2^-11, bf16 2^-8); the
// inner term bounds fp32 accumulation (recursive summation: inner * 2^-24);
// t = 2^-10 with TF32 (both inputs rounded to 10 mantissa bits), else 0.
// GELU: y may use the hardware tanh approximation (relative error ~2^-11):
// + 2^-10 |z|; its slope is at most 1.13, so z's bound counts 1.2 times.
// prop: backward outputs carry dz's error (rounded with the output: 2 u
// applies to |ref| + prop) (GELU: z's error times
// |gelu''| <= 0.8, the tanh approximation, and dz's rounding to the dtype)
// through the same GEMM with absolute values. ReLU's derivative in the
// reference is y > 0 (the device's y); where |z| is within its error bound
// of 0 the device's mask may say otherwise (cuBLASLt rounds the z it tests
// and the z it stores differently), so there dz may be dy or 0: prop adds
// |dy| for those elements. Elsewhere the mask must equal y > 0.
// Plus, for fp16, the smallest subnormal (2^-24): products of two small
// inputs land below fp16's normal range, where spacing is absolute.
// NaN never passes.
// Inputs must come back unchanged (every launch), and nothing may be written
// past the aux size the library asks for (a patterned guard follows it).
// FNORM_TEST_FILTER=substring runs the cases whose name has it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "dtype_io.hpp"
#include "fusednorm.h"
#include "halfbits.hpp"

using namespace fnorm_test;

namespace {

// CUDA_OK, elem_size, dtype_str, load_host / store_host: tests/common/dtype_io.hpp

constexpr int kGuard = 64;  // poisoned elements after every output

const char *epi_str(fnorm_linear_epilogue_t e) {
  static const char *names[] = {"none", "bias", "bias_relu", "bias_gelu"};
  return names[e];
}
double subnormal_step(fnorm_dtype_t t) { return t == FNORM_DTYPE_FLOAT16 ? std::ldexp(1.0, -24) : 1e-30; }
double unit_roundoff(fnorm_dtype_t t) {
  return t == FNORM_DTYPE_FLOAT32 ? std::ldexp(1.0, -24) : t == FNORM_DTYPE_FLOAT16 ? std::ldexp(1.0, -11)
                                                                                      : std::ldexp(1.0, -8);
}

double round_to(fnorm_dtype_t t, double v) {
  const float f = static_cast<float>(v);
  if (t == FNORM_DTYPE_FLOAT32) return f;
  if (t == FNORM_DTYPE_FLOAT16) return half_to_float(float_to_half(f));
  return bf16_to_float(float_to_bf16(f));
}
void store(fnorm_dtype_t t, unsigned char *base, int64_t i, double v) {
  fnorm_test::store_host(base, t, i, static_cast<float>(v));
}
double load(fnorm_dtype_t t, const unsigned char *base, int64_t i) { return fnorm_test::load_host(base, t, i); }

// A row-major matrix in a device buffer: `offset` elements in, row stride
// ld, then kGuard guard elements. Host copy of its logical values.
struct DevMatrix {
  fnorm_dtype_t dtype = FNORM_DTYPE_FLOAT32;
  int64_t rows = 0, cols = 0, ld = 0, offset = 0;
  void *base = nullptr;
  std::vector<double> v;  // rows x cols, packed
  size_t span_elems() const { return static_cast<size_t>(offset + (rows - 1) * ld + cols + kGuard); }
  void *ptr() const { return static_cast<unsigned char *>(base) + offset * fnorm_test::elem_size(dtype); }
  DevMatrix() = default;
  DevMatrix(fnorm_dtype_t t, int64_t r, int64_t c, int64_t ld_, int64_t off) : dtype(t), rows(r), cols(c), ld(ld_), offset(off) {
    CUDA_OK(cudaMalloc(&base, span_elems() * fnorm_test::elem_size(t)));
    CUDA_OK(cudaMemset(base, 0xff, span_elems() * fnorm_test::elem_size(t)));  // NaN in every dtype
    v.assign(static_cast<size_t>(r * c), 0.0);
  }
  DevMatrix(const DevMatrix &) = delete;
  DevMatrix &operator=(const DevMatrix &) = delete;
  DevMatrix(DevMatrix &&o) noexcept { *this = std::move(o); }
  DevMatrix &operator=(DevMatrix &&o) noexcept {
    std::swap(dtype, o.dtype); std::swap(rows, o.rows); std::swap(cols, o.cols); std::swap(ld, o.ld);
    std::swap(offset, o.offset); std::swap(base, o.base); std::swap(v, o.v);
    return *this;
  }
  ~DevMatrix() { cudaFree(base); }
  double &at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
  // Random values rounded to the dtype; padding and guards stay NaN.
  void fill(std::mt19937_64 &rng, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    std::vector<unsigned char> h(span_elems() * fnorm_test::elem_size(dtype), 0xff);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        at(r, c) = round_to(dtype, d(rng));
        store(dtype, h.data(), offset + r * ld + c, at(r, c));
      }
    CUDA_OK(cudaMemcpy(base, h.data(), h.size(), cudaMemcpyHostToDevice));
  }
  // Reads the device values into v; false if a guard or padding element
  // lost its poison.
  // True if the device still holds exactly the values of v (an input that
  // no launch may write) with its poisoned padding and guards.
  bool unchanged() {
    const std::vector<double> before = v;
    const bool guards = read();
    bool same = guards;
    for (size_t i = 0; i < v.size(); ++i) same = same && (v[i] == before[i] || (std::isnan(v[i]) && std::isnan(before[i])));
    v = before;
    return same;
  }
  bool read(bool check_padding = true) {
    std::vector<unsigned char> h(span_elems() * fnorm_test::elem_size(dtype));
    CUDA_OK(cudaMemcpy(h.data(), base, h.size(), cudaMemcpyDeviceToHost));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) at(r, c) = load(dtype, h.data(), offset + r * ld + c);
    bool ok = true;
    const int64_t end = offset + (rows - 1) * ld + cols;
    for (int64_t i = end; i < end + kGuard; ++i) ok = ok && std::isnan(load(dtype, h.data(), i));
    for (int64_t i = 0; i < offset; ++i) ok = ok && std::isnan(load(dtype, h.data(), i));
    if (check_padding)
      for (int64_t r = 0; r + 1 < rows; ++r)
        for (int64_t c = cols; c < ld; ++c) ok = ok && std::isnan(load(dtype, h.data(), offset + r * ld + c));
    return ok;
  }
};

// A descriptor whose set() must succeed (the test's shapes are valid).
struct Desc : fnorm_test::Desc {
  void set(fnorm_dtype_t t, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    const fnorm_status_t st = fnorm_test::Desc::set(t, std::move(dims), std::move(strides));
    if (st != FNORM_STATUS_SUCCESS) {
      std::fprintf(stderr, "tensor_desc_set failed (%d)\n", st);
      std::exit(99);
    }
  }
  // A matrix view, as [rows, cols], or as [2, rows / 2, cols] when rank3.
  void set(const DevMatrix &m, bool rank3 = false) {
    if (rank3) set(m.dtype, {2, m.rows / 2, m.cols}, {m.ld * (m.rows / 2), m.ld, 1});
    else set(m.dtype, {m.rows, m.cols}, {m.ld, 1});
  }
};

struct DevBytes {
  void *p = nullptr;
  size_t n = 0;
  explicit DevBytes(size_t bytes) : n(bytes) {
    if (bytes) CUDA_OK(cudaMalloc(&p, bytes));
  }
  ~DevBytes() { cudaFree(p); }
  DevBytes(const DevBytes &) = delete;
  DevBytes &operator=(const DevBytes &) = delete;
};

struct Case {
  fnorm_dtype_t dtype;
  fnorm_linear_weight_layout_t layout;
  fnorm_linear_epilogue_t epi;
  int64_t m, n, k;
  bool misalign = false;  // every tensor one element off its allocation's alignment (bias too)
  bool pad = false;       // row strides wider than the rows
  bool rank3 = false;     // x, y, dy, dx as [2, m / 2, .]
  bool tf32 = false;
  bool unfused = false;   // the FNORM_LINEAR_UNFUSED handle
  bool legacy = false;    // the handle on cuBLASLt's aux epilogues and GEMMs at n = 1 (the A/B hooks)
  bool own = false;       // the handle on our activation passes wherever they apply (FNORM_LINEAR_FWD_AUX=own)
  std::string str() const {
    char b[200];
    std::snprintf(b, sizeof b, "%s %s %s m=%lld n=%lld k=%lld%s%s%s%s%s%s%s", fnorm_test::dtype_str(dtype),
                  layout == FNORM_LINEAR_WEIGHT_KN ? "kn" : "nk", epi_str(epi), static_cast<long long>(m),
                  static_cast<long long>(n), static_cast<long long>(k), misalign ? " misaligned" : "",
                  pad ? " padded" : "", rank3 ? " rank3" : "", tf32 ? " tf32" : "", unfused ? " unfused" : "",
                  legacy ? " legacy" : "", own ? " own" : "");
    return b;
  }
};

struct Ctx {
  fnorm_handle_t fused = nullptr, unfused = nullptr, legacy = nullptr, own = nullptr;
  uint64_t seed = 0;
  long cases = 0, failures = 0, not_supported = 0;
  std::vector<std::string> ns_list;
};

double gelu(double z) { return 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z))); }
double gelu_grad(double z) {
  const double t = std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z));
  return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * z * z);
}

// Worst |got - ref| / allowed over a matrix, with where it happened.
struct Worst {
  double ratio = 0;
  int64_t r = -1, c = -1;
  double got = 0, ref = 0, allowed = 0;
  void add(int64_t rr, int64_t cc, double g, double ref_, double allowed_) {
    const double q = std::isfinite(g) ? std::fabs(g - ref_) / allowed_ : INFINITY;
    if (!(q <= ratio)) {
      ratio = q;
      r = rr;
      c = cc;
      got = g;
      ref = ref_;
      allowed = allowed_;
    }
  }
  bool ok(const char *what, const Case &cs) const {
    if (ratio <= 1) return true;
    std::fprintf(stderr, "FAIL %s: %s at [%lld, %lld]: got %.9g ref %.9g allowed %.3g (%.3gx)\n", cs.str().c_str(),
                 what, static_cast<long long>(r), static_cast<long long>(c), got, ref, allowed, ratio);
    return false;
  }
};

bool status_ok(Ctx &ctx, const Case &c, fnorm_status_t st, const char *what) {
  if (st == FNORM_STATUS_SUCCESS) return true;
  char msg[1024];
  fnorm_get_last_error_message(msg, sizeof msg);
  if (st == FNORM_STATUS_NOT_SUPPORTED && (c.misalign || c.pad)) {
    // Allowed (the issue: unaligned shapes work or say NOT_SUPPORTED);
    // counted and listed, never a pass.
    ++ctx.not_supported;
    ++counters().skipped;
    ctx.ns_list.push_back(c.str() + " " + what + ": " + msg);
    return false;
  }
  std::fprintf(stderr, "FAIL %s: %s returned %d: %s\n", c.str().c_str(), what, static_cast<int>(st), msg);
  ++ctx.failures;
  record(false, __FILE__, __LINE__, c.str() + " " + what);
  return false;
}

long g_aux_overshoot = 0;  // largest aux write seen past m * ld (bytes), for the log

void run_case(Ctx &ctx, const Case &c) {
  const char *filter = std::getenv("FNORM_TEST_FILTER");
  if (filter != nullptr && c.str().find(filter) == std::string::npos) return;
  ++ctx.cases;
  std::mt19937_64 rng(ctx.seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(ctx.cases)));
  const fnorm_dtype_t t = c.dtype;
  const int64_t off = c.misalign ? 1 : 0;
  const bool kn = c.layout == FNORM_LINEAR_WEIGHT_KN;
  const int64_t wr = kn ? c.k : c.n, wc = kn ? c.n : c.k;
  DevMatrix x(t, c.m, c.k, c.k + (c.pad ? 3 : 0), off), w(t, wr, wc, wc + (c.pad ? 1 : 0), off);
  DevMatrix y(t, c.m, c.n, c.n + (c.pad ? 5 : 0), off), dy(t, c.m, c.n, c.n + (c.pad ? 2 : 0), off);
  DevMatrix bias(t, 1, c.n, c.n, off), db(t, 1, c.n, c.n, off);
  DevMatrix dx(t, c.m, c.k, c.k + (c.pad ? 1 : 0), off), dw(t, wr, wc, w.ld, off);
  x.fill(rng, -1, 1);
  w.fill(rng, -1, 1);
  const bool has_bias = c.epi != FNORM_LINEAR_EPILOGUE_NONE;
  if (has_bias) bias.fill(rng, -0.5, 0.5);
  dy.fill(rng, -1, 1);
  auto W = [&](int64_t kk, int64_t nn) { return kn ? w.at(kk, nn) : w.at(nn, kk); };

  fnorm_linear_desc_t desc = nullptr;
  CHECK_STATUS(fnorm_linear_desc_create(&desc), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_desc_set(desc, c.epi, c.layout, c.tf32 ? FNORM_LINEAR_FLAG_ALLOW_TF32 : 0),
               FNORM_STATUS_SUCCESS);
  fnorm_handle_t h = c.unfused ? ctx.unfused : c.legacy ? ctx.legacy : c.own ? ctx.own : ctx.fused;
  Desc xd, wd, yd, dyd, dxd;
  xd.set(x, c.rank3);
  wd.set(w);
  yd.set(y, c.rank3);
  dyd.set(dy, c.rank3);
  dxd.set(dx, c.rank3);
  const bool act = c.epi == FNORM_LINEAR_EPILOGUE_BIAS_RELU || c.epi == FNORM_LINEAR_EPILOGUE_BIAS_GELU;
  const bool gelu_act = c.epi == FNORM_LINEAR_EPILOGUE_BIAS_GELU;
  size_t aux_bytes = 0, ws_bytes = 0, bws_bytes = 0;
  CHECK_STATUS(fnorm_linear_aux_size(h, desc, yd.d, &aux_bytes), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, desc, xd.d, wd.d, yd.d, &ws_bytes), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, desc, xd.d, wd.d, dyd.d, nullptr, &bws_bytes), FNORM_STATUS_SUCCESS);
  CHECK(act == (aux_bytes > 0));
  constexpr size_t kAuxGuard = 64 << 10;
  DevBytes aux(aux_bytes + kAuxGuard), ws(std::max(ws_bytes, bws_bytes) + 16);
  if (act) CUDA_OK(cudaMemset(aux.p, 0xa5, aux_bytes + kAuxGuard));
  // The workspace may have any alignment: hand it over one byte off.
  unsigned char *wsp = static_cast<unsigned char *>(ws.p) + 1;

  fnorm_status_t st = fnorm_linear_fwd(h, nullptr, desc, xd.d, x.ptr(), wd.d, w.ptr(), has_bias ? bias.ptr() : nullptr,
                                       yd.d, y.ptr(), act ? aux.p : nullptr, aux_bytes, wsp, ws_bytes);
  if (!status_ok(ctx, c, st, "fwd")) {
    fnorm_linear_desc_destroy(desc);
    return;
  }
  CUDA_OK(cudaDeviceSynchronize());
  const bool y_guard = y.read();
  CHECK(y_guard);
  if (!y_guard) std::fprintf(stderr, "FAIL %s: y's guard or padding was written\n", c.str().c_str());

  // Forward reference.
  const double u = unit_roundoff(t), sub = subnormal_step(t);
  const double tf = c.tf32 ? std::ldexp(1.0, -10) : 0.0;
  const double acc = std::ldexp(1.0, -23);  // 2 * 2^-24 per term of the inner sum
  std::vector<double> z(static_cast<size_t>(c.m * c.n)), ztol(z.size());
  Worst wy;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = has_bias ? bias.at(0, j) : 0.0, mag = std::fabs(s);
      for (int64_t kk = 0; kk < c.k; ++kk) {
        s += x.at(i, kk) * W(kk, j);
        mag += std::fabs(x.at(i, kk) * W(kk, j));
      }
      const size_t e = static_cast<size_t>(i * c.n + j);
      z[e] = s;
      ztol[e] = (2 * u + c.k * acc + tf) * mag + sub;
      double ref = s, allowed;
      if (c.epi == FNORM_LINEAR_EPILOGUE_BIAS_RELU) ref = std::max(s, 0.0);
      if (gelu_act) ref = gelu(s);
      allowed = 2 * u * std::fabs(ref) + 1.2 * ztol[e] + (gelu_act ? std::ldexp(std::fabs(s), -10) : 0.0);
      wy.add(i, j, y.at(i, j), ref, allowed);
    }
  bool ok = wy.ok("y", c);

  // Inference (no aux) must give y within the same bounds.
  if (act) {
    DevMatrix yi(t, c.m, c.n, y.ld, off);
    st = fnorm_linear_fwd(h, nullptr, desc, xd.d, x.ptr(), wd.d, w.ptr(), bias.ptr(), yd.d, yi.ptr(), nullptr, 0, wsp,
                          ws_bytes);
    if (!status_ok(ctx, c, st, "fwd (inference)")) {
      fnorm_linear_desc_destroy(desc);
      return;
    }
    CUDA_OK(cudaDeviceSynchronize());
    const bool yi_guard = yi.read();
    if (!yi_guard) std::fprintf(stderr, "FAIL %s: inference y's guard or padding was written\n", c.str().c_str());
    Worst wyi;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        const size_t e = static_cast<size_t>(i * c.n + j);
        const double ref = gelu_act ? gelu(z[e]) : std::max(z[e], 0.0);
        wyi.add(i, j, yi.at(i, j), ref,
                2 * u * std::fabs(ref) + 1.2 * ztol[e] + (gelu_act ? std::ldexp(std::fabs(z[e]), -10) : 0.0));
      }
    ok = wyi.ok("y (inference)", c) && yi_guard && ok;
  }

  // The aux buffer holds what cuBLASLt's formats say (linear_kernels.hpp):
  // ReLU's bits must agree with y > 0, GELU's values with z. Nothing past
  // the size asked for may change.
  if (act) {
    std::vector<unsigned char> ha(aux_bytes + kAuxGuard);
    CUDA_OK(cudaMemcpy(ha.data(), aux.p, ha.size(), cudaMemcpyDeviceToHost));
    const size_t tight = static_cast<size_t>(c.m) * (gelu_act ? (c.n + 7) / 8 * 8 * fnorm_test::elem_size(t) : (c.n + 127) / 128 * 16);
    long last = -1;
    for (size_t i = tight; i < ha.size(); ++i)
      if (ha[i] != 0xa5) last = static_cast<long>(i - tight);
    if (last >= 0) g_aux_overshoot = std::max(g_aux_overshoot, last + 1);
    if (tight + static_cast<size_t>(last + 1) > aux_bytes) {
      std::fprintf(stderr, "FAIL %s: the forward wrote %ld bytes past m rows of aux, beyond the %zu bytes asked for\n",
                   c.str().c_str(), last + 1, aux_bytes);
      ok = false;
    }
    Worst wa;
    long bad_bits = 0;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        const size_t e = static_cast<size_t>(i * c.n + j);
        if (!gelu_act) {
          const int64_t ld = (c.n + 127) / 128 * 128, bit = i * ld + j;
          const bool set = (ha[static_cast<size_t>(bit >> 3)] >> (bit & 7)) & 1;
          // z within its error of 0 may go either way.
          if (set != (y.at(i, j) > 0) && std::fabs(z[e]) > ztol[e]) ++bad_bits;
        } else {
          const int64_t ld = (c.n + 7) / 8 * 8;
          wa.add(i, j, load(t, ha.data(), i * ld + j), z[e], 2 * u * std::fabs(z[e]) + ztol[e]);
        }
      }
    if (bad_bits) std::fprintf(stderr, "FAIL %s: %ld ReLU mask bits disagree with y > 0\n", c.str().c_str(), bad_bits);
    ok = ok && bad_bits == 0 && wa.ok("aux (gelu z)", c);
  }

  // Backward: dz = dy * act'(z) and its error bound edz.
  std::vector<double> dz(z.size()), edz(z.size(), 0.0);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      const size_t e = static_cast<size_t>(i * c.n + j);
      double g = dy.at(i, j);
      if (c.epi == FNORM_LINEAR_EPILOGUE_BIAS_RELU) {
        if (std::fabs(z[e]) <= ztol[e]) edz[e] = std::fabs(g);  // undecided sign: dy or 0
        g = y.at(i, j) > 0 ? g : 0.0;
      }
      if (gelu_act) {
        g *= gelu_grad(z[e]);
        edz[e] = std::fabs(dy.at(i, j)) * (0.8 * (ztol[e] + u * std::fabs(z[e])) +
                                           std::ldexp(1 + std::fabs(z[e]), -10)) + u * std::fabs(g);
      }
      dz[e] = g;
    }
  CUDA_OK(cudaMemset(dx.base, 0xff, dx.span_elems() * fnorm_test::elem_size(t)));
  st = fnorm_linear_bwd(h, nullptr, desc, xd.d, x.ptr(), wd.d, w.ptr(), dyd.d, dy.ptr(), act ? aux.p : nullptr,
                        act ? aux_bytes : 0, nullptr, nullptr, 0, dxd.d, dx.ptr(), dw.ptr(),
                        has_bias ? db.ptr() : nullptr, nullptr, wsp, bws_bytes);
  if (status_ok(ctx, c, st, "bwd")) {
    CUDA_OK(cudaDeviceSynchronize());
    const bool g1 = dx.read(), g2 = dw.read(), g3 = db.read();
    if (!(g1 && g2 && g3)) std::fprintf(stderr, "FAIL %s: a guard of dx/dw/db was written\n", c.str().c_str());
    ok = ok && g1 && g2 && g3;
    Worst wdx, wdw, wdb;
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t kk = 0; kk < c.k; ++kk) {
        double s = 0, mag = 0, prop = 0;
        for (int64_t j = 0; j < c.n; ++j) {
          const size_t e = static_cast<size_t>(i * c.n + j);
          s += dz[e] * W(kk, j);
          mag += std::fabs(dz[e] * W(kk, j));
          prop += edz[e] * std::fabs(W(kk, j));
        }
        wdx.add(i, kk, dx.at(i, kk), s, 2 * u * (std::fabs(s) + prop) + (2 * u + c.n * acc + tf) * mag + prop + sub);
      }
    for (int64_t kk = 0; kk < c.k; ++kk)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0, mag = 0, prop = 0;
        for (int64_t i = 0; i < c.m; ++i) {
          const size_t e = static_cast<size_t>(i * c.n + j);
          s += x.at(i, kk) * dz[e];
          mag += std::fabs(x.at(i, kk) * dz[e]);
          prop += std::fabs(x.at(i, kk)) * edz[e];
        }
        const double got = kn ? dw.at(kk, j) : dw.at(j, kk);
        wdw.add(kk, j, got, s, 2 * u * (std::fabs(s) + prop) + (2 * u + c.m * acc + tf) * mag + prop + sub);
      }
    if (has_bias)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0, mag = 0, prop = 0;
        for (int64_t i = 0; i < c.m; ++i) {
          const size_t e = static_cast<size_t>(i * c.n + j);
          s += dz[e];
          mag += std::fabs(dz[e]);
          prop += edz[e];
        }
        wdb.add(0, j, db.at(0, j), s, 2 * u * (std::fabs(s) + prop) + (2 * u + c.m * acc) * mag + prop + sub);
      }
    const bool same = x.unchanged() && w.unchanged() && dy.unchanged() && (!has_bias || bias.unchanged());
    if (!same) std::fprintf(stderr, "FAIL %s: an input (x, w, dy or bias) changed during fwd/bwd\n", c.str().c_str());
    ok = ok && same;
    ok = wdx.ok("dx", c) && ok;
    ok = wdw.ok("dw", c) && ok;
    ok = wdb.ok("db", c) && ok;
  }
  if (!ok) ++ctx.failures;
  record(ok, __FILE__, __LINE__, c.str());
  fnorm_linear_desc_destroy(desc);
}

// The training forward's aux written by our passes (ReLU: the mask from y
// after cuBLASLt's RELU_BIAS; GELU: z from the BIAS GEMM, where the rule
// picks them) against what cuBLASLt's RELU_AUX_BIAS / GELU_AUX_BIAS write
// for the same inputs (the `legacy` handle), bit for bit: the chained
// backward hands our aux to cuBLASLt's DRELU_BGRAD / DGELU_BGRAD, which read
// its format. Inputs are small integers (x, w, bias in {-1, 0, 1}): z is
// exact in every dtype and often exactly 0. Where z != 0 the mask bits must
// agree exactly (and equal z > 0); where z == 0 ours must be 0 (y > 0, as
// PyTorch's ReLU backward) and cuBLASLt's is counted and reported (its
// RELU_AUX sets it there: a different derivative at 0, not a different
// format). GELU's z must agree bit for bit; y too for ReLU. Row padding is
// reported, not compared (ours writes 0 there). Ragged m and n, n across
// the 128-bit row padding, y one element off (the element-wise path of the
// mask pass), m = 1, n = 1.
long g_zero_bits = 0, g_zero_bits_lt_set = 0;

void run_aux_format(Ctx &ctx) {
  const int64_t shapes[][3] = {{17, 3, 64},  {64, 200, 17}, {1, 1, 1},    {1000, 129, 17},
                               {1000, 1, 64}, {1, 300, 5},   {33, 128, 8}, {8, 1000, 3}};
  std::mt19937_64 rng(ctx.seed + 991);
  long compared = 0, mismatched = 0, pad_written = 0, pad_bytes = 0;
  for (fnorm_dtype_t t : {FNORM_DTYPE_FLOAT32, FNORM_DTYPE_FLOAT16, FNORM_DTYPE_BFLOAT16})
    for (fnorm_linear_epilogue_t e : {FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_EPILOGUE_BIAS_GELU})
      for (fnorm_linear_weight_layout_t lay : {FNORM_LINEAR_WEIGHT_KN, FNORM_LINEAR_WEIGHT_NK})
        for (const auto &sh : shapes)
          for (int64_t off : {0, 1}) {
            const int64_t m = sh[0], n = sh[1], k = sh[2];
            const bool kn = lay == FNORM_LINEAR_WEIGHT_KN;
            DevMatrix x(t, m, k, k, off), w(t, kn ? k : n, kn ? n : k, kn ? n : k, off), b(t, 1, n, n, 0);
            DevMatrix y0(t, m, n, n, off), y1(t, m, n, n, off);
            for (DevMatrix *d : {&x, &w, &b}) {
              d->fill(rng, -1.49, 1.49);  // rounds to -1, 0 or 1 below
              for (double &v : d->v) v = std::nearbyint(v);
              std::vector<unsigned char> h(d->span_elems() * fnorm_test::elem_size(t), 0xff);
              for (int64_t r = 0; r < d->rows; ++r)
                for (int64_t c = 0; c < d->cols; ++c) store(t, h.data(), d->offset + r * d->ld + c, d->at(r, c));
              CUDA_OK(cudaMemcpy(d->base, h.data(), h.size(), cudaMemcpyHostToDevice));
            }
            fnorm_linear_desc_t desc = nullptr;
            CHECK_STATUS(fnorm_linear_desc_create(&desc), FNORM_STATUS_SUCCESS);
            CHECK_STATUS(fnorm_linear_desc_set(desc, e, lay, 0), FNORM_STATUS_SUCCESS);
            Desc xd, wd, yd;
            xd.set(x);
            wd.set(w);
            yd.set(y0);
            size_t aux_bytes = 0, ws_bytes = 0;
            CHECK_STATUS(fnorm_linear_aux_size(ctx.fused, desc, yd.d, &aux_bytes), FNORM_STATUS_SUCCESS);
            CHECK_STATUS(fnorm_linear_fwd_workspace_size(ctx.fused, desc, xd.d, wd.d, yd.d, &ws_bytes),
                         FNORM_STATUS_SUCCESS);
            DevBytes a0(aux_bytes), a1(aux_bytes), ws(ws_bytes);
            CUDA_OK(cudaMemset(a0.p, 0xa5, aux_bytes));
            CUDA_OK(cudaMemset(a1.p, 0xa5, aux_bytes));
            const fnorm_status_t s0 = fnorm_linear_fwd(ctx.own, nullptr, desc, xd.d, x.ptr(), wd.d, w.ptr(), b.ptr(),
                                                       yd.d, y0.ptr(), a0.p, aux_bytes, ws.p, ws_bytes);
            const fnorm_status_t s1 = fnorm_linear_fwd(ctx.legacy, nullptr, desc, xd.d, x.ptr(), wd.d, w.ptr(),
                                                       b.ptr(), yd.d, y1.ptr(), a1.p, aux_bytes, ws.p, ws_bytes);
            fnorm_linear_desc_destroy(desc);
            char what[160];
            std::snprintf(what, sizeof what, "aux format %s %s %s m=%lld n=%lld k=%lld%s", fnorm_test::dtype_str(t),
                          epi_str(e), kn ? "kn" : "nk", static_cast<long long>(m), static_cast<long long>(n),
                          static_cast<long long>(k), off ? " y misaligned" : "");
            if (s0 != FNORM_STATUS_SUCCESS || s1 != FNORM_STATUS_SUCCESS) {
              // One element off may have no cuBLASLt kernel at all (both say so).
              const bool ns = off && s0 == FNORM_STATUS_NOT_SUPPORTED && s1 == FNORM_STATUS_NOT_SUPPORTED;
              if (!ns) std::fprintf(stderr, "FAIL %s: status ours %d, cuBLASLt's %d\n", what, s0, s1);
              if (ns) ++counters().skipped;
              record(ns, __FILE__, __LINE__, what);
              continue;
            }
            CUDA_OK(cudaDeviceSynchronize());
            std::vector<unsigned char> h0(aux_bytes), h1(aux_bytes);
            CUDA_OK(cudaMemcpy(h0.data(), a0.p, aux_bytes, cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(h1.data(), a1.p, aux_bytes, cudaMemcpyDeviceToHost));
            long bad = 0;
            if (e == FNORM_LINEAR_EPILOGUE_BIAS_RELU) {
              const int64_t ld = (n + 127) / 128 * 128;
              for (int64_t r = 0; r < m; ++r) {
                for (int64_t c = 0; c < n; ++c) {
                  double z = b.at(0, c);
                  for (int64_t kk = 0; kk < k; ++kk) z += x.at(r, kk) * (kn ? w.at(kk, c) : w.at(c, kk));
                  const int64_t bit = r * ld + c;
                  const unsigned ours = (h0[bit >> 3] >> (bit & 7)) & 1, lts = (h1[bit >> 3] >> (bit & 7)) & 1;
                  if (z == 0) {
                    ++g_zero_bits;
                    g_zero_bits_lt_set += lts;
                    bad += ours != 0;
                  } else {
                    bad += ours != lts || ours != (z > 0 ? 1u : 0u);
                  }
                }
                for (int64_t byte = (r * ld + n + 7) / 8; byte < (r + 1) * ld / 8; ++byte) {
                  ++pad_bytes;
                  pad_written += h1[byte] != 0xa5;
                }
              }
              compared += m * n;
            } else {
              const int64_t ld = (n + 7) / 8 * 8, es = static_cast<int64_t>(fnorm_test::elem_size(t));
              for (int64_t r = 0; r < m; ++r)
                bad += std::memcmp(&h0[r * ld * es], &h1[r * ld * es], static_cast<size_t>(n * es)) != 0;
              compared += m * n;
            }
            const bool ys_ok = y0.read() && y1.read();
            bool same_y = ys_ok;
            if (e == FNORM_LINEAR_EPILOGUE_BIAS_RELU)
              for (size_t i = 0; i < y0.v.size(); ++i) same_y = same_y && y0.v[i] == y1.v[i];
            if (bad) std::fprintf(stderr, "FAIL %s: %ld %s differ from cuBLASLt's (ReLU: where z != 0) or are set at z == 0\n",
                                  what, bad, e == FNORM_LINEAR_EPILOGUE_BIAS_RELU ? "mask bits" : "rows of z");
            if (!same_y) std::fprintf(stderr, "FAIL %s: y differs from cuBLASLt's RELU_AUX_BIAS (or a guard was written)\n", what);
            mismatched += bad;
            record(bad == 0 && same_y, __FILE__, __LINE__, what);
          }
  std::printf("aux format: %ld elements' aux compared with cuBLASLt's, %ld differ; at z == 0 exactly (%ld ReLU "
              "elements) ours is 0 and cuBLASLt's bit was set at %ld; cuBLASLt wrote %ld of %ld whole padding bytes "
              "of the ReLU rows (ours writes 0 there)\n",
              compared, mismatched, g_zero_bits, g_zero_bits_lt_set, pad_written, pad_bytes);
}

// Two threads launching forwards of many shapes at once, on two handles and
// then on one shared handle: the results must be bit-identical to the same
// launches made from one thread (same heuristic answer, same kernel).
void run_threads(Ctx &ctx) {
  const int64_t shapes[][3] = {{64, 17, 3}, {1000, 64, 17}, {3, 1000, 64}, {17, 3, 1000}, {64, 64, 64}, {1, 1, 1}};
  constexpr int kShapes = 6;
  std::vector<DevMatrix> xs, ws, ys, bs;
  std::vector<std::unique_ptr<Desc>> xds, wds, yds;
  std::mt19937_64 rng(ctx.seed + 77);
  for (const auto &s : shapes) {
    xs.emplace_back(FNORM_DTYPE_FLOAT16, s[0], s[2], s[2], 0);
    ws.emplace_back(FNORM_DTYPE_FLOAT16, s[1], s[2], s[2], 0);  // NK
    ys.emplace_back(FNORM_DTYPE_FLOAT16, s[0], s[1], s[1], 0);
    bs.emplace_back(FNORM_DTYPE_FLOAT16, 1, s[1], s[1], 0);
    xs.back().fill(rng, -1, 1);
    ws.back().fill(rng, -1, 1);
    bs.back().fill(rng, -0.5, 0.5);
    xds.emplace_back(new Desc());
    wds.emplace_back(new Desc());
    yds.emplace_back(new Desc());
    xds.back()->set(xs.back());
    wds.back()->set(ws.back());
    yds.back()->set(ys.back());
  }
  fnorm_linear_desc_t desc = nullptr;
  fnorm_linear_desc_create(&desc);
  fnorm_linear_desc_set(desc, FNORM_LINEAR_EPILOGUE_BIAS_GELU, FNORM_LINEAR_WEIGHT_NK, 0);
  size_t ws_bytes = 0;
  fnorm_linear_fwd_workspace_size(ctx.fused, desc, xds[0]->d, wds[0]->d, yds[0]->d, &ws_bytes);
  auto launch_all = [&](fnorm_handle_t h, cudaStream_t s, void *wsp, std::vector<std::vector<unsigned char>> &out,
                        std::atomic<int> &bad) {
    std::vector<void *> ydev(kShapes);
    // Poisoned (0xFFFF is an fp16 NaN): an element no launch wrote differs
    // from the reference's written one, and initcheck sees no read of
    // uninitialized memory in the copy back (it does not track every store
    // path of cuBLASLt's kernels).
    for (int i = 0; i < kShapes; ++i) {
      CUDA_OK(cudaMalloc(&ydev[i], ys[i].span_elems() * 2));
      CUDA_OK(cudaMemset(ydev[i], 0xFF, ys[i].span_elems() * 2));
    }
    for (int rep = 0; rep < 20; ++rep)
      for (int i = 0; i < kShapes; ++i)
        if (fnorm_linear_fwd(h, s, desc, xds[i]->d, xs[i].ptr(), wds[i]->d, ws[i].ptr(), bs[i].ptr(), yds[i]->d,
                             ydev[i], nullptr, 0, wsp, ws_bytes) != FNORM_STATUS_SUCCESS)
          ++bad;
    CUDA_OK(cudaStreamSynchronize(s));
    out.resize(kShapes);
    for (int i = 0; i < kShapes; ++i) {
      out[i].resize(static_cast<size_t>(ys[i].rows * ys[i].cols * 2));
      CUDA_OK(cudaMemcpy(out[i].data(), ydev[i], out[i].size(), cudaMemcpyDeviceToHost));
      cudaFree(ydev[i]);
    }
  };
  // Reference: one thread, its own fresh handle.
  fnorm_handle_t h0 = nullptr, h1 = nullptr, h2 = nullptr;
  CHECK_STATUS(fnorm_create(&h0), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_create(&h1), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_create(&h2), FNORM_STATUS_SUCCESS);
  DevBytes w0(ws_bytes), w1(ws_bytes), w2(ws_bytes);
  cudaStream_t s0, s1, s2;
  CUDA_OK(cudaStreamCreate(&s0));
  CUDA_OK(cudaStreamCreate(&s1));
  CUDA_OK(cudaStreamCreate(&s2));
  std::vector<std::vector<unsigned char>> ref, a, b;
  std::atomic<int> bad{0};
  launch_all(h0, s0, w0.p, ref, bad);
  for (int round = 0; round < 2; ++round) {
    // Round 0: fresh handles h1, h2 (both caches fill at once); round 1:
    // both threads on h1.
    fnorm_handle_t ha = h1, hb = round == 0 ? h2 : h1;
    std::thread t1([&] { launch_all(ha, s1, w1.p, a, bad); });
    std::thread t2([&] { launch_all(hb, s2, w2.p, b, bad); });
    t1.join();
    t2.join();
    CHECK_EQ(bad.load(), 0);
    for (int i = 0; i < kShapes; ++i) {
      CHECK(a[i] == ref[i]);
      CHECK(b[i] == ref[i]);
    }
  }
  std::printf("threads: two handles and one shared handle: %s\n",
              bad.load() == 0 ? "results identical to one thread's" : "FAILED launches");
  cudaStreamDestroy(s0);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  fnorm_destroy(h0);
  fnorm_destroy(h1);
  fnorm_destroy(h2);
  fnorm_linear_desc_destroy(desc);
}

}  // namespace

int main() {
  if (skip_without_gpu()) return 77;
  fnorm_linear_desc_t probe = nullptr;
  if (fnorm_linear_desc_create(&probe) == FNORM_STATUS_NOT_SUPPORTED_BUILD) {
    std::printf("SKIP: this build has no cuBLASLt (fnorm_linear_* return NOT_SUPPORTED_BUILD)\n");
    return 77;
  }
  fnorm_linear_desc_destroy(probe);
  Ctx ctx;
  ctx.seed = test_seed();
  CHECK_STATUS(fnorm_create(&ctx.fused), FNORM_STATUS_SUCCESS);
  // The library reads FNORM_LINEAR_UNFUSED when a handle is created
  // (core/tuning.hpp): a second handle created with it set takes the
  // unfused paths.
  setenv("FNORM_LINEAR_UNFUSED", "1", 1);
  CHECK_STATUS(fnorm_create(&ctx.unfused), FNORM_STATUS_SUCCESS);
  {
    // First use of the layer on this handle (creates its state) while the
    // variable is set.
    Case c{FNORM_DTYPE_FLOAT32, FNORM_LINEAR_WEIGHT_KN, FNORM_LINEAR_EPILOGUE_BIAS, 3, 3, 3};
    c.unfused = true;
    run_case(ctx, c);
  }
  unsetenv("FNORM_LINEAR_UNFUSED");
  // The legacy handle: cuBLASLt's *_AUX_BIAS epilogues in the training
  // forward, the GEMMs at n = 1 (the A/B hooks).
  setenv("FNORM_LINEAR_FWD_AUX", "lt", 1);
  setenv("FNORM_LINEAR_NO_N1", "1", 1);
  CHECK_STATUS(fnorm_create(&ctx.legacy), FNORM_STATUS_SUCCESS);
  {
    Case c{FNORM_DTYPE_FLOAT32, FNORM_LINEAR_WEIGHT_KN, FNORM_LINEAR_EPILOGUE_BIAS, 3, 3, 3};
    c.legacy = true;
    run_case(ctx, c);
  }
  unsetenv("FNORM_LINEAR_NO_N1");
  // The own handle: our activation passes wherever they apply.
  setenv("FNORM_LINEAR_FWD_AUX", "own", 1);
  CHECK_STATUS(fnorm_create(&ctx.own), FNORM_STATUS_SUCCESS);
  {
    Case c{FNORM_DTYPE_FLOAT32, FNORM_LINEAR_WEIGHT_KN, FNORM_LINEAR_EPILOGUE_BIAS, 3, 3, 3};
    c.own = true;
    run_case(ctx, c);
  }
  unsetenv("FNORM_LINEAR_FWD_AUX");
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  const bool quick = std::getenv("FNORM_TEST_QUICK") != nullptr;
  const fnorm_dtype_t dtypes[] = {FNORM_DTYPE_FLOAT32, FNORM_DTYPE_FLOAT16, FNORM_DTYPE_BFLOAT16};
  const fnorm_linear_epilogue_t epis[] = {FNORM_LINEAR_EPILOGUE_NONE, FNORM_LINEAR_EPILOGUE_BIAS,
                                          FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_EPILOGUE_BIAS_GELU};
  const fnorm_linear_weight_layout_t layouts[] = {FNORM_LINEAR_WEIGHT_KN, FNORM_LINEAR_WEIGHT_NK};
  // FNORM_TEST_SANITIZE=1 (scripts/gpu-sanitize): one size and one big shape, for compute-sanitizer's tools.
  const bool san = std::getenv("FNORM_TEST_SANITIZE") != nullptr;
  const std::vector<int64_t> sizes = san     ? std::vector<int64_t>{17}
                                     : quick ? std::vector<int64_t>{1, 17, 64}
                                             : std::vector<int64_t>{1, 3, 17, 64};
  std::vector<std::array<int64_t, 3>> big = {{1000, 64, 17}, {17, 1000, 64}, {64, 17, 1000}, {1000, 17, 64}, {3, 64, 1000}};
  if (san) big.resize(1);
  for (fnorm_dtype_t dt : dtypes) {
    const long before = ctx.failures;
    for (fnorm_linear_weight_layout_t lay : layouts)
      for (fnorm_linear_epilogue_t e : epis) {
        for (int64_t m : sizes)
          for (int64_t n : sizes)
            for (int64_t k : sizes) run_case(ctx, {dt, lay, e, m, n, k});
        for (const auto &s : big) run_case(ctx, {dt, lay, e, s[0], s[1], s[2]});
        // Misaligned pointers, padded strides, rank 3, the unfused paths.
        for (const auto &s : {std::array<int64_t, 3>{64, 64, 64}, std::array<int64_t, 3>{17, 3, 64},
                              std::array<int64_t, 3>{64, 17, 3}}) {
          Case c{dt, lay, e, s[0], s[1], s[2]};
          c.misalign = true;
          run_case(ctx, c);
          c.misalign = false;
          c.pad = true;
          run_case(ctx, c);
          c.pad = false;
          if (s[0] % 2 == 0) {
            c.rank3 = true;
            run_case(ctx, c);
            c.rank3 = false;
          }
          c.unfused = true;
          run_case(ctx, c);
          c.misalign = true;
          run_case(ctx, c);
          c.unfused = c.misalign = false;
          c.legacy = true;
          run_case(ctx, c);
          c.legacy = false;
          c.own = true;
          run_case(ctx, c);
          c.misalign = true;
          run_case(ctx, c);
        }
        for (const auto &s : big) {
          Case c{dt, lay, e, s[0], s[1], s[2]};
          c.own = true;
          run_case(ctx, c);
        }
        // n = 1 and m = 1 on the legacy handle too (our n = 1 pass is the default).
        for (const auto &s : {std::array<int64_t, 3>{1000, 1, 64}, std::array<int64_t, 3>{17, 1, 3},
                              std::array<int64_t, 3>{1, 1, 17}, std::array<int64_t, 3>{1, 64, 17}}) {
          Case c{dt, lay, e, s[0], s[1], s[2]};
          c.legacy = true;
          run_case(ctx, c);
        }
        // n = 1 with k across several 256-column tiles, misaligned and padded.
        for (const auto &s : {std::array<int64_t, 3>{1000, 1, 600}, std::array<int64_t, 3>{3000, 1, 17}}) {
          Case c{dt, lay, e, s[0], s[1], s[2]};
          run_case(ctx, c);
          c.misalign = true;
          run_case(ctx, c);
          c.misalign = false;
          c.pad = true;
          run_case(ctx, c);
        }
        if (dt == FNORM_DTYPE_FLOAT32) {
          Case c{dt, lay, e, 64, 17, 1000};
          c.tf32 = true;
          run_case(ctx, c);
        }
      }
    std::printf("%s: %s\n", fnorm_test::dtype_str(dt), ctx.failures == before ? "all cases match" : "FAILURES");
  }
  run_aux_format(ctx);
  run_threads(ctx);
  std::printf("aux: the forward wrote at most %ld bytes past m rows (all within the size asked for unless FAILs say so)\n",
              g_aux_overshoot);
  std::printf("%ld cases, %ld failed, %ld NOT_SUPPORTED (allowed for misaligned/padded cases, listed):\n", ctx.cases,
              ctx.failures, ctx.not_supported);
  for (const std::string &s : ctx.ns_list) std::printf("  %s\n", s.c_str());
  fnorm_destroy(ctx.fused);
  fnorm_destroy(ctx.unfused);
  fnorm_destroy(ctx.legacy);
  fnorm_destroy(ctx.own);
  return finish("gpu linear");
}
