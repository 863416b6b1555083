// GPU test of LayerNorm forward against the double-precision host reference.
// Fresh random inputs every run (seed printed; FNORM_TEST_SEED repeats one),
// outputs poisoned with NaN before each launch, every dtype, awkward shapes,
// misaligned pointers, padded rows, in-place, and > 2^31 elements.
// Black-box: links only the shared library (plus the test's device helpers).
//
// Tolerances (|y - ref| <= atol + rtol * |ref|, the reference computed in
// double from the inputs as stored in the tested dtype):
//   fp32: 5e-5 / 5e-5   (fp32 arithmetic; inputs have |mean| up to 4)
//   fp16: 1e-3 / 1e-3   (half an fp16 ulp is 4.9e-4 relative)
//   bf16: 8e-3 / 8e-3   (half a bf16 ulp is 3.9e-3 relative)
// mean: 2e-5 * (mean |x| of the row); rstd: 1e-4 relative. NaN never passes.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "fusednorm.h"
#include "gpu_util.hpp"
#include "halfbits.hpp"
#include "reference.hpp"

using namespace fnorm_test;

namespace {

#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    const cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__, \
                   __LINE__, #call);                                                        \
      std::exit(99);                                                                        \
    }                                                                                       \
  } while (0)

size_t elem_size(fnorm_dtype_t t) { return t == FNORM_DTYPE_FLOAT32 ? 4 : 2; }
const char *dtype_str(fnorm_dtype_t t) {
  return t == FNORM_DTYPE_FLOAT32 ? "fp32" : t == FNORM_DTYPE_FLOAT16 ? "fp16" : "bf16";
}

Tolerance tol_for(fnorm_dtype_t t) {
  switch (t) {
    case FNORM_DTYPE_FLOAT32: return {5e-5, 5e-5};
    case FNORM_DTYPE_FLOAT16: return {1e-3, 1e-3};
    default: return {8e-3, 8e-3};
  }
}

