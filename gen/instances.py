# SPDX-License-Identifier: Apache-2.0
"""The declarative instance list: which kernels libfusednorm compiles.

Every kernel the runtime can dispatch to is one `Instance` here. Adding a
dtype is one entry in DTYPES; adding a pack size or a register-tier width is
one entry in the functions below. The runtime's dispatch table and the .cu
instantiation files are rendered from this list by generate.py.
"""
from __future__ import annotations

from dataclasses import dataclass

# name -> (C++ type, fnorm_dtype_t enumerator, bytes per element)
DTYPES = {
    "f32": ("float", "FNORM_DTYPE_FLOAT32", 4),
    "f16": ("__half", "FNORM_DTYPE_FLOAT16", 2),
    "bf16": ("__nv_bfloat16", "FNORM_DTYPE_BFLOAT16", 2),
}

# Kernel tiers: generator name -> (fnorm::Tier enumerator, what it is). The
# enum itself is emitted from this table (kernel_config.hpp), in this order.
TIER_TABLE = {
    "warp": ("Warp", "a group of 1..32 lanes per row, the row in registers"),
    "smem": ("BlockSmem", "one block per row, the row cached in shared memory"),
    "uncached": ("BlockUncached", "one block per row, x read twice (second time mostly from L2)"),
    "block": ("BlockRegisters", "one block (or cluster) per row, the row in registers"),
    "tiled": ("ColumnTiled", "backward fallback: row coefficients, then column tiles"),
    "rows": ("BlockRows", "backward: a persistent block of row groups per SM, x and dy in a ring"),
}
TIERS = ("warp", "smem", "uncached", "block")  # forward
BWD_TIERS = ("warp", "block", "tiled")  # every (dtype, pack)
BWD_WIDE_TIERS = ("rows",)  # 16-byte packs only

# Widest access is 16 bytes per thread (one LDG.128 / STG.128).
MAX_PACK_BYTES = 16

# The register tier keeps a row in registers: at most this many fp32 values
# per thread (beyond it the block tiers are faster and spill-free).
WARP_MAX_ELEMS_PER_THREAD = 32

# Packs-per-thread counts for the register tier. The two widest packs of a
# dtype are the fast paths and get the non-power-of-two counts too (so that
# e.g. 768 or 1536 columns waste no registers); narrower packs only serve odd
# column counts or misaligned pointers and get powers of two.
_DENSE_NPACKS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
_POW2_NPACKS = (1, 2, 4, 8, 16, 32)


@dataclass(frozen=True, order=True)
class Instance:
    op: str
    dtype: str
    pack: int
    tier: str
    npack: int = 0  # register tier only: packs held per thread
    out: str = "same"  # norm_fwd: y in x's dtype ("same") or quantized one-byte codes ("codes")

    @property
    def ctype(self) -> str:
        return DTYPES[self.dtype][0]

    @property
    def dtype_enum(self) -> str:
        return DTYPES[self.dtype][1]

    @property
    def tier_enum(self) -> str:
        return "0" if self.tier == "all" else f"Tier::{TIER_TABLE[self.tier][0]}"

    @property
    def name(self) -> str:
        return procedural_name(self)


def procedural_name(inst: Instance) -> str:
    """The one stable name of an instance: file, symbol and table comment."""
    name = f"{inst.op}_{inst.dtype}_p{inst.pack}"
    if inst.tier != "all":
        name += f"_{inst.tier}"
    if inst.tier in ("warp", "block", "rows"):
        name += f"_n{inst.npack}"
    if inst.out != "same":
        name += f"_{inst.out}"
    return name


def packs_for(dtype: str) -> list[int]:
    size = DTYPES[dtype][2]
    packs, p = [], 1
    while p * size <= MAX_PACK_BYTES:
        packs.append(p)
        p *= 2
    return packs


def warp_npacks(dtype: str, pack: int) -> list[int]:
    widest = packs_for(dtype)[-2:]
    candidates = _DENSE_NPACKS if pack in widest else _POW2_NPACKS
    return [n for n in candidates if n * pack <= WARP_MAX_ELEMS_PER_THREAD]


