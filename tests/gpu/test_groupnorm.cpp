/* SPDX-License-Identifier: Apache-2.0 */
// GPU test of GroupNorm (+ SiLU, + per-sample scale / shift), forward and
// backward, against a double-precision host reference, on fresh random
// inputs (seed printed; FNORM_TEST_SEED repeats one) with every output
// poisoned with NaN first (NaN never passes). Awkward shapes: C/G = 1,
// G = C, G = 1, odd spatial sizes, one and many samples, both layouts,
// every dtype, gamma/beta in x's dtype or fp32 or absent, scale/shift as
// the strided halves of one [N, 2C] tensor (temb.chunk(2, 1)) or absent,
// in place (y = x, dx = dy), a large case and an empty one; determinism
// (two runs, the same bits) and a CUDA-graph replay.
// Black-box: links only the shared library.
//
// Inputs: x = mu_(n,c) + u, mu in [-2, 2], u uniform in [-1, 1); gamma,
// beta in [-1.5, 1.5]; scale in [-0.5, 0.5], shift in [-1, 1]; dy in
// [-1, 1); all rounded to their dtypes, the reference reading them as stored.
// Tolerances (|got - ref| <= bound):
//   y:     atol_T + rtol_T |ref| + 8 eps32 max|x|_group rstd |gamma'|
//          with (atol, rtol) = fp32 (5e-5, 5e-5), fp16 (2e-3, 2e-3), bf16
//          (1.6e-2, 1.6e-2) (y rounded once to T; the last term the fp32
//          affine form's cancellation where rstd is large)
//   mean:  1e-5 (1 + |mean|); rstd: 1e-4 relative
//   dx:    atol_T * D + rtol_T |ref|, D = rstd_g * max over the group of
//          (|g| + mean|g| + |x_hat| mean|g x_hat|) (the terms dx adds)
//   dgamma, dbeta, dscale, dshift: rtol_P |ref| + 2e-5 * sum |terms| + 1e-6,
//          rtol_P = 1e-5 (fp32 outputs) or rtol_T (outputs in x's dtype),
//          plus, for SiLU on 16-bit data, the library's sigmoid (one
//          tanh.approx, absolute error <= 2^-11 in tanh, so <= 2.5e-4 in the
//          sigmoid) carried through du = dy s (1 + v (1 - s)): 2.5e-4 |dy|
//          (1 + |v|) per value, summed like the terms (a [4, 256] fp16 case
//          missed the bound without it by 10% on one seed)
// The backward reference uses the mean and rstd the device wrote.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "dtype_io.hpp"
#include "fusednorm.h"
#include "gpu_util.hpp"

using namespace fnorm_test;

