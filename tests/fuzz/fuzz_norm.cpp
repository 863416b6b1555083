/* SPDX-License-Identifier: Apache-2.0 */
// libFuzzer target: LayerNorm/RMSNorm size queries and launches (forward and
// backward) with fuzzed descriptors, pointers, aliasing and workspace sizes,
// against the fake handle (see fuzz_input.hpp).
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Input in(data, size);
  fnorm_norm_desc_t n = nullptr;
  fnorm_norm_desc_create(&n);
  fnorm_norm_desc_set(n, in.enum_value<fnorm_norm_mode_t>(2), static_cast<int32_t>(in.pick(9)) - 4,
                      in.pick(4) ? 1e-5 : in.real());
  if (in.pick(4) == 0) fnorm_norm_desc_set_flags(n, in.pick(5));  // every known combination, and bit 2
  fuzz::Tensor x, y, w, dy, dx;
  x.fill(in);
  // Mostly the same descriptor for y / dy / dx as x (the common valid case).
  fuzz::Tensor *ys = in.pick(3) ? &x : (y.fill(in), &y);
  fuzz::Tensor *dys = in.pick(3) ? &x : (dy.fill(in), &dy);
  fuzz::Tensor *dxs = in.pick(3) ? &x : (dx.fill(in), &dx);
  w.fill(in);
  const fnorm_handle_t h = fuzz::handle(in);
  fnorm_norm_desc_t nd = in.pick(16) ? n : nullptr;

  for (int round = 0; round < 2 && !in.empty(); ++round) {
    size_t fwd_ws = 777;
    // The query's own arguments: a refusal of a NULL one says nothing of the
    // launch (an empty tensor's launch succeeds without a device).
    const fnorm_tensor_desc_t qx = x.maybe(in), qy = ys->maybe(in);
    size_t *qout = in.pick(16) ? &fwd_ws : nullptr;
    const fnorm_status_t q = fnorm_norm_fwd_workspace_size(h, nd, qx, qy, qout);
    fuzz::read_last_error();
    void *px = in.ptr();
    const fnorm_status_t l = fnorm_norm_fwd(
        h, nullptr, nd, x.d, px, in.flag() ? nullptr : in.ptr(), in.flag() ? nullptr : in.ptr(),
        in.flag() ? w.d : nullptr, in.flag() ? in.ptr() : nullptr, in.flag() ? in.ptr() : nullptr, ys->d,
        in.flag() ? px : in.ptr(), static_cast<float *>(in.flag() ? in.ptr() : nullptr),
        static_cast<float *>(in.flag() ? in.ptr() : nullptr), in.ptr(), in.pick(2) ? fwd_ws : in.bytes());
    fuzz::read_last_error();
    if (h && nd && qout && qx == x.d && qy == ys->d) fuzz::expect_refused(q, l, "fnorm_norm_fwd");

    // The quantized forward: y one of the one-byte dtypes where the fuzzed
    // descriptor has one, scale / amax placed anywhere. The query's own
    // arguments decide whether its refusal binds the launch, as above.
    const auto scaling = in.enum_value<fnorm_quant_scaling_t>(2);
    size_t quant_ws = 777, scale_bytes = 0;
    const fnorm_tensor_desc_t qqx = x.maybe(in), qqy = ys->maybe(in);
    size_t *qqout = in.pick(16) ? &quant_ws : nullptr;
    const fnorm_status_t qq = fnorm_norm_fwd_quant_workspace_size(h, nd, qqx, qqy, scaling, qqout);
    fuzz::read_last_error();
    fnorm_norm_fwd_quant_scale_size(h, nd, x.maybe(in), scaling, in.pick(16) ? &scale_bytes : nullptr);
    fuzz::read_last_error();
    void *qpx = in.ptr();
    const fnorm_status_t ql = fnorm_norm_fwd_quant(
        h, nullptr, nd, x.d, qpx, in.flag() ? nullptr : in.ptr(), in.flag() ? nullptr : in.ptr(),
        in.flag() ? w.d : nullptr, in.flag() ? in.ptr() : nullptr, in.flag() ? in.ptr() : nullptr, ys->d,
        in.flag() ? qpx : in.ptr(), scaling, static_cast<float *>(in.pick(16) ? in.ptr() : nullptr),
        static_cast<float *>(in.flag() ? in.ptr() : nullptr), static_cast<float *>(in.flag() ? in.ptr() : nullptr),
        static_cast<float *>(in.flag() ? in.ptr() : nullptr), in.ptr(), in.pick(2) ? quant_ws : in.bytes());
    fuzz::read_last_error();
    if (h && nd && qqout && qqx == x.d && qqy == ys->d) fuzz::expect_refused(qq, ql, "fnorm_norm_fwd_quant");

    size_t bwd_ws = 777;
    fuzz::Tensor *wq = in.flag() ? &w : nullptr;
    fnorm_norm_bwd_workspace_size(h, nd, x.maybe(in), wq ? wq->d : nullptr, in.pick(16) ? &bwd_ws : nullptr);
    fuzz::read_last_error();
    void *pdy = in.ptr();
    fnorm_norm_bwd(h, nullptr, nd, x.d, in.ptr(), dys->d, pdy, static_cast<const float *>(in.ptr()),
                   static_cast<const float *>(in.ptr()), wq ? wq->d : nullptr, in.flag() ? in.ptr() : nullptr,
                   in.flag() ? nullptr : in.ptr(), dxs->d, in.flag() ? pdy : in.ptr(),
                   in.flag() ? in.ptr() : nullptr, in.flag() ? in.ptr() : nullptr, in.ptr(),
                   in.pick(2) ? bwd_ws : in.bytes());
    fuzz::read_last_error();
  }
  fnorm_norm_desc_destroy(n);
  return 0;
}
