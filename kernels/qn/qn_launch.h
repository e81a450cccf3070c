#pragma once
// How gemv_qn lays out its launch: a pure function of the grid and the device's counts,
// apart from the kernel (kernels/qn/gemv_qn_kernel.cuh) so that the rule -- measured on the H100,
// its numbers in qn_launch.cpp -- is unit-tested on the CPU against those measurements
// (tests/cpu/test_launch_rules.cpp).
#include <array>
#include <cstdint>
#include <functional>

namespace gemlite {

// Warps splitting K in each block of 16 rows (the automatic choice): `blocks` = ceil(N /
// 16) blocks on `sms` SMs, each holding resident_blocks(warps) blocks of that many warps
// (on the H100 16 / warps: the kernel's 128 registers a thread, while the scale slab fits).
int qn_warps_per_block(int64_t blocks, int sms, const std::function<int(int warps)>& resident_blocks);

// x rows a block of gemm_qn's tiled kernel takes with `warps` warps at tiles of
// `blocks_per_tile` 32-k blocks (E: 32 / bits, s7 8; the top of kernels/qn/gemm_qn_tiled.cuh
// says why); 16 warps (128 registers a thread) take at most 64.
#ifdef __CUDACC__
__host__ __device__
#endif
constexpr int qn_tiled_rows_x(int blocks_per_tile, int warps) {
  return blocks_per_tile <= 4 && warps <= 8 ? 128 : blocks_per_tile <= 8 ? 64 : 32;
}
// Whether blocks of 16 row blocks fit three stages (up to 10 blocks a tile, 3 bits; at 2
// bits a stage of 16 row blocks takes 80 KB).
constexpr bool qn_tiled_16_warps_fit(int blocks_per_tile) { return blocks_per_tile <= 10; }

// gemm_qn's tiled kernel (kernels/qn/gemm_qn_tiled.cuh): row blocks of W a block (8 or
// 16, one a warp) and blocks of a cluster splitting K (1, 2, 4 or 8).
struct QnTiledLaunch {
  int warps;
  int splits;
};
// The device's resident blocks (one an SM) in clusters of 1, 2, 4 and 8, for each block shape.
struct QnTiledResident {
  std::array<int, 4> of_8_warps, of_16_warps;
};
// For M x rows, ceil(N / 16) row blocks, `tiles` qN tiles of 32 * blocks_per_tile k a row
// (16 warps where qn_tiled_16_warps_fit); x rows a block: qn_tiled_rows_x. warps / splits
// > 0 are kept as given (the other chosen for them).
QnTiledLaunch qn_tiled_launch(int M, int64_t row_blocks, int64_t tiles, int blocks_per_tile,
                              const QnTiledResident& resident, int warps = 0, int splits = 0);

}  // namespace gemlite
