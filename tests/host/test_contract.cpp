/* SPDX-License-Identifier: Apache-2.0 */
// Host (no GPU) tests of the op contract (src/core/op.hpp) at every entry
// point: the overlap rule over every pair of a call's buffers (each pair the
// header forbids is BAD_PARAM naming both, each in-place pair it allows
// passes), tensors with no elements (valid; size queries answer 0; a launch
// validates its other arguments and enqueues nothing), the plan cache and
// the tuning read at fnorm_create. White-box: the pair matrices call each
// entry point's check (the step between describe and plan) on the fake
// handle; the pairs the issue named go through the C ABI as well, which
// refuses them before any device work.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "core/run_op.hpp"
#include "core/tuning.hpp"
#include "fake_handle.hpp"
#include "fusednorm.h"
#include "groupnorm/groupnorm.hpp"
#if FNORM_HAVE_CUBLASLT
#include "linear/linear.hpp"
#endif

using namespace fnorm_test;

namespace {

struct Norm {
  fnorm_norm_desc_t d = nullptr;
  Norm() { fnorm_norm_desc_create(&d); }
  ~Norm() { fnorm_norm_desc_destroy(d); }
};
struct Bn {
  fnorm_batchnorm_desc_t d = nullptr;
  Bn() { fnorm_batchnorm_desc_create(&d); }
  ~Bn() { fnorm_batchnorm_desc_destroy(d); }
};
struct Gn {
  fnorm_groupnorm_desc_t d = nullptr;
  Gn() { fnorm_groupnorm_desc_create(&d); }
  ~Gn() { fnorm_groupnorm_desc_destroy(d); }
};

// Distinct 64 KiB-apart, 256-byte aligned regions: slot i at arena + i * 64 KiB.
alignas(256) unsigned char g_arena[24 << 16];
void *slot(int i) { return g_arena + (static_cast<size_t>(i) << 16); }

// One entry point's buffers by name, and its check over them: returns the
// status (SUCCESS when the check passes) with the message.
struct PairMatrix {
  std::string op;
  std::vector<std::string> names;   // the call's buffers
  std::vector<std::string> outputs;  // those it writes
  std::vector<std::pair<std::string, std::string>> allowed;  // in-place pairs
  std::function<fnorm_status_t(const std::map<std::string, void *> &)> check;
};

bool is_output(const PairMatrix &m, const std::string &n) {
  for (const auto &o : m.outputs)
    if (o == n) return true;
  return false;
}
bool is_allowed(const PairMatrix &m, const std::string &a, const std::string &b) {
  for (const auto &p : m.allowed)
    if ((p.first == a && p.second == b) || (p.first == b && p.second == a)) return true;
  return false;
}

// Runs a check the way the entry point does (api_guard: Error -> status).
fnorm_status_t guarded(const std::function<void()> &f) { return fnorm::api_guard("check", f); }

// Every pair (a, b): b's pointer set to a's. A pair with an output is
// BAD_PARAM naming both, unless the header allows it in place; a pair of
// inputs passes. Each buffer alone (all distinct) passes.
void run_matrix(const PairMatrix &m) {
  std::map<std::string, void *> base;
  for (size_t i = 0; i < m.names.size(); ++i) base[m.names[i]] = slot(static_cast<int>(i));
  const fnorm_status_t clean = m.check(base);
  if (clean != FNORM_STATUS_SUCCESS) std::fprintf(stderr, "  %s: distinct buffers: %s\n", m.op.c_str(), last_error().c_str());
  CHECK_EQ(clean, FNORM_STATUS_SUCCESS);
  for (size_t i = 0; i < m.names.size(); ++i) {
    for (size_t j = 0; j < m.names.size(); ++j) {
      if (i == j) continue;
      const std::string &a = m.names[i], &b = m.names[j];
      std::map<std::string, void *> ptrs = base;
      ptrs[b] = ptrs[a];
      const fnorm_status_t st = m.check(ptrs);
      const bool refused = is_output(m, a) || is_output(m, b);
      const bool allowed = is_allowed(m, a, b);
      if (refused && !allowed) {
        const bool ok = st == FNORM_STATUS_BAD_PARAM && last_error().find("'" + a + "'") != std::string::npos &&
                        last_error().find("'" + b + "'") != std::string::npos &&
                        last_error().find("overlap") != std::string::npos;
        if (!ok)
          std::fprintf(stderr, "  %s: %s == %s: status %d, %s\n", m.op.c_str(), b.c_str(), a.c_str(), static_cast<int>(st),
                       last_error().c_str());
        CHECK(ok);
      } else {
        if (st != FNORM_STATUS_SUCCESS)
          std::fprintf(stderr, "  %s: %s == %s (%s): %s\n", m.op.c_str(), b.c_str(), a.c_str(),
                       allowed ? "in place" : "two inputs", last_error().c_str());
        CHECK_EQ(st, FNORM_STATUS_SUCCESS);
      }
    }
  }
}

// ---- the entry points' matrices -------------------------------------------------

void test_norm_overlaps() {
  fnorm_handle *h = fake_handle();
  Norm n;
  Desc x, w;
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  w.set(FNORM_DTYPE_FLOAT16, {768});
  run_matrix({"fnorm_norm_fwd",
              {"x", "residual", "sum", "gamma", "beta", "y", "mean", "rstd"},
              {"sum", "y", "mean", "rstd"},
              {{"y", "x"}, {"sum", "x"}, {"sum", "residual"}},
              [&](const std::map<std::string, void *> &p) {
                return guarded([&] {
                  fnorm::NormFwdArgs a{p.at("x"), p.at("residual"), p.at("sum"), p.at("gamma"), p.at("beta"),
                                       p.at("y"), static_cast<float *>(p.at("mean")),
                                       static_cast<float *>(p.at("rstd"))};
                  const fnorm::NormProblem pb = fnorm::NormFwd::describe({n.d, x.d, w.d, x.d}, &a);
                  fnorm::check_call<fnorm::NormFwd>(h, pb, a);
                });
              }});
  // The quantized forward: y (one-byte codes) never in place; the scale an
  // input per tensor, an output per token; amax an output.
  Desc q;
  q.set(FNORM_DTYPE_FLOAT8_E4M3, {4, 8, 768});
  for (fnorm_quant_scaling_t scaling : {FNORM_QUANT_SCALING_PER_TENSOR, FNORM_QUANT_SCALING_PER_TOKEN}) {
    const bool per_token = scaling == FNORM_QUANT_SCALING_PER_TOKEN;
    std::vector<std::string> outs = {"sum", "y", "amax", "mean", "rstd"};
    if (per_token) outs.push_back("scale");
    run_matrix({per_token ? "fnorm_norm_fwd_quant (per token)" : "fnorm_norm_fwd_quant (per tensor)",
                {"x", "residual", "sum", "gamma", "beta", "y", "scale", "amax", "mean", "rstd"},
                outs,
                {{"sum", "x"}, {"sum", "residual"}},
                [&](const std::map<std::string, void *> &p) {
                  return guarded([&] {
                    fnorm::NormFwdArgs a{p.at("x"), p.at("residual"), p.at("sum"), p.at("gamma"), p.at("beta"),
                                         p.at("y"), static_cast<float *>(p.at("mean")),
                                         static_cast<float *>(p.at("rstd")), static_cast<float *>(p.at("scale")),
                                         static_cast<float *>(p.at("amax"))};
                    const fnorm::NormProblem pb = fnorm::NormFwd::describe({n.d, x.d, w.d, q.d, true, scaling}, &a);
                    fnorm::check_call<fnorm::NormFwd>(h, pb, a);
                  });
                }});
  }
  run_matrix({"fnorm_norm_bwd",
              {"x", "dy", "dsum", "mean", "rstd", "gamma", "dx", "dgamma", "dbeta", "workspace"},
              {"dx", "dgamma", "dbeta", "workspace"},
              {{"dx", "dy"}, {"dx", "dsum"}},
              [&](const std::map<std::string, void *> &p) {
                return guarded([&] {
                  fnorm::NormBwdArgs a{p.at("x"), p.at("dy"), static_cast<const float *>(p.at("mean")),
                                       static_cast<const float *>(p.at("rstd")), p.at("gamma"), p.at("dsum"),
                                       p.at("dx"), p.at("dgamma"), p.at("dbeta"), p.at("workspace"), 4096};
                  const fnorm::NormProblem pb = fnorm::NormBwd::describe({n.d, x.d, x.d, x.d, w.d}, &a);
                  fnorm::check_call<fnorm::NormBwd>(h, pb, a);
                });
              }});
}

// BatchNorm's three passes; `sync`: with a communicator (SyncBatchNorm's
// entry points are the same functions; the checks need no NCCL call).
void test_batchnorm_overlaps(bool sync) {
  fnorm_handle *h = fake_handle();
  Bn bn;
  CHECK_STATUS(fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_ADD_RELU, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1),
               FNORM_STATUS_SUCCESS);
  if (sync) {
    if (fnorm_batchnorm_desc_set_comm(bn.d, reinterpret_cast<struct ncclComm *>(uintptr_t{0x1000}), 0) ==
        FNORM_STATUS_NOT_SUPPORTED_BUILD) {
      ++counters().skipped;
      return;
    }
  }
  Desc x;
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 3});
  const std::string suffix = sync ? " (SyncBatchNorm)" : "";
  // The descriptors described without the communicator's device check (the
  // communicator here is a stand-in address).
  auto describe = [&](fnorm::BnPass pass) { return fnorm::describe_bn(pass, bn.d, x.d); };
  struct ncclComm *const comm = sync ? reinterpret_cast<struct ncclComm *>(uintptr_t{0x1000}) : nullptr;
  run_matrix({"fnorm_batchnorm_fwd_train" + suffix,
              {"x", "z", "gamma", "beta", "y", "running_mean", "running_var", "num_batches_tracked", "saved_mean",
               "saved_invstd", "reserve", "workspace"},
              {"y", "running_mean", "running_var", "num_batches_tracked", "saved_mean", "saved_invstd", "reserve",
               "workspace"},
              {{"y", "x"}, {"y", "z"}},
              [&](const std::map<std::string, void *> &p) {
                return guarded([&] {
                  fnorm::BnArgs c;
                  c.comm = comm;
                  c.x = p.at("x"), c.z = p.at("z"), c.y = p.at("y");
                  c.gamma = static_cast<const float *>(p.at("gamma"));
                  c.beta = static_cast<const float *>(p.at("beta"));
                  c.running_mean = static_cast<float *>(p.at("running_mean"));
                  c.running_var = static_cast<float *>(p.at("running_var"));
                  c.num_batches_tracked = static_cast<int64_t *>(p.at("num_batches_tracked"));
                  c.saved_mean = static_cast<float *>(p.at("saved_mean"));
                  c.saved_invstd = static_cast<float *>(p.at("saved_invstd"));
                  c.reserve = p.at("reserve"), c.reserve_bytes = 64;
                  c.workspace = p.at("workspace"), c.workspace_bytes = 4096;
                  fnorm::check_call<fnorm::BnFwdTrain>(h, describe(fnorm::BnPass::FwdTrain), c);
                });
              }});
  if (!sync)
    run_matrix({"fnorm_batchnorm_fwd_infer",
                {"x", "z", "gamma", "beta", "running_mean", "running_var", "y", "workspace"},
                {"y", "workspace"},
                {{"y", "x"}, {"y", "z"}},
                [&](const std::map<std::string, void *> &p) {
                  return guarded([&] {
                    fnorm::BnArgs c;
                    c.x = p.at("x"), c.z = p.at("z"), c.y = p.at("y");
                    c.gamma = static_cast<const float *>(p.at("gamma"));
                    c.beta = static_cast<const float *>(p.at("beta"));
                    c.running_mean_in = static_cast<const float *>(p.at("running_mean"));
                    c.running_var_in = static_cast<const float *>(p.at("running_var"));
                    c.workspace = p.at("workspace"), c.workspace_bytes = 4096;
                    fnorm::check_call<fnorm::BnFwdInfer>(h, describe(fnorm::BnPass::FwdInfer), c);
                  });
                }});
  run_matrix({"fnorm_batchnorm_bwd" + suffix,
              {"x", "dy", "y", "gamma", "beta", "saved_mean", "saved_invstd", "reserve", "dx", "dz", "dgamma", "dbeta",
               "workspace"},
              {"dx", "dz", "dgamma", "dbeta", "workspace"},
              {{"dx", "dy"}, {"dx", "x"}, {"dz", "dy"}},
              [&](const std::map<std::string, void *> &p) {
                return guarded([&] {
                  fnorm::BnArgs c;
                  c.comm = comm;
                  c.x = p.at("x"), c.dy = p.at("dy"), c.y_in = p.at("y"), c.dx = p.at("dx"), c.dz = p.at("dz");
                  c.gamma = static_cast<const float *>(p.at("gamma"));
                  c.beta = static_cast<const float *>(p.at("beta"));
                  c.saved_mean_in = static_cast<const float *>(p.at("saved_mean"));
                  c.saved_invstd_in = static_cast<const float *>(p.at("saved_invstd"));
                  c.dgamma = static_cast<float *>(p.at("dgamma"));
                  c.dbeta = static_cast<float *>(p.at("dbeta"));
                  c.reserve = p.at("reserve"), c.reserve_bytes = 64;
                  c.workspace = p.at("workspace"), c.workspace_bytes = 4096;
                  fnorm::check_call<fnorm::BnBwd>(h, describe(fnorm::BnPass::Bwd), c);
                });
              }});
}

