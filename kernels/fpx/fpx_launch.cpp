#include "kernels/fpx/fpx_launch.h"

#include <algorithm>

namespace gemlite {

int64_t fpx_wave_cost(int64_t blocks, int64_t per_wave, int64_t tiles, int64_t block_tiles) {
  return (blocks + per_wave - 1) / per_wave * (tiles + block_tiles);
}

// Small M (<= 16, two n-tiles): first enough blocks along K (split-K) to give every SM a
// block, then warps per block along K, every warp keeping >= 2 tiles of K so that its
// next tile's loads overlap the current one. Larger M (the register kernel without the
// tiled one): 4 row blocks per block (they read the same x lines through L1), warps along
// K only while the grid is short of ~16 warps per SM.
FpxRegisterLaunch fpx_register_launch(int64_t row_blocks, int64_t k_tiles, int M, int sms, int resident_warps,
                                      const FpxLaunchOverrides& overrides, int max_splits) {
  FpxRegisterLaunch s;
  // MT = 2 beat 4 and 8 (4 row blocks a block) at every M from 16 to 64 on the H100 (they
  // wait on x from L2 step by step), e.g. 8192 x 8192 at M = 32: 54.5 us vs 114.6.
  s.mt = overrides.m_tile > 0 ? overrides.m_tile : M <= 8 ? 1 : 2;
  const int64_t m_chunks = (M + 8 * s.mt - 1) / (8 * s.mt);
  const bool small = s.mt <= 2;  // one row block per block, x fragments prefetched
  s.warps_n = small ? 1 : 4;
  const int max_warps = small ? 16 : 8;  // shared memory: warps * MT * 512 bytes <= 16 KB, 32 KB
  s.splits = 1;
  if (small && m_chunks == 1) {  // the workspace and counters hold one chunk of <= 16 x rows
    if (overrides.splits > 0) {
      s.splits = std::min(overrides.splits, kFpxMaxSplits);
    } else {
      while (s.splits < kFpxMaxSplits && row_blocks * s.splits < sms && k_tiles >= 16 * s.splits) s.splits *= 2;
    }
    s.splits = std::clamp(s.splits, 1, std::max(max_splits, 1));
  }
  const int64_t tiles = (k_tiles + s.splits - 1) / s.splits;
  // Resident warps per SM at the kernels' register counts (ptxas, sm_90a, fp6 fp16): MT = 1
  // uses 84 (one tile ahead) or 122 registers (two), MT = 2 128, MT = 4 / 8 80 / 116: ~16 warps.
  const int64_t target = int64_t(sms) * 16;
  if (overrides.warps_k > 0) {
    s.warps_k = std::clamp(overrides.warps_k, 1, max_warps / s.warps_n);
  } else if (s.mt == 2 && resident_warps > 0) {
    // M 9..16 is bound by latency and issue, where a last wave of a few blocks costs a
    // whole block's time: the fewest fpx_wave_cost over the counts measured (3, 4, 5, 6
    // and 8 warps; 2 only where K leaves no other), each warp keeping >= 2 tiles (ties:
    // fewer warps). 2 warps left the candidates in the seventeenth session: the cost picked
    // it at 688 / 768 row blocks (one wave, 16 tiles a warp), where 5 warps (two waves) ran
    // 15 % faster on 3acdf10's kernel (4096 x 11008 24.7 vs 21.0 us, 4096 x 12288 25.0 vs
    // 21.3) and 4096 x 12288 8 % faster on the kernel before (below); without it the rule
    // is the best of the sweep below on all seven shapes and within 5 % of the best on all
    // eleven of tests/cpu/test_launch_rules.cpp's current-kernel table. Same-machine A/B
    // (fp16, us, M = 9 / 12 / 16): 4096 x 12288 19.8 / 21.8 / 25.1 -> 18.4 / 19.6 / 21.3,
    // 4096 x 11008 (M = 12 / 16) 21.4 / 24.6 -> 19.1 / 20.8; 4096 x 14336 (896 row blocks,
    // now 4 warps, not a projection of the models we run: Llama-3-8B's gate and up are one
    // 4096 x 28672 weight) 20.9 / 21.9 / 24.9 -> 22.0 / 23.2 / 25.9; the other eight shapes
    // within 3 %. Sweep (H100, fp6 fp16, M = 16, GEMLITE_BENCH_FPX_WARPS_K; us at
    // warps_k = 2 / 3 / 4 / 5 / 6 / 8, then
    // the old rule's choice and this one's; measured on the kernel before 3acdf10, whose
    // loop was slower; tests/cpu/test_launch_rules.cpp holds a sweep of the current one):
    //   8192 x 10240  49.8 / 35.0 / 50.8 / 42.3 / 47.9 / 46.3   old 4, now 3
    //   4096 x 12288  28.0 / 33.4 / 29.3 / 25.8 / 29.2 / 27.9   old 4, then 2, now 5
    //   4096 x 4096   24.3 / 18.7 / 15.5 / 13.3 / 11.8 / 11.1   8, 8
    //   4096 x 22016  49.8 / 46.1 / 39.3 / 42.9 / 52.3 / 43.6   4, 4
    //   11008 x 4096  54.4 / 42.8 / 37.4 / 33.3 / 30.0 / 28.1   8, 8
    //   14336 x 4096  67.2 / 53.8 / 45.0 / 38.9 / 33.5 / 32.1   8, 8
    //   8192 x 57344  183.1 / 187.0 / 176.5 / 201.1 / 217.7 / 206.5   4, 4
    // At M = 1 (memory-bound: a short last wave costs little) the rule below was the best
    // or within 3 % of it on all of these but 4096 x 12288 (19.8 us; 17.4 at 3 warps), and
    // this cost would not have picked 3 there: it stays below. On 3acdf10's kernel it is
    // within 4 % of the best on all seven (4096 x 12288 17.0 us, 16.4 at 3 warps).
    const int64_t blocks = m_chunks * row_blocks * s.splits;
    int64_t best = -1;
    for (int warps_k : {3, 4, 5, 6, 8}) {
      if (warps_k > max_warps || 2 * warps_k > tiles) break;
      const int64_t per_wave = int64_t(sms) * std::max(resident_warps / warps_k, 1);
      const int64_t cost = fpx_wave_cost(blocks, per_wave, (tiles + warps_k - 1) / warps_k);
      if (best < 0 || cost < best) {
        best = cost;
        s.warps_k = warps_k;
      }
    }
    if (best < 0) s.warps_k = tiles >= 4 ? 2 : 1;
  } else {
    s.warps_k = small ? 4 : 1;
    // Doubling only while the grid still fits one wave: 8192 x 8192 at M = 1 took 16-warp
    // blocks (two waves of 4 tiles a warp) when the rule was "below the target".
    while (s.warps_n * s.warps_k * 2 <= max_warps && tiles >= 4 * s.warps_k &&
           m_chunks * row_blocks * s.splits * s.warps_k * 2 <= target)
      s.warps_k *= 2;
  }
  // MT = 1: two tiles ahead (122 registers, ~16 resident warps a SM) unless the grid fits
  // one wave only at one tile ahead (84 registers, ~23 warps): 8192 x 10240 at M = 1 (2560
  // warps) took 33.8 us at two tiles ahead (1.2 waves) and 27.0 at one; elsewhere two tiles
  // ahead won by 0-6 % (28672 x 8192: 67.0 us vs 70.5).
  if (s.mt == 1) {
    const int64_t total_warps = m_chunks * (row_blocks + s.warps_n - 1) / s.warps_n * s.warps_n * s.warps_k * s.splits;
    s.ahead = overrides.tiles_ahead > 0 ? overrides.tiles_ahead
              : (total_warps > int64_t(sms) * 16 && total_warps <= int64_t(sms) * 23) ? 1 : 2;
  }
  return s;
}

int fpx_tiled_rows_x(FpxTiledShape shape, int M) {
  return shape != FpxTiledShape::kNarrow ? 128 : M <= 32 ? 32 : 64;
}

int fpx_tiled_row_blocks(FpxTiledShape shape) { return shape == FpxTiledShape::kWide ? 8 : 16; }

FpxAllowedShapes fpx_automatic_shapes(int M) { return {M <= kFpxNarrowMaxM, true, true}; }

// The fewest waves x (tiles a block x a tile's cost + a block's start and end), in quarters
// of a wide tile; a wave holds resident.of_size[z] blocks, so clusters of 4 and 8 get 120
// of the 132 SMs. Ties go to the wide shape, then the tall one, then to fewer splits --
// which decides M <= 32, where the narrow shape (same costs, half the blocks) never costs
// more than the wide one: the wide shape wins there on ties only, as the sweep has it
// (8192 x 8192 at M = 32: wide at 2 splits; narrow first in this order fails the test).
//   wide (128 x rows, 128 rows of W):        tile 4, block 32, at every M (rows past M
//                                            cost as much as real ones);
//   tall (128 x rows, 256 rows of W):        tile 7 (twice the weights for 1.75x the
//                                            time), block 48;
//   narrow, 32 x rows (256 rows of W):       tile 4, block 32;
//   narrow, 64 x rows:                       tile 5, block 32.
// Fitted to two sweeps of every shape at 1 / 2 / 4 / 8 splits (one H200, 132 SMs as the
// H100, fp6 fp16, cold L2, median of three runs; the tables of
// tests/cpu/test_launch_rules.cpp, which scripts/fpx_sweep_table.py makes from the logs):
//  - M = 128, 256, 384, 512 (2026-11-27, nineteenth session), wide and tall, ten shapes:
//    the pick is within 5.6 % of the best of the eight settings on all 40 cases, 0.5 %
//    behind on average; the rule before (shape by M alone, splits by fpx_wave_cost with
//    all 132 SMs a wave) averaged 4.3 % and lost up to 25 % (4096 x 28672 at M = 256: wide
//    2 splits 151.2 us against tall 1 split 120.6);
//  - M = 32, 48, 64 (2026-11-27, twentieth session), all three shapes, the same ten shapes: the pick
//    is the best of the twelve settings on all 30 cases; the rule before (the narrow shape
//    alone, the most splits that keep >= 8 tiles a block within 3 waves of 132) averaged
//    9.7 % behind and lost up to 22 % (8192 x 8192 at M = 64: narrow 8 splits 45.9 us
//    against wide 2 splits 37.5). Fitted on nine shapes, the tenth's picks lose 0 % on
//    eight, 2.1 % (at most 6.2 %) on 8192 x 8192 and 6.1 % (at most 9.4 %) on 28672 x 8192;
//    any narrow block cost from 32 to 46 keeps every pick within 5 %.
// Several chunks of 64 x rows (a forced narrow shape above M = 64) cost the same way; an
// older sweep of that case (M = 128 as two chunks, on the kernel of its day;
// test_launch_rules.cpp) agrees with each pick.
FpxTiledLaunch fpx_tiled_launch(int64_t row_blocks, int64_t k_tiles, int M, const FpxClusterBlocks& resident,
                                FpxAllowedShapes allowed, int splits) {
  struct Cost {
    FpxTiledShape shape;
    bool allowed;
    int64_t tile, block;
  };
  const int64_t narrow_tile = fpx_tiled_rows_x(FpxTiledShape::kNarrow, M) == 32 ? 4 : 5;
  const Cost shapes[] = {{FpxTiledShape::kWide, allowed.wide, 4, 32},
                         {FpxTiledShape::kWideTall, allowed.tall, 7, 48},
                         {FpxTiledShape::kNarrow, allowed.narrow, narrow_tile, 32}};
  FpxTiledLaunch best{allowed.wide ? FpxTiledShape::kWide : allowed.tall ? FpxTiledShape::kWideTall : FpxTiledShape::kNarrow,
                      splits > 0 ? splits : 1, 0, 1};
  int64_t best_cost = -1;
  for (const Cost& c : shapes) {
    if (!c.allowed) continue;
    const int64_t m_chunks = (M + fpx_tiled_rows_x(c.shape, M) - 1) / fpx_tiled_rows_x(c.shape, M);
    const int64_t groups = (row_blocks + fpx_tiled_row_blocks(c.shape) - 1) / fpx_tiled_row_blocks(c.shape);
    for (int i = 0, z = 1; z <= kFpxTiledMaxSplits; ++i, z *= 2) {
      if (splits > 0 && z != splits) continue;
      const int64_t blocks = m_chunks * groups * z, per_wave = std::max(1, resident.of_size[i]);
      const int64_t cost = fpx_wave_cost(blocks, per_wave, (k_tiles + z - 1) / z * c.tile, c.block);
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = {c.shape, z, blocks, per_wave};
      }
    }
  }
  return best;
}

