#include "kernels/qn/qn_launch.h"

#include <algorithm>
#include <cmath>

namespace gemlite {

// Warps a block of gemv_qn (16 rows of W, the warps splitting K), by the first clause that
// applies:
//  1. Shared memory, not registers, lets an SM hold fewer warps in 4-warp blocks than in
//     8-warp ones (on an H100 or H200 a staged x of K > ~16k at group 64, two or three
//     blocks an SM; unstaged, a slab of scales past ~46 KB): 8, which keep 16 warps an SM
//     where two blocks fit (28672 x 8192, x staged, 4 -> 8 warps: q4g64, two blocks an SM,
//     44.0 -> 36.1 µs; q8, three, 75.0 -> 56.4; one unstaged case, 57344 x 4096 at group 32,
//     114 KB of scales and one block an SM: q4g32 97.6 -> 60.8; 16-warp blocks there and
//     slabs of 46-114 KB were not measured).
//  2. The 8-row kernel (M <= 8) without x staged, on a grid of two waves of 4-warp blocks
//     or more: 4. On long grids the last wave weighs little, and 4-warp blocks hide each
//     block's start and end behind three others where 8-warp ones have one (Llama-3-8B's
//     gate/up, 1792 blocks, 8 -> 4 warps: q4g64 25.5 -> 22.9 µs; llama3-8b tg128 +8.6 %).
//  3. Otherwise 4, unless 8 or 3 fills its last wave of blocks more than 2 points fuller (8
//     tried first) -- with x staged (M = 1), 8 only where one wave of 8-warp blocks holds
//     the whole grid (Llama-2-7B's q/k/v, 768 blocks, 8 -> 4 warps: 11.7 -> 10.1 µs;
//     llama2-7b q4g64 tg128 +6.5 %).
// The 16-row kernel (M 9..16) skips clause 2: it lost 9-11 % at 4 warps on the long grid.
// The sweeps behind each clause, with their commands and every shape, are in
// kernels/qn/MEASURED.md ("The GEMV's warps a block: the sweeps"); the numbers the rule
// must stay within 5 % of are tests/cpu/test_launch_rules.cpp's.
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
