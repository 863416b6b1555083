/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm in one launch for problems that fit in the registers of one wave
// of resident blocks (channels-last / [N, C] with C a power-of-two number of
// packs, up to a few million elements): each thread loads its K packs once,
// the block's per-column sums go to the workspace, a grid-wide barrier
// (cooperative launch), every block adds all blocks' sums in double, and the
// elementwise part runs on the values still in registers. For such sizes the
// three dependent launches of the general path (reduce, finalize, apply) cost
// more than the memory traffic; here x (and dy) are read once. Larger
// channels-last forwards may take the streaming kernel (bn_stream.cuh;
// shape_bn_persistent at the end says which).
//
// A block covers one column tile of ncp packs (the whole width, or tiles of
// kBnOneWaveTileCols columns, below) and rpi * K rows. Thread (r, cp) owns
// PACK columns [col0 + cp * PACK, col0 + cp * PACK + PACK) and rows base + r
// + i * rpi, i < K (rpi = 256 / ncp row slices). A warp covers 32 / ncp row
// segments of the tile; either whole consecutive rows (one tile: 32 * PACK
// consecutive elements starting on a multiple of 32) or segments of whole
// 32-element words (tiles of a multiple of 32 columns), so the ReLU mask
// words are built with the same shuffles as in the elementwise kernels.
//
// Forward sums are shifted by the channel's value in row 0 (read by every
// block alike): S1 = sum (x - K), S2 = sum (x - K)^2, mean = K + S1 / n,
// M2 = S2 - S1^2 / n: no cancellation worth the name for |mean| >> std.
//
// The combine after the barrier, in one of two forms (the kernel's GATHER):
//   gather: every block adds the partials of all blocks of its column tile
//     itself (tile blocks * tile columns loads per block), then computes its
//     coefficients; one barrier.
//   owner: column j's totals are added once, by block j % grid (its threads
//     over the blocks' partials, in a fixed order), which writes the
//     channel's outputs and coefficients (workspace); a second barrier, then
//     every block reads the coefficients of its columns.
// Gather costs grid^2 * width loads in all (314 MB of L2 reads at
// [128, 256, 14, 14] fp16, 392 blocks); owner costs a second barrier. H200
// (2026-11-22, bench/ab_batchnorm.py, forward / backward us, owner vs
// gather): [128, 256, 14, 14] fp16 23.8 / 26.7 vs 73.4 / 26.7 (the backward
// there takes the general path); [32, 64, 56, 56] 23.9 vs 33.9 forward;
// [16, 64, 56, 56] 17.8 / 18.2 vs 19.9 / 20.7; [64, 128, 14, 14] 15.2 / 14.4
// vs 14.8 / 14.5; [4, 64, 56, 56] 14.7 / 13.6 vs 11.8 / 11.1; fp16
// [126000, 16] 13.1 / 13.2 vs 11.9 / 11.9; fp32 [126000, 16] 13.3 / 14.8 vs
// 12.3 / 14.1. So gather where grid * width <= kBnGatherMax (3136, 1984 and
// 3952 above), owner from 12544 up. Outputs were bit-identical in every case
// (both add the float partials in double). FNORM_BN_PERSIST_GATHER_ALL=1
// forces gather (A/B runs).
#pragma once

#include <cooperative_groups.h>

#include <type_traits>

#include "batchnorm/batchnorm.cuh"
#include "batchnorm/bn_channel_end.cuh"
#include "batchnorm/bn_one_launch.cuh"
#include "batchnorm/bn_reduce.cuh"
#include "batchnorm/bn_stream.cuh"

