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

}  // namespace gemlite