namespace {

struct Tol {
  double atol, rtol;
};
Tol tol_for(fnorm_dtype_t t) {
  switch (t) {
    case FNORM_DTYPE_FLOAT32: return {5e-5, 5e-5};
    case FNORM_DTYPE_FLOAT16: return {2e-3, 2e-3};
    default: return {1.6e-2, 1.6e-2};
  }
}

struct Case {
  int64_t n, c;
  std::vector<int64_t> spatial;
  int64_t groups;
  fnorm_dtype_t dtype;
  bool cl;     // channels-last
  bool silu;
  int w;       // 0 none, 1 x's dtype, 2 fp32
  int ss;      // 0 none, 1 x's dtype, 2 fp32
  bool inplace = false;
  bool check_bwd = true;
};

std::string name(const Case &k) {
  std::string s = "[" + std::to_string(k.n) + "," + std::to_string(k.c);
  for (int64_t d : k.spatial) s += "," + std::to_string(d);
  s += "] G=" + std::to_string(k.groups) + " " + dtype_str(k.dtype) + (k.cl ? " NHWC" : " NCHW") +
       (k.silu ? " silu" : "") + (k.w ? (k.w == 1 ? " w" : " w32") : "") + (k.ss ? (k.ss == 1 ? " ss" : " ss32") : "") +
       (k.inplace ? " inplace" : "");
  return s;
}

struct TDesc {
  fnorm_tensor_desc_t d = nullptr;
  TDesc(fnorm_dtype_t t, const std::vector<int64_t> &dims, const std::vector<int64_t> &strides = {}) {
    fnorm_tensor_desc_create(&d);
    CHECK_STATUS(fnorm_tensor_desc_set(d, t, static_cast<int32_t>(dims.size()), dims.data(),
                                       strides.empty() ? nullptr : strides.data()),
                 FNORM_STATUS_SUCCESS);
  }
  ~TDesc() { fnorm_tensor_desc_destroy(d); }
};

double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

int64_t g_failures_printed = 0;
bool close(double got, double ref, double bound, const std::string &what, int64_t i) {
  const bool ok = std::fabs(got - ref) <= bound;  // NaN fails
  if (!ok && g_failures_printed++ < 10)
    std::fprintf(stderr, "  %s[%lld]: got %.8g, want %.8g (bound %.3g)\n", what.c_str(), static_cast<long long>(i), got,
                 ref, bound);
  return ok;
}

// Runs one case; returns true when every value passed.
bool run_case(fnorm_handle_t h, const Case &k, std::mt19937_64 &rng) {
  const int64_t S = [&] {
    int64_t s = 1;
    for (int64_t d : k.spatial) s *= d;
    return s;
  }();
  const int64_t N = k.n, C = k.c, G = k.groups, Cg = C / G, E = N * C * S;
  const fnorm_dtype_t T = k.dtype;
  const size_t es = elem_size(T);
  std::vector<int64_t> dims = {N, C};
  dims.insert(dims.end(), k.spatial.begin(), k.spatial.end());
  std::vector<int64_t> strides;
  if (k.cl) {  // N, spatial..., C
    strides.assign(dims.size(), 0);
    strides[1] = 1;
    int64_t st = C;
    for (size_t i = dims.size() - 1; i >= 2; --i) {
      strides[i] = st;
      st *= dims[i];
    }
    strides[0] = st;
  }
  auto idx = [&](int64_t n, int64_t c, int64_t s) { return k.cl ? (n * S + s) * C + c : (n * C + c) * S + s; };
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // Host inputs, as stored.
  std::vector<unsigned char> hx(E * es), hdy(E * es);
  std::vector<float> mu(N * C);
  for (auto &m : mu) m = 2.f * u(rng);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        store_host(hx.data(), T, idx(n, c, s), mu[n * C + c] + u(rng));
        store_host(hdy.data(), T, idx(n, c, s), u(rng));
      }
  const fnorm_dtype_t wt = k.w == 2 ? FNORM_DTYPE_FLOAT32 : T, st = k.ss == 2 ? FNORM_DTYPE_FLOAT32 : T;
  std::vector<unsigned char> hw(2 * C * elem_size(wt)), hss(2 * N * C * elem_size(st));
  for (int64_t i = 0; i < 2 * C; ++i) store_host(hw.data(), wt, i, 1.5f * u(rng));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      store_host(hss.data(), st, n * 2 * C + c, 0.5f * u(rng));      // scale: first half of temb row n
      store_host(hss.data(), st, n * 2 * C + C + c, u(rng));         // shift: second half
    }
  auto gamma = [&](int64_t c) { return k.w ? load_host(hw.data(), wt, c) : 1.0; };
  auto beta = [&](int64_t c) { return k.w ? load_host(hw.data(), wt, C + c) : 0.0; };
  auto scale = [&](int64_t n, int64_t c) { return k.ss ? load_host(hss.data(), st, n * 2 * C + c) : 0.0; };
  auto shift = [&](int64_t n, int64_t c) { return k.ss ? load_host(hss.data(), st, n * 2 * C + C + c) : 0.0; };

  DeviceBuffer dx_in(E * es), ddy(E * es), dy_out(E * es), ddx(E * es), dw(hw.size()), dss(hss.size());
  DeviceBuffer dmean(N * G * 4), drstd(N * G * 4), dgw(2 * C * elem_size(wt)), dgss(hss.size()), dgsh(hss.size());
  CUDA_OK(cudaMemcpy(dx_in.p, hx.data(), hx.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(ddy.p, hdy.data(), hdy.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dw.p, hw.data(), hw.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dss.p, hss.data(), hss.size(), cudaMemcpyHostToDevice));
  dy_out.poison();
  ddx.poison();
  dmean.poison();
  drstd.poison();
  dgw.poison();
  dgss.poison();
  dgsh.poison();

  fnorm_groupnorm_desc_t gn;
  fnorm_groupnorm_desc_create(&gn);
  const double eps = 1e-5;
  fnorm_groupnorm_desc_set(gn, G, eps, k.silu ? FNORM_GN_ACTIVATION_SILU : FNORM_GN_ACTIVATION_NONE);
  TDesc xd(T, dims, strides), wd(wt, {C}), ssd(st, {N, C}, {2 * C, 1});
  fnorm_tensor_desc_t wdp = k.w ? wd.d : nullptr, ssdp = k.ss ? ssd.d : nullptr;
  const void *g_ = k.w ? dw.p : nullptr, *b_ = k.w ? dw.at(C * elem_size(wt)) : nullptr;
  const void *s_ = k.ss ? dss.p : nullptr, *t_ = k.ss ? dss.at(C * elem_size(st)) : nullptr;
  size_t wsf = 0, wsb = 0;
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn, xd.d, &wsf), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn, xd.d, wdp, ssdp, &wsb), FNORM_STATUS_SUCCESS);
  DeviceBuffer ws(std::max(wsf, wsb));
  // In place: y over a copy of x.
  void *y = dy_out.p;
  if (k.inplace) CUDA_OK(cudaMemcpy(y, dx_in.p, E * es, cudaMemcpyDeviceToDevice));
  const void *xin = k.inplace ? y : dx_in.p;
  CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn, xd.d, xin, wdp, g_, b_, ssdp, s_, t_, xd.d, y,
                                   static_cast<float *>(dmean.p), static_cast<float *>(drstd.p), ws.p, wsf),
               FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  const auto hy = to_host(y, E * es);
  const auto hm = to_host(dmean.p, N * G * 4), hr = to_host(drstd.p, N * G * 4);
  // Forward reference.
  const Tol tl = tol_for(T);
  bool ok = true;
  std::vector<double> rmean(N * G), rrstd(N * G), rmax(N * G);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s1 = 0, s2 = 0, mx = 0;
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
        for (int64_t s = 0; s < S; ++s) {
          s1 += load_host(hx.data(), T, idx(n, c, s));
          mx = std::max(mx, std::fabs(load_host(hx.data(), T, idx(n, c, s))));
        }
      rmax[n * G + g] = mx;
      const double m = s1 / (Cg * S);
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
        for (int64_t s = 0; s < S; ++s) {
          const double d = load_host(hx.data(), T, idx(n, c, s)) - m;
          s2 += d * d;
        }
      rmean[n * G + g] = m;
      rrstd[n * G + g] = 1.0 / std::sqrt(s2 / (Cg * S) + eps);
      float gm, gr;
      std::memcpy(&gm, &hm[4 * (n * G + g)], 4);
      std::memcpy(&gr, &hr[4 * (n * G + g)], 4);
      ok &= close(gm, m, 1e-5 * (1 + std::fabs(m)), "mean", n * G + g);
      ok &= close(gr, rrstd[n * G + g], 1e-4 * rrstd[n * G + g], "rstd", n * G + g);
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t gi = n * G + c / Cg;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = idx(n, c, s);
        double v = (load_host(hx.data(), T, i) - rmean[gi]) * rrstd[gi] * gamma(c) + beta(c);
        v = v * (1 + scale(n, c)) + shift(n, c);
        if (k.silu) v = v * sigmoid(v);
        // y = x * (rstd gamma') + (beta' - mean rstd gamma') in fp32: each
        // term carries |x| rstd |gamma'| 2^-24, large where the group's
        // variance is small beside eps (PyTorch's kernel computes alike).
        const double cond = 8 * 1.1920929e-7 * rmax[gi] * rrstd[gi] * std::fabs(gamma(c) * (1 + scale(n, c)));
        ok &= close(load_host(hy.data(), T, i), v, tl.atol + tl.rtol * std::fabs(v) + cond, "y", i);
      }
    }
  // Determinism: a second forward gives the same bits (not in place).
  if (!k.inplace) {
    DeviceBuffer y2(E * es);
    y2.poison();
    CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn, xd.d, xin, wdp, g_, b_, ssdp, s_, t_, xd.d, y2.p, nullptr,
                                     nullptr, ws.p, wsf),
                 FNORM_STATUS_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    ok &= to_host(y2.p, E * es) == hy;
  }
  if (!k.check_bwd) {
    fnorm_groupnorm_desc_destroy(gn);
    return ok;
  }
  // Backward (from the device's mean / rstd); in place: dx over a copy of dy.
  void *dxp = ddx.p;
  if (k.inplace) CUDA_OK(cudaMemcpy(dxp, ddy.p, E * es, cudaMemcpyDeviceToDevice));
  const void *dyin = k.inplace ? dxp : ddy.p;
  void *dg = k.w ? dgw.p : nullptr, *db = k.w ? dgw.at(C * elem_size(wt)) : nullptr;
  // dscale and dshift: strided like the inputs (row stride 2C), each in a buffer of its own (the halves of one
  // buffer would overlap in extent, which the aliasing rule refuses for outputs).
  void *dsc = k.ss ? dgss.p : nullptr, *dsh = k.ss ? dgsh.p : nullptr;
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn, xd.d, dx_in.p, xd.d, dyin, static_cast<float *>(dmean.p),
                                   static_cast<float *>(drstd.p), wdp, g_, b_, ssdp, s_, t_, xd.d, dxp, dg, db, dsc,
                                   dsh, ws.p, wsb),
               FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  const auto hdx = to_host(dxp, E * es), hgw = to_host(dgw.p, dgw.bytes), hgss = to_host(dgss.p, dgss.bytes);
  const auto hgsh = to_host(dgsh.p, dgsh.bytes);
  std::vector<double> dgam(C, 0), dbet(C, 0), dgam_abs(C, 0), dbet_abs(C, 0), dgam_err(C, 0), dbet_err(C, 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      float fm, fr;
      std::memcpy(&fm, &hm[4 * (n * G + g)], 4);
      std::memcpy(&fr, &hr[4 * (n * G + g)], 4);
      const double mean = fm, rstd = fr, m = static_cast<double>(Cg * S);
      double sg = 0, sgx = 0, ag = 0, agx = 0, gmax = 0;
      std::vector<double> du(Cg * S), xh(Cg * S);
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
        double A = 0, B = 0, aA = 0, aB = 0, eA = 0, eB = 0;
        const double ga = gamma(c), be = beta(c), sc = scale(n, c), sh = shift(n, c);
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = idx(n, c, s), l = (c - g * Cg) * S + s;
          xh[l] = (load_host(hx.data(), T, i) - mean) * rstd;
          double d = load_host(hdy.data(), T, i);
          if (k.silu) {
            const double v = (xh[l] * ga + be) * (1 + sc) + sh, sgm = sigmoid(v);
            d = d * sgm * (1 + v * (1 - sgm));
          }
          du[l] = d;
          // The sigmoid's approximation in du (16-bit SiLU; header comment).
          const double de = k.silu && T != FNORM_DTYPE_FLOAT32
                                ? 2.5e-4 * std::fabs(load_host(hdy.data(), T, i)) *
                                      (1 + std::fabs((xh[l] * ga + be) * (1 + sc) + sh))
                                : 0.0;
          eA += de;
          eB += de * std::fabs(xh[l]);
          const double gg = d * (1 + sc) * ga;
          sg += gg;
          sgx += gg * xh[l];
          ag += std::fabs(gg);
          agx += std::fabs(gg * xh[l]);
          gmax = std::max(gmax, std::fabs(gg));
          A += d;
          B += d * xh[l];
          aA += std::fabs(d);
          aB += std::fabs(d * xh[l]);
        }
        const double rp = st == FNORM_DTYPE_FLOAT32 ? 1e-5 : tl.rtol;
        if (k.ss) {
          const int64_t o = n * 2 * C + c;
          const double rds = ga * B + be * A, rdh = A;
          ok &= close(load_host(hgss.data(), st, o), rds,
                      rp * std::fabs(rds) + 2e-5 * (std::fabs(ga) * aB + std::fabs(be) * aA) +
                          std::fabs(ga) * eB + std::fabs(be) * eA + 1e-6,
                      "dscale", o);
          ok &= close(load_host(hgsh.data(), st, o), rdh, rp * std::fabs(rdh) + 2e-5 * aA + eA + 1e-6, "dshift", o);
        }
        dgam[c] += (1 + sc) * B;
        dbet[c] += (1 + sc) * A;
        dgam_abs[c] += std::fabs((1 + sc)) * aB;
        dbet_abs[c] += std::fabs((1 + sc)) * aA;
        dgam_err[c] += std::fabs((1 + sc)) * eB;
        dbet_err[c] += std::fabs((1 + sc)) * eA;
      }
      double xmax = 0;
      for (double v : xh) xmax = std::max(xmax, std::fabs(v));
      const double D = rstd * (gmax + ag / m + xmax * agx / m);
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = idx(n, c, s), l = (c - g * Cg) * S + s;
          const double gg = du[l] * (1 + scale(n, c)) * gamma(c);
          const double ref = rstd * (gg - sg / m - xh[l] * sgx / m);
          ok &= close(load_host(hdx.data(), T, i), ref, tl.atol * D + tl.rtol * std::fabs(ref), "dx", i);
        }
    }
  if (k.w) {
    const double rp = wt == FNORM_DTYPE_FLOAT32 ? 1e-5 : tl.rtol;
    for (int64_t c = 0; c < C; ++c) {
      ok &= close(load_host(hgw.data(), wt, c), dgam[c],
                  rp * std::fabs(dgam[c]) + 2e-5 * dgam_abs[c] + dgam_err[c] + 1e-6, "dgamma", c);
      ok &= close(load_host(hgw.data(), wt, C + c), dbet[c],
                  rp * std::fabs(dbet[c]) + 2e-5 * dbet_abs[c] + dbet_err[c] + 1e-6, "dbeta", c);
    }
  }
  // Determinism of the backward: the same bits again (not in place).
  if (!k.inplace) {
    DeviceBuffer dx2(E * es), gw2(dgw.bytes), gss2(dgss.bytes), gsh2(dgsh.bytes);
    dx2.poison();
    gw2.poison();
    gss2.poison();
    gsh2.poison();
    CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn, xd.d, dx_in.p, xd.d, dyin, static_cast<float *>(dmean.p),
                                     static_cast<float *>(drstd.p), wdp, g_, b_, ssdp, s_, t_, xd.d, dx2.p,
                                     k.w ? gw2.p : nullptr, k.w ? gw2.at(C * elem_size(wt)) : nullptr,
                                     k.ss ? gss2.p : nullptr, k.ss ? gsh2.p : nullptr, ws.p, wsb),
                 FNORM_STATUS_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    ok &= to_host(dx2.p, E * es) == hdx;
    if (k.w) ok &= to_host(gw2.p, gw2.bytes) == hgw;
    if (k.ss) {
      // Only the elements the call writes (the halves of each row).
      const auto b2 = to_host(gss2.p, gss2.bytes), h2 = to_host(gsh2.p, gsh2.bytes);
      const size_t row = C * elem_size(st);
      for (int64_t n = 0; n < N; ++n) {
        ok &= std::memcmp(&b2[2 * n * row], &hgss[2 * n * row], row) == 0;
        ok &= std::memcmp(&h2[2 * n * row], &hgsh[2 * n * row], row) == 0;
      }
    }
  }
  fnorm_groupnorm_desc_destroy(gn);
  return ok;
}

