/* SPDX-License-Identifier: Apache-2.0 */
// The library's one reader of the environment (core/tuning.hpp).
#include "core/tuning.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fnorm {
namespace {

bool flag(const char *name) {
  const char *v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

void parse_norm_fwd(const char *knob, Tuning::NormFwd &t) {
  const std::string s = knob;
  size_t at = 0;
  while (at < s.size()) {
    const size_t end = std::min(s.find_first_of(",;", at), s.size());
    const std::string tok = s.substr(at, end - at);
    at = end + 1;
    int n = 0;
    char rest = 0;
    using Tier = Tuning::NormFwd::Tier;
    using Grid = Tuning::NormFwd::Grid;
    if (std::sscanf(tok.c_str(), "block:%d%c", &n, &rest) == 1 && n > 0) {
      t.tier = Tier::Block;
      t.npack = n;
    } else if (std::sscanf(tok.c_str(), "warp:%d%c", &n, &rest) == 1 && n > 0) {
      t.tier = Tier::Warp;
      t.npack = n;
    } else if (tok == "smem") {
      t.tier = Tier::Smem;
    } else if (tok == "uncached") {
      t.tier = Tier::Uncached;
    } else if (tok == "grid=rows") {
      t.grid = Grid::PerRow;
    } else if (tok == "grid=wave") {
      t.grid = Grid::Wave;
    } else if (!tok.empty() && t.bad_item[0] == '\0') {
      std::snprintf(t.bad_item, sizeof t.bad_item, "%s", tok.c_str());
    }
  }
}

}  // namespace

Tuning tuning_from_env() {
  Tuning t;
  t.check_pointers = flag("FNORM_CHECK_POINTERS");
  if (const char *v = std::getenv("FNORM_NORM_FWD_PLAN")) parse_norm_fwd(v, t.norm_fwd);
  if (const char *v = std::getenv("FNORM_GN_TILE_K")) {
    const long k = std::strtol(v, nullptr, 10);
    if (k > 0 && k <= 8) t.gn_tile_k = static_cast<int>(k);
  }
  if (const char *v = std::getenv("FNORM_GN_SCHEDULE")) {
    if (std::strcmp(v, "persistent") == 0) t.gn_schedule = Tuning::GnSchedule::Persistent;
    if (std::strcmp(v, "stream") == 0) t.gn_schedule = Tuning::GnSchedule::Stream;
    if (std::strcmp(v, "fused") == 0) t.gn_schedule = Tuning::GnSchedule::Fused;
  }
  t.bn_persist_gather_all = flag("FNORM_BN_PERSIST_GATHER_ALL");
  if (const char *v = std::getenv("FNORM_BN_ONEWAVE_TILE")) {
    const long n = std::strtol(v, nullptr, 10);
    if (n >= 32 && n <= 4096) t.bn_onewave_tile = static_cast<int>(n);
  }
  if (const char *v = std::getenv("FNORM_BN_ONEWAVE_K")) {
    const long n = std::strtol(v, nullptr, 10);
    if (n >= 1 && n <= 8) t.bn_onewave_k = static_cast<int>(n);
  }
  t.linear_unfused = flag("FNORM_LINEAR_UNFUSED");
  if (const char *v = std::getenv("FNORM_LINEAR_FWD_AUX")) {
    if (std::strcmp(v, "lt") == 0) t.linear_fwd_aux = Tuning::LinearFwdAux::Lt;
    if (std::strcmp(v, "own") == 0) t.linear_fwd_aux = Tuning::LinearFwdAux::Own;
  }
  t.linear_no_n1 = flag("FNORM_LINEAR_NO_N1");
  if (const char *v = std::getenv("FNORM_LINEAR_WS_MIB")) {
    const long mib = std::strtol(v, nullptr, 10);
    if (mib > 0 && mib <= 32) t.linear_heuristic_budget = static_cast<uint64_t>(mib) << 20;
  }
  return t;
}

}  // namespace fnorm
