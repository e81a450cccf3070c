#include "kernels/qn/qn_launch.h"

#include <algorithm>
#include <cmath>

namespace gemlite {

// 4, 8 or 3 warps: the count whose last wave of blocks is fullest; 4 on a tie, then 8, then
// 3. The first sweep on the H100 (q8, q4g64, q2g64, GEMLITE_BENCH_WARPS=2,4,8,16): 8 won at
// N = 4096 (0.5 waves with 4), 4 at N = 8192 and 57344. 3 came with the sixteenth
// session's sweep (GEMLITE_BENCH_WARPS=0,2,3,4,5,6,8 GEMLITE_BENCH_M=1,16, fp16, µs;
// tests/cpu/test_launch_rules.cpp holds it): N = 10240 (640 blocks, 0.97 waves of 5 blocks
// an SM), the sweep's automatic entries (8 warps) -> 3 warps: q4g64 M = 1 22.5 -> 19.5, q8
// 31.8 -> 30.3, M = 16 q4g64 41.3 -> 34.1, q8 45.0 -> 39.6; on the Llama-2-7B shapes and 8192 x 8192 / 57344 the choice was the best or
// within 6 % of it (4096 x 22016 at M = 16: q4g64 42.4 at 4, 41.0 at 8; q8 45.2, 42.8), and
// 5 or 6 warps never beat it by more than 2 %.
int qn_warps_per_block(int64_t blocks, int sms, const std::function<int(int warps)>& resident_blocks) {
  const auto last_wave_fill = [&](int warps) {
    const int resident = std::max(resident_blocks(warps), 1);
    const double waves = double(blocks) / double(int64_t(sms) * resident);
    return waves / std::ceil(waves);
  };
  int warps = 4;
  double fill = last_wave_fill(warps);
  for (int candidate : {8, 3}) {
    const double candidate_fill = last_wave_fill(candidate);
    if (candidate_fill > fill + 0.02) {
      warps = candidate;
      fill = candidate_fill;
    }
  }
  return warps;
}

// The fewest waves x (tiles a block + a block's start and end), as fpx_tiled_launch costs
// the FPx tiled kernel (kernels/fpx/fpx_launch.cpp): a block's start and end counted as
// 1024 k of tiles, every split keeping >= 2 tiles; ties go to fewer splits.
int qn_tiled_splits(int64_t blocks, int64_t tiles, int blocks_per_tile, const std::array<int, 4>& resident) {
  const int64_t block_tiles = std::max<int64_t>(32 / blocks_per_tile, 1);
  int best_splits = 1;
  int64_t best = -1;
  for (int i = 0, splits = 1; i < 4; ++i, splits *= 2) {
    if (splits > 1 && tiles < 2 * splits) break;
    const int64_t per_wave = std::max(resident[size_t(i)], 1);
    const int64_t waves = (blocks * splits + per_wave - 1) / per_wave;
    const int64_t cost = waves * ((tiles + splits - 1) / splits + block_tiles);
    if (best < 0 || cost < best) {
      best = cost;
      best_splits = splits;
    }
  }
  return best_splits;
}

}  // namespace gemlite