// GroupNorm: y may be x; dx may be dy or x (api/fusednorm.h). Both
// layouts, both activations, w / ss in fp32 and x's dtype.
void test_groupnorm_overlaps() {
  fnorm_handle *h = fake_handle();
  Gn gn;
  Desc x, w, ss;
  w.set(FNORM_DTYPE_FLOAT32, {8});
  ss.set(FNORM_DTYPE_FLOAT16, {4, 8}, {16, 1});  // a half of temb.chunk(2, 1)
  struct Variant {
    const char *name;
    std::vector<int64_t> strides;
    fnorm_gn_activation_t act;
  };
  for (const Variant &v : {Variant{"NCHW", {}, FNORM_GN_ACTIVATION_NONE},
                           Variant{"NHWC, SiLU", {72, 1, 24, 8}, FNORM_GN_ACTIVATION_SILU}}) {
    CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 4, 1e-6, v.act), FNORM_STATUS_SUCCESS);
    CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 3}, v.strides), FNORM_STATUS_SUCCESS);
    const std::string suffix = std::string(" (") + v.name + ")";
    run_matrix({"fnorm_groupnorm_fwd" + suffix,
                {"x", "gamma", "beta", "scale", "shift", "y", "mean", "rstd", "workspace"},
                {"y", "mean", "rstd", "workspace"},
                {{"y", "x"}},
                [&](const std::map<std::string, void *> &p) {
                  return guarded([&] {
                    const fnorm::GnFwdArgs a{p.at("x"),    p.at("gamma"), p.at("beta"),
                                             p.at("scale"), p.at("shift"), p.at("y"),
                                             static_cast<float *>(p.at("mean")), static_cast<float *>(p.at("rstd")),
                                             p.at("workspace"), 4096};
                    const fnorm::GnProblem pb = fnorm::GnFwd::describe({gn.d, x.d, w.d, ss.d, x.d}, &a);
                    fnorm::check_call<fnorm::GnFwd>(h, pb, a);
                  });
                }});
    run_matrix({"fnorm_groupnorm_bwd" + suffix,
                {"x", "dy", "mean", "rstd", "gamma", "beta", "scale", "shift", "dx", "dgamma", "dbeta", "dscale",
                 "dshift", "workspace"},
                {"dx", "dgamma", "dbeta", "dscale", "dshift", "workspace"},
                {{"dx", "dy"}, {"dx", "x"}},
                [&](const std::map<std::string, void *> &p) {
                  return guarded([&] {
                    const fnorm::GnBwdArgs a{p.at("x"),
                                             p.at("dy"),
                                             static_cast<const float *>(p.at("mean")),
                                             static_cast<const float *>(p.at("rstd")),
                                             p.at("gamma"),
                                             p.at("beta"),
                                             p.at("scale"),
                                             p.at("shift"),
                                             p.at("dx"),
                                             p.at("dgamma"),
                                             p.at("dbeta"),
                                             p.at("dscale"),
                                             p.at("dshift"),
                                             p.at("workspace"),
                                             4096};
                    const fnorm::GnProblem pb = fnorm::GnBwd::describe({gn.d, x.d, x.d, w.d, ss.d, x.d}, &a);
                    fnorm::check_call<fnorm::GnBwd>(h, pb, a);
                  });
                }});
  }
}

