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

// Blocks of a cluster splitting K for gemm_qn's tiled kernel (1, 2, 4 or 8): `blocks` =
// chunks of x rows x groups of 8 row blocks, `tiles` qN tiles of 32 * blocks_per_tile k a
// row, resident[i] the blocks (one an SM) the device runs at once in clusters of 2^i.
int qn_tiled_splits(int64_t blocks, int64_t tiles, int blocks_per_tile, const std::array<int, 4>& resident);

}  // namespace gemlite