// The empty tensor rules: forward writes nothing; backward zeros the sums.
void test_empty(fnorm_handle_t h) {
  fnorm_groupnorm_desc_t gn;
  fnorm_groupnorm_desc_create(&gn);
  TDesc xd(FNORM_DTYPE_FLOAT16, {3, 64, 0, 5}), wd(FNORM_DTYPE_FLOAT32, {64}), ssd(FNORM_DTYPE_FLOAT32, {3, 64}, {128, 1});
  DeviceBuffer mean(3 * 32 * 4), g(2 * 64 * 4), ss(3 * 128 * 4), sh(3 * 128 * 4);
  mean.poison();
  g.poison();
  ss.poison();
  sh.poison();
  size_t ws = 1;
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn, xd.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, size_t{0});
  CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn, xd.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   xd.d, nullptr, static_cast<float *>(mean.p), nullptr, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn, xd.d, nullptr, xd.d, nullptr, nullptr, nullptr, wd.d, nullptr,
                                   nullptr, ssd.d, nullptr, nullptr, xd.d, nullptr, g.p, g.at(256), ss.p, sh.p,
                                   nullptr, 0),
               FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  const auto hm = to_host(mean.p, mean.bytes), hg = to_host(g.p, g.bytes), hs = to_host(ss.p, ss.bytes);
  const auto hh = to_host(sh.p, sh.bytes);
  CHECK(std::all_of(hm.begin(), hm.end(), [](unsigned char b) { return b == 0xFF; }));  // untouched
  CHECK(std::all_of(hg.begin(), hg.end(), [](unsigned char b) { return b == 0; }));
  bool rows = true;
  for (int n = 0; n < 3; ++n)
    for (int c = 0; c < 64; ++c) {  // the rows' first halves are written; the rest stays poisoned
      float v, w, z;
      std::memcpy(&v, &hs[4 * (n * 128 + c)], 4);
      std::memcpy(&w, &hh[4 * (n * 128 + c)], 4);
      std::memcpy(&z, &hs[4 * (n * 128 + 64 + c)], 4);
      rows &= v == 0.f && w == 0.f && std::isnan(z);
    }
  CHECK(rows);
  fnorm_groupnorm_desc_destroy(gn);
}


