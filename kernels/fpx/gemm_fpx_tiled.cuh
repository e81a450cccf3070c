#pragma once
// The FPx tiled kernel (M > 16 on an H100): W and x staged in shared memory, wgmma, K split
// across a cluster. Included by kernels/fpx/gemm_fpx.cu only.
//
// A block owns WARPS row blocks of W (16 rows each) and 8 MT x rows, and walks its share of
// K by tiles of 128. Its warpgroups each own one 64-row m-tile: warp w holds row block w,
// whose FPx tile it decodes into A fragments exactly as the register kernel does, and per
// k-step its warpgroup issues one wgmma m64 N k16 (N = 8 MT) with x as B from shared
// memory (kernels/wgmma.cuh): the tensor cores run asynchronously while the warps decode
// the next k-steps (a tile's 8 k-steps in two halves, each its own A registers and wgmma
// group). The tiles of W are copied into shared memory with cp.async two tiles ahead (4
// stages: the stage a copy refills was last read by the wgmmas of two tiles back, which
// every warp has waited for by then); x lands in wgmma's K-major core-matrix layout with
// the decoder's k order (a lane's A registers hold the real k 4 tig + 0, 1 and 4 tig + 2,
// 3 of a step where the mma expects k 2 tig + 0, 1 and 2 tig + 8, 9, so B's k-groups of 8
// are the even and the odd pairs of 16 real k): permute_x_kernel first writes x into a
// scratch buffer as the image of the stages, and one thread copies a tile's x with one
// bulk copy (TMA engine, kernels/bulk_copy.cuh) completing on the stage's mbarrier: no x
// in registers, no per-thread copies. Three shapes:
//  - narrow: 16 warps, 256 rows of W, 32 x rows up to M = 32, else 64 (in chunks);
//  - wide: 8 warps, 128 rows of W, 128 x rows;
//  - wide and tall: 16 warps, 256 rows of W, 128 x rows (128 registers a thread, no
//    spills; 224 KB of shared memory);
//  fpx_tiled_launch (kernels/fpx/fpx_launch.cpp) picks one and the cluster size by M and
//  the shape of W.
//
// Shapes with few blocks split K over a cluster of `splits` blocks (gridDim.z, at most
// 8): each block leaves its fp32 partial sums in its own shared memory and, after a
// cluster barrier, block z sums the slice z of the outputs over the cluster's blocks in
// rank order (distributed shared memory): deterministic, no global workspace, no second
// kernel.
//
// The wide shape, measured on the way (H100, fp6 fp16, cold L2, 2026-11-27, gemlite-bench
// --kernels --kernel-set fpx, GEMLITE_BENCH_FPX_SWEEP=1): the 64-row tiled shape it
// replaced ran 8192 x 8192 at M = 512 in 247 us (0.37x cuBLAS) and 28672 x 8192 at M = 256
// in 401. A first wide version (256 x rows, n = 256 wgmmas, two 77 KB stages, x by 4-byte
// cp.async straight into the layout) was no faster: on 28672 x 8192 M = 256 it took 473
// us, 464 without decoding, 244 without the x copies, 135 with nothing but the W copies (a
// one-tile-deep pipeline waits out each tile's copies). 128 x rows, four stages and x by
// 16-byte cp.async from the permuted copy: still 0.3-0.5x (ncu, 8192 x 8192 M = 512: L2
// throughput 82 %, DRAM 7 %, 0.20 instructions issued a scheduler a cycle). x multicast to
// clusters of 2-8 blocks (each copying a slice for all, a cluster barrier a tile to free
// the stages) was slower again (8192 x 8192 M = 512: 211-313 us). One bulk copy a tile
// per block: 141 us (0.65x cuBLAS, the dense copy + cuBLAS 165), M = 128 40.9 (1.24x).
// Then the 32/64-row shapes took x the same way instead of through registers (loaded two
// tiles ahead, stored into the stage by the threads): A/B on one H200, fp16, two rounds,
// us at M = 32 / 64: 4096 x 12288 28.1 / 40.5 -> 26.0 / 31.4, 4096 x 22016 42.8 / 60.4 ->
// 39.3 / 47.6, 11008 x 4096 34.8 / 50.3 -> 31.9 / 37.8, 8192 x 8192 41.6 / 59.3 -> 37.4 /
// 46.2, 4096 x 4096 13.7 / 19.9 -> 13.1 / 15.9 (M = 17 and 48 likewise).
//
// Where the time of the wide shapes goes (eighteenth session, one H200, 8192 x 8192 at M =
// 512, fp16, best cluster split, us; each part switched off by a temporary flag, outputs
// wrong): 128 / 256 rows of W a block, the whole kernel 154.9 / 136.5; without the decode
// 136.6 / 123.9 (wgmma and copies), without the wgmmas 105.4 / 86.8, without the copies
// 138.9 / 120.1, with neither decode nor wgmma nor copies 54.1 / 46.0. That last, the bare
// loop and epilogue, fell to 34.2 (256 rows) once the epilogue wrote two rows a thread
// from its own shared memory where the cluster is one block (it had read every output
// through a distributed-shared-memory load, one at a time): the whole kernel 136.5 ->
// 123.4 and 154.9 -> 142.4 (cuBLAS 92-96). The tensor cores alone (no decode, no copies)
// take ~60 of the 109 us: the wgmmas do not hide the rest. Tried and dropped in the same
// way: x shared by two blocks of a cluster (each copying half of the tile to both by TMA
// multicast, a per-stage mbarrier telling the peer its stage is free): slower at every
// shape (8192 x 8192 M = 512 135.8 -> 146.6; the copies alone 64.6 -> 90.5); no per-tile
// block barrier (warp 0 copying W and x by bulk copies, "full" and "empty" mbarriers a
// stage, each warp releasing a stage once its wgmmas on it were done): no faster (122.5
// vs 123.4 us with 256 rows of W, 152.2 vs 142.4 with 128; runs on two H200s).
//
// What stalls (nineteenth session, one H200, ncu at base clocks, 8192 x 8192 fp16): at M =
// 512 (tall shape, 4 warps a scheduler) the tensor pipe is busy 66 % of the kernel, each
// warp issues ~285 instructions a tile, 0.39 issued a scheduler a cycle; cycles a warp
// waits per issued instruction: fixed-latency dependencies 2.35, barrier 1.68, math-pipe
// throttle 1.47, dispatch 0.89, short scoreboard 0.46, gmma 0.42; 16 % of the warp samples
// sit right after the tile's __syncthreads. At M = 128 (wide shape, 2 warps a scheduler)
// the tensor pipe is busy 49 %, ~329 instructions a warp a tile, fixed-latency waits 2.0,
// long scoreboard 0.64. Tried and dropped: finer wgmma groups (1 or 2 k-steps a group
// instead of 4, the same 32 A registers, so up to 7 groups run while a warp decodes one):
// no faster in a same-machine A/B over the six large shapes at M = 32..512 (us, 4 -> 2 ->
// 1 steps: 8192 x 8192 M = 128 38.1 -> 39.4 -> 39.0, M = 512 134.0 -> 137.4 -> 132.3;
// 4096 x 12288 M = 512 119.1 -> 117.7 -> 139.2; M <= 64 1-8 % slower with 1 step). The
// tensor queue is not what runs dry; each warp's chain of dependent decode instructions
// and the barrier that lines the warps up each tile are. W decoded once into shared
// memory by producer warps, feeding consumer warpgroups' wgmmas with both operands from
// shared memory (n = 256), was built and measured in the twenty-fourth session: no faster
// than this kernel (kernels/fpx/BENCH.md has why). Also tried
// the same day: the wide shape at two blocks an SM (2 stages, 1 tile ahead, every warp's
// wgmmas retired before the tile's barrier, 128 registers with 4 bytes spilled): 4 warps a
// scheduler instead of 2 took the sweep's larger grids 5-25 % down (8192 x 10240 M = 128,
// 4 splits, 60.7 -> 56.6 us; 4096 x 22016 M = 256, 2 splits, 127.9 -> 109.3), but a grid
// of one wave now lands two blocks an SM on half the SMs (8192 x 8192 M = 128, 2 splits,
// 37.8 -> 62.8): the best configuration of each shape moved -8 .. +7 %, not worth a
// second instantiation of every wide kernel.
//
// Earlier versions, measured on the way (H100, fp6 fp16, cold L2, gemlite-bench --kernels
// --kernel-set fpx with GEMLITE_BENCH_FPX_SPLITS=1,2,4,8): the shared-memory kernel this one
// replaced (x staged two tiles deep, W loaded to registers one tile ahead, one row block a
// warp, no split) waited on the W loads of each tile: 8192 x 8192 at M = 64 in 111.9 us
// (0.44x cuBLAS), 4096 x 4096 in 31.6 (0.47x). A first version of this one, 8 warps of two
// row blocks each with mma.sync, ran 4096 x 22016 at M = 64 in 75 us and at M = 512 in 465 (~200 TFLOP/s), and with wgmma
// no faster: ncu (4096 x 4096, M = 64, no split) showed ~860 instructions a warp a tile at
// 0.37 issued a scheduler a cycle (2 warps a scheduler; stalls on fixed-latency
// dependencies and shared-memory loads), the tensor cores mostly idle. Computing the copy
// addresses once took 8192 x 8192 M = 64 67.5 -> 60.9 us; 16 warps (one row block each)
// instead of 8 then 60.9 -> 56.5, 4096 x 22016 M = 64 63.8 -> 58.5. Tried and dropped: 5
// stages, 3 tiles ahead (200 KB of shared memory): 3-7 % slower on every shape at M = 32-128
// (8192 x 8192 M = 64 57.4 -> 60.8 us, A/B in one device session). Still issue-bound: the
// decode (lop3/shift/prmt per pair) and the per-tile copies are what a faster version
// must cut (kernels/fpx/BENCH.md has the table against cuBLAS and the dense copy).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/bulk_copy.cuh"
#include "kernels/device_util.cuh"
#include "kernels/fpx/fpx_format.h"
#include "kernels/fpx/fpx_launch.h"
#include "kernels/fpx/fpx_tile.cuh"
#include "kernels/fpx/gemm_fpx_params.cuh"
#include "kernels/pdl.cuh"
#include "kernels/wgmma.cuh"