namespace fnorm {

// Packs per thread kept in registers.
constexpr int kBnPersistK = 8;

// Blocks per SM asked of the compiler (0: none asked): the grid must be
// co-resident, so occupancy bounds the problems this path takes. The 16-bit
// forwards (8-element packs) keep 80 registers (16 bytes of stack) and 3
// blocks per SM when asked for 3; unasked, fp16 took 104 registers and bf16
// 119, 2 blocks per SM, and bf16 [128, 256, 14, 14] missed this path (1.45x
// fp16's time, H100; the ask was fp16's only while bf16 spilled 184 bytes
// with it, before nvcc 13). fp32 and the backwards keep their occupancy
// unasked (asking 1 block let the backward grow to 155 registers; asking
// bf16's backward for 2 spilled 232 bytes).
template <typename T, bool BWD>
constexpr int bn_persistent_min_blocks() { return !BWD && sizeof(T) == 2 ? 3 : 0; }

// A thread's place in the one-wave kernel (see the top of the file): PACK
// columns from col (lcol within the block's column tile), rows row(i) =
// row0 + i * rpi for i < k (<= kBnPersistK packs per thread) below rows, in
// row slice r of the block's rpi. (k and rows are the kernel's parameters:
// a row end computed per block instead took registers, and ptxas spilled.)
struct BnOneWaveThread {
  int ncp, rpi, r, lcol, col, k;
  int64_t row0, rows, width;
  __device__ __forceinline__ int64_t row(int i) const { return row0 + static_cast<int64_t>(i) * rpi; }
  __device__ __forceinline__ bool valid(int i) const { return i < k && row(i) < rows; }
};

// The thread's packs, loaded once and kept until the elementwise step: x
// (and dy with its mask bits, backward), as stored (BnVec: a bf16 pack of 8
// in 4 registers; held as Pack<bf16, 8> the bf16 backward took 223
// registers to fp16's 128).
template <typename T, int PACK, bool BWD>
struct BnOneWaveRegs {
  typename BnVec<T, PACK>::Raw xr[kBnPersistK], gr[kBnPersistK];
  uint32_t bits[kBnPersistK];
};

// Loads the thread's packs and returns its sums in a, b (forward: of x - K,
// K the channel's row-0 value; backward: of g and g * (x - mean), g the
// masked dy).
template <typename T, int PACK, bool BWD>
__device__ __forceinline__ void bn_one_wave_load(const BnPersistParams &p, const BnOneWaveThread &th,
                                                 BnOneWaveRegs<T, PACK, BWD> &v, float (&a)[PACK],
                                                 float (&b)[PACK]) {
  using Vec = BnVec<T, PACK>;
  constexpr int K = kBnPersistK;
  const T *x = static_cast<const T *>(p.x);
  const T *dy = static_cast<const T *>(p.dy);
  float ref[PACK];
#pragma unroll
  for (int k = 0; k < PACK; ++k) a[k] = b[k] = 0.f;
  if constexpr (BWD) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) ref[k] = p.f.in_mean[th.col + k];
  } else {
    load_pack<T, PACK>(x + th.col, ref);  // row 0: the shift
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t m = th.row(i);
    v.bits[i] = 0u;
    if (th.valid(i)) {
      v.xr[i] = Vec::load(x + m * th.width + th.col);
      if constexpr (BWD) {
        v.gr[i] = Vec::load(dy + m * th.width + th.col);
        if (p.mask_in != nullptr) v.bits[i] = read_mask_bits<PACK>(p.mask_in, m * th.width + th.col);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < K; ++i) {
    if (!th.valid(i)) continue;
    float xv[PACK], gv[PACK];
    Vec::widen(v.xr[i], xv);
    if constexpr (BWD) Vec::widen(v.gr[i], gv);
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      const float d = xv[k] - ref[k];
      if constexpr (BWD) {
        float g = gv[k];
        if (p.mask_in != nullptr && !((v.bits[i] >> k) & 1u)) g = 0.f;
        a[k] += g;
        b[k] += g * d;
      } else {
        a[k] += d;
        b[k] += d * d;
      }
    }
  }
}

