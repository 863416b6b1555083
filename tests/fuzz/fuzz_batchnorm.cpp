/* SPDX-License-Identifier: Apache-2.0 */
// libFuzzer target: BatchNorm size queries (training / reserve / inference /
// backward) and launches with fuzzed descriptors (every layout, epilogue,
// averaging mode and engine), pointers, aliasing and workspace sizes, against
// the fake handle (see fuzz_input.hpp). No communicator is attached: a
// SyncBatchNorm launch would hand NCCL the (fake) communicator.
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Input in(data, size);
  fnorm_batchnorm_desc_t bn = nullptr;
  fnorm_batchnorm_desc_create(&bn);
  fnorm_batchnorm_desc_set(bn, in.enum_value<fnorm_bn_epilogue_t>(3), in.pick(4) ? 1e-5 : in.real(),
                           in.enum_value<fnorm_bn_average_t>(2), in.pick(4) ? 0.1 : in.real());
  fnorm_batchnorm_desc_set_engine(bn, in.enum_value<fnorm_bn_engine_t>(3));
  fuzz::Tensor x, y, dy, dx;
  x.fill(in);
  fuzz::Tensor *ys = in.pick(3) ? &x : (y.fill(in), &y);
  fuzz::Tensor *dys = in.pick(3) ? &x : (dy.fill(in), &dy);
  fuzz::Tensor *dxs = in.pick(3) ? &x : (dx.fill(in), &dx);
  const fnorm_handle_t h = fuzz::handle(in);
  fnorm_batchnorm_desc_t d = in.pick(16) ? bn : nullptr;

  for (int round = 0; round < 2 && !in.empty(); ++round) {
    size_t ws = 777, rs = 777, iws = 777, bws = 777;
    size_t *out = in.pick(16) ? &ws : nullptr;
    const fnorm_tensor_desc_t qx = x.maybe(in);
    const fnorm_status_t qt = fnorm_batchnorm_fwd_train_workspace_size(h, d, qx, out);
    fnorm_batchnorm_reserve_space_size(h, d, x.maybe(in), in.pick(16) ? &rs : nullptr);
    fnorm_batchnorm_fwd_infer_workspace_size(h, d, x.maybe(in), in.pick(16) ? &iws : nullptr);
    fnorm_batchnorm_bwd_workspace_size(h, d, x.maybe(in), in.pick(16) ? &bws : nullptr);
    fuzz::read_last_error();

    void *px = in.ptr(), *pz = in.flag() ? in.ptr() : nullptr;
    auto vec = [&in]() { return static_cast<float *>(in.flag() ? in.ptr() : nullptr); };
    const fnorm_status_t lt = fnorm_batchnorm_fwd_train(
        h, nullptr, d, x.d, px, pz, vec(), vec(), vec(), vec(), static_cast<int64_t *>(in.flag() ? in.ptr() : nullptr),
        ys->d, in.flag() ? px : in.ptr(), vec(), vec(), in.ptr(), in.pick(2) ? ws : in.bytes(), in.ptr(),
        in.pick(2) ? rs : in.bytes());
    fuzz::read_last_error();
    if (h && d && out && qx == x.d) fuzz::expect_refused(qt, lt, "fnorm_batchnorm_fwd_train");

    fnorm_batchnorm_fwd_infer(h, nullptr, d, x.d, px, pz, vec(), vec(), vec(), vec(), ys->d,
                              in.flag() ? px : in.ptr(), in.ptr(), in.pick(2) ? iws : in.bytes());
    fuzz::read_last_error();

    void *pdy = in.ptr();
    fnorm_batchnorm_bwd(h, nullptr, d, x.d, px, dys->d, pdy, in.flag() ? in.ptr() : nullptr, vec(), vec(), vec(), vec(),
                        in.ptr(), in.pick(2) ? rs : in.bytes(), dxs->d, in.flag() ? pdy : in.ptr(),
                        in.flag() ? in.ptr() : nullptr, vec(), vec(), in.ptr(), in.pick(2) ? bws : in.bytes());
    fuzz::read_last_error();
  }
  fnorm_batchnorm_desc_destroy(bn);
  return 0;
}
