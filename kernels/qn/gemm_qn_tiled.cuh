#pragma once
// The qN tiled matmul (prompt chunks on an H100): y [M, N] = x [M, K] · Wᵀ (+ bias) for a
// qN / qNgG weight in the device layout of gemv_qn (QnDeviceWeight: 2 KB tiles of 16 block
// rows x 32 words, {scale, -zero * scale} pairs per group), read once per chunk of x rows
// instead of being expanded into a dense fp16 copy for cuBLAS. Included by
// kernels/qn/gemm_qn.cu only; gemm_qn.h has the contract.
//
// The design is that of the FPx tiled kernel (kernels/fpx/gemm_fpx_tiled.cuh, which has the
// measurements behind it), with qN's decoding (kernels/qn/qn_decode.cuh):
//  - a block owns WARPS row blocks of W (8 or 16: 128 or 256 rows, one a warp; two or
//    four warpgroups) and ROWS_X x rows, and walks its share of K one qN tile (32 E k, E =
//    32 / BITS codes a word; s7 E = 8, two blocks a pair byte) at a time through stages of
//    shared memory: W (2 KB a row block) and the tile's scale/bias pairs (64 bytes a row
//    block and 32-k block) by cp.async, x by one bulk copy (TMA) of permute_qn_x_kernel's
//    image completing on the stage's mbarrier; 4 stages copied 2 tiles ahead where they
//    fit (8 warps with up to 32 KB of x, 16 warps at 7-8 bits), else 3 (16 warps at 3-6
//    bits and s7; 128 x rows at 5-6 bits) or 2 (128 x rows at 3-4 bits and s7) 1 tile ahead;
//  - each warp decodes its row block's tile from shared memory into mma A fragments
//    exactly as the GEMV does (weight_pair: the same registers, the same k order), and its
//    warpgroup multiplies them with wgmma m64 n=ROWS_X k16, x as B from shared memory, in
//    groups of steps that alternate between two sets of A registers, so the decode of one
//    group runs while the tensor cores multiply the other;
//  - K is split over a cluster of `splits` blocks, summed through distributed shared
//    memory in rank order (deterministic, no workspace, no second kernel).
// qn_tiled_launch (kernels/qn/qn_launch.cpp) picks the block shape and the cluster size,
// with the sweeps behind it. The shapes: 8 warps with qn_tiled_rows_x x rows, which keeps
// a stage's x at <= 32 KB (128 at 7-8 bits, tiles of 128 k; 64 at 4-6 bits and s7; 32 at
// 2-3 bits, 320-512 k); 16 warps (128 registers a thread: at most 64 x rows); 8 warps with
// 128 x rows at 3..6 bits and s7, which halves the decoding a row of x costs at large M.
// 1-bit weights (1024 k a tile) are not served (gemm_qn_runs): they keep the GEMV slices
// or the dense copy + cuBLAS. Measured against those (H100, fp16, cold L2, us, gemm_qn /
// the dense copy + cuBLAS, the automatic launch): q4g64 4096 x 22016 at M = 32 38.7 /
// 156.0, at M = 256 111.7 / 168.7, at M = 512 222.1 / 233.5 (the README has the table,
// runtime/cuda/cuda_linear.cu and gemm_qn.cu where QuantLinear switches, and why).
//
// The k order. The GEMV's A fragment of 32-k block j, chunk c (k16 step s = 2 j + c) holds
// at mma-k 2 tig + u the real k 8 tig + 4 c + u and at mma-k 8 + 2 tig + u the real k 8 tig
// + 4 c + 2 + u (gemv_qn_kernel.cuh). So B's two 8-k groups of step s are, with p the pair
// index (real k 2p, 2p + 1) in the block, the pairs p = 2c, 2c + 4, 2c + 8, 2c + 12 and p =
// 2c + 1, 2c + 5, ...: group q = p % 4 holds the pairs p = q + 4i in order of i. The image
// is [chunk of ROWS_X rows][tile][block j][group q][ROWS_X rows][8 k], so step s reads
// groups 2 s and 2 s + 1 (as the FPx image does) and a tile's x is one contiguous copy.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/bulk_copy.cuh"
#include "kernels/device_util.cuh"
#include "kernels/pdl.cuh"
#include "kernels/qn/gemv_qn.h"
#include "kernels/qn/qn_decode.cuh"
#include "kernels/qn/qn_launch.h"
#include "kernels/wgmma.cuh"

