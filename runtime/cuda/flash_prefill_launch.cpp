#include "runtime/cuda/flash_prefill_launch.h"

#include <algorithm>

namespace gemlite {

FlashPrefillLaunch flash_prefill_launch(int64_t T, int pos0, int n_heads, int n_kv_heads, int sm_count) {
  constexpr int kBlocksPerSm = 2, kTilesASplit = 4;
  FlashPrefillLaunch launch;
  launch.heads_a_tile = pos0 >= kGroupHeadsFromPosition && T < kFlashQueries ? n_heads / n_kv_heads : 1;
  const int64_t rows = T * launch.heads_a_tile;  // of a tile's heads
  launch.query_tiles = int((rows + kFlashQueries - 1) / kFlashQueries);
  launch.key_tiles = int((pos0 + T + kFlashKeys - 1) / kFlashKeys);
  const int blocks = launch.query_tiles * (n_heads / launch.heads_a_tile);
  int splits = 1;
  if (blocks < sm_count)
    splits = std::min((kBlocksPerSm * sm_count + blocks - 1) / blocks, (launch.key_tiles + kTilesASplit - 1) / kTilesASplit);
  launch.tiles_per_split = (launch.key_tiles + splits - 1) / splits;
  launch.splits = (launch.key_tiles + launch.tiles_per_split - 1) / launch.tiles_per_split;  // none empty
  return launch;
}

}  // namespace gemlite