namespace gemlite {
namespace {

constexpr int kTiledStages = 4;
constexpr int kTiledAhead = 2;      // tiles copied ahead of the one computed

// A shape of the tiled kernel (above): WARPS warps, 8 MT x rows.
template <int EBITS, int MBITS, int MT, int WARPS>
struct TiledLayout {
  static constexpr int kRowsX = 8 * MT;
  static constexpr int kTileBytes = 256 * Planes<EBITS, MBITS>::kBits;
  static constexpr int kWBytes = WARPS * kTileBytes;  // [WARPS row blocks][tile]
  static constexpr int kGroupBytes = kRowsX * 16;   // one k-group (8 k) of the kRowsX rows, 16 bytes a row
  static constexpr int kXBytes = 16 * kGroupBytes;  // [8 steps][2 k-groups][kRowsX rows][8 k]
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kPartStride = WARPS * kFpxTileRows + 4;  // floats a partial-sum row: conflict-free stores
  static constexpr int kPartBytes = kRowsX * kPartStride * 4;   // [x rows][kPartStride] after the loop
  static constexpr int kStagesBytes = kTiledStages * kStageBytes > kPartBytes ? kTiledStages * kStageBytes : kPartBytes;
  static constexpr int kSmemBytes = kStagesBytes + kTiledStages * 8;  // + a stage's mbarrier
};

// Real k 16 s + 0..15 of a row as the B k-groups of step s: group 0 holds the even pairs
// (real k 0, 1, 4, 5, 8, 9, 12, 13), group 1 the odd ones (see the top of this section).
__device__ __forceinline__ void split_pairs(uint4 u0, uint4 u1, uint4& group0, uint4& group1) {
  group0 = make_uint4(u0.x, u0.z, u1.x, u1.z);
  group1 = make_uint4(u0.y, u0.w, u1.y, u1.w);
}

// The tiled kernel's x, in the image of its stages: xp [ceil(M / R)][KT][16 k-groups][R
// rows][8 k] (R = rows_x, a block's x rows), the k-groups of each 16 k in the order of
// split_pairs, zero past M and K, so that a block's x of one tile is one contiguous copy.
// One thread a 16-k step of a row: grid (ceil(KT * 8 / blockDim.x), ceil(M / R) * R),
// blockIdx.y the row (a flat index's 64-bit division and remainder had cost ~2x).
__global__ void permute_x_kernel(const uint16_t* x, uint16_t* xp, int M, int K, int KT, int rows_x) {
  pdl_launch_dependents();
  pdl_wait();
  const int s = int(blockIdx.x * blockDim.x + threadIdx.x), m = int(blockIdx.y);
  if (s >= KT * 8) return;
  const uint16_t* row = x + int64_t(m) * K;
  uint4 u[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int k = 16 * s + 8 * h;  // K % 8 == 0: eight k are all inside or all past K
    u[h] = m < M && k < K ? *reinterpret_cast<const uint4*>(row + k) : make_uint4(0, 0, 0, 0);
  }
  const int64_t tile = int64_t(m / rows_x) * KT + s / 8;
  uint4* group0 = reinterpret_cast<uint4*>(xp + (tile * 16 + 2 * (s % 8)) * rows_x * 8 + (m % rows_x) * 8);
  split_pairs(u[0], u[1], group0[0], group0[rows_x]);
}

// PRECOND: blockDim.x = 32 WARPS, dynamic shared memory TiledLayout::kSmemBytes, grid =
// (ceil(M / 8 MT), ceil(RB / WARPS), splits) in clusters of (1, 1, splits), splits a power
// of two <= 8, tiles_per_split = ceil(KT / splits), K % 8 == 0, a device of compute
// capability 9.0 (wgmma); p.x is permute_x_kernel's image for 8 MT rows (whose x must be
// 16-byte aligned).
template <int EBITS, int MBITS, bool BF16, int MT, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 1) gemm_fpx_tiled_kernel(const __grid_constant__ GemmFpxParams p) {
  using P = Planes<EBITS, MBITS>;
  using L = TiledLayout<EBITS, MBITS, MT, WARPS>;
  constexpr int kThreads = WARPS * 32;
  constexpr int kRowsX = L::kRowsX;
  extern __shared__ uint4 smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_raw);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int rb0 = blockIdx.y * WARPS;  // the block's first row block
  const int m0 = blockIdx.x * kRowsX;
  const int splits = int(gridDim.z), split = int(blockIdx.z);  // split = the block's rank in its cluster
  const int t_begin = min(split * p.tiles_per_split, p.KT);  // a split past K gets no tile
  const int n_tiles = max(0, min(p.KT, t_begin + p.tiles_per_split) - t_begin);