namespace gemlite {
namespace {

constexpr int kQnTiledMaxSplits = 8;


// k16 steps a wgmma group: the fewest >= 3 that divide the tile's steps into an even
// number of groups, so that the two A register sets alternate the same way in every tile
// (wgmma_wait<1> before a set is refilled retires the group that last read it): 4 at 2, 4
// and 8 bits, 5 at 3 and 6 bits, 3 at 5 bits (6 spilled 92 bytes at 16 warps' 128
// registers; 6 bits' 5 spill 48).
__host__ __device__ constexpr int qn_steps_per_group(int steps) {
  for (int d = 3; d < steps; ++d)
    if (steps % d == 0 && (steps / d) % 2 == 0) return d;
  return steps / 2;
}

// A block of WARPS warps (one row block of W each: 8 or 16) and ROWS_X x rows at BITS
// (SPARSE: s7's pair bytes, two 32-k blocks a code).
template <int BITS, int WARPS, bool SPARSE, int ROWS_X>
struct QnTiledLayout {
  static constexpr int kBlocks = SPARSE ? 2 * (32 / BITS) : 32 / BITS;  // E: 32-k blocks a tile
  static constexpr int kSteps = 2 * kBlocks;
  static constexpr int kStepsPerGroup = qn_steps_per_group(kSteps);
  static constexpr int kGroups = kSteps / kStepsPerGroup;
  static constexpr int kRowsX = ROWS_X;
  static constexpr int kTileK = 32 * kBlocks;
  static constexpr int kWBytes = WARPS * 2048;             // [row block][2 KB tile]
  static constexpr int kScaleBytes = kBlocks * WARPS * 64;  // [block j][row block][8][2] pairs
  static constexpr int kGroupBytes = kRowsX * 16;           // one 8-k group of the x rows
  static constexpr int kXBytes = 4 * kBlocks * kGroupBytes;  // [block j][group q][rows][8 k]
  static constexpr int kStageBytes = kWBytes + kScaleBytes + kXBytes;
  // 4 stages copied 2 tiles ahead where they fit the H100's 227 KB, else 3 stages 1 tile
  // ahead: either way the stage a copy refills was last read by the wgmmas of two tiles
  // back, which every warp has waited for by then (wgmma_wait<1> in the tile between).
  // Else (128 x rows at 4 bits and s7, 3 bits) 2 stages 1 tile ahead: the refilled stage
  // was read by the tile before, so every warp retires all its wgmmas before the tile's
  // barrier (kDrain).
  static constexpr int kStages = 4 * kStageBytes + 32 <= 227 * 1024 ? 4 : 3 * kStageBytes + 24 <= 227 * 1024 ? 3 : 2;
  static constexpr int kAhead = kStages > 2 ? kStages - 2 : 1;
  static constexpr bool kDrain = kStages - kAhead < 2;
  static constexpr int kPartStride = WARPS * 16 + 4;  // floats a partial-sum row: conflict-free stores
  static constexpr int kPartBytes = kRowsX * kPartStride * 4;
  static constexpr int kStagesBytes = kStages * kStageBytes > kPartBytes ? kStages * kStageBytes : kPartBytes;
  static constexpr int kSmemBytes = kStagesBytes + kStages * 8;  // + a stage's mbarrier
  static_assert(kSteps % kStepsPerGroup == 0 && kGroups % 2 == 0, "A register sets alternate per tile");
  static_assert(kSmemBytes <= 227 * 1024, "a block's shared memory on the H100");
};

struct GemmQnParams {
  const uint32_t* qweight;     // QnDeviceWeight::qweight: [RB, tiles, 512] words
  const uint32_t* scale_bias;  // QnDeviceWeight::scale_bias: [n_groups, N16] pairs
  const float* bias;           // [N] or null
  const uint16_t* x;           // permute_qn_x_kernel's image of x [M, K]
  uint16_t* y;                 // [M, N]
  int64_t N, N16;
  int64_t paired_half;         // QnDeviceWeight::paired_half: block rows -> stored rows
  int M, tiles, RB, n_groups, group_shift, tiles_per_split;
};

// x [M, K] -> the kernel's image [ceil(M / rows_x)][tiles][E blocks][4 groups][rows_x][8 k]
// (the top of this file), zero past M and K. One thread a 32-k block of a row: grid
// (ceil(tiles * E / blockDim.x), ceil(M / rows_x) * rows_x), blockIdx.y the row (as
// permute_x_kernel, gemm_fpx_tiled.cuh).
// PRECOND: K % 8 == 0, x 16-byte aligned.
__global__ void permute_qn_x_kernel(const uint16_t* x, uint16_t* image, int M, int K, int tiles, int blocks_per_tile,
                                    int rows_x) {
  pdl_launch_dependents();
  pdl_wait();
  const int b = int(blockIdx.x * blockDim.x + threadIdx.x), m = int(blockIdx.y);  // 32-k block b of row m
  if (b >= tiles * blocks_per_tile) return;
  const uint16_t* row = x + int64_t(m) * K;
  uint32_t pairs[4][4];  // [8-k piece i][pair within it]: pair p = 4 i + e
#pragma unroll
  for (int piece = 0; piece < 4; ++piece) {
    const int64_t k = 32 * b + 8 * piece;  // K % 8 == 0: a piece is all inside or all past K
    const uint4 v = m < M && k < K ? *reinterpret_cast<const uint4*>(row + k) : make_uint4(0, 0, 0, 0);
    pairs[piece][0] = v.x, pairs[piece][1] = v.y, pairs[piece][2] = v.z, pairs[piece][3] = v.w;
  }
  const int64_t chunk = m / rows_x, tile = b / blocks_per_tile, j = b % blocks_per_tile;
  uint4* group0 = reinterpret_cast<uint4*>(
      image + (((chunk * tiles + tile) * blocks_per_tile + j) * 4 * rows_x + m % rows_x) * 8);
#pragma unroll
  for (int q = 0; q < 4; ++q)  // group q: pairs q, q + 4, q + 8, q + 12
    group0[q * rows_x] = make_uint4(pairs[0][q], pairs[1][q], pairs[2][q], pairs[3][q]);
}

// PRECOND: blockDim.x = 32 WARPS, dynamic shared memory QnTiledLayout::kSmemBytes, grid =
// (ceil(M / rows_x), ceil(RB / WARPS), splits) in clusters of (1, 1, splits), splits a
// power of two <= 8, tiles_per_split = ceil(tiles / splits), a device of compute
// capability 9.0 running sm_90a code (wgmma, bulk copies, clusters); p.x is
// permute_qn_x_kernel's image for rows_x = ROWS_X.
template <int BITS, bool BF16, int WARPS, bool SPARSE, int ROWS_X>
__global__ void __launch_bounds__(WARPS * 32, 1) gemm_qn_tiled_kernel(const __grid_constant__ GemmQnParams p) {
  using L = QnTiledLayout<BITS, WARPS, SPARSE, ROWS_X>;
  constexpr int kThreads = WARPS * 32;
  constexpr int E = L::kBlocks;
  extern __shared__ uint4 smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int gid = lane / 4, tig = lane % 4;
  const int rb0 = blockIdx.y * WARPS;  // the block's first row block
  const int m0 = blockIdx.x * L::kRowsX;
  const int splits = int(gridDim.z), split = int(blockIdx.z);  // split = the block's rank in its cluster
  const int t_begin = min(split * p.tiles_per_split, p.tiles);  // a split past K gets no tile
  const int n_tiles = max(0, min(p.tiles, t_begin + p.tiles_per_split) - t_begin);

  const auto stage_of = [&](int i) { return smem + (i % L::kStages) * L::kStageBytes; };
  // W of tile i: WARPS row blocks x 128 pieces of 16 bytes, at the same places of every
  // tile (addresses computed once; row blocks past RB copy nothing).
  constexpr int kWCopies = WARPS * 128 / kThreads;
  const uint32_t* w_src[kWCopies];  // tile t_begin's piece
  uint32_t w_dst[kWCopies];         // offset in a stage; ~0u: nothing to copy
#pragma unroll
  for (int q = 0; q < kWCopies; ++q) {
    const int c = q * kThreads + int(threadIdx.x);
    const int r = c / 128, piece = c % 128;
    const bool copies = rb0 + r < p.RB;
    w_src[q] = p.qweight + (int64_t(copies ? rb0 + r : 0) * p.tiles + t_begin) * 512 + piece * 4;
    w_dst[q] = copies ? uint32_t(r * 2048 + piece * 16) : ~0u;
  }
  // The pairs of tile t: for each 32-k block j its group's WARPS row blocks x 64 bytes.
  constexpr int kScalePieces = E * WARPS * 4;
  const auto copy_w = [&](int i) {
    uint8_t* stage = stage_of(i);
#pragma unroll
    for (int q = 0; q < kWCopies; ++q)
      if (w_dst[q] != ~0u) cp_async16(stage + w_dst[q], w_src[q] + int64_t(i) * 512);
    const int t = t_begin + i;
    for (int c = int(threadIdx.x); c < kScalePieces; c += kThreads) {
      const int j = c / (WARPS * 4), r = c / 4 % WARPS, part = c % 4;
      if (rb0 + r >= p.RB) continue;
      const int g = min((t * E + j) >> p.group_shift, p.n_groups - 1);
      cp_async16(stage + L::kWBytes + (j * WARPS + r) * 64 + part * 16,
                 p.scale_bias + int64_t(g) * p.N16 + int64_t(rb0 + r) * 16 + part * 4);
    }
  };
  uint64_t* x_landed = reinterpret_cast<uint64_t*>(smem + L::kStagesBytes);  // [stage]
  const auto copy_x = [&](int i) {
    if (threadIdx.x != 0) return;
    uint64_t* landed = &x_landed[i % L::kStages];
    mbarrier_arrive_expect(landed, L::kXBytes);
    bulk_copy(stage_of(i) + L::kWBytes + L::kScaleBytes,
              reinterpret_cast<const uint8_t*>(p.x) + (int64_t(blockIdx.x) * p.tiles + t_begin + i) * L::kXBytes,
              L::kXBytes, landed);
  };

  // PDL: the first tiles of W (weights) before the wait for x. cp.async groups: W 0 (, W
  // 1), then one a loop step, so "all but the newest kAhead - 1 done" means W of tile i landed.
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < L::kStages; ++stage) mbarrier_init(&x_landed[stage], 1);
    fence_mbarrier_init();
  }
  __syncthreads();  // the mbarriers ready before any thread waits on them
  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < L::kAhead; ++i) {
    if (i < n_tiles) copy_w(i);
    cp_async_commit();
  }
  pdl_wait();