#if FNORM_HAVE_CUBLASLT
void test_linear_overlaps() {
  fnorm_handle *h = fake_handle();
  fnorm_linear_desc_t desc = nullptr;
  if (fnorm_linear_desc_create(&desc) != FNORM_STATUS_SUCCESS) {
    ++counters().skipped;
    return;
  }
  fnorm_linear_desc_set(desc, FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_WEIGHT_NK, 0);
  Desc x, w, y;
  x.set(FNORM_DTYPE_FLOAT16, {64, 32});
  w.set(FNORM_DTYPE_FLOAT16, {48, 32});
  y.set(FNORM_DTYPE_FLOAT16, {64, 48});
  run_matrix({"fnorm_linear_fwd",
              {"x", "w", "bias", "y", "aux", "workspace"},
              {"y", "aux", "workspace"},
              {},
              [&](const std::map<std::string, void *> &p) {
                return guarded([&] {
                  const fnorm::LinearFwdArgs a{p.at("x"), p.at("w"), p.at("bias"), p.at("y"), p.at("aux"), 1024,
                                               p.at("workspace"), 4096};
                  const fnorm::LinearProblem pb = fnorm::LinearFwd::describe({desc, x.d, w.d, y.d}, &a);
                  fnorm::check_call<fnorm::LinearFwd>(h, pb, a);
                });
              }});
  fnorm_linear_desc_t producer = nullptr;
  fnorm_linear_desc_create(&producer);
  fnorm_linear_desc_set(producer, FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_WEIGHT_NK, 0);
  run_matrix({"fnorm_linear_bwd",
              {"x", "w", "dy", "aux", "x_aux", "dx", "dw", "db", "x_db", "workspace"},
              {"dx", "dw", "db", "x_db", "workspace"},
              {},
              [&](const std::map<std::string, void *> &p) {
                return guarded([&] {
                  fnorm::LinearBwdArgs c;
                  c.x = p.at("x"), c.w = p.at("w"), c.dy = p.at("dy"), c.aux = p.at("aux"), c.x_aux = p.at("x_aux");
                  c.dx = p.at("dx"), c.dw = p.at("dw"), c.db = p.at("db"), c.x_db = p.at("x_db");
                  c.aux_bytes = c.x_aux_bytes = 1024;
                  c.workspace = p.at("workspace"), c.workspace_bytes = 4096;
                  const fnorm::LinearBwdDesc d = fnorm::LinearBwd::describe({desc, x.d, w.d, y.d, producer, x.d}, &c);
                  fnorm::check_call<fnorm::LinearBwd>(h, d, c);
                });
              }});
  fnorm_linear_desc_destroy(producer);
  fnorm_linear_desc_destroy(desc);
}
#endif

