/* SPDX-License-Identifier: Apache-2.0 */
// BatchNorm's training forward in one launch for channels-last tensors
// ([N, C], NHWC, NDHWC) whose C is PACK times a power of two <= 256, at any
// size (the streaming one-launch kernel; bn_persistent.cuh's one-wave kernel
// holds only tensors of up to 8 packs per thread): one cooperative grid of
// co-resident blocks reads x for the per-channel sums, combines the blocks'
// sums behind a grid barrier, and runs the elementwise step (batchnorm.cuh's
// BnForwardOp) on what it kept on chip, reading the rest a second time,
// newest first.
//
// Where it runs (bn_persistent.cuh's bn_stream_takes, and shape_bn_stream
// below: a grid of two blocks per SM with 12 packs per thread or more, from
// ~6.5M elements on 132 SMs): forwards without the addend (NONE, RELU),
// 16-bit types, tensors beyond the one-wave kernel's reach (fp16 up to
// kBnStreamMaxBytes). H100 (bench/NOTES.md, this kernel against the three
// launches, us): fp16 RELU [128, 64, 56, 56] 66.4 vs 76.6, NONE 64.0 vs
// 73.4, bf16 RELU 66.0 vs 81.3; ncu there: 53.7 MB read from DRAM (x is
// 51.4 MB: read once), but 16 warps per SM (128 registers) leave it
// latency-bound at 1.4 TB/s. At 205 and 411 MB (fp16 RELU) it ties the
// three launches (251.9 vs 249.0, 469.7 vs 473.7); with ADD_RELU (z read in
// the second pass) it lost (323.6 vs 299.5). The same scheme for the
// backward (x and dy kept) lost everywhere, 0.65x to 0.98x of the three
// launches: backwards take the other paths.
//
// Layout. The tensor is a sequence of slabs of 256 packs (256 * PACK / C
// whole rows). Thread t of a block takes pack t of every slab of its block's
// range, so its PACK channels, (t * PACK) % C onwards, never change (their
// sums and coefficients stay in registers), and a warp covers 32 consecutive
// packs starting on a mask word (the ReLU mask words are built with the
// shuffles of the elementwise kernels). Block b owns slabs
// [b * spb, (b + 1) * spb); a thread's packs are numbered i = 0 .. spb - 1.
//
// What stays on chip: of a thread's packs, the last kBnStreamKR stay in
// registers as stored, the KS before them in shared memory (KS set by the
// plan from what a block may hold at two blocks per SM), and the first ones
// are streamed: read again after the barrier, last first, while the L2
// still holds most of them. Where there is a streamed part, the packs kept
// on chip are read evict-first and y is written evict-first, so that the L2
// keeps the streamed part of x for the second read. Bytes from DRAM: x once
// (plus the streamed part the L2 did not keep) and y.
//
// The sums are shifted by the channel's value in row 0 (read by every block
// alike): S1 = sum (x - K), S2 = sum (x - K)^2, mean = K + S1 / n,
// M2 = S2 - S1^2 / n: no cancellation worth the name for |mean| >> std.
//
// The combine after the barrier, in one of two forms (the kernel's GATHER):
//   gather: every block adds all blocks' partials itself (grid * C loads per
//     block), then computes its coefficients; one barrier.
//   owner: channel j's totals are added once, by one warp (its lanes over
//     the blocks' partials, in a fixed order), which writes the channel's
//     outputs and coefficients (workspace); a second barrier, then every
//     thread reads the coefficients of its channels.
// Gather where grid * C <= kBnGatherMax, owner above: the threshold the
// one-wave kernel measured (bn_persistent.cuh), not measured again here.
// Both add the float partials in double, in a fixed order: deterministic.
#pragma once

#include <cooperative_groups.h>

#include <type_traits>

#include "batchnorm/batchnorm.cuh"
#include "batchnorm/bn_channel_end.cuh"
#include "batchnorm/bn_one_launch.cuh"