#pragma unroll
  for (int i = 0; i < L::kAhead; ++i)
    if (i < n_tiles) copy_x(i);

  uint32_t magic;  // CodeLayout::magic(), opaque to the compiler so that it stays in one register
  asm volatile("mov.b32 %0, %1;" : "=r"(magic) : "n"(CodeLayout<BITS, BF16>::magic()));
  float acc[L::kRowsX / 8][4] = {};  // [n-tile][C fragment] of the warp's row block
  constexpr int kG = L::kStepsPerGroup;
  uint32_t a_even[kG][4] = {}, a_odd[kG][4] = {};  // A fragments of the even and odd step groups
  // Warps past RB still issue their warpgroup's wgmmas (they are collective), on rows that are never stored.
  const bool warp_active = rb0 + warp < p.RB;
  for (int i = 0; i < n_tiles; ++i) {
    cp_async_wait<L::kAhead - 1>();
    mbarrier_wait(&x_landed[i % L::kStages], uint32_t(i / L::kStages) & 1);
    if constexpr (L::kDrain) wgmma_wait<0>();  // tile i - 1's stage is refilled next
    __syncthreads();  // tile i's W and x visible; every warp has waited for the wgmmas of tile i - 2 (kDrain: i - 1)
    if (i + L::kAhead < n_tiles) {
      copy_w(i + L::kAhead);
      copy_x(i + L::kAhead);
    }
    cp_async_commit();
    const uint8_t* stage = stage_of(i);
    // The lane's words as the GEMV loads them: [row half h][chunk c], 16 bytes each.
    WordPair pairs[2][2][2];  // [h][c][words {x, y} or {z, w}]
    if (warp_active) {
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 v = *reinterpret_cast<const uint4*>(stage + warp * 2048 + (2 * c + h) * 512 + lane * 16);
          pairs[h][c][0] = word_pair(v.x, v.y);
          pairs[h][c][1] = word_pair(v.z, v.w);
        }
    }
    const uint8_t* scales = stage + L::kWBytes + warp * 64 + gid * 8;  // + block j * 512
    const uint8_t* x_stage = stage + L::kWBytes + L::kScaleBytes;
    static_for<0, L::kGroups>([&](auto group) {
      constexpr int G = decltype(group)::value;
      uint32_t(&a)[kG][4] = G % 2 == 0 ? a_even : a_odd;
      wgmma_wait<1>();  // the group that last read `a` (group G - 2) is done
#pragma unroll
      for (int s = 0; s < kG; ++s)
#pragma unroll
        for (int q = 0; q < 4; ++q) wgmma_keep(a[s][q]);
      if (warp_active) {
        static_for<0, kG>([&](auto step) {
          // Step S: 32-k block B, chunk C; B is code J of the words (s7: half H of pair byte J).
          constexpr int S = G * kG + decltype(step)::value, B = S / 2, C = S % 2;
          constexpr int J = SPARSE ? B / 2 : B, H = SPARSE ? B % 2 : 0;
          const uint2 sb = *reinterpret_cast<const uint2*>(scales + B * WARPS * 64);  // rows gid, gid + 8
          uint32_t(&f)[4] = a[S - G * kG];
          f[0] = weight_pair<BITS, BF16, J, SPARSE, H>(pairs[0][C][0], sb.x, magic);
          f[1] = weight_pair<BITS, BF16, J, SPARSE, H>(pairs[1][C][0], sb.y, magic);
          f[2] = weight_pair<BITS, BF16, J, SPARSE, H>(pairs[0][C][1], sb.x, magic);
          f[3] = weight_pair<BITS, BF16, J, SPARSE, H>(pairs[1][C][1], sb.y, magic);
        });
      }
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < kG; ++step)
        wgmma_rs<L::kRowsX, BF16>(acc, a[step],
                                  wgmma_desc(x_stage + 2 * (G * kG + step) * L::kGroupBytes, L::kGroupBytes, 128));
      wgmma_commit();
    });
  }
  wgmma_wait<0>();
