/* SPDX-License-Identifier: Apache-2.0 */
// GroupNorm's one kernel family (groupnorm.hpp says the design): forward
// and backward, channels-first and channels-last, a persistent grid of
// co-resident blocks taking tiles round-robin, each tile held in shared
// memory from its sums to its outputs (double-buffered: the next tile's
// loads are in flight while the block waits on its unit and stores).
//
// A unit is (sample n, gb groups = W channels from cbase). Its channels are
// cut in nrb channel blocks of `lines` channels and its spatial range in nsc
// sub-tiles of `span` values; a tile is `reps` consecutive sub-tiles.
// Thread (r, j) = (tid / tpr, tid % tpr) holds k packs of `pack` elements:
//   channels-first: channel line r of the block, spatial values
//     sc * span + (k * tpr + j) * pack + [0, pack)  (a team of tpr threads per channel)
//   channels-last: channels j * pack + [0, pack) of the block (its P slots),
//     rows (spatial values) sc * span + k * rps + r  (rps row slices)
// Sums per thread and slot are reduced per line (channel) in shared memory
// in a fixed tree, then per group; the forward's are shifted sums of x - K
// (K: the group's first value, read alike by every block), the backward's
// the sums of du and du * x_hat per channel, from which the group sums of
// g = du * (1 + scale) * gamma follow. Every combination is in a fixed
// order: the outputs are the same bits run to run.
#pragma once

#include "core/device.cuh"
#include "groupnorm/gn_stream.cuh"
#include "groupnorm/gn_tile.cuh"
#include "groupnorm/groupnorm.hpp"