double load_host(const unsigned char *base, fnorm_dtype_t t, int64_t i) {
  if (t == FNORM_DTYPE_FLOAT32) {
    float f;
    std::memcpy(&f, base + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, base + 2 * i, 2);
  return t == FNORM_DTYPE_FLOAT16 ? half_to_float(h) : bf16_to_float(h);
}

struct DeviceBuffer {
  void *p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { CUDA_OK(cudaMalloc(&p, n)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  unsigned char *at(size_t off) { return static_cast<unsigned char *>(p) + off; }
};

std::vector<unsigned char> to_host(const void *d, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  CUDA_OK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

enum Affine { kNone = 0, kGammaBeta = 1, kGammaOnly = 2, kBetaOnly = 3 };

struct Case {
  fnorm_dtype_t dtype;
  int64_t rows;
  int64_t cols;
  Affine affine;
  int x_offset;  // elements: makes x misaligned
  int y_offset;
  int64_t x_pad;  // elements between rows of x (row stride = cols + pad)
  bool inplace;
  bool rank3;  // describe x as [rows, 2, cols / 2] normalized over the last two dims
  std::string str() const {
    char b[256];
    std::snprintf(b, sizeof b, "%s rows=%lld cols=%lld affine=%d x_off=%d y_off=%d pad=%lld%s%s",
                  dtype_str(dtype), static_cast<long long>(rows), static_cast<long long>(cols),
                  static_cast<int>(affine), x_offset, y_offset, static_cast<long long>(x_pad),
                  inplace ? " inplace" : "", rank3 ? " rank3" : "");
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

// Runs fn(row) for every row on all host cores.
template <class Fn>
void parallel_rows(int64_t rows, Fn fn) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(rows, std::thread::hardware_concurrency()));
  std::vector<std::thread> ts;
  for (int64_t t = 0; t < nt; ++t)
    ts.emplace_back([&, t] {
      for (int64_t r = t; r < rows; r += nt) fn(r);
    });
  for (auto &th : ts) th.join();
}

struct RowResult {
  double worst = 0;  // max over elements of |err| / allowed
  int64_t worst_col = -1;
  double got = 0, ref = 0;
  bool stats_ok = true;
};

// Compares the listed rows of y/mean/rstd on the host against the reference.
bool check_rows(const Case &c, const std::vector<int64_t> &rows, const unsigned char *hx,
                int64_t x_stride, const unsigned char *hy, int64_t y_stride,
                const unsigned char *hg, const unsigned char *hb, const float *hmean,
                const float *hrstd, double eps) {
  const Tolerance tol = tol_for(c.dtype);
  std::vector<RowResult> res(rows.size());
  std::vector<double> g(c.cols), b(c.cols);
  for (int64_t j = 0; j < c.cols; ++j) {
    if (hg) g[j] = load_host(hg, c.dtype, j);
    if (hb) b[j] = load_host(hb, c.dtype, j);
  }
  parallel_rows(static_cast<int64_t>(rows.size()), [&](int64_t k) {
    const int64_t r = rows[k];
    std::vector<double> xr(c.cols), yr(c.cols);
    double abs_sum = 0;
    for (int64_t j = 0; j < c.cols; ++j) {
      xr[j] = load_host(hx, c.dtype, static_cast<int64_t>(k) * x_stride + j);
      abs_sum += std::fabs(xr[j]);
    }
    double mean, rstd;
    layernorm_row_reference(xr.data(), c.cols, hg ? g.data() : nullptr, hb ? b.data() : nullptr, eps,
                            yr.data(), &mean, &rstd);
    RowResult &rr = res[k];
    for (int64_t j = 0; j < c.cols; ++j) {
      const double got = load_host(hy, c.dtype, static_cast<int64_t>(k) * y_stride + j);
      const double allowed = tol.atol + tol.rtol * std::fabs(yr[j]);
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
      std::fprintf(stderr, "  row %lld: mean %.9g (ref %.9g) rstd %.9g (ref %.9g)\n",
                   static_cast<long long>(r), hmean ? hmean[k] : 0.f, mean, hrstd ? hrstd[k] : 0.f, rstd);
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

void run_case(Ctx &ctx, const Case &c) {
  ++ctx.cases;
  const size_t es = elem_size(c.dtype);
  const int64_t xs = c.cols + c.x_pad;
  const int64_t ys = c.inplace ? xs : c.cols;
  const size_t x_elems = static_cast<size_t>((c.rows - 1) * xs + c.cols);
  const size_t y_elems = static_cast<size_t>((c.rows - 1) * ys + c.cols);
  DeviceBuffer xbuf((x_elems + 16) * es), ybuf((y_elems + 16) * es), wbuf(2 * (c.cols + 16) * es);
  DeviceBuffer stats(2 * c.rows * sizeof(float));
  void *x = xbuf.at(c.x_offset * es);
  void *y = c.inplace ? x : ybuf.at(c.y_offset * es);
  void *gamma = (c.affine == kGammaBeta || c.affine == kGammaOnly) ? wbuf.at(c.x_offset * es) : nullptr;
  void *beta = (c.affine == kGammaBeta || c.affine == kBetaOnly) ? wbuf.at((c.cols + 8) * es) : nullptr;
  float *mean = static_cast<float *>(stats.p);
  float *rstd = mean + c.rows;
  const uint64_t seed = ctx.seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(ctx.cases));
  // Rows shifted by up to +-4 with spread 2: catches E[x^2]-E[x]^2 cancellation.
  CUDA_OK(fill_uniform(c.dtype, xbuf.p, static_cast<int64_t>(x_elems + 16), seed, -1.f, 1.f, xs, 4.f, nullptr));
  CUDA_OK(fill_uniform(c.dtype, wbuf.p, c.cols + 16, seed + 1, 0.5f, 1.5f, c.cols + 16, 0.f, nullptr));
  CUDA_OK(fill_uniform(c.dtype, wbuf.at((c.cols + 8) * es), c.cols + 8, seed + 2, -0.5f, 0.5f, c.cols + 8, 0.f, nullptr));
  if (!c.inplace) CUDA_OK(cudaMemset(ybuf.p, 0xFF, ybuf.bytes));  // NaN in every dtype
  CUDA_OK(cudaMemset(stats.p, 0xFF, stats.bytes));
  // x as the reference sees it (before an in-place run overwrites it).
  const std::vector<unsigned char> hx = to_host(x, x_elems * es);

  fnorm_tensor_desc_t xd, yd, wd;
  fnorm_tensor_desc_create(&xd);
  fnorm_tensor_desc_create(&yd);
  fnorm_tensor_desc_create(&wd);
  set_desc(xd, c, xs);
  set_desc(yd, c, ys);
  const int64_t wdims[1] = {c.cols};
  fnorm_tensor_desc_set(wd, c.dtype, 1, wdims, nullptr);
  fnorm_norm_desc_set(ctx.norm, FNORM_NORM_LAYERNORM, c.rank3 ? -2 : -1, 1e-5);
  size_t ws = 1;
  CHECK_STATUS(fnorm_layernorm_fwd_workspace_size(ctx.norm, xd, yd, &ws), FNORM_STATUS_SUCCESS);
  CHECK_EQ(ws, static_cast<size_t>(0));
  const fnorm_status_t st = fnorm_layernorm_fwd(ctx.handle, nullptr, ctx.norm, xd, x, wd, gamma, beta, yd, y,
                                                mean, rstd, nullptr, 0);
  CHECK_STATUS(st, FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  fnorm_tensor_desc_destroy(xd);
  fnorm_tensor_desc_destroy(yd);
  fnorm_tensor_desc_destroy(wd);
  if (st != FNORM_STATUS_SUCCESS) {
    ++ctx.failures;
    std::fprintf(stderr, "FAIL %s: launch failed\n", c.str().c_str());
    return;
  }
  const std::vector<unsigned char> hy = to_host(y, y_elems * es);
  const std::vector<unsigned char> hg = gamma ? to_host(gamma, c.cols * es) : std::vector<unsigned char>();
  const std::vector<unsigned char> hb = beta ? to_host(beta, c.cols * es) : std::vector<unsigned char>();
  std::vector<float> hm(c.rows), hr(c.rows);
  CUDA_OK(cudaMemcpy(hm.data(), mean, c.rows * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hr.data(), rstd, c.rows * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<int64_t> rows(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) rows[r] = r;
  const bool ok = check_rows(c, rows, hx.data(), xs, hy.data(), ys, gamma ? hg.data() : nullptr,
                             beta ? hb.data() : nullptr, hm.data(), hr.data(), 1e-5);
  // Padding between rows of y (none here) and the bytes around y stay poisoned.
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

// > 2^31 elements: every element of y is checked for being written (no NaN
// poison left), and rows at the start, around element 2^31 and at the end are
// checked against the reference.
void run_huge_case(Ctx &ctx, fnorm_dtype_t dtype, int64_t cols) {
  const int64_t rows = (int64_t{1} << 31) / cols + 3;
  Case c{dtype, rows, cols, kGammaBeta, 0, 0, 0, false, false};
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
  fnorm_tensor_desc_t xd, wd;
  fnorm_tensor_desc_create(&xd);
  fnorm_tensor_desc_create(&wd);
  const int64_t dims[2] = {rows, cols};
  fnorm_tensor_desc_set(xd, dtype, 2, dims, nullptr);
  fnorm_tensor_desc_set(wd, dtype, 1, &cols, nullptr);
  fnorm_norm_desc_set(ctx.norm, FNORM_NORM_LAYERNORM, -1, 1e-5);
  float *mean = static_cast<float *>(stats.p), *rstd = mean + rows;
  CHECK_STATUS(fnorm_layernorm_fwd(ctx.handle, nullptr, ctx.norm, xd, xbuf.p, wd, wbuf.p,
                                   wbuf.at(cols * es), xd, ybuf.p, mean, rstd, nullptr, 0),
               FNORM_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  fnorm_tensor_desc_destroy(xd);
  fnorm_tensor_desc_destroy(wd);
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
  const bool ok = check_rows(c, sample, hx.data(), cols, hy.data(), cols, hw.data(), hw.data() + cols * es,
                             hm.data(), hr.data(), 1e-5);
  CHECK(ok);
  if (!ok || bad != 0) ++ctx.failures;
  std::printf("huge %s: %lld elements, %lld non-finite outputs, sampled rows %s\n", c.str().c_str(),
              static_cast<long long>(n), static_cast<long long>(bad), ok ? "match" : "MISMATCH");
}

}  // namespace

int main() {
  int ndev = 0;
  const cudaError_t derr = cudaGetDeviceCount(&ndev);
  if (derr != cudaSuccess || ndev == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices); GPU tests need one\n",
                cudaGetErrorString(derr), ndev);
    return 77;
  }
  Ctx ctx;
  const char *env_seed = std::getenv("FNORM_TEST_SEED");
  ctx.seed = env_seed ? std::strtoull(env_seed, nullptr, 0)
                      : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu (set FNORM_TEST_SEED to repeat)\n", static_cast<unsigned long long>(ctx.seed));
  CHECK_STATUS(fnorm_create(&ctx.handle), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_norm_desc_create(&ctx.norm), FNORM_STATUS_SUCCESS);
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);

  const fnorm_dtype_t dtypes[] = {FNORM_DTYPE_FLOAT32, FNORM_DTYPE_FLOAT16, FNORM_DTYPE_BFLOAT16};
  const int64_t cols_list[] = {1, 3, 31, 32, 33, 127, 768, 1000, 1024, 1536, 4096, 5000, 32768};
  const int64_t rows_list[] = {1, 7, 4096};
  for (fnorm_dtype_t dt : dtypes) {
    const long before = ctx.failures;
    for (int64_t cols : cols_list) {
      for (int64_t rows : rows_list) {
        for (Affine a : {kNone, kGammaBeta}) {
          run_case(ctx, {dt, rows, cols, a, 0, 0, 0, false, false});
          run_case(ctx, {dt, rows, cols, a, 1, 1, 0, false, false});  // x, y, gamma misaligned by one element
        }
        run_case(ctx, {dt, rows, cols, kGammaOnly, 0, 3, 0, false, false});
        run_case(ctx, {dt, rows, cols, kBetaOnly, 2, 0, 0, false, false});
      }
    }
    // Padded rows (a slice of a wider tensor), in place, rank 3 over two dims,
    // and the block tiers' boundaries (smem vs uncached, large rows).
    for (int64_t cols : {64, 1000, 4096, 32768}) {
      run_case(ctx, {dt, 513, cols, kGammaBeta, 0, 0, 8, false, false});
      run_case(ctx, {dt, 513, cols, kGammaBeta, 0, 0, 3, false, false});
      run_case(ctx, {dt, 513, cols, kGammaBeta, 0, 0, 0, true, false});
      run_case(ctx, {dt, 65, cols, kGammaBeta, 0, 0, 0, false, true});
    }
    for (int64_t cols : {40000, 65536, 100000, 131072, 262144}) run_case(ctx, {dt, 17, cols, kGammaBeta, 0, 0, 0, false, false});
    std::printf("%s: %s\n", dtype_str(dt), ctx.failures == before ? "all cases match" : "FAILURES");
  }
  run_huge_case(ctx, FNORM_DTYPE_FLOAT16, 1024);   // register tier
  run_huge_case(ctx, FNORM_DTYPE_FLOAT16, 32768);  // shared-memory tier
  std::printf("%ld cases, %ld failed\n", ctx.cases, ctx.failures);
  fnorm_norm_desc_destroy(ctx.norm);
  fnorm_destroy(ctx.handle);
  return finish("gpu layernorm_fwd");
}