// The overlaps the issue found passing validation, through the C ABI: each
// is BAD_PARAM before any device work (the fake handle has none).
void test_abi_refuses_named_pairs() {
  fnorm_handle *h = fake_handle();
  Norm n;
  Desc x, w;
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 768});
  w.set(FNORM_DTYPE_FLOAT16, {768});
  unsigned char *px = static_cast<unsigned char *>(slot(0)), *py = static_cast<unsigned char *>(slot(1));
  unsigned char *pg = static_cast<unsigned char *>(slot(2));
  float *mean = static_cast<float *>(slot(3)), *rstd = static_cast<float *>(slot(4));
  auto fwd = [&](void *y, const void *gamma, float *m, float *r) {
    return fnorm_norm_fwd(h, nullptr, n.d, x.d, px, nullptr, nullptr, w.d, gamma, nullptr, x.d, y, m, r, nullptr, 0);
  };
  CHECK_STATUS(fwd(py, pg, reinterpret_cast<float *>(px), rstd), FNORM_STATUS_BAD_PARAM);  // mean == x
  CHECK(mentions("'mean'") && mentions("'x'"));
  CHECK_STATUS(fwd(pg + 2, pg, mean, rstd), FNORM_STATUS_BAD_PARAM);  // y over gamma
  CHECK(mentions("'gamma'") && mentions("'y'"));
  CHECK_STATUS(fwd(py, pg, mean, mean), FNORM_STATUS_BAD_PARAM);  // rstd == mean
  CHECK(mentions("'mean'") && mentions("'rstd'"));

  unsigned char *pdy = static_cast<unsigned char *>(slot(5)), *pdx = static_cast<unsigned char *>(slot(6));
  unsigned char *pdg = static_cast<unsigned char *>(slot(7)), *pdb = static_cast<unsigned char *>(slot(8));
  unsigned char *pws = static_cast<unsigned char *>(slot(9));
  auto bwd = [&](void *dx, void *dg, void *db, void *ws) {
    return fnorm_norm_bwd(h, nullptr, n.d, x.d, px, x.d, pdy, mean, rstd, w.d, pg, nullptr, x.d, dx, dg, db, ws, 4096);
  };
  CHECK_STATUS(bwd(pdx, px, pdb, pws), FNORM_STATUS_BAD_PARAM);  // dgamma == x
  CHECK(mentions("'dgamma'") && mentions("'x'"));
  CHECK_STATUS(bwd(pdx, pdg, pdb, pdx), FNORM_STATUS_BAD_PARAM);  // workspace == dx
  CHECK(mentions("'workspace'") && mentions("'dx'"));
  CHECK_STATUS(bwd(pdx, pdg, pdg, pws), FNORM_STATUS_BAD_PARAM);  // dgamma == dbeta
  CHECK(mentions("'dgamma'") && mentions("'dbeta'"));

  Bn bn;
  Desc bx;
  bx.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 3});
  float *gamma = static_cast<float *>(slot(10)), *beta = static_cast<float *>(slot(11));
  float *rm = static_cast<float *>(slot(12)), *rv = static_cast<float *>(slot(13));
  float *sm = static_cast<float *>(slot(14)), *si = static_cast<float *>(slot(15));
  auto train = [&](void *y, float *running_mean, float *saved_mean) {
    return fnorm_batchnorm_fwd_train(h, nullptr, bn.d, bx.d, px, nullptr, gamma, beta, running_mean, rv, nullptr, bx.d,
                                     y, saved_mean, si, pws, 1 << 16, nullptr, 0);
  };
  CHECK_STATUS(train(py, rm, reinterpret_cast<float *>(px)), FNORM_STATUS_BAD_PARAM);  // saved_mean == x
  CHECK(mentions("'saved_mean'") && mentions("'x'"));
  CHECK_STATUS(train(py, gamma, sm), FNORM_STATUS_BAD_PARAM);  // running_mean == gamma
  CHECK(mentions("'running_mean'") && mentions("'gamma'"));
  CHECK_STATUS(train(reinterpret_cast<unsigned char *>(gamma) + 4, rm, sm), FNORM_STATUS_BAD_PARAM);  // y over gamma
  CHECK(mentions("'y'") && mentions("'gamma'"));
  CHECK_STATUS(fnorm_batchnorm_fwd_infer(h, nullptr, bn.d, bx.d, px, nullptr, gamma, beta, rm, rv, bx.d,
                                         reinterpret_cast<unsigned char *>(rv) - 16, pws, 1 << 16),
               FNORM_STATUS_BAD_PARAM);  // y over running_var
  CHECK(mentions("'y'") && mentions("'running_var'"));
}