namespace fnorm {

// Packs per thread kept in registers (KR) and loaded together in the
// streamed part (U), within the 128 registers of two 256-thread blocks per
// SM. ptxas (fp16 / bf16, 8-element packs): KR 12, U 4 keeps 24-40 bytes of
// stack (register-part packs, outside the loops); U 8 spilled in the loops
// (292 bytes fp16, 774 bf16, with KR 16).
constexpr int kBnStreamKR = 12;
constexpr int kBnStreamU = 4;
constexpr int64_t kBnGatherMax = 8192;  // grid * C (see above)
constexpr int kBnStreamBlocksPerSm = 2;

// A thread's place in the one-launch kernel: its packs i = 0 .. n - 1 (n
// the same for the whole block) at elements e(i); the first n_valid exist.
template <int PACK>
struct BnStreamThread {
  int64_t first;  // pack index of i = 0
  int n, n_valid;
  int col;        // its first channel
  __device__ __forceinline__ int64_t elem(int i) const {
    return (first + static_cast<int64_t>(i) * kBnThreads) * PACK;
  }
  __device__ __forceinline__ bool valid(int i) const { return i >= 0 && i < n_valid; }
};

// The sums of one thread's packs (see the top of the file).
template <typename T, int PACK>
struct BnStreamSums {
  using Vec = BnVec<T, PACK>;
  float a[PACK], b[PACK], ref[PACK];
  // The same shift, no values (for blocked summation).
  __device__ __forceinline__ BnStreamSums fresh() const {
    BnStreamSums s = *this;
#pragma unroll
    for (int k = 0; k < PACK; ++k) s.a[k] = s.b[k] = 0.f;
    return s;
  }
  __device__ __forceinline__ void merge(const BnStreamSums &o) {
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      a[k] += o.a[k];
      b[k] += o.b[k];
    }
  }
  __device__ __forceinline__ void add(const typename Vec::Raw &xr) {
    float x[PACK];
    Vec::widen(xr, x);
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      const float d = x[k] - ref[k];
      a[k] += d;
      b[k] += d * d;
    }
  }
};

// Owner combine: channel j by warp j of the grid (8 per block), its lanes
// over the blocks' partials in a fixed order, then a fixed shuffle tree;
// lane 0 writes the channel's outputs and coefficients (p.f's workspace).
template <typename T>
__device__ __forceinline__ void bn_stream_combine_owner(const BnPersistParams &p) {
  constexpr int kWarps = kBnThreads / 32;
  const int lane = threadIdx.x & 31;
  const int G = static_cast<int>(gridDim.x);
  const int64_t C = p.shape.width;
  const double n = static_cast<double>(p.shape.rows);
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); j < C;
       j += static_cast<int64_t>(G) * kWarps) {
    double s1 = 0.0, s2 = 0.0;
#pragma unroll 4
    for (int g = lane; g < G; g += 32) {
      s1 += __ldcg(p.part_moment1 + static_cast<int64_t>(g) * C + j);
      s2 += __ldcg(p.part_moment2 + static_cast<int64_t>(g) * C + j);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      s1 += __shfl_xor_sync(kFullMask, s1, off);
      s2 += __shfl_xor_sync(kFullMask, s2, off);
    }
    if (lane == 0) {
      // Row 0 is still x here: y (possibly x itself) is written after the
      // second barrier.
      const double mean = static_cast<double>(Convert<T>::to_float(static_cast<const T *>(p.x)[j])) + s1 / n;
      finish_fwd(p.f, j, n, mean, fmax(s2 - s1 * s1 / n, 0.0));
    }
  }
}

// The elementwise step on pack i: x (and z, ADD_RELU) as stored. Every lane
// of the warp calls it (the mask words).
template <typename T, int PACK>
struct BnStreamApply {
  using Vec = BnVec<T, PACK>;
  using Raw = typename Vec::Raw;
  const BnPersistParams &p;
  const BnStreamThread<PACK> &th;
  BnPackCoefs<PACK> q;
  bool add, relu, evict_first;
  __device__ __forceinline__ void operator()(int i, const Raw &xr, const Raw &zr) const {
    const bool active = th.valid(i);
    const int64_t e = th.elem(i);
    float x[PACK];
    Vec::widen(xr, x);
    uint32_t mbits = 0;
    if (active) {
      const BnForwardOp<T, PACK> op{add, relu};
      float z[PACK];
      if (add) Vec::widen(zr, z);
      Raw out;
      mbits = op(x, z, q, out);
      Vec::store(static_cast<T *>(p.y) + e, out, evict_first);
    }
    if (p.mask_out != nullptr) store_mask_word<PACK>(p.mask_out, e, mbits, active);
  }
};

// The kernel's static shared memory (its arrays below, and slack for their
// alignment).
template <int PACK>
constexpr size_t bn_stream_static_smem(bool gather) {
  return 2 * kBnThreads * PACK * sizeof(float) + (gather ? kBnThreads * (2 * sizeof(double) + sizeof(BnCoefs)) : 64) + 256;
}

