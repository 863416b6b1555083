/* SPDX-License-Identifier: Apache-2.0 */
// Host (no GPU) tests of the BatchNorm API: descriptor, layout detection,
// validation of every launch argument before any device work, size queries
// (workspace arithmetic, reserve space). White-box: a handle built without a
// device (132 SMs, like an H100/H200).
#include <cstring>
#include <string>
#include <vector>

#include "api_check.hpp"
#include "check.hpp"
#include "fake_handle.hpp"
#include "fusednorm.h"
#include "batchnorm/batchnorm.hpp"

using namespace fnorm_test;

namespace {

struct Bn {
  fnorm_batchnorm_desc_t d = nullptr;
  Bn() { fnorm_batchnorm_desc_create(&d); }
  ~Bn() { fnorm_batchnorm_desc_destroy(d); }
};

void test_desc() {
  Bn bn;
  fnorm_bn_epilogue_t e;
  double eps, mom;
  fnorm_bn_average_t avg;
  fnorm_bn_engine_t eng;
  CHECK_STATUS(fnorm_batchnorm_desc_get(bn.d, &e, &eps, &avg, &mom), FNORM_STATUS_SUCCESS);
  CHECK_EQ(e, FNORM_BN_EPILOGUE_NONE);
  CHECK_EQ(eps, 1e-5);
  CHECK_EQ(avg, FNORM_BN_AVERAGE_EXPONENTIAL);
  CHECK_EQ(mom, 0.1);
  CHECK_STATUS(fnorm_batchnorm_desc_get_engine(bn.d, &eng), FNORM_STATUS_SUCCESS);
  CHECK_EQ(eng, FNORM_BN_ENGINE_AUTO);
  CHECK_STATUS(fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_ADD_RELU, 1e-3, FNORM_BN_AVERAGE_CUMULATIVE, 0.5),
               FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_desc_get(bn.d, &e, &eps, &avg, &mom), FNORM_STATUS_SUCCESS);
  CHECK(e == FNORM_BN_EPILOGUE_ADD_RELU && eps == 1e-3 && avg == FNORM_BN_AVERAGE_CUMULATIVE && mom == 0.5);
  // Bad values name the argument and leave the descriptor as it was.
  CHECK_STATUS(fnorm_batchnorm_desc_set(bn.d, static_cast<fnorm_bn_epilogue_t>(7), 1e-5,
                                        FNORM_BN_AVERAGE_EXPONENTIAL, 0.1),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("epilogue"));
  CHECK_STATUS(fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_NONE, -1.0, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("epsilon"));
  CHECK_STATUS(fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_NONE, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 1.5),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("momentum"));
  CHECK_STATUS(fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_NONE, 1e-5, static_cast<fnorm_bn_average_t>(3), 0.1),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("average"));
  CHECK_STATUS(fnorm_batchnorm_desc_get(bn.d, &e, &eps, &avg, &mom), FNORM_STATUS_SUCCESS);
  CHECK(e == FNORM_BN_EPILOGUE_ADD_RELU && eps == 1e-3);
  CHECK_STATUS(fnorm_batchnorm_desc_set_engine(bn.d, static_cast<fnorm_bn_engine_t>(9)), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("engine"));
  CHECK_STATUS(fnorm_batchnorm_desc_create(nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_batchnorm_desc_destroy(nullptr), FNORM_STATUS_SUCCESS);
}

