/* SPDX-License-Identifier: Apache-2.0 */
// The optional NVIDIA libraries (cuBLASLt, cuDNN, NCCL), opened at first use
// instead of linked: libfusednorm's only NVIDIA dependency at load time is
// cudart, so a LayerNorm-only program needs nothing else installed, and a
// process that loads its own NCCL or cuDNN later (PyTorch) gets that one.
//
// Each library has a table of the functions the library provides to us
// (core/dynload_<lib>.cpp): it defines every one of them under its own name,
// hidden inside libfusednorm, forwarding to the address resolved from the
// opened library. The op code calls cudnnCreate(...) as if it were linked.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

namespace fnorm {
namespace dynload {

struct Library {
  Library(const char *name_, const char *soname_, const char *needed_by_, const char *const *symbols_,
          size_t count_)
      : name(name_), soname(soname_), needed_by(needed_by_), symbols(symbols_), count(count_) {}
  // The tables' Library objects are never destroyed (core/dynload_<lib>.cpp
  // makes them with new): forwarders may still run during static
  // destruction. A Library with a shorter life (a test's) frees its table.
  ~Library() { delete[] table.load(); }
  Library(const Library &) = delete;
  Library &operator=(const Library &) = delete;
  const char *name;       // "cuDNN"
  const char *soname;     // the major version the build compiled against: "libcudnn.so.9"
  const char *needed_by;  // what fails without it: "the BatchNorm cuDNN engine"
  const char *const *symbols;  // the table's function names, in table order
  size_t count;
  // Filled once per process by open().
  std::mutex mutex;
  std::atomic<void **> table{nullptr};
  bool failed = false;
  std::string failure;  // the message, once failed
  std::string where;    // the path it was opened from, once opened
};

// The resolved addresses of lib.symbols (same order). Opens the library on
// the first call, trying in turn: a copy already loaded in the process under
// its soname (RTLD_NOLOAD), the process's global symbols (a library linked
// into the program), then dlopen of the soname (LD_LIBRARY_PATH, the loader
// cache, the system directories). The outcome is kept for the process. If the library or one of its functions is
// missing, throws Error{FNORM_STATUS_NOT_SUPPORTED_BUILD} whose message names
// the library, its soname and what needs it. Thread-safe.
void *const *open(Library &lib);

// Where `lib` was found (a path, or "process" for global symbols); empty if
// it has not been opened. For diagnostics and the tests.
std::string origin(const Library &lib);

}  // namespace dynload
}  // namespace fnorm

// The body of one table (core/dynload_<lib>.cpp), from its X-macro list of
// (return type, name, (parameters), (arguments)): the names in order, the
// index of each, and the definition of each function.
#define FNORM_DYNLOAD_INDEX(ret, name, params, args) k_##name,
#define FNORM_DYNLOAD_NAME(ret, name, params, args) #name,
#define FNORM_DYNLOAD_DEFINE(lib, ret, name, params, args)                                 \
  ret name params {                                                                        \
    return reinterpret_cast<decltype(&::name)>(::fnorm::dynload::open(lib)[k_##name]) args; \
  }