// GATHER: the combine's form (see above), a kernel of its own so that each
// form gets its own registers.
template <typename T, int PACK, bool GATHER>
__global__ void __launch_bounds__(kBnThreads, kBnStreamBlocksPerSm)
    bn_stream_kernel(BnPersistParams p, BnStreamGrid grid) {
  using Vec = BnVec<T, PACK>;
  using Raw = typename Vec::Raw;
  constexpr int KR = kBnStreamKR;
  constexpr int U = kBnStreamU;
  extern __shared__ __align__(16) unsigned char bn_stream_keep[];
  Raw *keep = reinterpret_cast<Raw *>(bn_stream_keep);  // [KS][kBnThreads]
  __shared__ float sa[kBnThreads * PACK];
  __shared__ float sb[kBnThreads * PACK];
  __shared__ double da[GATHER ? kBnThreads : 1];
  __shared__ double db[GATHER ? kBnThreads : 1];
  __shared__ BnCoefs coef[GATHER ? kBnThreads : 1];

  const T *x = static_cast<const T *>(p.x);
  const int64_t C = p.shape.width;
  BnStreamThread<PACK> th;
  {
    const int64_t total_packs = p.shape.rows * C / PACK;
    const int64_t total_slabs = ceil_div(total_packs, static_cast<int64_t>(kBnThreads));
    const int64_t slab0 = static_cast<int64_t>(blockIdx.x) * grid.slabs_per_block;
    th.first = slab0 * kBnThreads + threadIdx.x;
    th.n = static_cast<int>(max(int64_t{0}, min(grid.slabs_per_block, total_slabs - slab0)));
    th.n_valid = th.first < total_packs
                     ? static_cast<int>(min(static_cast<int64_t>(th.n),
                                            ceil_div(total_packs - th.first, static_cast<int64_t>(kBnThreads))))
                     : 0;
    th.col = static_cast<int>((threadIdx.x * PACK) & (C - 1));
  }
  const int n_reg = min(KR, th.n);
  const int n_smem = min(grid.keep_smem, th.n - n_reg);
  const int n_str = th.n - n_reg - n_smem;

  // ---- first read: the sums ------------------------------------------------
  BnStreamSums<T, PACK> sums;
#pragma unroll
  for (int k = 0; k < PACK; ++k) sums.a[k] = sums.b[k] = 0.f;
  load_pack<T, PACK>(x + th.col, sums.ref);  // row 0: the shift
  // Channel threadIdx.x's shift for the gather combine, read before the
  // grid barrier: y may be x itself, and row 0 is overwritten after it.
  const float shift = GATHER && threadIdx.x < C ? Convert<T>::to_float(x[threadIdx.x]) : 0.f;

  // Packs [i0, i1) in groups of U: loads first (cs: evict-first), then sums;
  // to_smem also keeps them in shared memory slots i - i0.
  auto first_read = [&](int i0, int i1, bool cs, bool to_smem) {
    int i = i0;
    for (; i + U <= i1; i += U) {
      Raw xr[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (th.valid(i + u)) {
          const int64_t e = th.elem(i + u);
          xr[u] = cs ? Vec::load_cs(x + e) : Vec::load(x + e);
        }
      }
      BnStreamSums<T, PACK> grp = sums.fresh();  // blocked summation: the group's, then the total
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!th.valid(i + u)) continue;
        grp.add(xr[u]);
        if (to_smem) keep[(i + u - i0) * kBnThreads + threadIdx.x] = xr[u];
      }
      sums.merge(grp);
    }
    for (; i < i1; ++i) {
      if (!th.valid(i)) continue;
      const int64_t e = th.elem(i);
      const Raw xr = cs ? Vec::load_cs(x + e) : Vec::load(x + e);
      sums.add(xr);
      if (to_smem) keep[(i - i0) * kBnThreads + threadIdx.x] = xr;
    }
  };
  first_read(0, n_str, false, false);
  first_read(n_str, n_str + n_smem, true, true);
  // The register part: pack n - KR + k in slot k (k >= KR - n_reg).
  const int i_reg = th.n - KR;
  Raw xk[KR];
