#pragma once
// How gemv_qn lays out its launch: a pure function of the grid and the device's counts,
// apart from the kernel (kernels/qn/gemv_qn_kernel.cuh) so that the rule -- measured on the H100,
// its numbers in qn_launch.cpp -- is unit-tested on the CPU against those measurements
// (tests/cpu/test_launch_rules.cpp).
#include <cstdint>
#include <functional>

namespace gemlite {

// Warps splitting K in each block of 16 rows (the automatic choice): `blocks` = ceil(N /
// 16) blocks on `sms` SMs, each holding resident_blocks(warps) blocks of that many warps.
int qn_warps_per_block(int64_t blocks, int sms, const std::function<int(int warps)>& resident_blocks);

// resident_blocks for the usual case: 16 warps an SM (the kernel's 128 registers a thread).
inline int qn_resident_blocks(int warps) { return 16 / warps; }

}  // namespace gemlite
