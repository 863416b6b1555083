/* SPDX-License-Identifier: Apache-2.0 */
// Opening the optional NVIDIA libraries at first use (core/dynload.hpp).
#include "core/dynload.hpp"

#include <dlfcn.h>

#include <vector>

#include "core/error.hpp"

namespace fnorm {
namespace dynload {

namespace {

// dlerror() of the last failed dl* call, or `fallback`.
std::string dl_error(const char *fallback) {
  const char *e = dlerror();
  return e != nullptr ? e : fallback;
}

// Every symbol of the table from `handle`, or the first missing name.
bool resolve(void *handle, const Library &lib, std::vector<void *> &out, std::string *missing) {
  out.assign(lib.count, nullptr);
  for (size_t i = 0; i < lib.count; ++i) {
    out[i] = dlsym(handle, lib.symbols[i]);
    if (out[i] == nullptr) {
      *missing = lib.symbols[i];
      return false;
    }
  }
  return true;
}

}  // namespace

void *const *open(Library &lib) {
  void *const *t = lib.table.load(std::memory_order_acquire);
  if (t != nullptr) return t;
  std::lock_guard<std::mutex> lock(lib.mutex);
  t = lib.table.load(std::memory_order_relaxed);
  if (t != nullptr) return t;
  if (!lib.failed) {
    std::vector<void *> syms;
    std::string missing, tried;
    // 1. Already in the process under its soname (the caller's NCCL, the
    //    cuDNN PyTorch loaded): that copy, so that objects it created (an
    //    ncclComm_t) are used by the code that made them.
    void *handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    std::string where = lib.soname;
    // 2. Linked into the program, or loaded with RTLD_GLOBAL under another name.
    if (handle == nullptr) {
      (void)dlerror();
      if (dlsym(RTLD_DEFAULT, lib.symbols[0]) != nullptr) {
        handle = RTLD_DEFAULT;
        where = "process";
      }
    }
    // 3. The loader's search (LD_LIBRARY_PATH, the loader cache, ...).
    if (handle == nullptr) {
      handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) tried = dl_error("not found");
    }
    if (handle == nullptr) {
      lib.failed = true;
      lib.failure = format("%s (%s) could not be loaded (%s); %s needs it: install %s, or put the directory "
                           "that holds %s on the loader path (LD_LIBRARY_PATH or ldconfig)",
                           lib.name, lib.soname, tried.c_str(), lib.needed_by, lib.name, lib.soname);
    } else if (!resolve(handle, lib, syms, &missing)) {
      lib.failed = true;
      lib.failure = format("%s (%s, from %s) has no function %s: it is older than the version this build "
                           "was compiled against; %s needs it",
                           lib.name, lib.soname, where.c_str(), missing.c_str(), lib.needed_by);
    } else {
      void **table = new void *[lib.count];  // the library stays open for the process
      for (size_t i = 0; i < lib.count; ++i) table[i] = syms[i];
      Dl_info info{};
      if (handle != RTLD_DEFAULT && dladdr(syms[0], &info) != 0 && info.dli_fname != nullptr)
        where = info.dli_fname;
      lib.where = where;
      lib.table.store(table, std::memory_order_release);
      return table;
    }
  }
  fail(FNORM_STATUS_NOT_SUPPORTED_BUILD, "%s", lib.failure.c_str());
}

std::string origin(const Library &lib) {
  if (lib.table.load(std::memory_order_acquire) == nullptr) return std::string();
  return lib.where;
}

}  // namespace dynload
}  // namespace fnorm