#pragma unroll
  for (int k = 0; k < KR; ++k) {
    if (k >= KR - n_reg && th.valid(i_reg + k)) xk[k] = Vec::load_cs(x + th.elem(i_reg + k));
  }
  {
    BnStreamSums<T, PACK> grp = sums.fresh();
#pragma unroll
    for (int k = 0; k < KR; ++k)
      if (k >= KR - n_reg && th.valid(i_reg + k)) grp.add(xk[k]);
    sums.merge(grp);
  }

  {
    const int ncp = static_cast<int>(C / PACK);
    bn_block_partials<PACK>(p, sums.a, sums.b, ncp, th.col, 0, blockIdx.x, sa, sb);
  }
  cooperative_groups::this_grid().sync();

  // ---- combine: this thread's coefficients -----------------------------------
  BnStreamApply<T, PACK> apply{p, th};
  if constexpr (GATHER) {
    // (Block 0 alone writes the channels' outputs, and counts the batch
    // after: the running averages' factor may be read here.)
    bn_combine_gather<false>(p, static_cast<int>(C), 0, static_cast<int>(gridDim.x), blockIdx.x, shift,
                             blockIdx.x == 0 ? running_factor(p.f) : 0.0, da, db, coef);
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      const BnCoefs c = coef[th.col + k];
      apply.q.c[kBnMean][k] = c.mean;
      apply.q.c[kBnXmuScale][k] = c.xmu_scale;
      apply.q.c[kBnShift][k] = c.shift;
      apply.q.c[kBnDyScale][k] = 0.f;
    }
  } else {
    bn_stream_combine_owner<T>(p);
    cooperative_groups::this_grid().sync();
#pragma unroll
    for (int k = 0; k < PACK; ++k) {
      apply.q.c[kBnMean][k] = __ldcg(p.f.mean + th.col + k);
      apply.q.c[kBnXmuScale][k] = __ldcg(p.f.xmu_scale + th.col + k);
      apply.q.c[kBnShift][k] = __ldcg(p.f.shift + th.col + k);
      apply.q.c[kBnDyScale][k] = 0.f;
    }
  }
  // (Every finish_fwd above read the counter for the cumulative average
  // before this barrier or, gather, in block 0 before its __syncthreads.)
  if (p.num_batches_tracked != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *p.num_batches_tracked += 1;

  // ---- second pass, newest first: registers, shared memory, streamed --------
  apply.add = p.epilogue == FNORM_BN_EPILOGUE_ADD_RELU;
  apply.relu = p.epilogue != FNORM_BN_EPILOGUE_NONE;
  apply.evict_first = grid.evict_first;
  const T *z = static_cast<const T *>(p.z);
  const bool add = apply.add;
  // z of pack i (ADD_RELU), loaded with its group.
  auto load_z = [&](int i, Raw &zr) {
    if (add && th.valid(i)) zr = Vec::load(z + th.elem(i));
  };
  // The register part in groups of kG (z of a group in registers beside it).
  constexpr int kG = KR % 4 == 0 ? 4 : KR % 2 == 0 ? 2 : 1;
#pragma unroll
  for (int k0 = KR - kG; k0 >= 0; k0 -= kG) {
    if (k0 + kG <= KR - n_reg) break;  // the slots below hold nothing
    Raw zr[kG];
#pragma unroll
    for (int u = kG - 1; u >= 0; --u) load_z(i_reg + k0 + u, zr[u]);
#pragma unroll
    for (int u = kG - 1; u >= 0; --u) {
      const int k = k0 + u;
      if (k >= KR - n_reg) apply(i_reg + k, xk[k], zr[u]);
    }
  }
  // Packs [i0, i1), last first, in groups of U, from shared memory
  // (slots i - i0) or global memory.
  auto second_read = [&](int i0, int i1, bool from_smem) {
    int i = i1;
    for (; i - U >= i0; i -= U) {
      Raw xr[U], zr[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int ii = i - 1 - u;
        if (th.valid(ii)) {
          if (from_smem) {
            xr[u] = keep[(ii - i0) * kBnThreads + threadIdx.x];
          } else {
            xr[u] = Vec::load_cs(x + th.elem(ii));
          }
        }
        load_z(ii, zr[u]);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) apply(i - 1 - u, xr[u], zr[u]);
    }
    for (; i > i0; --i) {
      const int ii = i - 1;
      Raw xr{}, zr{};
      if (th.valid(ii)) {
        if (from_smem) {
          xr = keep[(ii - i0) * kBnThreads + threadIdx.x];
        } else {
          xr = Vec::load_cs(x + th.elem(ii));
        }
      }
      load_z(ii, zr);
      apply(ii, xr, zr);
    }
  };
  second_read(n_str, n_str + n_smem, true);
  second_read(0, n_str, false);
}

