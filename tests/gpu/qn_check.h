#pragma once
// The qN kernels' check against the CPU reference (tests/gpu/test_gemv_qn.cu has the
// tolerance and why): one launch on poisoned output, every element compared. Shared by the
// GEMV's tests and gemm_qn's (tests/gpu/test_gemm_qn.cu).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>

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
  double worst_ratio = 0;        // max |y - ref| / S2, what the tolerance bounds
  double worst_plain_ratio = 0;  // max |y - ref| / S, for the record
  int64_t failures = 0;
  std::string first_failure;
};

// launch(x, y): one kernel launch of y [M, N] = x [M, K] · Wᵀ on the test's stream.
using QnLaunch = std::function<void(const void* x, void* y)>;

// Runs `launch` once on poisoned output (0xFF bytes: NaN) and compares every element with
// linear_reference within tol * S2 (2^-9 fp16, 2^-7 bf16; qn_error_scales.h); x is N(0,
// 1), or uniform in [0.5, 1] with positive_x, placed x_offset_elements past an aligned
// allocation.
CheckResult launch_and_compare(const PackedWeight& packed, DType act, int64_t M, std::mt19937_64& rng,
                               cudaStream_t stream, const QnLaunch& launch, int x_offset_elements = 0,
                               bool positive_x = false);

}  // namespace gemlite