#pragma unroll
  for (int s = 0; s < kG; ++s)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      wgmma_keep(a_even[s][q]);
      wgmma_keep(a_odd[s][q]);
    }
#pragma unroll
  for (int j = 0; j < L::kRowsX / 8; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) wgmma_keep(acc[j][q]);

  // Partial sums into shared memory as [x row][block row]; C fragment of n-tile j:
  // acc[j][0..1] = block row gid, x rows 8 j + 2 tig + 0/1; [2..3] = block row gid + 8.
  cp_async_wait<0>();
  __syncthreads();  // the stages are free
  float* part = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int j = 0; j < L::kRowsX / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        part[(8 * j + 2 * tig + e) * L::kPartStride + warp * 16 + gid + 8 * h] = acc[j][2 * h + e];
  if (splits > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  // Block `split` finishes outputs [split, split + 1) * per of the (x row, block row) pairs,
  // rows fastest (coalesced y), two neighbouring block rows a thread: stored rows n, n + 1
  // (a SwiGLU pair keeps runs of 8 block rows together, qn_stored_row), one 4-byte store
  // where N is even.
  constexpr int kRows = WARPS * 16;
  constexpr int kOutputs = L::kRowsX * kRows;
  const int per = kOutputs / splits;
  const bool paired_stores = p.N % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 4 == 0;
  for (int o = split * per + 2 * int(threadIdx.x); o < (split + 1) * per; o += 2 * kThreads) {
    const int mc = o / kRows, row = o % kRows;
    const int64_t v = int64_t(rb0) * 16 + row;  // block row
    const int m = m0 + mc;
    if (v >= p.N || m >= p.M) continue;
    const int64_t n = qn_stored_row(v, p.paired_half);
    const float2 sum = cluster_sum2<kQnTiledMaxSplits>(part + mc * L::kPartStride + row, splits);
    const bool both = v + 1 < p.N;
    const uint16_t y0 = to_activation<BF16>(sum.x + (p.bias ? p.bias[n] : 0.0f));
    const uint16_t y1 = both ? to_activation<BF16>(sum.y + (p.bias ? p.bias[n + 1] : 0.0f)) : 0;
    store_output_pair(p.y + int64_t(m) * p.N + n, y0, y1, both, paired_stores);
  }
  if (splits > 1) cluster_sync();  // no block leaves while another may still read its partial sums
}

}  // namespace
}  // namespace gemlite