void test_layouts_and_sizes() {
  fnorm_handle *h = fake_handle();
  Bn bn;
  Desc x;
  size_t ws = 0, rs = 7;
  // NCHW packed.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT16, {8, 16, 5, 7}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
  CHECK(ws > 0 && ws % 256 == 0);
  CHECK_STATUS(fnorm_batchnorm_reserve_space_size(h, bn.d, x.d, &rs), FNORM_STATUS_SUCCESS);
  CHECK_EQ(rs, static_cast<size_t>(0));  // NONE: no mask
  fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_RELU, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1);
  CHECK_STATUS(fnorm_batchnorm_reserve_space_size(h, bn.d, x.d, &rs), FNORM_STATUS_SUCCESS);
  CHECK_EQ(rs, static_cast<size_t>((8 * 16 * 35 + 31) / 32 * 4));  // one bit per element, 32-bit words
  // NHWC: C fastest, then W, H, N.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT16, {8, 16, 5, 7}, {16 * 35, 1, 16 * 7, 16}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
  // Size-1 dimensions may carry any stride (PyTorch's channels-last [N, C, 1, 1]).
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {8, 16, 1, 1}, {16, 1, 99, 12345}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_SUCCESS);
  // Anything else is NOT_SUPPORTED and says which layouts are.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {8, 16, 5, 7}, {16 * 35 * 2, 35, 7, 1}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_NOT_SUPPORTED);
  CHECK(mentions("NHWC"));
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {16}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("rank"));
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, nullptr, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, nullptr, x.d, &ws), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'bn'"));
  // Workspace arithmetic: partials of the split reduction + coefficient
  // vectors; inference needs only the vectors, and grows with C.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {126000, 16}), FNORM_STATUS_SUCCESS);
  size_t wf = 0, wb = 0, wi = 0;
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &wf), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_bwd_workspace_size(h, bn.d, x.d, &wb), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_infer_workspace_size(h, bn.d, x.d, &wi), FNORM_STATUS_SUCCESS);
  CHECK_EQ(wi, static_cast<size_t>(3 * 256));  // mean, scale, shift: 16 floats each, 256-byte aligned
  CHECK(wf > wi && wb > wf);
  // Room for one wave of 256-thread blocks (132 SMs x 8) over the one column
  // tile of 16 fp32 columns: 1056 splits, two arrays of partials.
  CHECK_EQ(wf, static_cast<size_t>(2 * ((1056 * 16 * 4 + 255) / 256 * 256) + 3 * 256));
  // The huge shape of the issue: sizes in int64, nothing overflows.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {2100000, 256, 4}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &wf), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_reserve_space_size(h, bn.d, x.d, &rs), FNORM_STATUS_SUCCESS);
  CHECK_EQ(rs, static_cast<size_t>(2100000ll * 256 * 4 / 32 * 4));
}