// More than 2^31 values ([3, 32, 23000, 1000] bf16, 2.2 G): the last
// sample's last group (offsets past 2^31) against the float64 reference,
// forward and backward, in both layouts. FNORM_TEST_SKIP_HUGE=1 leaves it out.
void test_huge(fnorm_handle_t h) {
  if (const char *e = std::getenv("FNORM_TEST_SKIP_HUGE"); e && std::string(e) == "1") return;
  const int64_t N = 3, C = 32, H = 23000, W = 1000, S = H * W, G = 32, E = N * C * S;
  const fnorm_dtype_t T = FNORM_DTYPE_BFLOAT16;
  DeviceBuffer x(E * 2), dy(E * 2), y(E * 2), dx(E * 2), mean(N * G * 4), rstd(N * G * 4);
  CUDA_OK(fill_uniform(T, x.p, E, 11, -1.f, 1.f, S, 2.f, nullptr));
  CUDA_OK(fill_uniform(T, dy.p, E, 12, -1.f, 1.f, S, 0.f, nullptr));
  fnorm_groupnorm_desc_t gn;
  fnorm_groupnorm_desc_create(&gn);
  fnorm_groupnorm_desc_set(gn, G, 1e-5, FNORM_GN_ACTIVATION_SILU);
  for (int cl = 0; cl < 2; ++cl) {
    y.poison();
    dx.poison();
    mean.poison();
    rstd.poison();
    TDesc xd(T, {N, C, H, W}, cl ? std::vector<int64_t>{S * C, 1, W * C, C} : std::vector<int64_t>{});
    size_t wf = 0, wb = 0;
    CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn, xd.d, &wf), FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn, xd.d, nullptr, nullptr, &wb), FNORM_STATUS_SUCCESS);
    DeviceBuffer ws(std::max(wf, wb));
    CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn, xd.d, x.p, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     xd.d, y.p, static_cast<float *>(mean.p), static_cast<float *>(rstd.p), ws.p, wf),
                 FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn, xd.d, x.p, xd.d, dy.p, static_cast<float *>(mean.p),
                                     static_cast<float *>(rstd.p), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     xd.d, dx.p, nullptr, nullptr, nullptr, nullptr, ws.p, wb),
                 FNORM_STATUS_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    // The last sample on the host (channels-last interleaves its groups).
    const size_t off = static_cast<size_t>(2 * C * S) * 2, bytes = static_cast<size_t>(C * S) * 2;
    const auto hx = to_host(x.at(off), bytes), hdy = to_host(dy.at(off), bytes);
    const auto hy = to_host(y.at(off), bytes), hdx = to_host(dx.at(off), bytes);
    const auto hm = to_host(mean.p, N * G * 4), hr = to_host(rstd.p, N * G * 4);
    const int64_t g = G - 1;  // channel 31
    auto at = [&](int64_t s) { return cl ? s * C + g : g * S + s; };
    double s1 = 0, s2 = 0;
    for (int64_t s = 0; s < S; ++s) s1 += load_host(hx.data(), T, at(s));
    const double mu = s1 / S;
    for (int64_t s = 0; s < S; ++s) {
      const double d = load_host(hx.data(), T, at(s)) - mu;
      s2 += d * d;
    }
    const double rs = 1.0 / std::sqrt(s2 / S + 1e-5);
    float fm, fr;
    std::memcpy(&fm, &hm[4 * (2 * G + g)], 4);
    std::memcpy(&fr, &hr[4 * (2 * G + g)], 4);
    bool ok = close(fm, mu, 1e-5 * (1 + std::fabs(mu)), "huge mean", g) && close(fr, rs, 1e-4 * rs, "huge rstd", g);
    double sg = 0, sgx = 0, ag = 0;
    std::vector<double> du(S), xh(S);
    for (int64_t s = 0; s < S; ++s) {
      xh[s] = (load_host(hx.data(), T, at(s)) - fm) * fr;
      const double sgm = sigmoid(xh[s]);
      du[s] = load_host(hdy.data(), T, at(s)) * sgm * (1 + xh[s] * (1 - sgm));
      sg += du[s];
      sgx += du[s] * xh[s];
      ag += std::fabs(du[s]);
    }
    const Tol tl = tol_for(T);
    for (int64_t s = 0; s < S; ++s) {
      const double xv = (load_host(hx.data(), T, at(s)) - mu) * rs, yv = xv * sigmoid(xv);
      ok &= close(load_host(hy.data(), T, at(s)), yv, tl.atol + tl.rtol * std::fabs(yv), "huge y", at(s));
      const double ref = fr * (du[s] - sg / S - xh[s] * sgx / S);
      ok &= close(load_host(hdx.data(), T, at(s)), ref, tl.atol * fr * (2 + 2 * ag / S) + tl.rtol * std::fabs(ref),
                  "huge dx", at(s));
    }
    record(ok, __FILE__, __LINE__, cl ? "huge NHWC" : "huge NCHW");
    std::printf("%s [3,32,23000,1000] bf16 %s silu (last group, offsets past 2^31)\n", ok ? "ok  " : "FAIL",
                cl ? "NHWC" : "NCHW");
    std::fflush(stdout);
  }
  fnorm_groupnorm_desc_destroy(gn);
}

}  // namespace

