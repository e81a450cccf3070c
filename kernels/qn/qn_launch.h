#pragma once
// How gemv_qn and gemm_qn lay out their launches: pure functions of the shape and the
// device's counts, apart from the kernels (kernels/qn/gemv_qn_kernel.cuh, gemm_qn_tiled.cuh)
// so that the rules -- measured on the H100, their numbers in qn_launch.cpp -- are
// unit-tested on the CPU against those measurements (tests/cpu/test_launch_rules.cpp).
#include <array>
#include <cstdint>
#include <functional>

namespace gemlite {

// Warps splitting K in each block of 16 rows (the automatic choice): `blocks` = ceil(N /
// 16) blocks on `sms` SMs, each holding resident_blocks(warps) blocks of that many warps
// (on the H100 16 / warps: the kernel's 128 registers a thread, while the scale slab fits);
// sixteen_rows: the launch runs gemv_qn's 16-row kernel (M > kGemvMaxM); x_staged: its
// 8-row kernel at M = 1 with x staged in shared memory (gemv_qn_stages_x).
int qn_warps_per_block(int64_t blocks, int sms, bool sixteen_rows, bool x_staged,
                       const std::function<int(int warps)>& resident_blocks);

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
// Whether 8 warps may take 128 x rows where qn_tiled_rows_x gives them fewer: 5 to 10
// blocks a tile (3..6 bits, s7), in 2 or 3 stages.
constexpr bool qn_tiled_wide_fits(int blocks_per_tile) { return blocks_per_tile >= 5 && blocks_per_tile <= 10; }

// gemm_qn's tiled kernel (kernels/qn/gemm_qn_tiled.cuh): a block shape -- row blocks of W
// a block (8 or 16, one a warp) and x rows -- and blocks of a cluster splitting K (1, 2, 4
// or 8). The shapes: 8 warps with qn_tiled_rows_x(E, 8) x rows, 16 warps with
// qn_tiled_rows_x(E, 16) (where qn_tiled_16_warps_fit), 8 warps with 128 x rows (where
// qn_tiled_wide_fits).
struct QnTiledLaunch {
  int warps;
  int rows_x;
  int splits;
};
enum QnTiledShape { kQnTiled8Warps, kQnTiled16Warps, kQnTiledWide, kQnTiledShapes };
// A shape's warps and x rows at `blocks_per_tile`, and whether it exists there.
struct QnTiledShapeOf {
  int warps, rows_x;
  bool exists;
};
QnTiledShapeOf qn_tiled_shape(QnTiledShape shape, int blocks_per_tile);
// The device's resident blocks (one an SM) in clusters of 1, 2, 4 and 8, per shape (zeros
// for a shape that does not exist at this E).
struct QnTiledResident {
  std::array<int, 4> of[kQnTiledShapes];
};
// For M x rows, ceil(N / 16) row blocks, `tiles` qN tiles of 32 * blocks_per_tile k a row.
// warps, rows_x and splits > 0 restrict the choice to what they name; where no shape of
// this width matches them, all three fields are 0.
QnTiledLaunch qn_tiled_launch(int M, int64_t row_blocks, int64_t tiles, int blocks_per_tile,
                              const QnTiledResident& resident, int warps = 0, int rows_x = 0, int splits = 0);

}  // namespace gemlite
