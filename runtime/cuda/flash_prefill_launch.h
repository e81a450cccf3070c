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
  int query_tiles = 1;      // grid.x: tiles of kFlashQueries tokens
  int key_tiles = 1;        // key tiles the last query tile sees
  int splits = 1;           // grid.z: splits over the key tiles, each holding at least one
  int tiles_per_split = 1;  // key tiles a split takes (the last may take fewer)
};

// T tokens at positions [pos0, pos0 + T) with n_heads query heads (grid.y) on sm_count SMs.
// Split over the keys only when the query tiles leave SMs idle: to ~2 blocks an SM (two fit
// at heads of 128, 87 KB of shared memory each; blocks of splits past a query tile's keys
// count too, though they exit at once), and no more than one split per 4 key tiles, so that
// the partials (written, read back, merged) stay a small share of the work. Chosen, not
// swept: measured as a whole (llama2-7b q4g64 @ d4096, H100: pp32 19 % slower unsplit than
// the cuBLAS GEMMs, 69 % faster split; runtime/cuda/MEASURED.md).
FlashPrefillLaunch flash_prefill_launch(int64_t T, int pos0, int n_heads, int sm_count);

}  // namespace gemlite
