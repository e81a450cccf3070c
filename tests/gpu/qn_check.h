#pragma once
// The qN and s7 kernels' check against their reference (tests/gpu/qn_reference.h: the
// kernel's own weights in float64, the bound of an fp32 accumulation and one rounding):
// one launch on poisoned output, every element compared. Shared by the GEMV's tests, the
// s7 GEMV's and gemm_qn's.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/packed_weight.h"
#include "kernels/weight_format.h"
#include "runtime/dtype.h"

namespace gemlite {

inline WeightFormat qn_format(int bits, int group) {  // qN at `bits`, group 0 = per channel
  WeightFormat f;
  f.kind = FormatKind::QN;
  f.bits = bits;
  f.group = group;
  return f;
}

struct CheckResult {
  double worst_ratio = 0;  // max |y - ref| / qn_tolerance: <= 1 passes
  int64_t failures = 0;
  std::string first_failure;
};

// x [M, K] in the activation type: its bits, and their values.
struct Activations {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

// y [M, N] (activation-type bits) against x · Wᵀ (+ the weight's bias) with W as the kernel
// prepared for `act` forms it, within qn_tolerance; a non-finite y fails.
CheckResult compare_with_kernel_reference(const PackedWeight& packed, DType act, const std::vector<float>& x, int64_t M,
                                          const std::vector<uint16_t>& y);

// launch(x, y): one kernel launch of y [M, N] = x [M, K] · Wᵀ on the test's stream.
using QnLaunch = std::function<void(const void* x, void* y)>;

// Runs `launch` once on poisoned output (0xFF bytes: NaN) with x placed x_offset_elements
// past an aligned allocation, and compares every element (compare_with_kernel_reference).
CheckResult launch_and_compare(const PackedWeight& packed, DType act, const Activations& x, int64_t M,
                               cudaStream_t stream, const QnLaunch& launch, int x_offset_elements = 0);
// The same on fresh x: N(0, 1), or uniform in [0.5, 1] with positive_x.
CheckResult launch_and_compare(const PackedWeight& packed, DType act, int64_t M, std::mt19937_64& rng,
                               cudaStream_t stream, const QnLaunch& launch, int x_offset_elements = 0,
                               bool positive_x = false);

// Every group of W by itself: launches of M rows of x where row m of launch l is N(0, 1) on
// group l * M + m (the last group past the end) and 0 elsewhere, each checked as
// launch_and_compare does. Where S covers one group, the bound is a small share of y, so a
// group dequantized with another's scale fails it even at long K. The worst ratio of all
// launches, their failures summed, the first failure's text.
CheckResult check_every_group(const PackedWeight& packed, DType act, int64_t M, std::mt19937_64& rng,
                              cudaStream_t stream, const QnLaunch& launch);

}  // namespace gemlite