// Owner combine: column j's totals once, by block j % grid (its threads over
// the blocks' partials, in a fixed order), which writes the channel's
// outputs and coefficients (p.f's workspace); then a second grid barrier,
// and every block reads the coefficients of all columns into coef. (x,
// width and rows are the kernel's: read from p here, they changed ptxas's
// choices, e.g. the fp16 4-element-pack backward went from 80 registers to
// 112, 3 to 2 blocks per SM.)
template <typename T, bool BWD>
__device__ __forceinline__ void bn_one_wave_combine_owner(const BnPersistParams &p, const T *x, int64_t width,
                                                          int64_t rows, double *da, double *db, BnCoefs *coef) {
  const int G = static_cast<int>(gridDim.x);
  for (int j = static_cast<int>(blockIdx.x); j < width; j += G) {
    double s1 = 0.0, s2 = 0.0;
    for (int g = threadIdx.x; g < G; g += kBnThreads) {
      s1 += __ldcg(p.part_moment1 + static_cast<int64_t>(g) * width + j);
      s2 += __ldcg(p.part_moment2 + static_cast<int64_t>(g) * width + j);
    }
    da[threadIdx.x] = s1;
    db[threadIdx.x] = s2;
    for (int stride = kBnThreads >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      if (threadIdx.x < stride) {
        da[threadIdx.x] += da[threadIdx.x + stride];
        db[threadIdx.x] += db[threadIdx.x + stride];
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const double n = static_cast<double>(rows);
      const double S1 = da[0], S2 = db[0];
      if constexpr (BWD) {
        finish_bwd(p.f, j, n, S1, S2, true);
      } else {
        // Row 0 is still x here (y, possibly x itself, is written after
        // the second barrier).
        const double mean = static_cast<double>(Convert<T>::to_float(x[j])) + S1 / n;
        finish_fwd(p.f, j, n, mean, fmax(S2 - S1 * S1 / n, 0.0));
      }
    }
    __syncthreads();  // da / db are reused for the next column
  }
  cooperative_groups::this_grid().sync();
  if (threadIdx.x < width) {
    BnCoefs q;
    q.mean = __ldcg(p.f.mean + threadIdx.x);
    q.xmu_scale = __ldcg(p.f.xmu_scale + threadIdx.x);
    q.shift = __ldcg(p.f.shift + threadIdx.x);
    q.dy_scale = BWD ? __ldcg(p.f.dy_scale + threadIdx.x) : 0.f;
    coef[threadIdx.x] = q;
  }
  __syncthreads();
}

// The elementwise step on the packs in registers, with the coefficients of
// the thread's columns (coef, per column of the block's tile).
template <typename T, int PACK, bool BWD>
__device__ __forceinline__ void bn_one_wave_apply(const BnPersistParams &p, const BnOneWaveThread &th,
                                                  const BnOneWaveRegs<T, PACK, BWD> &v, const BnCoefs *coef) {
  using Vec = BnVec<T, PACK>;
  constexpr int K = kBnPersistK;
  BnPackCoefs<PACK> q;
#pragma unroll
  for (int k = 0; k < PACK; ++k) {
    const BnCoefs c = coef[th.lcol + k];
    q.c[kBnMean][k] = c.mean;
    q.c[kBnXmuScale][k] = c.xmu_scale;
    q.c[kBnShift][k] = c.shift;
    q.c[kBnDyScale][k] = BWD ? c.dy_scale : 0.f;
  }
  const BnForwardOp<T, PACK> fop{p.epilogue == FNORM_BN_EPILOGUE_ADD_RELU, p.epilogue != FNORM_BN_EPILOGUE_NONE};
  const BnBackwardOp<T, PACK> bop{p.mask_in != nullptr};
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const int64_t m = th.row(i);
    const bool active = th.valid(i);
    const int64_t e = m * th.width + th.col;
    float x[PACK];
    Vec::widen(v.xr[i], x);
    if constexpr (BWD) {
      if (active) {
        float g[PACK];
        Vec::widen(v.gr[i], g);
        Vec::store(static_cast<T *>(p.dx) + e, bop(x, g, v.bits[i], q));
        if (p.dz != nullptr && bop.masked) Vec::store(static_cast<T *>(p.dz) + e, Vec::narrow(g));
      }
    } else {
      uint32_t mbits = 0;
      if (active) {
        float zv[PACK];
        if (fop.add) load_pack<T, PACK>(static_cast<const T *>(p.z) + e, zv);
        typename Vec::Raw out;
        mbits = fop(x, zv, q, out);
        Vec::store(static_cast<T *>(p.y) + e, out);
      }
      if (p.mask_out != nullptr) store_mask_word<PACK>(p.mask_out, e, mbits, active);
    }
  }
}