// GroupNorm through the C ABI: the forbidden pairs are BAD_PARAM naming both
// before any device work; the in-place pairs pass the overlap rule and are
// refused only for the workspace they were not given (also before any
// device work: the size is known without the device).
void test_abi_groupnorm_pairs() {
  fnorm_handle *h = fake_handle();
  Gn gn;
  CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 4, 1e-6, FNORM_GN_ACTIVATION_SILU), FNORM_STATUS_SUCCESS);
  Desc x, w, ss;
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 3});
  w.set(FNORM_DTYPE_FLOAT16, {8});
  ss.set(FNORM_DTYPE_FLOAT32, {4, 8});
  unsigned char *px = static_cast<unsigned char *>(slot(0)), *py = static_cast<unsigned char *>(slot(1));
  unsigned char *pg = static_cast<unsigned char *>(slot(2)), *pb = static_cast<unsigned char *>(slot(3));
  unsigned char *ps = static_cast<unsigned char *>(slot(4)), *pt = static_cast<unsigned char *>(slot(5));
  float *mean = static_cast<float *>(slot(6)), *rstd = static_cast<float *>(slot(7));
  unsigned char *pws = static_cast<unsigned char *>(slot(8));
  auto fwd = [&](void *y, float *m, float *r, void *ws, size_t bytes) {
    return fnorm_groupnorm_fwd(h, nullptr, gn.d, x.d, px, w.d, pg, pb, ss.d, ps, pt, x.d, y, m, r, ws, bytes);
  };
  CHECK_STATUS(fwd(py, mean, mean, pws, 4096), FNORM_STATUS_BAD_PARAM);  // rstd == mean
  CHECK(mentions("'mean'") && mentions("'rstd'"));
  CHECK_STATUS(fwd(pg + 2, mean, rstd, pws, 4096), FNORM_STATUS_BAD_PARAM);  // y over gamma
  CHECK(mentions("'gamma'") && mentions("'y'"));
  CHECK_STATUS(fwd(py, reinterpret_cast<float *>(pt), rstd, pws, 4096), FNORM_STATUS_BAD_PARAM);  // mean == shift
  CHECK(mentions("'mean'") && mentions("'shift'"));
  CHECK_STATUS(fwd(py, mean, rstd, py, 4096), FNORM_STATUS_BAD_PARAM);  // workspace == y
  CHECK(mentions("'workspace'") && mentions("'y'"));
  CHECK_STATUS(fwd(px, mean, rstd, nullptr, 0), FNORM_STATUS_INSUFFICIENT_WORKSPACE);  // y == x: in place
  CHECK(mentions("workspace_bytes"));

  unsigned char *pdy = static_cast<unsigned char *>(slot(9)), *pdx = static_cast<unsigned char *>(slot(10));
  unsigned char *pdg = static_cast<unsigned char *>(slot(11)), *pdb = static_cast<unsigned char *>(slot(12));
  unsigned char *pds = static_cast<unsigned char *>(slot(13)), *pdt = static_cast<unsigned char *>(slot(14));
  auto bwd = [&](const float *m, void *dx, void *dg, void *db, void *ds, void *dt, void *ws, size_t bytes) {
    return fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, px, x.d, pdy, m, rstd, w.d, pg, pb, ss.d, ps, pt, x.d, dx, dg,
                               db, ds, dt, ws, bytes);
  };
  CHECK_STATUS(bwd(mean, pdx, px, pdb, pds, pdt, pws, 4096), FNORM_STATUS_BAD_PARAM);  // dgamma == x
  CHECK(mentions("'dgamma'") && mentions("'x'"));
  CHECK_STATUS(bwd(mean, pdx, pdg, pdb, pds, pds, pws, 4096), FNORM_STATUS_BAD_PARAM);  // dshift == dscale
  CHECK(mentions("'dscale'") && mentions("'dshift'"));
  CHECK_STATUS(bwd(reinterpret_cast<float *>(pdx), pdx, pdg, pdb, pds, pdt, pws, 4096),
               FNORM_STATUS_BAD_PARAM);  // mean == dx
  CHECK(mentions("'mean'") && mentions("'dx'"));
  CHECK_STATUS(bwd(mean, pdx, pdg, pdb, pds, pdt, pdx + 16, 4096), FNORM_STATUS_BAD_PARAM);  // workspace over dx
  CHECK(mentions("'workspace'") && mentions("'dx'"));
  CHECK_STATUS(bwd(mean, pdx, pdg, pdb, ps, pdt, pws, 4096), FNORM_STATUS_BAD_PARAM);  // dscale == scale
  CHECK(mentions("'dscale'") && mentions("'scale'"));
  CHECK_STATUS(bwd(mean, pdy, pdg, pdb, pds, pdt, nullptr, 0), FNORM_STATUS_INSUFFICIENT_WORKSPACE);  // dx == dy
  CHECK(mentions("workspace_bytes"));
  CHECK_STATUS(bwd(mean, px, pdg, pdb, pds, pdt, nullptr, 0), FNORM_STATUS_INSUFFICIENT_WORKSPACE);  // dx == x
  CHECK(mentions("workspace_bytes"));
}

// ---- empty tensors ------------------------------------------------------------

