/* SPDX-License-Identifier: Apache-2.0 */
// libFuzzer target: every descriptor's create/set/get/destroy, the error
// strings, the status categories and the last-error buffer, in a fuzzed
// sequence of calls. Launches nothing (the other targets do).
#include "fuzz_input.hpp"

namespace {

void tensor_ops(fuzz::Input &in, fnorm_tensor_desc_t t) {
  fuzz::Tensor scratch;
  switch (in.pick(4)) {
    case 0: {
      // set with raw fuzzed sizes and strides
      const int32_t rank = static_cast<int32_t>(in.raw<int8_t>());
      int64_t dims[FNORM_MAX_RANK], strides[FNORM_MAX_RANK];
      for (int i = 0; i < FNORM_MAX_RANK; ++i) dims[i] = in.dim();
      for (int i = 0; i < FNORM_MAX_RANK; ++i) strides[i] = in.dim();
      // A rank above FNORM_MAX_RANK must be refused before dims is read past its end.
      fnorm_tensor_desc_set(in.pick(10) ? t : nullptr, in.enum_value<fnorm_dtype_t>(3),
                            rank > FNORM_MAX_RANK ? FNORM_MAX_RANK + 1 : rank, in.pick(20) ? dims : nullptr,
                            in.flag() ? strides : nullptr);
      break;
    }
    case 1: {
      fnorm_dtype_t dt;
      int32_t rank = -7;
      int64_t dims[FNORM_MAX_RANK], strides[FNORM_MAX_RANK];
      const int32_t max_rank = static_cast<int32_t>(in.pick(FNORM_MAX_RANK + 3)) - 2;  // -2 .. MAX_RANK
      const fnorm_status_t st = fnorm_tensor_desc_get(in.pick(10) ? t : nullptr, in.flag() ? &dt : nullptr,
                                                      in.flag() ? &rank : nullptr, in.flag() ? dims : nullptr,
                                                      in.flag() ? strides : nullptr, max_rank);
      if (st == FNORM_STATUS_SUCCESS && rank != -7 && (rank < 1 || rank > FNORM_MAX_RANK)) std::abort();
      break;
    }
    case 2: {
      int64_t n = -1;
      const fnorm_status_t st = fnorm_tensor_desc_get_elements(in.pick(10) ? t : nullptr, in.flag() ? &n : nullptr);
      if (st == FNORM_STATUS_SUCCESS && n != -1 && n < 0) std::abort();  // sizes are >= 0
      break;
    }
    default:
      scratch.fill(in);
      break;
  }
}

void norm_ops(fuzz::Input &in, fnorm_norm_desc_t n) {
  fnorm_norm_desc_t d = in.pick(10) ? n : nullptr;
  switch (in.pick(4)) {
    case 0: {
      const double eps = in.real();
      if (fnorm_norm_desc_set(d, in.enum_value<fnorm_norm_mode_t>(2), in.raw<int32_t>() % 12, eps) ==
          FNORM_STATUS_SUCCESS) {
        // The header's promise: epsilon is finite, >= 0 and representable in fp32.
        double got = -1;
        fnorm_norm_desc_get(d, nullptr, nullptr, &got);
        if (!(std::isfinite(got) && got >= 0 && got <= 3.4028234663852886e38)) {
          std::fprintf(stderr, "fnorm_norm_desc_set accepted epsilon %g\n", got);
          std::abort();
        }
      }
      break;
    }
    case 1: {
      fnorm_norm_mode_t m;
      int32_t axis;
      double eps;
      fnorm_norm_desc_get(d, in.flag() ? &m : nullptr, in.flag() ? &axis : nullptr, in.flag() ? &eps : nullptr);
      break;
    }
    case 2: fnorm_norm_desc_set_flags(d, in.raw<uint32_t>() & (in.flag() ? 1u : ~0u)); break;
    default: {
      uint32_t f;
      fnorm_norm_desc_get_flags(d, in.flag() ? &f : nullptr);
    }
  }
}

void bn_ops(fuzz::Input &in, fnorm_batchnorm_desc_t b) {
  fnorm_batchnorm_desc_t d = in.pick(10) ? b : nullptr;
  switch (in.pick(6)) {
    case 0:
      fnorm_batchnorm_desc_set(d, in.enum_value<fnorm_bn_epilogue_t>(3), in.real(), in.enum_value<fnorm_bn_average_t>(2),
                               in.real());
      break;
    case 1: {
      fnorm_bn_epilogue_t e;
      double eps, mom;
      fnorm_bn_average_t a;
      fnorm_batchnorm_desc_get(d, in.flag() ? &e : nullptr, in.flag() ? &eps : nullptr, in.flag() ? &a : nullptr,
                               in.flag() ? &mom : nullptr);
      break;
    }
    case 2: fnorm_batchnorm_desc_set_engine(d, in.enum_value<fnorm_bn_engine_t>(3)); break;
    case 3: {
      fnorm_bn_engine_t e;
      fnorm_batchnorm_desc_get_engine(d, in.flag() ? &e : nullptr);
      break;
    }
    case 4:
      // The communicator is only stored here (this target launches nothing).
      fnorm_batchnorm_desc_set_comm(d, in.flag() ? nullptr : reinterpret_cast<ncclComm *>(fuzz::Input::base(1)),
                                    in.raw<uint32_t>() & (in.flag() ? 1u : ~0u));
      break;
    default: {
      ncclComm *c;
      uint32_t f;
      fnorm_batchnorm_desc_get_comm(d, in.flag() ? &c : nullptr, in.flag() ? &f : nullptr);
    }
  }
}

void linear_ops(fuzz::Input &in, fnorm_linear_desc_t l) {
  fnorm_linear_desc_t d = in.pick(10) ? l : nullptr;
  if (in.flag()) {
    fnorm_linear_desc_set(d, in.enum_value<fnorm_linear_epilogue_t>(4), in.enum_value<fnorm_linear_weight_layout_t>(2),
                          in.raw<uint32_t>() & (in.flag() ? 1u : ~0u));
  } else {
    fnorm_linear_epilogue_t e;
    fnorm_linear_weight_layout_t w;
    uint32_t f;
    fnorm_linear_desc_get(d, in.flag() ? &e : nullptr, in.flag() ? &w : nullptr, in.flag() ? &f : nullptr);
  }
}

void error_ops(fuzz::Input &in) {
  const fnorm_status_t s = static_cast<fnorm_status_t>(in.flag() ? in.raw<int32_t>() : 1000 * in.pick(6) + in.pick(4));
  const char *str = fnorm_get_error_string(s);
  if (str == nullptr || std::strlen(str) == 0) std::abort();
  const fnorm_status_t c = fnorm_status_category(s);
  if (c == FNORM_STATUS_SUCCESS && s != FNORM_STATUS_SUCCESS && s > 0 && s < 1000) {
    // 1..999 round down to 0: fine.
  }
  char buf[80];
  const size_t size = in.pick(sizeof buf + 1);
  const size_t full = fnorm_get_last_error_message(size ? buf : nullptr, size);
  if (size > 0 && std::strlen(buf) >= size) std::abort();
  if (size > full && std::strlen(buf) != full) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::Input in(data, size);
  fuzz::Tensor t;
  fnorm_norm_desc_t n = nullptr;
  fnorm_batchnorm_desc_t b = nullptr;
  fnorm_linear_desc_t l = nullptr;
  fnorm_norm_desc_create(&n);
  fnorm_batchnorm_desc_create(&b);
  const fnorm_status_t lst = fnorm_linear_desc_create(&l);
  for (int op = 0; op < 64 && !in.empty(); ++op) {
    switch (in.pick(5)) {
      case 0: tensor_ops(in, t.d); break;
      case 1: norm_ops(in, n); break;
      case 2: bn_ops(in, b); break;
      case 3: if (lst == FNORM_STATUS_SUCCESS) linear_ops(in, l); break;
      default: error_ops(in);
    }
    fuzz::read_last_error();
  }
  fnorm_norm_desc_destroy(n);
  fnorm_batchnorm_desc_destroy(b);
  fnorm_linear_desc_destroy(l);
  return 0;
}
