/* SPDX-License-Identifier: Apache-2.0 */
// libFuzzer target: the fully-connected layer's size queries (aux, forward
// and backward workspace) and launches with fuzzed descriptors, epilogues,
// weight layouts, chained producers, pointers and buffer sizes, against the
// fake handle (see fuzz_input.hpp). Without cuBLASLt in the build every call
// answers NOT_SUPPORTED_BUILD, which is checked too.
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Input in(data, size);
  fnorm_linear_desc_t desc = nullptr, prod = nullptr;
  if (fnorm_linear_desc_create(&desc) != FNORM_STATUS_SUCCESS) {
    size_t b = 0;
    if (fnorm_linear_aux_size(fake_handle(), nullptr, nullptr, &b) != FNORM_STATUS_NOT_SUPPORTED_BUILD) std::abort();
    return 0;
  }
  fnorm_linear_desc_create(&prod);
  fnorm_linear_desc_set(desc, in.enum_value<fnorm_linear_epilogue_t>(4), in.enum_value<fnorm_linear_weight_layout_t>(2),
                        in.pick(8) ? in.pick(2) : in.raw<uint32_t>());
  fnorm_linear_desc_set(prod, in.enum_value<fnorm_linear_epilogue_t>(4), in.enum_value<fnorm_linear_weight_layout_t>(2),
                        in.pick(2));
  fuzz::Tensor x, w, y, dx;
  x.fill(in);
  w.fill(in);
  y.fill(in);
  fuzz::Tensor *dxs = in.pick(3) ? &x : (dx.fill(in), &dx);
  const fnorm_handle_t h = fuzz::handle(in);
  fnorm_linear_desc_t d = in.pick(16) ? desc : nullptr;
  fnorm_linear_desc_t p = in.flag() ? prod : nullptr;

  for (int round = 0; round < 2 && !in.empty(); ++round) {
    size_t aux = 777, fws = 777, bws = 777;
    fnorm_linear_aux_size(h, d, y.maybe(in), in.pick(16) ? &aux : nullptr);
    fuzz::read_last_error();
    const fnorm_tensor_desc_t qx = x.maybe(in), qw = w.maybe(in), qy = y.maybe(in);
    size_t *qout = in.pick(16) ? &fws : nullptr;
    const fnorm_status_t qf = fnorm_linear_fwd_workspace_size(h, d, qx, qw, qy, qout);
    fuzz::read_last_error();
    void *px = in.ptr(), *pw = in.ptr();
    const fnorm_status_t lf =
        fnorm_linear_fwd(h, nullptr, d, x.d, px, w.d, pw, in.flag() ? in.ptr() : nullptr, y.d,
                         in.flag() ? px : in.ptr(), in.flag() ? in.ptr() : nullptr, in.pick(2) ? aux : in.bytes(),
                         in.ptr(), in.pick(2) ? fws : in.bytes());
    fuzz::read_last_error();
    if (h && d && qout && qx == x.d && qw == w.d && qy == y.d) fuzz::expect_refused(qf, lf, "fnorm_linear_fwd");

    fnorm_linear_bwd_workspace_size(h, d, x.maybe(in), w.maybe(in), y.maybe(in), p, in.pick(16) ? &bws : nullptr);
    fuzz::read_last_error();
    fnorm_linear_bwd(h, nullptr, d, x.d, in.flag() ? px : nullptr, w.d, in.flag() ? pw : nullptr, y.d, in.ptr(),
                     in.flag() ? in.ptr() : nullptr, in.pick(2) ? aux : in.bytes(), p, in.flag() ? in.ptr() : nullptr,
                     in.bytes(), in.flag() ? dxs->d : nullptr, in.flag() ? in.ptr() : nullptr,
                     in.flag() ? in.ptr() : nullptr, in.flag() ? in.ptr() : nullptr, in.flag() ? in.ptr() : nullptr,
                     in.ptr(), in.pick(2) ? bws : in.bytes());
    fuzz::read_last_error();
  }
  fnorm_linear_desc_destroy(desc);
  fnorm_linear_desc_destroy(prod);
  return 0;
}