// Every launch argument is validated before any device work: with the fake
// handle, reaching a launch would fail differently (no device).
void test_launch_validation() {
  fnorm_handle *h = fake_handle();
  Bn bn;
  Desc x, y, other;
  x.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 3});
  y.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 3});
  alignas(256) static unsigned char mem[1 << 16];
  void *px = mem, *py = mem + 4096, *pz = mem + 8192, *ws = mem + 16384, *rs = mem + 12288;
  float *vec = reinterpret_cast<float *>(mem + 32768);
  size_t wsb = 0;
  fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &wsb);
  auto train = [&](const void *xx, const void *z, void *yy, void *w, size_t wb, void *r, size_t rb,
                   float *rm, float *rv, int64_t *nbt) {
    return fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, xx, z, vec, vec + 8, rm, rv, nbt, y.d, yy, vec + 32,
                                     vec + 40, w, wb, r, rb);
  };
  CHECK_STATUS(train(nullptr, nullptr, py, ws, wsb, nullptr, 0, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'x'"));
  CHECK_STATUS(train(px, nullptr, nullptr, ws, wsb, nullptr, 0, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'y'"));
  CHECK_STATUS(train(px, nullptr, py, ws, wsb - 1, nullptr, 0, nullptr, nullptr, nullptr),
               FNORM_STATUS_INSUFFICIENT_WORKSPACE);
  CHECK(mentions("workspace_bytes"));
  CHECK_STATUS(train(px, nullptr, py, nullptr, wsb, nullptr, 0, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK_STATUS(train(px, pz, py, ws, wsb, nullptr, 0, nullptr, nullptr, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'z'"));
  CHECK_STATUS(train(px, nullptr, py, ws, wsb, nullptr, 0, vec + 16, nullptr, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("running_var"));
  CHECK_STATUS(train(px, nullptr, static_cast<unsigned char *>(px) + 2, ws, wsb, nullptr, 0, nullptr, nullptr,
                     nullptr),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("overlap"));
  // The workspace overlapping an output.
  CHECK_STATUS(train(px, nullptr, py, py, wsb, nullptr, 0, nullptr, nullptr, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("workspace"));
  // Other sizes or layout for y.
  other.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 4});
  CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, px, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, other.d, py, nullptr, nullptr, ws, wsb, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("y_desc"));
  other.set(FNORM_DTYPE_FLOAT16, {4, 8, 3, 3}, {72, 1, 24, 8});
  CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, x.d, px, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, other.d, py, nullptr, nullptr, ws, wsb, nullptr, 0),
               FNORM_STATUS_BAD_PARAM_SHAPE);
  CHECK(mentions("channels-last"));
  // ReLU: the reserve space is required and sized.
  fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_RELU, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1);
  size_t rsb = 0;
  fnorm_batchnorm_reserve_space_size(h, bn.d, x.d, &rsb);
  CHECK_STATUS(train(px, nullptr, py, ws, wsb, nullptr, 0, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("reserve"));
  CHECK_STATUS(train(px, nullptr, py, ws, wsb, rs, rsb - 1, nullptr, nullptr, nullptr),
               FNORM_STATUS_INSUFFICIENT_WORKSPACE);
  CHECK(mentions("reserve_bytes"));
  // ADD_RELU needs z.
  fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_ADD_RELU, 1e-5, FNORM_BN_AVERAGE_CUMULATIVE, 0.1);
  CHECK_STATUS(train(px, nullptr, py, ws, wsb, rs, rsb, nullptr, nullptr, nullptr),
               FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("'z'"));
  // CUMULATIVE averaging reads the counter.
  CHECK_STATUS(train(px, pz, py, ws, wsb, rs, rsb, vec + 16, vec + 24, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("num_batches_tracked"));
  // One value per channel: training is undefined.
  Desc one;
  one.set(FNORM_DTYPE_FLOAT32, {1, 8});
  fnorm_batchnorm_desc_set(bn.d, FNORM_BN_EPILOGUE_NONE, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1);
  CHECK_STATUS(fnorm_batchnorm_fwd_train(h, nullptr, bn.d, one.d, px, nullptr, nullptr, nullptr, nullptr, nullptr,
                                         nullptr, one.d, py, nullptr, nullptr, ws, 1 << 12, nullptr, 0),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("more than one value per channel"));
  // Backward: saved statistics are required; dz only with ADD_RELU; dx may be dy.
  auto bwd = [&](const float *sm, void *dx, void *dz) {
    return fnorm_batchnorm_bwd(h, nullptr, bn.d, x.d, px, x.d, py, nullptr, nullptr, nullptr, sm, vec + 8, nullptr, 0,
                               x.d, dx, dz, vec + 16, vec + 24, ws, 1 << 14);
  };
  CHECK_STATUS(bwd(nullptr, pz, nullptr), FNORM_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(mentions("saved_mean"));
  CHECK_STATUS(bwd(vec, pz, rs), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'dz'"));
  CHECK_STATUS(bwd(vec, static_cast<unsigned char *>(py) + 2, nullptr), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("overlap"));
  // Misaligned per-channel vectors are named.
  CHECK_STATUS(fnorm_batchnorm_bwd(h, nullptr, bn.d, x.d, px, x.d, py, nullptr,
                                   reinterpret_cast<const float *>(mem + 32770), nullptr, vec, vec + 8, nullptr, 0,
                                   x.d, pz, nullptr, nullptr, nullptr, ws, 1 << 14),
               FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("'gamma'"));
}

// SyncBatchNorm paths that need no NCCL call: the descriptor's communicator
// and flags, the workspace room for the all-reduced triples, and the CUDNN
// engine's refusal. (Launches query the communicator's device, so they are
// tested on GPUs: tests/gpu/test_syncbn.py.)
// Workspace sizes whose byte counts exceed size_t are refused, never wrapped
// around (issue 16: C = 2^61 or 2^62 answered 0 bytes for training and
// backward).
void test_size_overflow() {
  fnorm_handle *h = fake_handle();
  Bn bn;
  Desc x;
  for (int shift : {61, 62}) {
    CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {1, int64_t{1} << shift}), FNORM_STATUS_SUCCESS);
    size_t ws = 12345;
    CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
    CHECK(mentions("x_desc"));
    CHECK(mentions("overflow"));
    CHECK_STATUS(fnorm_batchnorm_bwd_workspace_size(h, bn.d, x.d, &ws), FNORM_STATUS_BAD_PARAM_SHAPE);
    CHECK(mentions("x_desc"));
    CHECK_EQ(ws, static_cast<size_t>(12345));  // untouched on refusal
  }
  // 2^62 channels: even one fp32 value per channel overflows (inference).
  size_t wi = 0;
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {1, int64_t{1} << 62}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_infer_workspace_size(h, bn.d, x.d, &wi), FNORM_STATUS_BAD_PARAM_SHAPE);
  // Large but representable: answered.
  CHECK_STATUS(x.set(FNORM_DTYPE_FLOAT32, {2, int64_t{1} << 40}), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &wi), FNORM_STATUS_SUCCESS);
  CHECK(wi > (size_t{3} << 42));
}

void test_sync_desc() {
  fnorm_handle *h = fake_handle();
  Bn bn;
  Desc x;
  x.set(FNORM_DTYPE_FLOAT16, {4, 48, 5, 5});
  size_t plain = 0, synced = 0, infer_plain = 0, infer_synced = 0;
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &plain), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_infer_workspace_size(h, bn.d, x.d, &infer_plain), FNORM_STATUS_SUCCESS);
  struct ncclComm *fake = reinterpret_cast<struct ncclComm *>(uintptr_t{0x1000});
  CHECK_STATUS(fnorm_batchnorm_desc_set_comm(bn.d, fake, 2), FNORM_STATUS_BAD_PARAM);
  CHECK(mentions("flags"));
  CHECK_STATUS(fnorm_batchnorm_desc_set_comm(bn.d, fake, FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS), FNORM_STATUS_SUCCESS);
  struct ncclComm *got = nullptr;
  uint32_t flags = 0;
  CHECK_STATUS(fnorm_batchnorm_desc_get_comm(bn.d, &got, &flags), FNORM_STATUS_SUCCESS);
  CHECK(got == fake && flags == FNORM_BN_SYNC_GLOBAL_WEIGHT_GRADS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &synced), FNORM_STATUS_SUCCESS);
  CHECK_EQ(synced, plain + (48 * 3 * 8 + 255) / 256 * 256);  // the per-channel triples, in double
  CHECK_STATUS(fnorm_batchnorm_fwd_infer_workspace_size(h, bn.d, x.d, &infer_synced), FNORM_STATUS_SUCCESS);
  CHECK_EQ(infer_synced, infer_plain);  // inference is local
  CHECK_STATUS(fnorm_batchnorm_desc_set_engine(bn.d, FNORM_BN_ENGINE_CUDNN), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, bn.d, x.d, &synced), FNORM_STATUS_NOT_SUPPORTED);
  CHECK(mentions("NATIVE"));
  CHECK_STATUS(fnorm_batchnorm_desc_set_comm(bn.d, nullptr, 0), FNORM_STATUS_SUCCESS);  // detach
  CHECK_STATUS(fnorm_batchnorm_desc_get_comm(bn.d, &got, nullptr), FNORM_STATUS_SUCCESS);
  CHECK(got == nullptr);
}