// One H100, fp6, M = 16, cold L2 (GEMLITE_BENCH_FPX_SWEEP=1 GEMLITE_BENCH_M=16
// GEMLITE_BENCH_FORMATS=fp6 gemlite-bench --kernels --kernel-set fpx, 2026-11-28), us of the
// register kernel / the tiled kernel at fpx_tiled_launch's pick (narrow on every shape the
// rule takes), fp16:
//  - taken, N >= 3.5 K and waves >= 80 % full: 8192 x 57344 157.4 / 141.9 (224 blocks in 2
//    waves of 132: 85 %), 4096 x 14336 26.1 / 23.3 (2 splits, 112 blocks: 85 %), 4096 x
//    28672 43.3 / 37.7 (85 %), 8192 x 28672 84.1 / 69.0 (85 %), 4096 x 32000 48.9 / 41.2
//    (95 %), 5120 x 27648 51.9 / 44.8 (82 %); bf16 likewise (e.g. 4096 x 28672 44.0 / 40.1);
//  - not taken, N >= 3.5 K but 65 % full: 4096 x 22016 34.6 / 35.0 (86 blocks; bf16 35.2 /
//    38.9);
//  - not taken, N < 3.5 K (the tiled kernel lost every one): 4096 x 11008 20.8 / 21.9,
//    4096 x 12288 21.0 / 22.3, 4096 x 6144 11.3 / 13.9, 8192 x 10240 29.6 / 37.2, 8192 x
//    8192 23.8 / 34.8, 4096 x 4096 8.7 / 13.1, 28672 x 8192 74.9 / 100.7, 11008 x 4096
//    18.4 / 27.1, 14336 x 4096 22.6 / 33.3, 4096 x 1024 7.6 / 8.8.
// An H200 sweep (twenty-ninth session, kernels/fpx/BENCH.md) split its shapes the same way.
bool fpx_tiled_at_small_m(int64_t N, int64_t K, int M, const FpxClusterBlocks& resident) {
  if (!fpx_small_m_may_tile(M) || 2 * N < 7 * K) return false;
  const FpxTiledLaunch pick = fpx_tiled_launch((N + 15) / 16, (K + 127) / 128, M, resident, fpx_automatic_shapes(M));
  const int64_t waves = (pick.blocks + pick.per_wave - 1) / pick.per_wave;
  return 5 * pick.blocks >= 4 * waves * pick.per_wave;
}

}  // namespace gemlite