// GATHER: the combine's form (see above), a kernel of its own so that each
// form gets its own registers and occupancy. Block b covers column tile
// b % tiles (ncp packs) and rows from (b / tiles) * rpi * k (k packs per
// thread); the owner form runs one tile (the whole width).
template <typename T, int PACK, bool BWD, bool GATHER>
__global__ void __launch_bounds__(kBnThreads, (bn_persistent_min_blocks<T, BWD>()))
    bn_persistent_kernel(BnPersistParams p, int ncp_log2, int tiles, int k) {
  __shared__ float sa[kBnThreads * PACK];
  __shared__ float sb[kBnThreads * PACK];
  __shared__ double da[kBnThreads];
  __shared__ double db[kBnThreads];
  __shared__ BnCoefs coef[kBnThreads];  // per column of the tile (<= 256)

  BnOneWaveThread th;
  th.ncp = 1 << ncp_log2;
  th.rpi = kBnThreads >> ncp_log2;
  th.r = threadIdx.x >> ncp_log2;
  th.lcol = (threadIdx.x & (th.ncp - 1)) * PACK;
  const int tile_cols = th.ncp * PACK;
  const int bx = tiles == 1 ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x) / tiles;
  const int col0 = (static_cast<int>(blockIdx.x) - bx * tiles) * tile_cols;
  th.col = col0 + th.lcol;
  th.width = p.shape.width;  // == tiles * ncp * PACK
  th.rows = p.shape.rows;
  th.k = k;
  th.row0 = static_cast<int64_t>(bx) * th.rpi * k + th.r;
  const T *x = static_cast<const T *>(p.x);

  // Column col0 + threadIdx.x's shift for the gather combine and the running
  // averages' factor, read before the grid barrier: y may be x itself, and
  // row 0 is overwritten after it.
  const float shift = !BWD && threadIdx.x < tile_cols ? Convert<T>::to_float(x[col0 + threadIdx.x]) : 0.f;
  __shared__ double rf;
  if (!BWD && GATHER && bx == 0 && threadIdx.x == 0) rf = running_factor(p.f);
  BnOneWaveRegs<T, PACK, BWD> v;
  float a[PACK], b[PACK];
  bn_one_wave_load<T, PACK, BWD>(p, th, v, a, b);
  bn_block_partials<PACK>(p, a, b, th.ncp, th.lcol, col0, bx, sa, sb);
  cooperative_groups::this_grid().sync();
  if constexpr (GATHER) {
    bn_combine_gather<BWD>(p, tile_cols, col0, static_cast<int>(gridDim.x) / tiles, bx, shift, rf, da, db, coef);
  } else {
    bn_one_wave_combine_owner<T, BWD>(p, x, th.width, p.shape.rows, da, db, coef);
  }
  // (Every finish_fwd read the counter for the cumulative average before
  // the last barrier.)
  if (!BWD && p.num_batches_tracked != nullptr && blockIdx.x == 0 && threadIdx.x == 0)
    *p.num_batches_tracked += 1;
  bn_one_wave_apply<T, PACK, BWD>(p, th, v, coef);
}