  const auto stage_of = [&](int i) { return smem + (i % kTiledStages) * L::kStageBytes; };
  // W of tile i (the row blocks below RB) into its stage: a thread's pieces (16 bytes
  // each) sit at the same places of every tile, so their addresses are computed once
  // (the per-tile index arithmetic had been ~170 of ~860 instructions a warp a tile).
  constexpr int kWPieces = WARPS * L::kTileBytes / 16;
  constexpr int kWCopies = (kWPieces + kThreads - 1) / kThreads;
  const uint8_t* w_src[kWCopies];  // tile t_begin's piece
  uint32_t w_dst[kWCopies];        // offset in a stage; ~0u: nothing to copy
#pragma unroll
  for (int q = 0; q < kWCopies; ++q) {
    const int c = q * kThreads + int(threadIdx.x);
    const int r = c / (L::kTileBytes / 16), piece = c % (L::kTileBytes / 16);
    const bool copies = c < kWPieces && rb0 + r < p.RB;
    w_src[q] = p.packed + (int64_t(copies ? rb0 + r : 0) * p.KT + t_begin) * L::kTileBytes + piece * 16;
    w_dst[q] = copies ? uint32_t(r * L::kTileBytes + piece * 16) : ~0u;
  }
  const auto copy_w = [&](int i) {
    uint8_t* stage = stage_of(i);
#pragma unroll
    for (int q = 0; q < kWCopies; ++q)
      if (w_dst[q] != ~0u) cp_async16(stage + w_dst[q], w_src[q] + int64_t(i) * L::kTileBytes);
  };

