#pragma once
// How the fused prefill attention (flash_prefill.cuh) lays out its grid: a pure function of
// the chunk, its position, the heads and the device's SM count, apart from the kernel, so
// that the rule -- with the measurements it rests on -- and the split invariants the kernel
// relies on are unit-tested on the CPU (tests/cpu/test_flash_prefill_launch.cpp).
#include <cstdint>

namespace gemlite {

constexpr int kFlashQueries = 64;  // a block's query tile: 4 warps of 16 rows
constexpr int kFlashKeys = 64;     // a key tile

struct FlashPrefillLaunch {
  int heads_a_tile = 1;     // query heads whose rows share a tile (1, or the kv head's group)
  int query_tiles = 1;      // grid.x: tiles of kFlashQueries rows of T x heads_a_tile
  int key_tiles = 1;        // key tiles the last query tile sees
  int splits = 1;           // grid.z: splits over the key tiles, each holding at least one
  int tiles_per_split = 1;  // key tiles a split takes (the last may take fewer)
};

// Grouped-query attention: a chunk of fewer than kFlashQueries tokens from this position
// on has tiles whose rows are (token, query head) pairs of one kv head, token-major, so
// that they fill a tile and the group's heads share every K and V tile a block copies
// (grid.y = n_kv_heads); otherwise a tile's rows are one head's tokens (grid.y = n_heads).
// llama3-8b q4g64 (32 / 8 heads), H100, grouped against one head a tile (four runs, either
// order): after 4096 positions pp8 +6..10 %, pp16 +4..7 %, pp32 +0.5..4 %, but pp128 -2..+0.3
// % and pp512 -3.3 %; after 512 and 1024 within 0.5 % (pp16, pp32). Runs of identical code
// at position 0 differed by up to 1.8 % (pp16), the noise these rest on. The position lies
// between the measured 512 and 4096, not swept.
constexpr int kGroupHeadsFromPosition = 1024;

// T tokens at positions [pos0, pos0 + T) with n_heads query heads over n_kv_heads on
// sm_count SMs; grid (query_tiles, n_heads / heads_a_tile, splits).
// Split over the keys only when the query tiles leave SMs idle: to ~2 blocks an SM (two fit
// at heads of 128, 87 KB of shared memory each; blocks of splits past a query tile's keys
// count too, though they exit at once), and no more than one split per 4 key tiles, so that
// the partials (written, read back, merged) stay a small share of the work. Chosen, not
// swept: measured as a whole (llama2-7b q4g64 @ d4096, H100: pp32 19 % slower unsplit than
// the cuBLAS GEMMs, 69 % faster split; runtime/cuda/MEASURED.md).
FlashPrefillLaunch flash_prefill_launch(int64_t T, int pos0, int n_heads, int n_kv_heads, int sm_count);

}  // namespace gemlite
