#pragma once
// The error scales that bound gemv_qn's rounding (tests/gpu/test_gemv_qn.cu has the
// tolerance). A .cpp of their own (host code, OpenMP over the rows of W): serial, they were
// most of the GEMV tests' time.
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"

namespace gemlite {

// Error scales of each output [M, N]: S = sum_k |x_k| |w_k|, and the scale of what the
// kernel rounds, S2 = sum_k |x_k| (|w_k| + |q_k s| + |z s|) (w = q s - z s with s and -z s
// stored in the activation type). w: a qNgG weight; x [M, K].
struct ErrorScales {
  std::vector<float> plain, dequant;
};
ErrorScales error_scales(const PackedWeight& w, const std::vector<float>& x, int64_t M);

}  // namespace gemlite
