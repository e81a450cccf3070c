// The fused prefill attention's grid (runtime/cuda/flash_prefill_launch.h): the choices the
// H100 measurements rest on, and over a sweep of chunks, positions, heads and SM counts the
// invariants flash_prefill_kernel and flash_merge_kernel rely on.
#include <gtest/gtest.h>

#include <string>

#include "runtime/cuda/flash_prefill_launch.h"

namespace gemlite {
namespace {

constexpr int kH100Sms = 132;

// llama2-7b (32 heads) as measured on an H100 (runtime/cuda/MEASURED.md, twenty-fifth
// session): at the start of the context pp128 and pp512 ran unsplit (+3.0 % and +4.3 %
// against the cuBLAS GEMMs); after 4096 positions pp512 unsplit (+73 %), pp128 in 5 splits
// (+107 %), pp32, pp16 and pp8 in 9 (+69 %, 2.4x and 1.7x; unsplit, pp32 had lost 19 %).
TEST(FlashPrefillLaunch, TheMeasuredLlama2Chunks) {
  struct Case {
    int T, pos0, splits, tiles_per_split;
  };
  for (const Case c : {Case{512, 0, 1, 8}, Case{128, 0, 1, 2}, Case{512, 4096, 1, 72}, Case{128, 4096, 5, 14},
                       Case{32, 4096, 9, 8}, Case{16, 4096, 9, 8}, Case{8, 4096, 9, 8}}) {
    const FlashPrefillLaunch launch = flash_prefill_launch(c.T, c.pos0, 32, kH100Sms);
    EXPECT_EQ(launch.splits, c.splits) << "pp" << c.T << " @ d" << c.pos0;
    EXPECT_EQ(launch.tiles_per_split, c.tiles_per_split) << "pp" << c.T << " @ d" << c.pos0;
  }
}

// Every split holds at least one key tile of the last query tile (split 0 holds key 0, so
// the merge always finds a finite max), the splits cover all key tiles, a grid that fills
// the SMs stays unsplit, and grid.z stays within CUDA's 65535.
TEST(FlashPrefillLaunch, SplitsCoverTheKeysAndNoneIsEmpty) {
  for (const int sms : {1, 8, 80, kH100Sms})
    for (const int heads : {1, 6, 14, 32, 64})
      for (const int pos0 : {0, 1, 63, 64, 1000, 4096, 131072})
        for (const int T : {1, 2, 5, 31, 32, 63, 64, 65, 100, 300, 512, 8192}) {
          const FlashPrefillLaunch launch = flash_prefill_launch(T, pos0, heads, sms);
          const std::string where = "T " + std::to_string(T) + " at " + std::to_string(pos0) + ", " +
                                    std::to_string(heads) + " heads, " + std::to_string(sms) + " SMs";
          EXPECT_EQ(launch.query_tiles, (T + kFlashQueries - 1) / kFlashQueries) << where;
          EXPECT_EQ(launch.key_tiles, (pos0 + T + kFlashKeys - 1) / kFlashKeys) << where;
          ASSERT_GE(launch.splits, 1) << where;
          ASSERT_GE(launch.tiles_per_split, 1) << where;
          EXPECT_GE(int64_t(launch.splits) * launch.tiles_per_split, launch.key_tiles) << where;
          EXPECT_LT(int64_t(launch.splits - 1) * launch.tiles_per_split, launch.key_tiles) << where;
          EXPECT_LE(launch.splits, 65535) << where;
          if (int64_t(launch.query_tiles) * heads >= sms) EXPECT_EQ(launch.splits, 1) << where;
        }
}

}  // namespace
}  // namespace gemlite