// Column tiles of the one-wave kernel: each block covers kBnOneWaveTileCols
// columns (a multiple of 32, so that a warp's packs still make whole ReLU
// mask words) of its rows, not the whole width, so that the gather combine
// adds only its tile's partials: per block tile_blocks * tile_cols loads
// where the whole-width tile has grid * width (at [128, 256, 14, 14] fp16,
// 49 * 32 against 392 * 256), after one grid barrier where the owner form
// took two; and C up to rows' worth of tiles, not only 32 packs, fits.
constexpr int kBnOneWaveTileCols = 32;

namespace detail {

// The one-wave shape at ncp_log2 packs per tile, `tiles` tiles and k packs
// per thread, if its grid fits co-resident and the partials and its gather
// adds at most gather_cap partials per block (0: no bound); else s->kernel
// stays None. k: kBnPersistK, the fewest blocks. (The fewest packs per
// thread that fit, the most blocks to share the SMs' loads, measured
// slower, H100, fp16 forward us, that against 8: [128, 512, 7, 7] 17.4 vs
// 16.4, [64, 128, 14, 14] 16.0 vs 12.1, [16, 64, 56, 56] 19.9 vs 16.6,
// [4, 64, 56, 56] 17.2 vs 11.3; FNORM_BN_ONEWAVE_K forces it.)
template <typename T, int PACK, bool BWD>
cudaError_t one_wave_at(const BnPersistParams &p, int ncp_log2, int64_t tiles, bool gather, int k,
                        int64_t gather_cap, const DeviceContext &ctx, BnPersistShape *s) {
  auto kernel = gather ? bn_persistent_kernel<T, PACK, BWD, true> : bn_persistent_kernel<T, PACK, BWD, false>;
  int occ = 0;
  cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel), kBnThreads, 0, &occ);
  if (err != cudaSuccess) return err;
  const int64_t tile_cols = (int64_t{1} << ncp_log2) * PACK;
  const int64_t tile_blocks = ceil_div(p.shape.rows, (kBnThreads >> ncp_log2) * int64_t{k});
  const int64_t blocks = tile_blocks * tiles;
  if (tile_blocks > p.max_blocks || blocks > static_cast<int64_t>(occ) * ctx.dev.sm_count) return cudaSuccess;
  if (gather_cap > 0 && tile_blocks * tile_cols > gather_cap) return cudaSuccess;
  s->kernel = BnOneLaunch::OneWave;
  s->k = k;
  s->blocks = blocks;
  s->blocks_per_sm = occ;
  s->ncp_log2 = ncp_log2;
  s->tiles = static_cast<int>(tiles);
  s->gather = gather;
  return cudaSuccess;
}

}  // namespace detail

// The one-wave kernel's shape where the whole problem fits one co-resident
// grid of it (else none). First column tiles of tile_cols columns (t.
// onewave_tile, else kBnOneWaveTileCols) where they divide the width and
// their gather stays within kBnGatherMax (a forced tile skips that bound);
// else the whole width as one tile (C a power-of-two number of packs <= 32)
// with the gather or owner combine (t.gather_all: gather at any size).
// Assumptions: group == 1, pointers aligned to PACK elements,
// p.part_moment1 / part_moment2 hold p.max_blocks rows of width floats.
template <typename T, int PACK, bool BWD>
cudaError_t shape_bn_one_wave(const BnPersistParams &p, const BnPersistTuning &t, const DeviceContext &ctx,
                              BnPersistShape *s) {
  *s = BnPersistShape{};
  const int64_t width = p.shape.width;
  if (p.shape.group != 1 || width % PACK != 0) return cudaSuccess;
  const int64_t packs = width / PACK;
  const int64_t tile_cols = t.onewave_tile > 0 ? t.onewave_tile : kBnOneWaveTileCols;
  const int64_t tile_packs = tile_cols / PACK;
  const int k = t.onewave_k > 0 ? t.onewave_k : kBnPersistK;
  if (tile_cols % 32 == 0 && tile_cols % PACK == 0 && tile_packs <= 32 && (tile_packs & (tile_packs - 1)) == 0 &&
      width % tile_cols == 0) {
    int ncp_log2 = 0;
    while ((int64_t{1} << ncp_log2) < tile_packs) ++ncp_log2;
    const cudaError_t err = detail::one_wave_at<T, PACK, BWD>(p, ncp_log2, width / tile_cols, true, k,
                                                              t.onewave_tile > 0 ? 0 : kBnGatherMax, ctx, s);
    if (err != cudaSuccess || s->kernel != BnOneLaunch::None) return err;
  }
  if (packs > 32 || (packs & (packs - 1)) != 0) return cudaSuccess;
  int ncp_log2 = 0;
  while ((int64_t{1} << ncp_log2) < packs) ++ncp_log2;
  const int64_t blocks = ceil_div(p.shape.rows, (kBnThreads >> ncp_log2) * int64_t{k});
  return detail::one_wave_at<T, PACK, BWD>(p, ncp_log2, 1, t.gather_all || blocks * width <= kBnGatherMax, k, 0,
                                           ctx, s);
}