  // x of tile i: thread 0 expects the tile's bytes on the stage's mbarrier and copies them,
  // one bulk copy (the TMA engine) of permute_x_kernel's image.
  uint64_t* x_landed = reinterpret_cast<uint64_t*>(smem + L::kStagesBytes);  // [stage]
  const auto copy_x = [&](int i) {
    if (threadIdx.x != 0) return;
    uint64_t* landed = &x_landed[i % kTiledStages];
    mbarrier_arrive_expect(landed, L::kXBytes);
    bulk_copy(stage_of(i) + L::kWBytes,
              reinterpret_cast<const uint8_t*>(p.x) + (int64_t(blockIdx.x) * p.KT + t_begin + i) * L::kXBytes,
              L::kXBytes, landed);
  };

  // PDL: the first tiles of W before the wait for x. cp.async groups (W only): W 0, W 1,
  // then one a loop step (W of tile i + 2), so "all but the newest one done" means W of
  // tile i landed.
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kTiledStages; ++stage) mbarrier_init(&x_landed[stage], 1);
    fence_mbarrier_init();
  }
  __syncthreads();  // the mbarriers ready before any thread waits on them
  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < kTiledAhead; ++i) {
    if (i < n_tiles) copy_w(i);
    cp_async_commit();
  }
  pdl_wait();
