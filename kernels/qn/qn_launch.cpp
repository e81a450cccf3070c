#include "kernels/qn/qn_launch.h"

#include <algorithm>
#include <cmath>

namespace gemlite {

// The 8-row kernel (M <= 8): 4 warps once the grid holds two waves of 4-warp blocks or
// more. Otherwise 4, 8 or 3 warps, the count whose last wave of blocks is fullest (4 on a
// tie, then 8, then 3).
// The two-wave clause came with an H200 sweep (2026-11-28, GEMLITE_BENCH_WARPS=0,3,4,8
// GEMLITE_BENCH_M=1, fp16, cold L2; tests/cpu/test_launch_rules.cpp holds it): on long
// grids the last wave weighs little, and 8-warp blocks (two tiles a warp at K = 4096 and 4
// bits, two blocks an SM) hid each block's start and end behind one other block where
// 4-warp ones have three. M = 1, 8 -> 4 warps: q4g64 4096 x 28672 (1792 blocks, Llama-3-8B's
// gate/up) 25.5 -> 22.9 us, 4096 x 128256 (Llama-3's classifier) 101.9 -> 87.9; q6g64 and
// q2g64 there 8-23 % faster; q8 1 % slower at 28672 (33.3 -> 33.7), 7 % faster at 128256
// (136.9 -> 128.0); M = 2 and 8 the same way (q4g64 4096 x 128256 at M = 8 128.9 -> 109.1). llama3-8b tg128 (one H200,
// interleaved, `gemlite-bench --device cuda --synthetic llama3-8b -f q4g64 -p 0 -n 128 -r
// 2`): q4g64 509.1 / 511.3 -> 554.3 / 554.3 tok/s (+8.6 %), q8 403.5 -> 411.2. At 768
// blocks (4096 x 12288, under two waves) q8 still ran 7 % faster at 8 warps (15.8 against
// 17.0 us), so the clause starts at two waves; and the 16-row kernel (M = 16) lost 9-11 % at
// 4 warps on 4096 x 28672 (q4g64 50.8 -> 55.4 us, q8 50.7 -> 56.1; it gained 2-3 % on 4096 x
// 128256), so it keeps the fill rule.
// The first sweep on the H100 (q8, q4g64, q2g64, GEMLITE_BENCH_WARPS=2,4,8,16): 8 won at
// N = 4096 (0.5 waves with 4), 4 at N = 8192 and 57344. 3 came with the sixteenth
// session's sweep (GEMLITE_BENCH_WARPS=0,2,3,4,5,6,8 GEMLITE_BENCH_M=1,16, fp16, µs;
// tests/cpu/test_launch_rules.cpp holds it): N = 10240 (640 blocks, 0.97 waves of 5 blocks
// an SM), the sweep's automatic entries (8 warps) -> 3 warps: q4g64 M = 1 22.5 -> 19.5, q8
// 31.8 -> 30.3, M = 16 q4g64 41.3 -> 34.1, q8 45.0 -> 39.6; on the Llama-2-7B shapes and
// 8192 x 8192 / 57344 the choice was the best or within 6 % of it (4096 x 22016 at M = 16:
// q4g64 42.4 at 4, 41.0 at 8; q8 45.2, 42.8), and 5 or 6 warps never beat it by more than 2 %.
//
// With x staged (M = 1: every block starts by copying x, gemv_qn_kernel.cuh's XS), 8-warp
// blocks only where one wave of them holds the grid: past that 4 or 3 warps, whichever
// fills its last wave better. On the kernel of 2026-11-28 (x staged through .cg, before
// the early epilogue loads; the sweeps above) 8 warps had tied or won grids of 1-2 waves of
// 4-warp blocks on their fuller last wave (q4g64 4096 x 12288 12.4 / 12.0 µs at 8 / 4, q8
// 15.8 / 17.0); on the kernel of 2026-11-29 4 win there (why was not measured). H200
// sweep (2026-11-29, GEMLITE_BENCH_WARPS=3,4,8 GEMLITE_BENCH_M=1, fp16, cold L2; the
// x-staged sweep of tests/cpu/test_launch_rules.cpp), 8 -> 4 warps: q4g64 4096 x 12288
// (768 blocks, Llama-2-7B's q/k/v) 11.7 -> 10.1 µs, 4096 x 11008 11.3 -> 9.9, 2048 x 11264
// (TinyLlama's gate/up) 8.3 -> 6.7; q3g64 alike; q6g64 equal, q8 +3-4 %. tg128 (one H200,
// interleaved, two rounds, `gemlite-bench --device cuda --synthetic MODEL -f q4g64,q8 -p 0
// -n 128 -r 2`): llama2-7b q4g64 637.4 / 637.3 -> 679.0 / 678.7 tok/s (+6.5 %), tinyllama-1.1b
// q4g64 1866.9 / 1864.4 -> 1996.2 / 2015.3 (+7.5 %), q8 of both and llama3-8b (no such grid)
// within 1 %. The fill decides between 4 and 3 past two waves of 4-warp blocks as well,
// where the clause above gives unstaged launches 4: 4096 x 28672 (1792 blocks, Llama-3-8B's
// gate/up; 3 warps' last wave 90 % full, 4 warps' 85 %) 4 -> 3 warps q8 32.5 -> 30.7 µs,
// q6g64 30.7 -> 29.3, q3g64 22.9 -> 20.7, q4g64 20.3 -> 20.5; 4096 x 22016 (1376 blocks,
// 3 warps' last wave 4 % full) stays at 4. llama3-8b tg128 (5ddabcd's gemlite-bench against
// this rule's, one H200, interleaved, two rounds, `-r 2`): q8 447.9 / 449.2 -> 458.1 / 453.8
// tok/s (+1.6 %), q4g64 627.2 / 626.0 -> 627.1 / 625.9.
//
// Where shared memory, not registers, bounds the blocks an SM holds (a staged x of K > ~16k
// at group 64, two or three blocks an SM; a slab of scales past ~100 KB, one), 8-warp
// blocks, the most warps it then holds. H200 (2026-11-29, GEMLITE_BENCH_WARPS=3,4,8
// GEMLITE_BENCH_STAGE_X=1, fp16, M = 1, cold L2), 28672 x 8192 (84 KB a block at g64, two an
// SM), 3 / 4 / 8 warps: q4g64 54.2 / 44.0 / 36.1 µs, q8 88.3 / 75.0 / 56.4, q3g64 48.6 / 38.9
// / 37.4, q2g64 40.8 / 32.2 / 28.7; 22016 x 8192 (65 KB, three an SM), 4 / 8 warps: q6g64
// 56.6 / 41.2, q4g64 35.1 / 29.7, q8 44.8 / 44.8; x from global at 57344 x 4096, group 32
// (114 KB of scales, one block an SM), 4 / 8 warps: q4g32 97.6 / 60.8, q8g32 133.5 / 82.6
// (tests/cpu/test_launch_rules.cpp holds the staged sweeps).
int qn_warps_per_block(int64_t blocks, int sms, bool sixteen_rows, bool x_staged,
                       const std::function<int(int warps)>& resident_blocks) {
  const auto resident_warps = [&](int warps) { return std::max(resident_blocks(warps), 1) * warps; };
  if (resident_warps(4) < resident_warps(8)) return 8;
  const auto last_wave_fill = [&](int warps) {
    const int resident = std::max(resident_blocks(warps), 1);
    const double waves = double(blocks) / double(int64_t(sms) * resident);
    return waves / std::ceil(waves);
  };
  const bool eight_fit_one_wave = blocks <= int64_t(sms) * std::max(resident_blocks(8), 1);
  const bool staged_long = x_staged && !sixteen_rows && !eight_fit_one_wave;  // 4 or 3 warps by fill
  if (!sixteen_rows && !staged_long && blocks >= 2 * int64_t(sms) * std::max(resident_blocks(4), 1)) return 4;
  int warps = 4;
  double fill = last_wave_fill(warps);
  for (int candidate : {8, 3}) {
    if (candidate == 8 && staged_long) continue;
    const double candidate_fill = last_wave_fill(candidate);
    if (candidate_fill > fill + 0.02) {
      warps = candidate;
      fill = candidate_fill;
    }
  }
  return warps;
}

// The 16-row-block shape at M <= 64 (where it won on all sixteen cases of the first sweep
// below), otherwise the fewest waves x (tiles a block x a tile's cost + a block's start and
// end), as fpx_tiled_launch costs the FPx tiled kernel (kernels/fpx/fpx_launch.cpp): a
// tile of 8 row blocks costs 4 E (quarters of a 32-k block), one of 16 row blocks 7 E (the
// FPx kernel's tall shape's ratio), 8 row blocks with 128 x rows 6 E (fitted to the second
// sweep); a block's start and end 128 (1024 k of 8 row blocks); every split keeps >= 2
// tiles; ties go to the shape listed first, then to fewer splits. Sweeps (H100, fp16, cold
// L2, 2026-11-27, gemlite-bench --kernels --kernel-set gemv, each shape at the cluster size
// the rule of the time chose):
//  - first (GEMLITE_BENCH_M=17,64,128,256 GEMLITE_BENCH_GEMM_WARPS=8,16; us at 8 / 16 warps):
//    q4g64 4096 x 22016  M = 17 45.0 / 37.6   64 47.7 / 39.1  128 74.6 / 72.3  256 151.4 / 120.9
//    q4g64 11008 x 4096  M = 17 34.3 / 30.1   64 35.2 / 30.5  128 39.5 / 56.2  256 67.1 / 65.3
//    q8    4096 x 22016  M = 17 64.4 / 46.5   64 71.4 / 46.6  128 76.5 / 83.7  256 122.8 / 143.0
//    q8    11008 x 4096  M = 17 51.9 / 34.5   64 54.0 / 35.6  128 56.3 / 63.4  256 64.9 / 74.8
//    (q8's 8-warp blocks take 128 x rows, its 16-warp ones 64);
//  - second, with 128 x rows for 8 warps at 3..6 bits and s7 (GEMLITE_BENCH_M=128..512
//    GEMLITE_BENCH_GEMM_WARPS=8,16 GEMLITE_BENCH_GEMM_ROWS=32,64,128; us at 8 warps with 64
//    x rows / 16 warps / 8 warps with 128 x rows):
//    q4g64 4096 x 22016  M = 128 74.4 / 73.0 / 68.6   256 147.0 / 125.0 / 108.6   512 272.8 / 247.9 / 223.1
//    q4g64 11008 x 4096  M = 128 40.0 / 56.2 / 48.7   256 67.1 / 68.2 / 59.1      512 136.9 / 118.2 / 103.8
//    q6g64 4096 x 12288  M = 128 59.8 / 49.4 / 42.6   512 185.0 / 157.2 / 132.6
// tests/cpu/test_launch_rules.cpp holds 36 such cases; the rule's shape is within 5 % of
// the fastest on all of them.
QnTiledShapeOf qn_tiled_shape(QnTiledShape shape, int blocks_per_tile) {
  const int E = blocks_per_tile;
  switch (shape) {
    case kQnTiled16Warps: return {16, qn_tiled_rows_x(E, 16), qn_tiled_16_warps_fit(E)};
    case kQnTiledWide: return {8, 128, qn_tiled_wide_fits(E)};
    default: return {8, qn_tiled_rows_x(E, 8), true};
  }
}

QnTiledLaunch qn_tiled_launch(int M, int64_t row_blocks, int64_t tiles, int blocks_per_tile,
                              const QnTiledResident& resident, int warps, int rows_x, int splits) {
  const int E = blocks_per_tile;
  const int64_t tile_costs[kQnTiledShapes] = {4 * E, 7 * E, 6 * E};  // in quarters of a 32-k block of 8 row blocks
  const bool forced = warps > 0 || rows_x > 0;
  const bool sixteen_fit = qn_tiled_shape(kQnTiled16Warps, E).exists;
  QnTiledLaunch best{0, 0, 0};  // none: the settings named no shape of this width
  int64_t best_cost = -1;
  for (int s = 0; s < kQnTiledShapes; ++s) {
    const QnTiledShapeOf shape = qn_tiled_shape(QnTiledShape(s), E);
    if (!shape.exists || (warps > 0 && shape.warps != warps) || (rows_x > 0 && shape.rows_x != rows_x)) continue;
    if (!forced && M <= 64 && sixteen_fit && s != kQnTiled16Warps) continue;
    const int64_t blocks = (M + shape.rows_x - 1) / shape.rows_x * ((row_blocks + shape.warps - 1) / shape.warps);
    for (int i = 0, z = 1; i < 4; ++i, z *= 2) {
      if ((splits > 0 && z != splits) || (splits == 0 && z > 1 && tiles < 2 * z)) continue;
      const int64_t per_wave = std::max(resident.of[s][size_t(i)], 1);
      const int64_t waves = (blocks * z + per_wave - 1) / per_wave;
      const int64_t cost = waves * ((tiles + z - 1) / z * tile_costs[s] + 4 * 32);
      if (best_cost < 0 || cost < best_cost) {
        best_cost = cost;
        best = {shape.warps, shape.rows_x, z};
      }
    }
  }
  return best;
}

}  // namespace gemlite