# The register tiers aim at this many packs per thread: four independent
# 16-byte loads in flight per thread before the first reduction (fewer left
# the H200 latency-bound at 60% of copy bandwidth, 2026-11-22). The runtime's
# planner reads it from kernel_config.hpp (kTargetNpack).
TARGET_NPACK = 4

# Block-register tier: packs per thread. NPACK * PACK <= 32 keeps 1024-thread
# blocks within 64 registers per thread. One pack per thread serves RMSNorm
# rows of 128-256 packs, two LayerNorm rows that are too few to fill the
# SMs (the runtime's planner says why).
def block_npacks(dtype: str, pack: int) -> list[int]:
    return [n for n in (1, 2, TARGET_NPACK, 2 * TARGET_NPACK) if n * pack <= WARP_MAX_ELEMS_PER_THREAD]


# The forward's output axis: y in x's dtype, or one-byte quantized codes
# (fnorm_norm_fwd_quant; the format, FP8 E4M3 / E5M2 or INT8, is the
# store's runtime field). Each has its own dispatch table; a quantized plan
# is the plain plan's kernel geometry with the codes instance of the same
# (dtype, pack, tier, npack), so that v is bit for bit the plain forward's.
NORM_FWD_OUTS = ("same", "codes")


def norm_fwd_instances(dtypes) -> list[Instance]:
    out = []
    for dt in dtypes:
        for pack in packs_for(dt):
            for o in NORM_FWD_OUTS:
                for n in warp_npacks(dt, pack):
                    out.append(Instance("norm_fwd", dt, pack, "warp", n, o))
                for n in block_npacks(dt, pack):
                    out.append(Instance("norm_fwd", dt, pack, "block", n, o))
                out.append(Instance("norm_fwd", dt, pack, "smem", 0, o))
                out.append(Instance("norm_fwd", dt, pack, "uncached", 0, o))
    return out


# Backward's register tiers keep two fp32 accumulators (dgamma, dbeta) per
# value a thread owns; x and dy wait in shared memory (a ring of rows copied
# ahead with cp.async), not in registers. At most 32 values per thread: 64
# accumulator registers, within the 128 a 512-thread block may use.
BWD_MAX_ELEMS_PER_THREAD = 32


# The warp tier's rings also stay within 64 bytes of each of x and dy per
# thread: fp32 at 32 values per lane (1024 columns) ran at 64% of copy
# bandwidth on the H200 against 72% for a block of 128 threads at 8 values.
BWD_WARP_MAX_BYTES_PER_THREAD = 64


def bwd_warp_npacks(dtype: str, pack: int) -> list[int]:
    return [n for n in (1, 2, 4, 8, 16, 32)
            if n * pack <= BWD_MAX_ELEMS_PER_THREAD and n * pack * DTYPES[dtype][2] <= BWD_WARP_MAX_BYTES_PER_THREAD]


def bwd_block_npacks(dtype: str, pack: int) -> list[int]:
    return [n for n in (2, 4, 8) if n * pack <= BWD_MAX_ELEMS_PER_THREAD]


# Rows tier (16-byte packs only, the aligned fast path): one or two packs per
# thread. fp32: two (8 values) in blocks of up to 1024 threads (64
# registers). 16-bit: one (8 values, 1024 threads) or two (16 values, blocks
# of at most 512 threads, 128 registers); the runtime's planner chooses
# (plan_rows_tier says how). A row group holds 8192 columns at most.
BWD_ROWS_MIN_VALUES = 1024  # a row group holds at least this many columns
BWD_ROWS_MAX_THREADS = 1024
BWD_ROWS_SMEM_MARGIN = 8 * 1024


def bwd_rows_npacks(dtype: str, pack: int) -> list[int]:
    return [2] if DTYPES[dtype][2] == 4 else [1, 2]


