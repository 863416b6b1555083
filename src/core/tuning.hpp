/* SPDX-License-Identifier: Apache-2.0 */
// Tuning: every environment variable the library reads, read once per
// handle (at fnorm_create) into plain values. The planners read this struct,
// never the environment, and parse no strings. The knobs other than
// FNORM_CHECK_POINTERS are for benchmarks and tests (bench/README.md lists
// them); none changes what a call computes, only which path computes it.
#pragma once

#include <cstdint>

namespace fnorm {

struct Tuning {
  // FNORM_CHECK_POINTERS (the one public knob, api/fusednorm.h): ask CUDA
  // about every pointer before a launch (core/pointer_check.hpp).
  bool check_pointers = false;

  // FNORM_NORM_FWD_PLAN: overrides of the LayerNorm / RMSNorm forward plan,
  // items separated by ',' or ';' (bench/ab_norm.py times planner choices
  // against each other in one process):
  //   block:N / warp:N       the register tier at N packs per thread
  //   smem / uncached        that block tier
  //   grid=rows / grid=wave  a block per row / one wave of resident blocks
  // A forced tier that cannot hold the row is refused (NOT_SUPPORTED), never
  // replaced by another; an item that does not parse makes every forward
  // on the handle BAD_PARAM, naming it.
  struct NormFwd {
    enum class Tier { Planner, Block, Warp, Smem, Uncached } tier = Tier::Planner;
    int npack = 0;  // Block / Warp
    enum class Grid { Planner, PerRow, Wave } grid = Grid::Planner;
    char bad_item[32] = "";  // the first item that did not parse ("" when all did)
  } norm_fwd;

  // FNORM_GN_TILE_K=N (1..8): GroupNorm's tiles of at most N packs per
  // thread (groupnorm/gn_plan.cpp; the pass's most: 8 forward, 4
  // backward); 0 or unset: the planner's.
  int gn_tile_k = 0;
  // FNORM_GN_SCHEDULE=persistent|stream|fused: GroupNorm's schedule
  // (groupnorm/groupnorm.hpp) instead of the planner's; for A/B timings
  // and for tests that reach both.
  // stream: the separate passes everywhere; fused: the streaming schedule
  // with every channels-first forward in one launch (gn_s_fused_cf; the
  // planner's where x is larger than L2).
  enum class GnSchedule { Planner, Persistent, Stream, Fused } gn_schedule = GnSchedule::Planner;

  // FNORM_BN_PERSIST_GATHER_ALL=1: the BatchNorm one-launch kernel's gather
  // combine at every size (batchnorm/bn_persistent.cuh).
  bool bn_persist_gather_all = false;
  // FNORM_BN_ONEWAVE_TILE=N (32..4096 columns): the one-wave kernel's column
  // tiles of N columns (32, 64, 128 or 256 that divides C, at most 32 packs)
  // at any gather size; any other N: the whole-width tile only (the kernel
  // before tiles); 0 or unset: the planner's (bn_persistent.cuh).
  int bn_onewave_tile = 0;
  // FNORM_BN_ONEWAVE_K=N (1..8): the one-wave kernel at N packs per thread
  // (where its grid fits); 0 or unset: the planner's (8).
  int bn_onewave_k = 0;

  // The fully-connected layer (linear/linear_plan.cpp):
  // FNORM_LINEAR_UNFUSED=1: the library's own epilogue kernels instead of
  // cuBLASLt's fused epilogues (the paths taken where cuBLASLt has no fused
  // kernel), so that tests reach them.
  bool linear_unfused = false;
  // FNORM_LINEAR_FWD_AUX=lt|own: the forward's activation from cuBLASLt's
  // epilogues always (lt) or from the library's passes beside the GEMM
  // wherever the rule in linear_plan.cpp may choose them (own).
  enum class LinearFwdAux { Rule, Lt, Own } linear_fwd_aux = LinearFwdAux::Rule;
  // FNORM_LINEAR_NO_N1=1: n = 1 backward through the GEMMs, not the
  // library's pass.
  bool linear_no_n1 = false;
  // FNORM_LINEAR_WS_MIB=N (1..32): the workspace budget cuBLASLt's heuristic
  // is told for every GEMM; 0: each GEMM's own budget.
  uint64_t linear_heuristic_budget = 0;
};

// The environment's tuning (core/tuning.cpp: the library's only getenv).
Tuning tuning_from_env();

}  // namespace fnorm