// Where the streaming kernel runs instead of the three launches: training
// forwards of 16-bit types without the addend, fp16 up to kBnStreamMaxBytes,
// bf16 at every size. H100 (bench/NOTES.md "BatchNorm round 3", RELU, us,
// streaming vs three launches): fp16 51 MB 66.4 vs 76.6, 205 MB 251.9 vs
// 249.0; bf16 51 MB 66.0 vs 81.3, 205 MB 250.8 vs 272.5; ADD_RELU (z read in
// the second pass) 323.6 vs 299.5 at 205 MB.
constexpr int64_t kBnStreamMaxBytes = int64_t{64} << 20;
template <typename T>
bool bn_stream_takes(const BnPersistParams &p) {
  const int64_t bytes = p.shape.elements() * static_cast<int64_t>(sizeof(T));
  return p.epilogue != FNORM_BN_EPILOGUE_ADD_RELU && (std::is_same_v<T, __nv_bfloat16> || bytes <= kBnStreamMaxBytes);
}

// The one-launch shape of a training pass (the plan's, bn_native.cpp): the
// one-wave kernel where the tensor fits it (faster than the streaming kernel
// there: 26.6 vs 37.6 us at [128, 256, 14, 14], fp16 RELU, H100), else the
// streaming kernel where bn_stream_takes and its grid is full
// (shape_bn_stream), else none (the three launches).
template <typename T, int PACK, bool BWD>
cudaError_t shape_bn_persistent(const BnPersistParams &p, const BnPersistTuning &t, const DeviceContext &ctx,
                                BnPersistShape *s) {
  const cudaError_t err = shape_bn_one_wave<T, PACK, BWD>(p, t, ctx, s);
  if (err != cudaSuccess || s->kernel != BnOneLaunch::None) return err;
  if constexpr (!BWD && sizeof(T) == 2) {
    if (bn_stream_takes<T>(p)) return shape_bn_stream<T, PACK>(p, t.gather_all, ctx, s);
  }
  return cudaSuccess;
}

// Launches the planned one-launch kernel (s.kernel != None); *launched says
// whether it ran (if not, the caller runs the three launches).
template <typename T, int PACK, bool BWD>
cudaError_t launch_bn_persistent(const BnPersistParams &p, const BnPersistShape &s, cudaStream_t stream,
                                 bool *launched) {
  *launched = false;
  if (s.kernel == BnOneLaunch::OneWave) {
    auto kernel = s.gather ? bn_persistent_kernel<T, PACK, BWD, true> : bn_persistent_kernel<T, PACK, BWD, false>;
    return launch_bn_cooperative(kernel, s, stream, launched, p, s.ncp_log2, s.tiles, s.k);
  }
  if constexpr (!BWD && sizeof(T) == 2) {
    if (s.kernel == BnOneLaunch::Stream) return launch_bn_stream<T, PACK>(p, s, stream, launched);
  }
  return cudaSuccess;
}

}  // namespace fnorm