// The streaming kernel's shape: its grid (all co-resident) and layout, or
// none where the grid does not fit co-resident. Assumptions (of a shape set):
// group == 1, C / PACK a power of two <= 256, pointers aligned to PACK
// elements, p.part_moment1 / part_moment2 hold p.max_blocks rows of C floats,
// p.f's coefficient arrays set (owner combine).
template <typename T, int PACK>
cudaError_t shape_bn_stream(const BnPersistParams &p, bool gather_all, const DeviceContext &ctx, BnPersistShape *s) {
  *s = BnPersistShape{};
  const int64_t C = p.shape.width;
  const int64_t ncp = C / PACK;
  if (p.shape.group != 1 || C % PACK != 0 || ncp > kBnThreads || (ncp & (ncp - 1)) != 0) return cudaSuccess;
  const int64_t slabs = ceil_div(p.shape.elements() / PACK, int64_t{kBnThreads});
  constexpr int KR = kBnStreamKR;
  constexpr size_t kSlotBytes = kBnThreads * sizeof(typename BnVec<T, PACK>::Raw);
  // Blocks: kBnStreamBlocksPerSm per SM, each thread with at least KR
  // packs. A tensor too small for that grid (or a workspace with fewer
  // partial rows: C > 1024 at 16 bytes per pack) is left to the other paths:
  // the one shape measured with fewer blocks than SMs ran slower than the
  // three launches (H100, fp16 RELU [128, 512, 7, 7], 131 blocks: 23.0 us
  // against 20.0); every measured win ran 262-264 blocks.
  const int64_t full = int64_t{kBnStreamBlocksPerSm} * ctx.dev.sm_count;
  if (full < 1 || p.max_blocks < full || ceil_div(slabs, full) < KR) return cudaSuccess;
  int64_t spb = ceil_div(slabs, full);
  const int64_t blocks = ceil_div(slabs, spb);
  spb = ceil_div(slabs, blocks);  // even out the blocks' shares
  const bool gather = (gather_all || blocks * C <= kBnGatherMax) && C <= kBnThreads;
  auto kernel = gather ? bn_stream_kernel<T, PACK, true> : bn_stream_kernel<T, PACK, false>;
  // Shared memory for KS slots: what a block may have at kBnStreamBlocksPerSm
  // per SM beside its static arrays (1 KiB per block is the system's).
  const int64_t per_sm = static_cast<int64_t>(ctx.dev.max_smem_optin) + 1024;
  const int64_t room = per_sm / kBnStreamBlocksPerSm - 1024 - static_cast<int64_t>(bn_stream_static_smem<PACK>(gather));
  BnStreamGrid g;
  g.slabs_per_block = spb;
  g.keep_smem = static_cast<int>(std::clamp<int64_t>(
      std::min<int64_t>(std::max<int64_t>(room, 0) / static_cast<int64_t>(kSlotBytes), spb - KR), 0, 1 << 20));
  // Fewer slots where the estimate above leaves fewer than the blocks the
  // grid needs co-resident (allocation granularity).
  int occ = 0;
  for (;;) {
    const cudaError_t err = cached_occupancy(ctx.occupancy, reinterpret_cast<const void *>(kernel), kBnThreads,
                                             static_cast<size_t>(g.keep_smem) * kSlotBytes, &occ);
    if (err != cudaSuccess) return err;
    if (blocks <= static_cast<int64_t>(occ) * ctx.dev.sm_count) break;
    if (g.keep_smem == 0) return cudaSuccess;
    g.keep_smem /= 2;
  }
  g.evict_first = spb > KR + g.keep_smem;
  s->kernel = BnOneLaunch::Stream;
  s->gather = gather;
  s->blocks = blocks;
  s->smem = static_cast<size_t>(g.keep_smem) * kSlotBytes;
  s->blocks_per_sm = occ;
  s->stream = g;
  return cudaSuccess;
}

// Launches the streaming kernel with its planned shape; *launched says
// whether it ran (if not, the caller runs the three launches).
template <typename T, int PACK>
cudaError_t launch_bn_stream(const BnPersistParams &p, const BnPersistShape &s, cudaStream_t stream, bool *launched) {
  auto kernel = s.gather ? bn_stream_kernel<T, PACK, true> : bn_stream_kernel<T, PACK, false>;
  return launch_bn_cooperative(kernel, s, stream, launched, p, s.stream);
}

}  // namespace fnorm
