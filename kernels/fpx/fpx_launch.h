#pragma once
// How gemm_fpx lays out its launches: pure functions of the shape, M and the device's counts
// (SMs, resident warps), apart from the kernels (kernels/fpx/gemm_fpx_*.cuh) so that the rules -- each one
// measured on the H100, with its numbers in fpx_launch.cpp -- are unit-tested on the CPU
// against those measurements (tests/cpu/test_launch_rules.cpp).
#include <cstdint>

namespace gemlite {

constexpr int kFpxMaxSplits = 8;         // register kernel: blocks splitting K (through a workspace)
constexpr int kFpxSplitMaxM = 16;        // ... only for M <= 16 (one chunk of two n-tiles)
constexpr int kFpxTiledMaxSplits = 8;    // tiled kernel: blocks of a cluster splitting K (the portable cluster size)

// Time of a grid whose blocks each walk `tiles` tiles of K, in tile-steps: its waves of
// `per_wave` resident blocks, each costing its tiles plus `block_tiles` (~4) for a block's
// start (first loads) and end (reduction, epilogue). For kernels bound by latency and
// issue rather than by DRAM; its uses were each measured against a sweep (fpx_launch.cpp).
int64_t fpx_wave_cost(int64_t blocks, int64_t per_wave, int64_t tiles, int64_t block_tiles = 4);

// The register kernel's launch (M <= 16, and any M where the tiled kernel does not run).
struct FpxRegisterLaunch {
  int mt = 1;        // n-tiles of 8 x rows a warp: 1 (M <= 8) or 2 (M > 8); 4 or 8 when asked
  int warps_n = 1;   // row blocks (16 rows of W) a block: 1 for MT <= 2, else 4
  int warps_k = 1;   // warps of a block splitting K
  int splits = 1;    // blocks splitting K (one chunk of <= 16 x rows only)
  int ahead = 1;     // MT = 1: tiles of W and x loaded ahead of the one multiplied (1 or 2)
};

// Overrides of the automatic choice (0: automatic), for tests and benchmarks (GemmFpxConfig).
struct FpxLaunchOverrides {
  int warps_k = 0;      // warps of a block splitting K
  int splits = 0;       // blocks splitting K: M <= 16, <= the weight's max_splits
  int m_tile = 0;       // n-tiles of 8 x rows per warp: 1, 2, 4 or 8
  int tiles_ahead = 0;  // MT = 1: tiles of W and x loaded ahead of the one multiplied, 1 or 2
};

// row_blocks = ceil(N / 16), k_tiles = ceil(K / 128); resident_warps: warps of the MT = 2
// kernel an SM holds (its registers; 0 where unknown), used for M 9..16; max_splits: the
// most the weight's workspace holds (FpxDeviceWeight::max_splits).
FpxRegisterLaunch fpx_register_launch(int64_t row_blocks, int64_t k_tiles, int M, int sms, int resident_warps,
                                      const FpxLaunchOverrides& overrides = {}, int max_splits = kFpxMaxSplits);

// The tiled kernel's shapes (kernels/fpx/gemm_fpx_tiled.cuh): narrow (32 or 64 x rows, 256
// rows of W a block), wide (128 x rows, 128 rows of W), wide and tall (128 x rows, 256 rows
// of W). One block an SM (their shared memory).
enum class FpxTiledShape { kNarrow, kWide, kWideTall };
// Automatic launches consider the narrow shape up to this M (one chunk of x rows, where its
// sweep measured it), the wide ones at every M.
constexpr int kFpxNarrowMaxM = 64;
// x rows a block of `shape` takes at M: the narrow shape 32 up to M = 32, else 64 (in
// chunks of 64 above M = 64, where only a forced narrow shape runs); the wide ones 128.
int fpx_tiled_rows_x(FpxTiledShape shape, int M);
// Row blocks of W (16 rows each) a block of `shape` takes: the wide shape 8, the others 16
// (one a warp).
int fpx_tiled_row_blocks(FpxTiledShape shape);
// Blocks of the tiled kernel (one an SM) the device runs at once in clusters of 1, 2, 4
// and 8 blocks (cudaOccupancyMaxActiveClusters times the cluster size): 132, 132, 120, 120
// on the H100 SXM and the H200, whose GPCs leave SMs that no cluster of 4 fills.
struct FpxClusterBlocks {
  int of_size[4];
};
// The shapes a launch may choose from: fpx_automatic_shapes(M) for an automatic one, the
// one asked for where a caller forces it (GemmFpxConfig::tiled).
struct FpxAllowedShapes {
  bool narrow, wide, tall;
};
// All three at M <= kFpxNarrowMaxM, the wide ones above.
FpxAllowedShapes fpx_automatic_shapes(int M);
struct FpxTiledLaunch {
  FpxTiledShape shape;
  int splits;            // blocks of a cluster splitting K: 1, 2, 4 or 8
  int64_t blocks = 0;    // of the grid: chunks of x rows x groups of row blocks x splits
  int64_t per_wave = 1;  // blocks resident at once in clusters of `splits` (FpxClusterBlocks)
};
// The shape and the cluster size chosen together (fpx_launch.cpp has the cost and its
// sweeps); row_blocks = ceil(N / 16), k_tiles = ceil(K / 128). PRECOND: at least one shape
// allowed; `splits` 0 (chosen too) or 1, 2, 4 or 8, kept as it is, the shape chosen for it
// (so a forced cluster size may change an automatic launch's shape).
FpxTiledLaunch fpx_tiled_launch(int64_t row_blocks, int64_t k_tiles, int M, const FpxClusterBlocks& resident,
                                FpxAllowedShapes allowed, int splits = 0);
// The small M where an automatic launch may take the tiled kernel: 9..16 (kFpxMaxM), the
// register kernel's MT = 2 range (fpx_register_launch), 16 x rows a warp.
constexpr bool fpx_small_m_may_tile(int M) { return M > 8 && M <= 16; }
// Whether an automatic launch at such an M takes the tiled kernel: on weights whose N is at
// least 3.5 K and whose fpx_tiled_launch pick fills its waves to >= 80 % (fpx_launch.cpp
// has the sweep).
bool fpx_tiled_at_small_m(int64_t N, int64_t K, int M, const FpxClusterBlocks& resident);
}  // namespace gemlite
