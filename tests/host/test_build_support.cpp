/* SPDX-License-Identifier: Apache-2.0 */
// What a build supports at run time: the GPUs it has code for (the status of
// a launch on any other), and the loader of the optional NVIDIA libraries
// (core/dynload.hpp). Default: the mechanism, with libraries that exist everywhere (libc) and
// ones that exist nowhere. --absent: run by tests/abi/check_cudart_only.py
// with a loader path of libcudart alone, where cuBLASLt, cuDNN and NCCL
// cannot be found: every call into them fails with NOT_SUPPORTED_BUILD and a
// message naming the library, through the public API where a host test can
// reach one (SyncBatchNorm's communicator check) and through the function
// tables otherwise.
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "check.hpp"
#include "core/build_config.hpp"
#include "core/dynload.hpp"
#include "fake_handle.hpp"
#include "fusednorm.h"

#ifdef FNORM_CUBLASLT_SONAME
#include <cublasLt.h>
#endif
#ifdef FNORM_CUDNN_SONAME
#include <cudnn.h>
#endif

using namespace fnorm_test;

namespace {

const char *const kLibcSymbols[] = {"strlen", "memcpy"};
const char *const kMissingSymbol[] = {"strlen", "fnorm_no_such_function"};
const char *const kAbsentSymbols[] = {"anything"};

bool contains(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

// The status and message of `body` as the ABI would return them.
template <class Body>
std::pair<fnorm_status_t, std::string> run(Body body) {
  const fnorm_status_t st = fnorm::api_guard("test", body);
  char msg[1024] = "";
  fnorm_get_last_error_message(msg, sizeof msg);
  return {st, msg};
}

void test_mechanism() {
  // A library in the process: its functions, and where it came from.
  fnorm::dynload::Library libc("libc", "libc.so.6", "this test", kLibcSymbols, 2);
  void *const *t = fnorm::dynload::open(libc);
  // libc's own functions (under ASan, RTLD_DEFAULT finds its interceptors).
  void *libc_handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  CHECK(libc_handle != nullptr);
  CHECK(t[0] == dlsym(libc_handle, "strlen"));
  CHECK(t[1] == dlsym(libc_handle, "memcpy"));
  CHECK(fnorm::dynload::open(libc) == t);  // opened once
  CHECK(contains(fnorm::dynload::origin(libc), "libc"));

  // A library that exists nowhere: the status, and a message naming it and
  // what needs it; the same answer again without retrying.
  fnorm::dynload::Library absent("Absentlib", "libfnorm_absent_for_test.so.7", "the frobnicator", kAbsentSymbols, 1);
  for (int i = 0; i < 2; ++i) {
    auto r = run([&] { (void)fnorm::dynload::open(absent); });
    CHECK_EQ(r.first, FNORM_STATUS_NOT_SUPPORTED_BUILD);
    CHECK(contains(r.second, "Absentlib (libfnorm_absent_for_test.so.7) could not be loaded"));
    CHECK(contains(r.second, "the frobnicator needs it"));
  }
  CHECK(fnorm::dynload::origin(absent).empty());

  // A library without one of the table's functions (older than the build).
  fnorm::dynload::Library old("libc", "libc.so.6", "this test", kMissingSymbol, 2);
  auto r = run([&] { (void)fnorm::dynload::open(old); });
  CHECK_EQ(r.first, FNORM_STATUS_NOT_SUPPORTED_BUILD);
  CHECK(contains(r.second, "has no function fnorm_no_such_function"));
}

// A launch the device has no code for (what cudaLaunchKernel returns then):
// NOT_SUPPORTED_BUILD, naming the device's compute capability and the archs
// of this build.
void test_no_kernel_image() {
  auto r = run([] { fnorm::check_cuda(cudaErrorNoKernelImageForDevice, "layernorm_fwd launch"); });
  std::printf("%s\n", r.second.c_str());
  CHECK_EQ(r.first, FNORM_STATUS_NOT_SUPPORTED_BUILD);
  CHECK(contains(r.second, "layernorm_fwd launch failed"));
  CHECK(contains(r.second, "is compute capability"));
  CHECK(contains(r.second, FNORM_BUILT_ARCHS));
  CHECK(contains(r.second, "gpu_archs"));
}

// Whether `soname` can be opened here anyway (a system directory the loader
// always searches, e.g. a distribution's cuDNN in /usr/lib/<triplet>): its
// absence cannot be tested then, and that part is skipped, saying so.
bool present(const char *soname) {
  void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  std::printf("SKIP: %s is in a directory the loader always searches; its absence cannot be tested here\n",
              soname);
  ++counters().skipped;
  return true;
}

// Expects every optional library to be missing from the loader path.
void test_absent() {
#ifdef FNORM_NCCL_SONAME
  if (!present(FNORM_NCCL_SONAME)) {
    // SyncBatchNorm through the public API: the communicator check is the
    // first NCCL call, before any device work (the handle needs no GPU).
    fnorm_batchnorm_desc_t bn = nullptr;
    fnorm_tensor_desc_t xd = nullptr;
    CHECK_STATUS(fnorm_batchnorm_desc_create(&bn), FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_batchnorm_desc_set_comm(bn, reinterpret_cast<struct ncclComm *>(0x1000), 0),
                 FNORM_STATUS_SUCCESS);
    CHECK_STATUS(fnorm_tensor_desc_create(&xd), FNORM_STATUS_SUCCESS);
    const int64_t dims[4] = {2, 3, 4, 5};
    CHECK_STATUS(fnorm_tensor_desc_set(xd, FNORM_DTYPE_FLOAT32, 4, dims, nullptr), FNORM_STATUS_SUCCESS);
    static float buf[512];
    const fnorm_status_t st =
        fnorm_batchnorm_fwd_train(fake_handle(), nullptr, bn, xd, buf, nullptr, buf, buf, nullptr, nullptr,
                                  nullptr, xd, buf + 128, buf + 256, buf + 300, nullptr, 0, nullptr, 0);
    char msg[1024];
    fnorm_get_last_error_message(msg, sizeof msg);
    std::printf("fnorm_batchnorm_fwd_train with a communicator: %s\n  %s\n", fnorm_get_error_string(st), msg);
    CHECK_EQ(st, FNORM_STATUS_NOT_SUPPORTED_BUILD);
    CHECK(contains(msg, "NCCL (" FNORM_NCCL_SONAME ") could not be loaded"));
    CHECK(contains(msg, "SyncBatchNorm"));
    fnorm_tensor_desc_destroy(xd);
    fnorm_batchnorm_desc_destroy(bn);
  }
#endif
#ifdef FNORM_CUDNN_SONAME
  if (!present(FNORM_CUDNN_SONAME)) {
    auto r = run([] { (void)cudnnGetErrorString(CUDNN_STATUS_SUCCESS); });
    std::printf("cuDNN: %s\n", r.second.c_str());
    CHECK_EQ(r.first, FNORM_STATUS_NOT_SUPPORTED_BUILD);
    CHECK(contains(r.second, "cuDNN (" FNORM_CUDNN_SONAME ") could not be loaded"));
  }
#endif
#ifdef FNORM_CUBLASLT_SONAME
  if (!present(FNORM_CUBLASLT_SONAME)) {
    auto r = run([] { (void)cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS); });
    std::printf("cuBLASLt: %s\n", r.second.c_str());
    CHECK_EQ(r.first, FNORM_STATUS_NOT_SUPPORTED_BUILD);
    CHECK(contains(r.second, "cuBLASLt (" FNORM_CUBLASLT_SONAME ") could not be loaded"));
  }
#endif
}

}  // namespace

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "--absent") == 0) {
    test_absent();
    const int rc = finish("host-build-support --absent");
    return rc == 0 && counters().passed == 0 ? 77 : rc;  // nothing could be tested here
  }
  test_mechanism();
  test_no_kernel_image();
  return finish("host-build-support");
}