// AUTO (white-box): the size rule on the figures of two GPUs, and the size
// queries on a handle without cuDNN's state (the fake handle has no device,
// so it never gets one): NATIVE's answers, reserve 0, no state created.
void test_auto() {
  using fnorm::BnPass;
  Desc x;
  Bn defaults;
  auto view = [&](fnorm_dtype_t t, std::vector<int64_t> dims, bool cl) {
    std::vector<int64_t> st(dims.size());
    if (cl) {  // C fastest, then the spatial dims from the last, then N
      st[1] = 1;
      int64_t s = dims[1];
      for (size_t i = dims.size() - 1; i >= 2; --i) {
        st[i] = s;
        s *= dims[i];
      }
      st[0] = s;
    } else {
      st.clear();
    }
    CHECK_STATUS(x.set(t, dims, st), FNORM_STATUS_SUCCESS);
    return fnorm::describe_bn(BnPass::FwdTrain, defaults.d, x.d);
  };
  // The rule (bn_plan.cpp): C = 64 with spatial dimensions, fp16/bf16
  // channels-last, 1 MiB .. 2x the L2. H200: 60 MiB L2; H100: 50 MiB.
  const int64_t h200 = 60ll << 20, h100 = 50ll << 20, none = 0;
  const auto f16 = FNORM_DTYPE_FLOAT16;
  for (BnPass p : {BnPass::FwdTrain, BnPass::Bwd}) {
    CHECK(fnorm::bn_auto_prefers_cudnn(view(f16, {128, 64, 56, 56}, true), p, h200));
    CHECK(fnorm::bn_auto_prefers_cudnn(view(FNORM_DTYPE_BFLOAT16, {128, 64, 56, 56}, true), p, h200));
    CHECK(fnorm::bn_auto_prefers_cudnn(view(f16, {4, 64, 56, 56}, true), p, h200));    // 1.6 MB
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {2, 64, 56, 56}, true), p, h200));   // 0.8 MB
    CHECK(fnorm::bn_auto_prefers_cudnn(view(f16, {256, 64, 56, 56}, true), p, h100));  // 103 MB <= 2x 50 MiB
    CHECK(fnorm::bn_auto_prefers_cudnn(view(f16, {300, 64, 56, 56}, true), p, h200));  // 120 MB
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {300, 64, 56, 56}, true), p, h100));
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {512, 64, 56, 56}, true), p, h200));  // 205 MB
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {128, 256, 56, 56}, true), p, h200));
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {128, 32, 56, 56}, true), p, h200));
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {128, 128, 28, 28}, true), p, h200));
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {32768, 64}, true), p, h200));  // [N, C]: not measured
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {128, 64, 56, 56}, true), p, none));  // no device figures
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {128, 64, 56, 56}, false), p, h200));  // NCHW
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(FNORM_DTYPE_FLOAT32, {32, 64, 56, 56}, true), p, h200));
    CHECK(!fnorm::bn_auto_prefers_cudnn(view(FNORM_DTYPE_FLOAT32, {126000, 16}, true), p, h200));
  }
  CHECK(!fnorm::bn_auto_prefers_cudnn(view(f16, {128, 64, 56, 56}, true), BnPass::FwdInfer, h200));

  fnorm_handle *h = fake_handle();
  Bn automatic, native;
  CHECK_STATUS(fnorm_batchnorm_desc_set_engine(native.d, FNORM_BN_ENGINE_NATIVE), FNORM_STATUS_SUCCESS);
  view(f16, {128, 64, 56, 56}, true);
  size_t a = 0, n = 0, rs = 9;
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, automatic.d, x.d, &a), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_fwd_train_workspace_size(h, native.d, x.d, &n), FNORM_STATUS_SUCCESS);
  CHECK_EQ(a, n);
  CHECK_STATUS(fnorm_batchnorm_bwd_workspace_size(h, automatic.d, x.d, &a), FNORM_STATUS_SUCCESS);
  CHECK_STATUS(fnorm_batchnorm_bwd_workspace_size(h, native.d, x.d, &n), FNORM_STATUS_SUCCESS);
  CHECK_EQ(a, n);
  CHECK_STATUS(fnorm_batchnorm_reserve_space_size(h, automatic.d, x.d, &rs), FNORM_STATUS_SUCCESS);
  CHECK_EQ(rs, static_cast<size_t>(0));
  for (int i = 0; i < fnorm::OpStates::kSlots; ++i)
    CHECK(h->states.find(i) == nullptr);  // a size query never creates cuDNN's state
  // With an epilogue AUTO is NATIVE: its mask.
  fnorm_batchnorm_desc_set(automatic.d, FNORM_BN_EPILOGUE_RELU, 1e-5, FNORM_BN_AVERAGE_EXPONENTIAL, 0.1);
  CHECK_STATUS(fnorm_batchnorm_reserve_space_size(h, automatic.d, x.d, &rs), FNORM_STATUS_SUCCESS);
  CHECK_EQ(rs, static_cast<size_t>((128 * 64 * 56 * 56) / 32 * 4));
}

}  // namespace

int main() {
  test_desc();
  test_layouts_and_sizes();
  test_launch_validation();
  test_size_overflow();
  test_sync_desc();
  test_auto();
  return fnorm_test::finish("host batchnorm api");
}
