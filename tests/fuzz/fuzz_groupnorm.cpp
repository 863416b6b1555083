/* SPDX-License-Identifier: Apache-2.0 */
// libFuzzer target: GroupNorm's descriptor, size queries and launches
// (forward and backward) with fuzzed groups / epsilon / activation, x
// descriptors of any rank, sizes and strides (both layouts and garbage),
// w / ss descriptors, pointers (NULL, misaligned, aliased) and workspace
// sizes, against the fake handle (see fuzz_input.hpp).
//
// Beyond "no crash, a readable message" it checks what api/fusednorm.h
// promises of these calls: every status is one the header lists; a refusal
// of the arguments names one of them in quotes; a size query's answer is 0
// for an empty x, never smaller with w / ss than without (backward), and
// enough for the launch with the same descriptors; and a launch that went
// past validation (to the device, which the test's environment hides) had
// its required pointers, and no output the same address as another buffer
// except the in-place pairs (fwd: y == x; bwd: dx == dy, dx == x).
#include "fuzz_input.hpp"

namespace {

bool one_of(fnorm_status_t s, std::initializer_list<fnorm_status_t> set) {
  for (fnorm_status_t t : set)
    if (s == t) return true;
  return false;
}

// The launches' statuses (api/fusednorm.h), and NO_DEVICE: a call that
// passes validation meets a runtime with no device here.
constexpr std::initializer_list<fnorm_status_t> kLaunchStatuses = {
    FNORM_STATUS_SUCCESS,          FNORM_STATUS_BAD_PARAM_NULL_POINTER, FNORM_STATUS_BAD_PARAM_SHAPE,
    FNORM_STATUS_BAD_PARAM,        FNORM_STATUS_INSUFFICIENT_WORKSPACE, FNORM_STATUS_NOT_SUPPORTED,
    FNORM_STATUS_NOT_SUPPORTED_BUILD, FNORM_STATUS_CUDA_ERROR,         FNORM_STATUS_NO_DEVICE};
// The size queries touch no GPU.
constexpr std::initializer_list<fnorm_status_t> kQueryStatuses = {
    FNORM_STATUS_SUCCESS,   FNORM_STATUS_BAD_PARAM_NULL_POINTER, FNORM_STATUS_BAD_PARAM_SHAPE,
    FNORM_STATUS_BAD_PARAM, FNORM_STATUS_NOT_SUPPORTED,          FNORM_STATUS_NOT_SUPPORTED_BUILD};

[[noreturn]] void finding(const char *what, fnorm_status_t st, const char *why) {
  char msg[512];
  fnorm_get_last_error_message(msg, sizeof msg);
  std::fprintf(stderr, "%s: status %d: %s\n  last error: %s\n", what, static_cast<int>(st), why, msg);
  std::abort();
}

// The status is documented, the message readable; a refusal of the
// arguments (the BAD_PARAM band, NOT_SUPPORTED) names one of `args` in quotes.
void expect(fnorm_status_t st, std::initializer_list<fnorm_status_t> set, std::initializer_list<const char *> args,
            const char *what) {
  fuzz::read_last_error();
  if (!one_of(st, set)) finding(what, st, "not a status the header lists for this call");
  const fnorm_status_t cat = fnorm_status_category(st);
  if (cat != FNORM_STATUS_BAD_PARAM && st != FNORM_STATUS_NOT_SUPPORTED) return;
  char msg[512];
  fnorm_get_last_error_message(msg, sizeof msg);
  for (const char *a : args) {
    char quoted[64];
    std::snprintf(quoted, sizeof quoted, "'%s'", a);
    if (std::strstr(msg, quoted) != nullptr) return;
  }
  finding(what, st, "the message names none of the call's arguments");
}

// Past validation: the call met the (absent) device.
bool reached_device(fnorm_status_t st) { return st == FNORM_STATUS_NO_DEVICE || st == FNORM_STATUS_CUDA_ERROR; }

int64_t elements(fnorm_tensor_desc_t d) {
  int64_t n = -1;
  return fnorm_tensor_desc_get_elements(d, &n) == FNORM_STATUS_SUCCESS ? n : -1;
}

// One buffer of a launch: its name, pointer, whether the call writes it, and
// an upper bound of its extent in bytes.
struct Buf {
  const char *name;
  const void *p;
  bool out;
  size_t bound;
};

size_t sat_mul(size_t a, size_t b) { return b != 0 && a > SIZE_MAX / b ? SIZE_MAX : a * b; }
size_t sat_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

// An upper bound of the bytes a descriptor's elements span (4-byte elements
// at most: fp32 / fp16 / bf16).
size_t span_bound(fnorm_tensor_desc_t d) {
  int32_t rank = 0;
  int64_t dims[FNORM_MAX_RANK] = {}, strides[FNORM_MAX_RANK] = {};
  if (d == nullptr || fnorm_tensor_desc_get(d, nullptr, &rank, dims, strides, FNORM_MAX_RANK) != FNORM_STATUS_SUCCESS)
    return 0;
  size_t last = 0;
  for (int32_t i = 0; i < rank; ++i) {
    if (dims[i] <= 0) return 0;
    last = sat_add(last, sat_mul(static_cast<size_t>(dims[i] - 1), static_cast<size_t>(strides[i])));
  }
  return sat_mul(sat_add(last, 1), 4);
}

// A launch that went past validation with a non-empty x: no output shares
// its address with another buffer unless the pair is allowed in place.
// (Equal addresses only: the fuzzed pointers are 64 GiB apart or a few
// bytes off, so equality is the overlap this can judge without extents;
// extents up to SIZE_MAX included: core's overlap test compares distances.)
void expect_no_alias(std::initializer_list<Buf> bufs, std::initializer_list<std::pair<const char *, const char *>> ok,
                     const char *what, fnorm_status_t st) {
  for (const Buf *a = bufs.begin(); a != bufs.end(); ++a)
    for (const Buf *b = a + 1; b != bufs.end(); ++b) {
      if (a->p == nullptr || a->p != b->p || !(a->out || b->out)) continue;
      bool allowed = false;
      for (const auto &pr : ok)
        allowed |= (std::strcmp(pr.first, a->name) == 0 && std::strcmp(pr.second, b->name) == 0) ||
                   (std::strcmp(pr.first, b->name) == 0 && std::strcmp(pr.second, a->name) == 0);
      if (!allowed) {
        std::fprintf(stderr, "%s: '%s' == '%s'\n", what, a->name, b->name);
        finding(what, st, "passed validation with an output overlapping another buffer");
      }
    }
}

void expect_given(std::initializer_list<std::pair<const char *, const void *>> bufs, const char *what,
                  fnorm_status_t st) {
  for (const auto &b : bufs)
    if (b.second == nullptr) {
      std::fprintf(stderr, "%s: '%s' is NULL\n", what, b.first);
      finding(what, st, "passed validation without a required pointer");
    }
}

// The query answered `bytes` for these descriptors; a launch given at least
// that many must not say the workspace is short.
void expect_enough(fnorm_status_t query, size_t bytes, size_t given, fnorm_status_t launch, const char *what) {
  if (query == FNORM_STATUS_SUCCESS && given >= bytes && launch == FNORM_STATUS_INSUFFICIENT_WORKSPACE)
    finding(what, launch, "the size query's answer is short for the launch");
}

// w_desc ([C] packed, sizes of 1 around it) and ss_desc ([N, C, 1...], any
// strides): mostly shaped after x so that the launches get past them,
// sometimes anything fuzz_input makes.
void fill_params(fuzz::Input &in, fnorm_tensor_desc_t x, fuzz::Tensor &w, fuzz::Tensor &ss) {
  fnorm_dtype_t dt = FNORM_DTYPE_FLOAT32;
  int32_t rank = 0;
  int64_t dims[FNORM_MAX_RANK] = {}, strides[FNORM_MAX_RANK] = {};
  const bool have_x = fnorm_tensor_desc_get(x, &dt, &rank, dims, strides, FNORM_MAX_RANK) == FNORM_STATUS_SUCCESS &&
                      rank >= 2;
  auto dtype = [&]() {
    switch (in.pick(4)) {
      case 0: return FNORM_DTYPE_FLOAT32;
      case 1: return in.enum_value<fnorm_dtype_t>(6);
      default: return dt;
    }
  };
  if (!have_x || in.pick(4) == 0) {
    w.fill(in);
  } else {
    const int64_t c = dims[1];
    const unsigned shape = in.pick(3);  // [C], [1, C, 1], [C, 1]
    const int64_t wd[3] = {shape == 1 ? 1 : c, shape == 1 ? c : 1, 1};
    const int64_t ws[3] = {in.flag() ? 1 : in.dim(), 1, 1};
    const int32_t wr = shape == 0 ? 1 : shape == 1 ? 3 : 2;
    fnorm_tensor_desc_set(w.d, dtype(), wr, wd, in.pick(4) ? nullptr : ws);
  }
  if (!have_x || in.pick(4) == 0) {
    ss.fill(in);
  } else {
    const int64_t n = dims[0], c = dims[1];
    const int32_t sr = 2 + static_cast<int32_t>(in.pick(3));  // [N, C] with 0..2 trailing 1s
    int64_t sd[4] = {n, c, 1, 1}, st[4] = {1, 1, 1, 1};
    switch (in.pick(4)) {
      case 0: st[0] = c > 0 ? c : 1; break;                           // packed
      case 1: st[0] = c > 0 && c < INT64_MAX / 2 ? 2 * c : 1; break;  // a half of temb.chunk(2, 1)
      case 2: st[0] = 1, st[1] = n > 0 ? n : 1; break;                // transposed
      default: st[0] = in.dim(), st[1] = in.dim();                    // anything (overlapping too)
    }
    fnorm_tensor_desc_set(ss.d, dtype(), sr, sd, in.pick(8) ? st : nullptr);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Input in(data, size);
  fnorm_groupnorm_desc_t g = nullptr;
  fnorm_groupnorm_desc_create(&g);
  {
    // Mostly group counts that divide common C, sometimes any size.
    const int64_t groups = in.pick(4) ? in.one_of<int64_t>({1, 2, 3, 4, 8, 16, 32, 64}) : in.dim();
    const double eps = in.pick(4) ? 1e-5 : in.real();
    const fnorm_gn_activation_t act = in.enum_value<fnorm_gn_activation_t>(2);
    int64_t g0 = 0;
    double e0 = 0;
    fnorm_gn_activation_t a0 = FNORM_GN_ACTIVATION_NONE;
    fnorm_groupnorm_desc_get(g, &g0, &e0, &a0);
    const fnorm_status_t st = fnorm_groupnorm_desc_set(in.pick(16) ? g : nullptr, groups, eps, act);
    expect(st, {FNORM_STATUS_SUCCESS, FNORM_STATUS_BAD_PARAM_NULL_POINTER, FNORM_STATUS_BAD_PARAM},
           {"desc", "groups", "epsilon", "activation"}, "fnorm_groupnorm_desc_set");
    int64_t g1 = 0;
    double e1 = 0;
    fnorm_gn_activation_t a1 = FNORM_GN_ACTIVATION_NONE;
    fnorm_groupnorm_desc_get(g, &g1, &e1, &a1);
    if (st == FNORM_STATUS_SUCCESS) {
      // The header's promise: groups >= 1, epsilon finite, >= 0, representable in fp32.
      if (g1 != groups || e1 != eps || a1 != act || g1 < 1 ||
          !(std::isfinite(e1) && e1 >= 0 && e1 <= 3.4028234663852886e38))
        finding("fnorm_groupnorm_desc_set", st, "kept a value the header says it refuses, or not the value set");
    } else if (g1 != g0 || std::memcmp(&e1, &e0, sizeof e0) != 0 || a1 != a0) {
      finding("fnorm_groupnorm_desc_set", st, "a refused set changed the descriptor");
    }
  }
  fuzz::Tensor x, y, dy, dx, w, ss;
  x.fill(in);
  // Mostly the same descriptor for y / dy / dx as x (the common valid case).
  fuzz::Tensor *ys = in.pick(3) ? &x : (y.fill(in), &y);
  fuzz::Tensor *dys = in.pick(3) ? &x : (dy.fill(in), &dy);
  fuzz::Tensor *dxs = in.pick(3) ? &x : (dx.fill(in), &dx);
  fill_params(in, x.d, w, ss);
  const fnorm_handle_t h = fuzz::handle(in);
  const fnorm_groupnorm_desc_t gd = in.pick(16) ? g : nullptr;
  const int64_t x_elems = elements(x.d);

  for (int round = 0; round < 2 && !in.empty(); ++round) {
    // ---- forward ----
    size_t fwd_ws = 777;
    const fnorm_tensor_desc_t qx = x.maybe(in);
    size_t *qout = in.pick(16) ? &fwd_ws : nullptr;
    const fnorm_status_t q = fnorm_groupnorm_fwd_workspace_size(h, gd, qx, qout);
    expect(q, kQueryStatuses, {"handle", "gn", "x_desc", "workspace_bytes"}, "fnorm_groupnorm_fwd_workspace_size");
    if (q == FNORM_STATUS_SUCCESS && x_elems == 0 && fwd_ws != 0)
      finding("fnorm_groupnorm_fwd_workspace_size", q, "an empty x needs workspace");

    const fnorm_tensor_desc_t wd = in.flag() ? w.d : nullptr, sd = in.flag() ? ss.d : nullptr;
    void *px = in.ptr();
    const void *gamma = in.flag() ? in.ptr() : nullptr, *beta = in.flag() ? in.ptr() : nullptr;
    const void *scale = in.flag() ? in.ptr() : nullptr, *shift = in.flag() ? in.ptr() : nullptr;
    void *py = in.flag() ? px : in.ptr();
    float *mean = static_cast<float *>(in.flag() ? in.ptr() : nullptr);
    float *rstd = static_cast<float *>(in.flag() ? in.ptr() : nullptr);
    void *pws = in.ptr();
    const size_t wsb = in.pick(2) ? fwd_ws : in.bytes();
    const fnorm_status_t l = fnorm_groupnorm_fwd(h, nullptr, gd, x.d, px, wd, gamma, beta, sd, scale, shift, ys->d,
                                                 py, mean, rstd, pws, wsb);
    expect(l, kLaunchStatuses,
           {"handle", "gn", "x_desc", "x", "w_desc", "gamma", "beta", "ss_desc", "scale", "shift", "y_desc", "y",
            "mean", "rstd", "workspace", "workspace_bytes"},
           "fnorm_groupnorm_fwd");
    if (h && gd && qout && qx == x.d) {
      fuzz::expect_refused(q, l, "fnorm_groupnorm_fwd");
      expect_enough(q, fwd_ws, wsb, l, "fnorm_groupnorm_fwd");
    }
    if (reached_device(l) && x_elems > 0) {
      expect_given({{"x", px}, {"y", py}}, "fnorm_groupnorm_fwd", l);
      const size_t xb = sat_mul(static_cast<size_t>(x_elems), 4), wb = span_bound(wd), sb = span_bound(sd);
      expect_no_alias({{"x", px, false, xb}, {"gamma", gamma, false, wb}, {"beta", beta, false, wb},
                       {"scale", scale, false, sb}, {"shift", shift, false, sb}, {"y", py, true, xb},
                       {"mean", mean, true, xb}, {"rstd", rstd, true, xb},
                       {"workspace", wsb ? pws : nullptr, true, wsb}},
                      {{"y", "x"}}, "fnorm_groupnorm_fwd", l);
    }

    // ---- backward ----
    size_t bwd_ws = 777, bare_ws = 777;
    const fnorm_tensor_desc_t bx = x.maybe(in);
    const fnorm_tensor_desc_t bw = in.flag() ? w.d : nullptr, bs = in.flag() ? ss.d : nullptr;
    size_t *bout = in.pick(16) ? &bwd_ws : nullptr;
    const fnorm_status_t bq = fnorm_groupnorm_bwd_workspace_size(h, gd, bx, bw, bs, bout);
    expect(bq, kQueryStatuses, {"handle", "gn", "x_desc", "w_desc", "ss_desc", "workspace_bytes"},
           "fnorm_groupnorm_bwd_workspace_size");
    if (bq == FNORM_STATUS_SUCCESS && x_elems == 0 && bwd_ws != 0)
      finding("fnorm_groupnorm_bwd_workspace_size", bq, "an empty x needs workspace");
    // Without w_desc and ss_desc the answer is never larger (header: smaller).
    if (bq == FNORM_STATUS_SUCCESS && bout &&
        fnorm_groupnorm_bwd_workspace_size(h, gd, bx, nullptr, nullptr, &bare_ws) == FNORM_STATUS_SUCCESS &&
        bare_ws > bwd_ws)
      finding("fnorm_groupnorm_bwd_workspace_size", bq, "w_desc / ss_desc made the answer smaller");
    fuzz::read_last_error();

    // Mostly the query's w / ss descriptors, sometimes the others.
    const fnorm_tensor_desc_t lw = in.pick(4) ? bw : (in.flag() ? w.d : nullptr);
    const fnorm_tensor_desc_t ls = in.pick(4) ? bs : (in.flag() ? ss.d : nullptr);
    void *bpx = in.flag() ? px : in.ptr();
    void *pdy = in.ptr();
    const float *bmean = static_cast<const float *>(in.flag() ? static_cast<void *>(mean) : in.ptr());
    const float *brstd = static_cast<const float *>(in.flag() ? static_cast<void *>(rstd) : in.ptr());
    const void *bgamma = in.flag() ? in.ptr() : nullptr, *bbeta = in.flag() ? in.ptr() : nullptr;
    const void *bscale = in.flag() ? in.ptr() : nullptr, *bshift = in.flag() ? in.ptr() : nullptr;
    void *pdx;
    switch (in.pick(4)) {
      case 0: pdx = pdy; break;
      case 1: pdx = bpx; break;
      default: pdx = in.ptr();
    }
    void *dgamma = in.flag() ? in.ptr() : nullptr, *dbeta = in.flag() ? in.ptr() : nullptr;
    void *dscale = in.flag() ? in.ptr() : nullptr, *dshift = in.flag() ? in.ptr() : nullptr;
    void *bpws = in.ptr();
    const size_t bwsb = in.pick(2) ? bwd_ws : in.bytes();
    const fnorm_status_t bl =
        fnorm_groupnorm_bwd(h, nullptr, gd, x.d, bpx, dys->d, pdy, bmean, brstd, lw, bgamma, bbeta, ls, bscale, bshift,
                            dxs->d, pdx, dgamma, dbeta, dscale, dshift, bpws, bwsb);
    expect(bl, kLaunchStatuses,
           {"handle", "gn", "x_desc", "x", "dy_desc", "dy", "mean", "rstd", "w_desc", "gamma", "beta", "ss_desc",
            "scale", "shift", "dx_desc", "dx", "dgamma", "dbeta", "dscale", "dshift", "workspace", "workspace_bytes"},
           "fnorm_groupnorm_bwd");
    if (h && gd && bout && bx == x.d && lw == bw && ls == bs) {
      fuzz::expect_refused(bq, bl, "fnorm_groupnorm_bwd");
      expect_enough(bq, bwd_ws, bwsb, bl, "fnorm_groupnorm_bwd");
    }
    if (reached_device(bl) && x_elems > 0) {
      expect_given({{"x", bpx}, {"dy", pdy}, {"mean", bmean}, {"rstd", brstd}, {"dx", pdx}}, "fnorm_groupnorm_bwd", bl);
      const size_t xb = sat_mul(static_cast<size_t>(x_elems), 4), wb = span_bound(lw), sb = span_bound(ls);
      expect_no_alias({{"x", bpx, false, xb}, {"dy", pdy, false, xb}, {"mean", bmean, false, xb},
                       {"rstd", brstd, false, xb}, {"gamma", bgamma, false, wb}, {"beta", bbeta, false, wb},
                       {"scale", bscale, false, sb}, {"shift", bshift, false, sb}, {"dx", pdx, true, xb},
                       {"dgamma", dgamma, true, wb}, {"dbeta", dbeta, true, wb}, {"dscale", dscale, true, sb},
                       {"dshift", dshift, true, sb}, {"workspace", bwsb ? bpws : nullptr, true, bwsb}},
                      {{"dx", "dy"}, {"dx", "x"}}, "fnorm_groupnorm_bwd", bl);
    }
  }
  fnorm_groupnorm_desc_destroy(g);
  return 0;
}