void test_empty_descriptors() {
  Desc t;
  CHECK_STATUS(t.set(FNORM_DTYPE_FLOAT16, {0, 768}), FNORM_STATUS_SUCCESS);
  int64_t n = -1;
  CHECK_STATUS(fnorm_tensor_desc_get_elements(t.d, &n), FNORM_STATUS_SUCCESS);
  CHECK_EQ(n, 0);
  int64_t dims[2], strides[2];
  CHECK_STATUS(fnorm_tensor_desc_get(t.d, nullptr, nullptr, dims, strides, 2), FNORM_STATUS_SUCCESS);
  CHECK_EQ(strides[0], 768);  // packed strides treat a size of 0 as 1 (PyTorch's)
  CHECK_STATUS(t.set(FNORM_DTYPE_FLOAT16, {4, 0}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_tensor_desc_get(t.d, nullptr, nullptr, dims, strides, 2), FNORM_STATUS_SUCCESS);
  CHECK_EQ(strides[0], 1);
  // The other sizes' product must still fit in int64.
  CHECK_STATUS(t.set(FNORM_DTYPE_FLOAT16, {0, int64_t{1} << 40, int64_t{1} << 30}), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("overflows"));
  CHECK_STATUS(t.set(FNORM_DTYPE_FLOAT16, {0, -1}), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("dims[1]"));
}

void test_empty_norm() {
  fnorm_handle *h = fake_handle();
  Norm n;
  Desc x, w;
  w.set(FNORM_DTYPE_FLOAT16, {768});
  size_t ws = 99;
  for (const std::vector<int64_t> &dims : {std::vector<int64_t>{0, 768}, {4, 0, 768}}) {
    x.set(FNORM_DTYPE_FLOAT16, dims);
    CHECK_STATUS(fnorm_norm_fwd_workspace_size(h, n.d, x.d, x.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    ws = 99;
    CHECK_STATUS(fnorm_norm_bwd_workspace_size(h, n.d, x.d, w.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    // No memory behind an empty tensor: NULL data pointers are accepted,
    // nothing is enqueued (the fake handle has no device to enqueue on).
    CHECK_STATUS(fnorm_norm_fwd(h, nullptr, n.d, x.d, nullptr, nullptr, nullptr, w.d, slot(0), slot(1), x.d, nullptr,
                                nullptr, nullptr, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_norm_bwd(h, nullptr, n.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, w.d, slot(0), nullptr,
                                x.d, nullptr, nullptr, nullptr, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
  }
  // The arguments that stay meaningful are still validated.
  x.set(FNORM_DTYPE_FLOAT16, {0, 768});
  Desc wrong;
  wrong.set(FNORM_DTYPE_FLOAT16, {767});
  CHECK_STATUS(fnorm_norm_fwd(h, nullptr, n.d, x.d, nullptr, nullptr, nullptr, wrong.d, slot(0), nullptr, x.d,
                              nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("w_desc"));
  Desc y;
  y.set(FNORM_DTYPE_FLOAT16, {1, 768});
  CHECK_STATUS(fnorm_norm_fwd(h, nullptr, n.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, y.d,
                              nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  CHECK_STATUS(fnorm_norm_fwd(h, nullptr, n.d, x.d, nullptr, nullptr, slot(0), nullptr, nullptr, nullptr, x.d,
                              nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("without 'residual'"));
  fnorm_norm_desc_set(n.d, FNORM_NORM_RMSNORM, -1, 1e-6);
  CHECK_STATUS(fnorm_norm_fwd(h, nullptr, n.d, x.d, nullptr, nullptr, nullptr, w.d, slot(0), slot(1), x.d, nullptr,
                              nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'beta'"));
}

void test_empty_batchnorm() {
  fnorm_handle *h = fake_handle();
  Bn bn;
  Desc x;
  size_t ws = 99;
  for (const std::vector<int64_t> &dims : {std::vector<int64_t>{0, 8, 3, 3}, {4, 8, 0}, {4, 0, 3}}) {
    x.set(FNORM_DTYPE_FLOAT16, dims);
    CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    ws = 99;
    CHECK_STATUS(fnorm_batchnorm_fwd_infer_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    ws = 99;
    CHECK_STATUS(fnorm_batchnorm_bwd_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    ws = 99;
    CHECK_STATUS(fnorm_batchnorm_reserve_space_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    // Nothing to compute (no counter, no weight gradients): nothing enqueued.
    float *rm = static_cast<float *>(slot(0)), *rv = static_cast<float *>(slot(1));
    CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, nullptr, nullptr, nullptr, nullptr, rm, rv, nullptr,
                                           x.d, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_batchnorm_fwd_infer(h, nullptr, bn.d, x.d, nullptr, nullptr, nullptr, nullptr, rm, rv, x.d,
                                           nullptr, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_batchnorm_bwd(h, nullptr, bn.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, nullptr, rm, rv,
                                     nullptr, 0, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
  }
  // Still validated: one value per channel in training, z without ADD_RELU,
  // running statistics given together.
  x.set(FNORM_DTYPE_FLOAT32, {1, 0});
  CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, x.d, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("more than one value per channel"));
  x.set(FNORM_DTYPE_FLOAT32, {0, 8});
  CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, nullptr, slot(0), nullptr, nullptr, nullptr, nullptr,
                                         nullptr, x.d, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'z'"));
  CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, nullptr, nullptr, nullptr, nullptr,
                                         static_cast<float *>(slot(0)), nullptr, nullptr, x.d, nullptr, nullptr,
                                         nullptr, nullptr, 0, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("running_var"));
  CHECK_STATUS(fnorm_batchnorm_fwd_infer(h, nullptr, bn.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         x.d, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("running_mean"));
}

// GroupNorm: N = 0 or no spatial values is empty (C = 0 is a shape error:
// no group count divides it).
void test_empty_groupnorm() {
  fnorm_handle *h = fake_handle();
  Gn gn;
  CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 4, 1e-5, FNORM_GN_ACTIVATION_SILU), FNORM_STATUS_SUCCESS);
  Desc x, w, ss;
  w.set(FNORM_DTYPE_FLOAT32, {8});
  size_t ws = 99;
  for (const std::vector<int64_t> &dims : {std::vector<int64_t>{0, 8, 3, 3}, {4, 8, 0}, {2, 8, 3, 0}}) {
    x.set(FNORM_DTYPE_FLOAT16, dims);
    ss.set(FNORM_DTYPE_FLOAT16, {dims[0], 8});
    CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    ws = 99;
    CHECK_STATUS(fnorm_groupnorm_bwd_workspace_size(h, gn.d, x.d, w.d, ss.d, &ws), FNORM_STATUS_SUCCESS);
    CHECK_EQ(ws, size_t{0});
    // No memory behind an empty tensor: NULL data pointers are accepted,
    // nothing is enqueued (the fake handle has no device to enqueue on).
    CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn.d, x.d, nullptr, w.d, slot(0), slot(1), ss.d, slot(2), slot(3),
                                     x.d, nullptr, nullptr, nullptr, nullptr, 0),
                 FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, w.d, slot(0),
                                     slot(1), ss.d, slot(2), slot(3), x.d, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     nullptr, 0),
                 FNORM_STATUS_SUCCESS);
  }
  // The arguments that stay meaningful are still validated.
  x.set(FNORM_DTYPE_FLOAT16, {2, 8, 0});
  ss.set(FNORM_DTYPE_FLOAT16, {2, 8});
  Desc wrong;
  wrong.set(FNORM_DTYPE_FLOAT32, {7});
  CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn.d, x.d, nullptr, wrong.d, slot(0), nullptr, nullptr, nullptr,
                                   nullptr, x.d, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("w_desc"));
  Desc y;
  y.set(FNORM_DTYPE_FLOAT16, {2, 8, 1});
  CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, y.d, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn.d, x.d, nullptr, nullptr, slot(0), nullptr, nullptr, nullptr,
                                   nullptr, x.d, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("w_desc"));
  // Sums over no values still go to outputs that must not overlap.
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, w.d, nullptr,
                                   nullptr, nullptr, nullptr, nullptr, x.d, nullptr, slot(0), slot(0), nullptr,
                                   nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dgamma'") && mentions("'dbeta'"));
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, w.d, nullptr,
                                   nullptr, nullptr, nullptr, nullptr, x.d, nullptr,
                                   static_cast<unsigned char *>(slot(0)) + 1, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dgamma'"));
  Desc ssov;
  ssov.set(FNORM_DTYPE_FLOAT16, {2, 8}, {4, 1});  // rows 4 apart over 8 columns
  CHECK_STATUS(fnorm_groupnorm_bwd(h, nullptr, gn.d, x.d, nullptr, x.d, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, ssov.d, nullptr, nullptr, x.d, nullptr, nullptr, nullptr, slot(0),
                                   nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dscale'"));
  CHECK_STATUS(fnorm_groupnorm_desc_set(gn.d, 3, 1e-5, FNORM_GN_ACTIVATION_NONE), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, x.d, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("'gn'"));
  x.set(FNORM_DTYPE_FLOAT16, {4, 0, 3});
  CHECK_STATUS(fnorm_groupnorm_fwd_workspace_size(h, gn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("x_desc"));
  CHECK_STATUS(fnorm_groupnorm_fwd(h, nullptr, gn.d, x.d, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, x.d, nullptr, nullptr, nullptr, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("x_desc"));
}

#if FNORM_HAVE_CUBLASLT
void test_empty_linear() {
  fnorm_handle *h = fake_handle();
  fnorm_linear_desc_t desc = nullptr;
  if (fnorm_linear_desc_create(&desc) != FNORM_STATUS_SUCCESS) {
    ++counters().skipped;
    return;
  }
  fnorm_linear_desc_set(desc, FNORM_LINEAR_EPILOGUE_BIAS_RELU, FNORM_LINEAR_WEIGHT_NK, 0);
  Desc x, w, y;
  size_t bytes = 99;
  // m = 0 (no rows), n = 0 (no outputs): y has no elements.
  struct Mnk {
    int64_t m, n, k;
  };
  for (const Mnk &s : {Mnk{0, 48, 32}, Mnk{64, 0, 32}}) {
    x.set(FNORM_DTYPE_FLOAT16, {s.m, s.k});
    w.set(FNORM_DTYPE_FLOAT16, {s.n, s.k});
    y.set(FNORM_DTYPE_FLOAT16, {s.m, s.n});
    CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, desc, x.d, w.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
    CHECK_EQ(bytes, size_t{0});
    bytes = 99;
    CHECK_STATUS(fnorm_linear_bwd_workspace_size(h, desc, x.d, w.d, y.d, nullptr, &bytes), FNORM_STATUS_SUCCESS);
    CHECK_EQ(bytes, size_t{0});
    CHECK_STATUS(fnorm_linear_aux_size(h, desc, y.d, &bytes), FNORM_STATUS_SUCCESS);
    CHECK_EQ(bytes, size_t{0});
    CHECK_STATUS(fnorm_linear_fwd(h, nullptr, desc, x.d, nullptr, w.d, nullptr, slot(0), y.d, nullptr, nullptr, 0,
                                  nullptr, 0),
                 FNORM_STATUS_SUCCESS);
  }
  // k = 0: y = act(bias) needs no GEMM, so no cuBLASLt workspace.
  x.set(FNORM_DTYPE_FLOAT16, {64, 0});
  w.set(FNORM_DTYPE_FLOAT16, {48, 0});
  y.set(FNORM_DTYPE_FLOAT16, {64, 48});
  CHECK_STATUS(fnorm_linear_fwd_workspace_size(h, desc, x.d, w.d, y.d, &bytes), FNORM_STATUS_SUCCESS);
  CHECK_EQ(bytes, size_t{0});
  // The epilogue's rules hold with empty tensors.
  x.set(FNORM_DTYPE_FLOAT16, {0, 32});
  w.set(FNORM_DTYPE_FLOAT16, {48, 32});
  y.set(FNORM_DTYPE_FLOAT16, {0, 48});
  fnorm_linear_desc_set(desc, FNORM_LINEAR_EPILOGUE_NONE, FNORM_LINEAR_WEIGHT_NK, 0);
  CHECK_STATUS(fnorm_linear_fwd(h, nullptr, desc, x.d, nullptr, w.d, nullptr, slot(0), y.d, nullptr, nullptr, 0,
                                nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'bias'"));
  fnorm_linear_desc_destroy(desc);
}
#endif

// ---- plan cache and tuning -------------------------------------------------------

void test_plan_cache() {
  struct Key {
    int64_t a;
    int32_t b, c;
  };
  struct Plan {
    int value = 0;
  };
  using Cache = fnorm::PlanCache<Key, Plan, 4>;
  int made = 0;
  auto get = [&](uint64_t handle, Key k) {
    return Cache::get(handle, k, [&] {
      ++made;
      return Plan{static_cast<int>(k.a)};
    }).value;
  };
  CHECK_EQ(get(1, {7, 0, 0}), 7);
  CHECK_EQ(get(1, {7, 0, 0}), 7);
  CHECK_EQ(made, 1);  // the second call planned nothing
  CHECK_EQ(get(2, {7, 0, 0}), 7);
  CHECK_EQ(made, 2);  // another handle: its own plan
  CHECK_EQ(get(1, {7, 0, 1}), 7);
  CHECK_EQ(made, 3);  // another key
  for (int i = 0; i < 4; ++i) get(1, {100 + i, 0, 0});  // four more push the first ones out
  const int before = made;
  CHECK_EQ(get(1, {7, 0, 0}), 7);
  CHECK_EQ(made, before + 1);
  // Each thread has its own entries: a plan made on one is made again on
  // another, and both see their own.
  int other = 0;
  std::thread t([&] {
    other = Cache::get(1, Key{7, 0, 0}, [] { return Plan{-7}; }).value;
  });
  t.join();
  CHECK_EQ(other, -7);
  CHECK_EQ(get(1, {7, 0, 0}), 7);
}

void test_tuning() {
  const char *vars[] = {"FNORM_CHECK_POINTERS", "FNORM_NORM_FWD_PLAN", "FNORM_BN_PERSIST_GATHER_ALL",
                        "FNORM_BN_ONEWAVE_TILE", "FNORM_BN_ONEWAVE_K", "FNORM_LINEAR_UNFUSED", "FNORM_LINEAR_FWD_AUX",
                        "FNORM_LINEAR_NO_N1", "FNORM_LINEAR_WS_MIB"};
  for (const char *v : vars) unsetenv(v);
  fnorm::Tuning t = fnorm::tuning_from_env();
  CHECK(!t.check_pointers && !t.bn_persist_gather_all && !t.linear_unfused && !t.linear_no_n1);
  CHECK_EQ(t.bn_onewave_tile, 0);
  CHECK_EQ(t.bn_onewave_k, 0);
  CHECK(t.norm_fwd.tier == fnorm::Tuning::NormFwd::Tier::Planner);
  CHECK_EQ(t.linear_heuristic_budget, uint64_t{0});
  setenv("FNORM_CHECK_POINTERS", "0", 1);  // "0" and "" are off
  setenv("FNORM_NORM_FWD_PLAN", "block:4;grid=rows", 1);
  setenv("FNORM_LINEAR_FWD_AUX", "own", 1);
  setenv("FNORM_LINEAR_WS_MIB", "4", 1);
  setenv("FNORM_BN_PERSIST_GATHER_ALL", "1", 1);
  setenv("FNORM_BN_ONEWAVE_TILE", "64", 1);
  setenv("FNORM_BN_ONEWAVE_K", "9", 1);  // out of range: the planner's
  t = fnorm::tuning_from_env();
  CHECK(!t.check_pointers && t.bn_persist_gather_all);
  CHECK_EQ(t.bn_onewave_tile, 64);
  CHECK_EQ(t.bn_onewave_k, 0);
  CHECK(t.norm_fwd.tier == fnorm::Tuning::NormFwd::Tier::Block);
  CHECK_EQ(t.norm_fwd.npack, 4);
  CHECK(t.norm_fwd.grid == fnorm::Tuning::NormFwd::Grid::PerRow);
  CHECK(t.linear_fwd_aux == fnorm::Tuning::LinearFwdAux::Own);
  CHECK_EQ(t.linear_heuristic_budget, uint64_t{4} << 20);
  setenv("FNORM_NORM_FWD_PLAN", "smem,bogus", 1);
  t = fnorm::tuning_from_env();
  CHECK(t.norm_fwd.tier == fnorm::Tuning::NormFwd::Tier::Smem);
  CHECK_EQ(std::string(t.norm_fwd.bad_item), std::string("bogus"));
  // A planner given an item it cannot parse says so (BAD_PARAM naming it).
  fnorm::NormProblem v;
  v.dtype = FNORM_DTYPE_FLOAT32;
  v.rows = v.cols = 64;
  fnorm::NormFwdPlan plan;
  bool refused = false;
  try {
    fnorm::apply_fwd_tuning(v, 4, fake_handle()->info, t.norm_fwd, plan);
  } catch (const fnorm::Error &e) {
    refused = e.status == FNORM_STATUS_BAD_PARAM && e.message.find("bogus") != std::string::npos;
  }
  CHECK(refused);
  for (const char *var : vars) unsetenv(var);
}

}  // namespace

int main() {
  test_norm_overlaps();
  test_batchnorm_overlaps(false);
  test_batchnorm_overlaps(true);
  test_groupnorm_overlaps();
#if FNORM_HAVE_CUBLASLT
  test_linear_overlaps();
#endif
  test_abi_refuses_named_pairs();
  test_abi_groupnorm_pairs();
  test_empty_descriptors();
  test_empty_norm();
  test_empty_batchnorm();
  test_empty_groupnorm();
#if FNORM_HAVE_CUBLASLT
  test_empty_linear();
#endif
  test_plan_cache();
  test_tuning();
  return fnorm_test::finish("host contract");
}