int main() {
  if (skip_without_gpu()) return 77;
  const uint64_t seed = test_seed();
  std::mt19937_64 rng(seed);
  fnorm_handle_t h;
  CHECK_STATUS(fnorm_create(&h), FNORM_STATUS_SUCCESS);
  const fnorm_dtype_t F32 = FNORM_DTYPE_FLOAT32, F16 = FNORM_DTYPE_FLOAT16, BF = FNORM_DTYPE_BFLOAT16;
  std::vector<Case> cases;
  for (fnorm_dtype_t t : {F32, F16, BF})
    for (bool cl : {false, true}) {
      cases.push_back({2, 64, {7, 7}, 32, t, cl, false, 1, 0});
      cases.push_back({2, 64, {7, 7}, 32, t, cl, true, 2, 2});
      cases.push_back({1, 32, {3, 5}, 32, t, cl, true, 1, 1});     // C/G = 1
      cases.push_back({3, 16, {8, 8}, 1, t, cl, false, 2, 1});     // G = 1
      cases.push_back({2, 40, {1, 1}, 40, t, cl, true, 0, 2});     // G = C, 1x1
      cases.push_back({5, 320, {9, 9}, 32, t, cl, true, 1, 1});    // many samples, Cg = 10
      cases.push_back({1, 128, {32, 32}, 32, t, cl, true, 2, 0, true});  // in place
      cases.push_back({2, 96, {13}, 8, t, cl, false, 0, 0});       // [N, C, L]
      cases.push_back({2, 64, {3, 4, 5}, 16, t, cl, true, 1, 1});  // NCDHW / NDHWC
    }
  cases.push_back({4, 256, {}, 32, F16, false, true, 1, 1});       // [N, C]
  cases.push_back({1, 4096, {2}, 1, F32, false, false, 1, 0});     // G = 1, wide group
  cases.push_back({1, 512, {64, 64}, 32, BF, false, true, 1, 1});  // several tiles per group
  cases.push_back({1, 512, {64, 64}, 32, BF, true, true, 1, 1});
  cases.push_back({2, 1280, {16, 16}, 32, F16, true, true, 2, 2});
  cases.push_back({1, 512, {256, 256}, 32, BF, false, true, 1, 0});  // large (33.5 M values)
  cases.push_back({1, 512, {256, 256}, 32, BF, true, true, 1, 0});
  cases.push_back({1, 64, {512, 512}, 1, BF, false, false, 0, 0});   // G = 1 large: two passes over x
  for (const Case &k : cases) {
    const bool ok = run_case(h, k, rng);
    record(ok, __FILE__, __LINE__, name(k));
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", name(k).c_str());
    std::fflush(stdout);
  }
  test_empty(h);
  test_huge(h);
  fnorm_destroy(h);
  return finish("test_groupnorm");
}