def norm_bwd_instances(dtypes) -> list[Instance]:
    out = []
    for dt in dtypes:
        for pack in packs_for(dt):
            for n in bwd_warp_npacks(dt, pack):
                out.append(Instance("norm_bwd", dt, pack, "warp", n))
            for n in bwd_block_npacks(dt, pack):
                out.append(Instance("norm_bwd", dt, pack, "block", n))
            out.append(Instance("norm_bwd", dt, pack, "tiled"))
            if pack * DTYPES[dt][2] == MAX_PACK_BYTES:
                for n in bwd_rows_npacks(dt, pack):
                    out.append(Instance("norm_bwd", dt, pack, "rows", n))
    return out


# BatchNorm: one instance per (dtype, pack) holds all its kernels (the two
# reductions in both layouts, the two elementwise passes).
def batchnorm_instances(dtypes) -> list[Instance]:
    return [Instance("batchnorm", dt, pack, "all") for dt in dtypes for pack in packs_for(dt)]


# GroupNorm: one table per dtype of every (pack, layout, pass) kernel
# (gn_kernels.cuh); the packs are those gn_plan.cpp's packs_of tries: the
# widest (MAX_PACK_BYTES), for types narrower than 4 bytes also half of it,
# and 1.
def groupnorm_packs(dtype: str) -> list[int]:
    size = DTYPES[dtype][2]
    widest = MAX_PACK_BYTES // size
    return sorted({widest, widest // 2 if size < 4 else widest, 1}, reverse=True)


def groupnorm_instances(dtypes) -> list[Instance]:
    return [Instance("groupnorm", dt, pack, "all") for dt in dtypes for pack in groupnorm_packs(dt)]


# op -> (instance function, template rendering one .cu file per dtype)
OPS = {
    "norm_fwd": (norm_fwd_instances, "norm_fwd.cu.jinja"),
    "norm_bwd": (norm_bwd_instances, "norm_bwd.cu.jinja"),
    "batchnorm": (batchnorm_instances, "batchnorm.cu.jinja"),
    "groupnorm": (groupnorm_instances, "groupnorm.cu.jinja"),
}


# The constants the runtime shares with this file, emitted into
# kernel_config.hpp: name -> (value, what it means). Nothing restates them.
def config_constants() -> dict[str, tuple[int, str]]:
    return {
        "kMaxPackBytes": (MAX_PACK_BYTES, "widest access per thread, in bytes (one LDG.128 / STG.128)"),
        "kTargetNpack": (TARGET_NPACK, "packs per thread the register tiers aim at"),
        "kWarpMaxElemsPerThread": (WARP_MAX_ELEMS_PER_THREAD,
                                   "forward register tiers: fp32 values a thread holds at most"),
        "kBwdMaxElemsPerThread": (BWD_MAX_ELEMS_PER_THREAD,
                                  "backward register tiers: values (two accumulators each) a thread owns at most"),
        "kBwdWarpMaxBytesPerThread": (BWD_WARP_MAX_BYTES_PER_THREAD,
                                      "backward warp tier: bytes of each of x and dy a thread stages at most"),
        "kBwdRowsMinValues": (BWD_ROWS_MIN_VALUES,
                              "backward rows tier: columns a row group holds at least (narrower rows stay on the warp tier)"),
        "kBwdRowsMaxThreads": (BWD_ROWS_MAX_THREADS, "backward rows tier: threads per block at most"),
        "kBwdRowsSmemMargin": (BWD_ROWS_SMEM_MARGIN,
                               "backward rows tier: bytes of shared memory kept off the ring (static slots, slack)"),
    }


def all_instances(dtypes=None) -> list[Instance]:
    """Every instance of every op for the selected dtypes, sorted."""
    chosen = list(DTYPES) if dtypes is None else list(dtypes)
    unknown = [d for d in chosen if d not in DTYPES]
    if unknown:
        raise ValueError(f"unknown dtype(s) {unknown}; known: {sorted(DTYPES)}")
    out = []
    for make, _template in OPS.values():
        out.extend(make(chosen))
    return sorted(out)