#pragma unroll
  for (int i = 0; i < kTiledAhead; ++i)
    if (i < n_tiles) copy_x(i);

  float acc[MT][4] = {};  // [n-tile][C fragment] of the warp's row block
  uint32_t a_lo[4][4] = {}, a_hi[4][4] = {};  // A fragments of k-steps 0-3 and 4-7, [step][register]
  // Warps past RB still issue their warpgroup's wgmmas (they are collective), on rows that are never stored.
  const bool warp_active = rb0 + warp < p.RB;
  for (int i = 0; i < n_tiles; ++i) {
    cp_async_wait<kTiledAhead - 1>();
    mbarrier_wait(&x_landed[i % kTiledStages], uint32_t(i / kTiledStages) & 1);
    __syncthreads();  // tile i's W and x visible; every warp has waited for the wgmmas of tile i - 2
    const bool refill = i + kTiledAhead < n_tiles;
    if (refill) {
      copy_w(i + kTiledAhead);
      copy_x(i + kTiledAhead);
    }
    cp_async_commit();
    const uint8_t* stage = stage_of(i);
    uint32_t words[P::kWords];
    if (warp_active) load_tile<EBITS, MBITS, true>(stage + warp * L::kTileBytes, lane, words);
    const uint8_t* x_stage = stage + L::kWBytes;
    // Two halves of the tile, 4 k-steps each, in their own registers and wgmma group: the
    // decode of one half runs while the tensor cores multiply the other.
    static_for<0, 2>([&](auto half) {
      constexpr int H = decltype(half)::value;
      uint32_t(&a)[4][4] = H == 0 ? a_lo : a_hi;
      wgmma_wait<1>();  // the group that last read `a` (this half of tile i - 1) is done
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int q = 0; q < 4; ++q) wgmma_keep(a[s][q]);
      if (warp_active) {
        static_for<0, 4>([&](auto step) {
          constexpr int S = 4 * H + decltype(step)::value;
          dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 0>(words), a[S % 4][0], a[S % 4][1]);
          dequantize_pairs<EBITS, MBITS, BF16>(code_bytes<EBITS, MBITS, S, 1>(words), a[S % 4][2], a[S % 4][3]);
        });
      }
      wgmma_fence();
#pragma unroll
      for (int step = 0; step < 4; ++step)
        wgmma_rs<kRowsX, BF16>(acc, a[step],
                               wgmma_desc(x_stage + 2 * (4 * H + step) * L::kGroupBytes, L::kGroupBytes, 128));
      wgmma_commit();
    });
  }
  wgmma_wait<0>();
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      wgmma_keep(a_lo[s][q]);
      wgmma_keep(a_hi[s][q]);
    }
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) wgmma_keep(acc[j][q]);

  // Partial sums into shared memory as [x row][row of the block]; C fragment of n-tile j:
  // acc[j][0..1] = row gid, x rows 8 j + 2 tig + 0/1; [2..3] = row gid + 8.
  cp_async_wait<0>();
  __syncthreads();  // the stages are free
  float* part = reinterpret_cast<float*>(smem);
  const int gid = lane / 4, tig = lane % 4;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        part[(8 * j + 2 * tig + e) * L::kPartStride + warp * kFpxTileRows + gid + 8 * h] = acc[j][2 * h + e];
  if (splits > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  // Block `split` finishes outputs [split, split + 1) * per of the (x row, row) pairs, rows
  // fastest (coalesced y), two adjacent rows a thread (one 4-byte store where N is even).
  constexpr int kRows = WARPS * kFpxTileRows;
  constexpr int kOutputs = kRowsX * kRows;
  const int per = kOutputs / splits;
  const bool paired_stores = p.N % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 4 == 0;
  for (int o = split * per + 2 * int(threadIdx.x); o < (split + 1) * per; o += 2 * int(blockDim.x)) {
    const int mc = o / kRows, row = o % kRows;
    const int64_t n = int64_t(rb0) * kFpxTileRows + row;
    const int m = m0 + mc;
    if (n >= p.N || m >= p.M) continue;
    const float2 sum = cluster_sum2<kFpxTiledMaxSplits>(part + mc * L::kPartStride + row, splits);
    const bool both = n + 1 < p.N;
    const uint16_t y0 = to_activation<BF16>(sum.x * p.row_factor[n] + (p.bias ? p.bias[n] : 0.0f));
    const uint16_t y1 =
        both ? to_activation<BF16>(sum.y * p.row_factor[n + 1] + (p.bias ? p.bias[n + 1] : 0.0f)) : 0;
    store_output_pair(p.y + int64_t(m) * p.N + n, y0, y1, both, paired_stores);
  }
  if (splits > 1) cluster_sync();  // no block leaves while another may still read its partial sums
}

}  // namespace
}  // namespace gemlite