namespace fnorm {

template <typename T, int P, bool CL, bool BWD>
__global__ void __launch_bounds__(kGnThreads, gn_blocks_per_sm(CL)) gn_kernel(const __grid_constant__ GnParams p) {
  using Tile = GnTile<T, P, CL, BWD>;
  using Raw = typename Tile::Raw;
  constexpr int KMAX = Tile::KMAX, NS = Tile::NS;
  __shared__ float sa[kGnThreads * NS], sb[kGnThreads * NS];
  __shared__ float la[kGnThreads * NS], lb[kGnThreads * NS];  // lines: CF <= kGnThreads, CL <= kGnThreads * P
  __shared__ float2 gacc[kGnThreads], ures[2][kGnThreads];
  extern __shared__ __align__(16) unsigned char gn_smem[];
  __shared__ int s_owner[2], s_last;

  const GnGeometry &g = p.geo;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t total = g.units * g.tiles;
  const int64_t subs = g.nrb * g.nsc;
  unsigned *arrive = p.counters + 1, *ready = p.counters + 1 + g.units;
  const double m = static_cast<double>(p.cg) * static_cast<double>(p.s);
  const int64_t grid = gridDim.x;
  Raw *buf[2] = {reinterpret_cast<Raw *>(gn_smem), reinterpret_cast<Raw *>(gn_smem) + (BWD ? 2 : 1) * KMAX * kGnThreads};

  // Step A of tile jt (into buffer `slot`): load it, its sums, publish
  // them; the last tile of its unit to arrive combines the unit's partials
  // in tile order, writes the unit's results and releases the others.
  auto step_a = [&](int64_t jt, int slot) {
    Tile tile(p);
    tile.set_unit(jt / g.tiles);
    const int64_t t = jt % g.tiles, n = tile.n, u = tile.u;
    Raw *xr = buf[slot];
    Raw *dr = xr + KMAX * kGnThreads;
    {
      const int64_t sub = t * g.reps;
      const int64_t c0 = tile.chan0(sub / g.nsc);
      const typename Tile::Packs pk = tile.packs(c0, sub % g.nsc);
      tile.load(p.x, xr, c0, pk);
      if constexpr (BWD) tile.load(p.dy, dr, c0, pk);
      cp_async_commit();
    }
    __syncthreads();  // gacc's last readers are done
    if (tid < g.gb) gacc[tid] = make_float2(0.f, 0.f);
    // ---- phase 1: load, sums per slot, per line, per group ----
    for (int rep = 0; rep < g.reps; ++rep) {
      const int64_t sub = t * g.reps + rep;
      if (sub >= subs) break;
      const int64_t rb = sub / g.nsc, sc = sub % g.nsc;
      const int64_t c0 = tile.chan0(rb);
      const typename Tile::Packs pk = tile.packs(c0, sc);
      if (rep > 0) {  // rep 0 was loaded above
        tile.load(p.x, xr, c0, pk);
        if constexpr (BWD) tile.load(p.dy, dr, c0, pk);
        cp_async_commit();
      }
      // The line (channel) coefficients, once per line in shared memory
      // (la, lb, sa, sb are free until the line sums), then each thread's
      // slots from there: fwd the group's shift; bwd rstd, mean, gamma', beta'.
      __syncthreads();
      for (int l = tid; l < g.lines; l += kGnThreads) {
        const int64_t cu = rb * g.lines + l;
        if (cu >= tile.W) continue;
        const int q = static_cast<int>(cu) / static_cast<int>(p.cg);
        if constexpr (BWD) {
          la[l] = p.rstd_in[tile.g0 + q];
          lb[l] = p.mean_in[tile.g0 + q];
          if (p.silu) {
            const GnChannel<T> ch(p, n, tile.cbase + cu);
            sa[l] = ch.gp;
            sb[l] = ch.bp;
          }
        } else {
          la[l] = tile.shift_of(q);
        }
      }
      __syncthreads();
      float a[NS], b[NS];
      float co0[NS], co1[NS], co2[NS], co3[NS];  // fwd: the shift; bwd: rstd, mean, gamma', beta'
      const int line0 = CL ? tile.j * P : tile.r;
#pragma unroll
      for (int e = 0; e < NS; ++e) {
        a[e] = b[e] = 0.f;
        if (c0 < 0) continue;
        co0[e] = la[line0 + e];
        if constexpr (BWD) {
          co1[e] = lb[line0 + e];
          if (p.silu) {
            co2[e] = sa[line0 + e];
            co3[e] = sb[line0 + e];
          }
        }
      }
      cp_async_wait<0>();
      if (c0 >= 0) {
#pragma unroll
        for (int k = 0; k < KMAX; ++k) {
          if (k >= g.k || !pk.valid(k)) continue;
          const Raw xk = xr[k * kGnThreads + tid];
          const Raw dk = BWD ? dr[k * kGnThreads + tid] : xk;
#pragma unroll
          for (int i = 0; i < P; ++i) {
            const int e = CL ? i : 0;
            const float xv = Convert<T>::to_float(xk.v[i]);
            if constexpr (BWD) {
              const float xh = (xv - co1[e]) * co0[e];
              float du = Convert<T>::to_float(dk.v[i]);
              if (p.silu) {
                const float v = xh * co2[e] + co3[e];
                const float sg = gn_sigmoid<T>(v);
                du = du * sg * (1.f + v * (1.f - sg));
              }
              a[e] += du;
              b[e] += du * xh;
            } else {
              const float d = xv - co0[e];
              a[e] += d;
              b[e] += d * d;
            }
          }
        }
      }
      gn_line_reduce<NS, CL>(g, tile.r, tile.j, a, b, sa, sb, la, lb);
      if (BWD && p.line_part != nullptr) {
        for (int l = tid; l < g.lines; l += kGnThreads)
          p.line_part[(u * subs + sub) * g.lines + l] = make_float2(la[l], lb[l]);
      }
      // Group sums of the lines (weights: 1 forward; gamma' backward).
      const int64_t first = rb * g.lines;
      for (int q = warp; q < g.gb; q += kGnThreads / 32) {
        const int64_t lo = max(q * p.cg - first, int64_t{0});
        const int64_t hi = min((q + 1) * p.cg - first, min(g.lines, tile.W - first));
        float2 s = make_float2(0.f, 0.f);
        for (int64_t l = lo + lane; l < hi; l += 32) {
          float w = 1.f;
          if constexpr (BWD) w = GnChannel<T>(p, n, tile.cbase + first + l).gp;
          s.x += w * la[l];
          s.y += w * lb[l];
        }
        s = group_allreduce<Sum2Op>(s, 32);
        if (lane == 0) gacc[q] = make_float2(gacc[q].x + s.x, gacc[q].y + s.y);
      }
    }
    __syncthreads();
    if (tid < g.gb) p.group_part[(u * g.tiles + t) * g.gb + tid] = gacc[tid];
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      s_owner[slot] = atomicAdd(arrive + u, 1u) == g.tiles - 1;
    }
    __syncthreads();
    if (!s_owner[slot]) return;
    __threadfence();
      for (int q = warp; q < g.gb; q += kGnThreads / 32) {
        double s1 = 0.0, s2 = 0.0;
        for (int64_t tt = lane; tt < g.tiles; tt += 32) {
          const float2 v = __ldcg(p.group_part + (u * g.tiles + tt) * g.gb + q);
          s1 += v.x;
          s2 += v.y;
        }
        for (int o = 16; o > 0; o >>= 1) {
          s1 += __shfl_xor_sync(kFullMask, s1, o);
          s2 += __shfl_xor_sync(kFullMask, s2, o);
        }
        if (lane == 0) {
          float2 res;
          if constexpr (BWD) {
            res = make_float2(static_cast<float>(s1 / m), static_cast<float>(s2 / m));
          } else {
            const double d = s1 / m;
            const double var = fmax(s2 / m - d * d, 0.0);
            const float mean = static_cast<float>(static_cast<double>(tile.shift_of(q)) + d);
            const float rstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(p.eps)));
            res = make_float2(mean, rstd);
            const int64_t gi = tile.g0 + q;
            if (p.mean) p.mean[gi] = mean;
            if (p.rstd) p.rstd[gi] = rstd;
          }
          ures[slot][q] = res;
          p.unit_res[u * g.gb + q] = res;
        }
      }
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      atomicExch(ready + u, 1u);
    }
    if constexpr (BWD) {
      // ---- the owner: per-channel sums of the unit (dscale, dshift, and
      // the (n, c) terms of dgamma / dbeta); the last unit adds those ----
      const bool channel_grads = p.line_part != nullptr && (p.dscale || p.dshift || p.dgamma || p.dbeta);
      if (channel_grads) {
        for (int64_t cu = tid; cu < tile.W; cu += kGnThreads) {
          const int64_t rb = cu / g.lines, slot = cu % g.lines;
          float A = 0.f, B = 0.f;
          for (int64_t sc = 0; sc < g.nsc; ++sc) {
            const float2 v = __ldcg(p.line_part + (u * subs + rb * g.nsc + sc) * g.lines + slot);
            A += v.x;
            B += v.y;
          }
          const int64_t c = tile.cbase + cu;
          const GnChannel<T> ch(p, n, c);
          const int64_t si = n * p.ss_sn + c * p.ss_sc;
          if (p.dshift) gn_st<T>(p.dshift, p.ss_f32, si, A);
          if (p.dscale) gn_st<T>(p.dscale, p.ss_f32, si, ch.gamma * B + ch.beta * A);
          p.nc_sums[n * p.c + c] = make_float2(ch.one_s * A, ch.one_s * B);
        }
        if (p.dgamma || p.dbeta) {
          __syncthreads();
          if (tid == 0) {
            __threadfence();
            s_last = atomicAdd(p.counters, 1u) == g.units - 1;
          }
          __syncthreads();
          if (s_last) {
            __threadfence();
            for (int64_t c = tid; c < p.c; c += kGnThreads) {
              float A = 0.f, B = 0.f;
              for (int64_t i = 0; i < p.n; ++i) {
                const float2 v = __ldcg(p.nc_sums + i * p.c + c);
                A += v.x;
                B += v.y;
              }
              if (p.dbeta) gn_st<T>(p.dbeta, p.w_f32, c, A);
              if (p.dgamma) gn_st<T>(p.dgamma, p.w_f32, c, B);
            }
          }
        }
      }
    }
  };

  // Step B of tile jt: wait for its unit's results, normalize, store.
  auto step_b = [&](int64_t jt, int slot) {
    Tile tile(p);
    tile.set_unit(jt / g.tiles);
    const int64_t t = jt % g.tiles, n = tile.n, u = tile.u;
    Raw *xr = buf[slot];
    Raw *dr = xr + KMAX * kGnThreads;
    if (!s_owner[slot]) {
      if (tid == 0) {
        while (*reinterpret_cast<volatile unsigned *>(ready + u) == 0u) __nanosleep(32);
        __threadfence();
      }
      __syncthreads();
      if (tid < g.gb) ures[slot][tid] = __ldcg(p.unit_res + u * g.gb + tid);
    }
    __syncthreads();
    // ---- phase 2: normalize what shared memory holds (re-read when reps > 1) ----
    for (int rep = 0; rep < g.reps; ++rep) {
      const int64_t sub = t * g.reps + rep;
      if (sub >= subs) break;
      const int64_t rb = sub / g.nsc, sc = sub % g.nsc;
      const int64_t c0 = tile.chan0(rb);
      // The line coefficients (as in phase 1): fwd y = x * ca + cb; bwd
      // x_hat = (x - mean) * rstd (exact near the mean), gamma', beta'.
      __syncthreads();
      for (int l = tid; l < g.lines; l += kGnThreads) {
        const int64_t cu = rb * g.lines + l;
        if (cu >= tile.W) continue;
        const int q = static_cast<int>(cu) / static_cast<int>(p.cg);
        const GnChannel<T> ch(p, n, tile.cbase + cu);
        if constexpr (BWD) {
          la[l] = p.rstd_in[tile.g0 + q];
          lb[l] = p.mean_in[tile.g0 + q];
          sa[l] = ch.gp;
          sb[l] = ch.bp;
        } else {
          const float mean = ures[slot][q].x, rs = ures[slot][q].y;
          la[l] = rs * ch.gp;
          lb[l] = ch.bp - mean * rs * ch.gp;
        }
      }
      __syncthreads();
      if (c0 < 0) continue;
      const typename Tile::Packs pk = tile.packs(c0, sc);
      if (g.reps > 1) {
        tile.load(p.x, xr, c0, pk);
        if constexpr (BWD) tile.load(p.dy, dr, c0, pk);
        cp_async_commit();
        cp_async_wait<0>();
      }
      // bwd: dx = c1 du + c2 + c3 x_hat with c1 = rstd gamma', c2, c3 from
      // the unit's means of g and g x_hat.
      float ca[NS], cb[NS], c1[NS], c2[NS], c3[NS], gp[NS], bp[NS];
      const int line0 = CL ? tile.j * P : tile.r;
#pragma unroll
      for (int e = 0; e < NS; ++e) {
        ca[e] = la[line0 + e];
        cb[e] = lb[line0 + e];
        if constexpr (BWD) {
          const int q = tile.group_of(c0, e);
          gp[e] = sa[line0 + e];
          bp[e] = sb[line0 + e];
          c1[e] = ca[e] * gp[e];
          c2[e] = -ca[e] * ures[slot][q].x;
          c3[e] = -ca[e] * ures[slot][q].y;
        }
      }
      T *out = static_cast<T *>(p.y);
#pragma unroll
      for (int k = 0; k < KMAX; ++k) {
        if (k >= g.k) continue;
        if (!pk.valid(k)) continue;
        const int64_t o = pk.at(k);
        const Raw xk = xr[k * kGnThreads + tid];
        const Raw dk = BWD ? dr[k * kGnThreads + tid] : xk;
        float res[P];
#pragma unroll
        for (int i = 0; i < P; ++i) {
          const int e = CL ? i : 0;
          const float xv = Convert<T>::to_float(xk.v[i]);
          if constexpr (BWD) {
            const float xh = (xv - cb[e]) * ca[e];
            float du = Convert<T>::to_float(dk.v[i]);
            if (p.silu) {
              const float v = xh * gp[e] + bp[e];
              const float sg = gn_sigmoid<T>(v);
              du = du * sg * (1.f + v * (1.f - sg));
            }
            res[i] = c1[e] * du + c2[e] + c3[e] * xh;
          } else {
            float v = xv * ca[e] + cb[e];
            if (p.silu) v = v * gn_sigmoid<T>(v);
            res[i] = v;
          }
        }
        store_pack<T, P>(out + o, res);
      }
    }
  };

  // Tiles are dealt round-robin (tile j to block j % grid, in order), and a
  // block publishes tile j + grid's sums (step A) before it waits on tile
  // j's unit (step B): the wait overlaps the next tile's loads and sums.
  // Deadlock-free with co-resident blocks and at most grid tiles per unit:
  // a unit's tiles lie in two consecutive rounds k, k + 1, and a block
  // publishes its round k + 1 tile having waited only on units of rounds
  // < k; by induction over rounds every unit completes.
  int cur = 0;
  if (blockIdx.x < total) step_a(blockIdx.x, 0);
  for (int64_t jt = blockIdx.x; jt < total; jt += grid, cur ^= 1) {
    if (jt + grid < total) step_a(jt + grid, cur ^ 1);
    step_b(jt, cur);
  }
}

// A cooperative launch: the grid is co-resident (a unit's blocks wait for
// each other), or the launch fails.
template <typename T, int P, bool CL, bool BWD>
cudaError_t gn_launch(const GnParams &p, const LaunchShape &s, cudaStream_t stream) {
  return launch_cooperative(gn_kernel<T, P, CL, BWD>, s.grid, s.block, s.smem, stream, p);
}

#define FNORM_GN_INSTANCE(T, DT, P, CL, BWD)                                                                   \
  GnInstance {                                                                                                 \
    DT, P, CL, BWD, reinterpret_cast<const void *>(&gn_kernel<T, P, CL, BWD>), &gn_launch<T, P, CL, BWD>,      \
        &gn_s_launch<T, P, CL, BWD>                                                                              \
  }

}  // namespace fnorm
