// The fused prefill attention's grid (runtime/cuda/flash_prefill_launch.h): regression pins
// of the launches the H100 measurements were taken with (the rule was chosen, not swept, so
// these are its own outputs at the measured chunks, kept so that a change to the rule shows
// which measured launches it moves), and over a sweep of chunks, positions, heads and SM counts the
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
TEST(FlashPrefillLaunch, PinsTheLaunchesMeasuredOnLlama2) {
  struct Case {
    int T, pos0, splits, tiles_per_split;
  };
  for (const Case c : {Case{512, 0, 1, 8}, Case{128, 0, 1, 2}, Case{512, 4096, 1, 72}, Case{128, 4096, 5, 14},
                       Case{32, 4096, 9, 8}, Case{16, 4096, 9, 8}, Case{8, 4096, 9, 8}}) {
    const FlashPrefillLaunch launch = flash_prefill_launch(c.T, c.pos0, 32, 32, kH100Sms);
    EXPECT_EQ(launch.splits, c.splits) << "pp" << c.T << " @ d" << c.pos0;
    EXPECT_EQ(launch.tiles_per_split, c.tiles_per_split) << "pp" << c.T << " @ d" << c.pos0;
  }
}

// llama3-8b (32 query heads over 8 kv heads) as measured on an H100 (kGroupHeadsFromPosition
// in flash_prefill_launch.h): one head a tile at positions 0 and 512 and for chunks of 64
// tokens or more; the group's 4 heads a tile for shorter chunks after 4096 positions, where
// 16 tokens are then one tile a kv head (8 blocks, split 17 ways: 136 blocks) instead of 32
// tiles of 16 rows each split 9 ways (288).
TEST(FlashPrefillLaunch, PinsTheLaunchesMeasuredOnLlama3) {
  struct Case {
    int T, pos0, heads_a_tile, query_tiles, splits;
  };
  for (const Case c : {Case{16, 0, 1, 1, 1}, Case{32, 512, 1, 1, 3}, Case{8, 4096, 4, 1, 17}, Case{16, 4096, 4, 1, 17},
                       Case{32, 4096, 4, 2, 17}, Case{128, 4096, 1, 2, 5}, Case{512, 4096, 1, 8, 1}}) {
    const FlashPrefillLaunch launch = flash_prefill_launch(c.T, c.pos0, 32, 8, kH100Sms);
    EXPECT_EQ(launch.heads_a_tile, c.heads_a_tile) << "pp" << c.T << " @ d" << c.pos0;
    EXPECT_EQ(launch.query_tiles, c.query_tiles) << "pp" << c.T << " @ d" << c.pos0;
    EXPECT_EQ(launch.splits, c.splits) << "pp" << c.T << " @ d" << c.pos0;
  }
}

// Every split holds at least one key tile of the last query tile (split 0 holds key 0, so
// the merge always finds a finite max), the splits cover all key tiles, a grid that fills
// the SMs stays unsplit, and grid.z stays within CUDA's 65535.
TEST(FlashPrefillLaunch, SplitsCoverTheKeysAndNoneIsEmpty) {
  struct Heads {
    int n_heads, n_kv_heads;
  };
  for (const int sms : {1, 8, 80, kH100Sms})
    for (const Heads heads : {Heads{1, 1}, Heads{6, 6}, Heads{14, 2}, Heads{32, 32}, Heads{32, 8}, Heads{64, 64}})
      for (const int pos0 : {0, 1, 63, 64, 1000, 4096, 131072})
        for (const int T : {1, 2, 5, 31, 32, 63, 64, 65, 100, 300, 512, 8192}) {
          const FlashPrefillLaunch launch = flash_prefill_launch(T, pos0, heads.n_heads, heads.n_kv_heads, sms);
          const std::string where = "T " + std::to_string(T) + " at " + std::to_string(pos0) + ", " +
                                    std::to_string(heads.n_heads) + "/" + std::to_string(heads.n_kv_heads) +
                                    " heads, " + std::to_string(sms) + " SMs";
          // A tile's rows: one head's tokens, or (token, query head) pairs of a kv head's group.
          const int group = heads.n_heads / heads.n_kv_heads;
          EXPECT_EQ(launch.heads_a_tile, pos0 >= kGroupHeadsFromPosition && T < kFlashQueries ? group : 1) << where;
          const int64_t rows = int64_t(T) * launch.heads_a_tile;
          EXPECT_EQ(launch.query_tiles, (rows + kFlashQueries - 1) / kFlashQueries) << where;
          EXPECT_EQ(launch.key_tiles, (pos0 + T + kFlashKeys - 1) / kFlashKeys) << where;
          ASSERT_GE(launch.splits, 1) << where;
          ASSERT_GE(launch.tiles_per_split, 1) << where;
          EXPECT_GE(int64_t(launch.splits) * launch.tiles_per_split, launch.key_tiles) << where;
          EXPECT_LT(int64_t(launch.splits - 1) * launch.tiles_per_split, launch.key_tiles) << where;
          EXPECT_LE(launch.splits, 65535) << where;
          const int64_t blocks = int64_t(launch.query_tiles) * (heads.n_heads / launch.heads_a_tile);
          if (blocks >= sms) EXPECT_EQ(launch.splits, 1) << where;
        }
}

}  // namespace
}  // namespace gemlite
