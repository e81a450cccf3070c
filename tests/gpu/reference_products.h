#pragma once
// The float64 reference of the matmul tests: x · the decoded Wᵀ, with the scale of an fp32
// accumulation's error beside it. A .cpp of its own (host code, OpenMP over the rows of W),
// since the references of the wide-shape tests were most of the GPU suite's time.
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"

namespace gemlite {

// ref [M, N] = x [M, K] · decoded Wᵀ in float64 (without the weight's bias), s [M, N] =
// Σ_k |x_k w_k| per output.
void reference_products(const PackedWeight& packed, const std::vector<double>& x, int64_t M, std::vector<double>* ref,
                        std::vector<double>* s);
// The same with W's rows from `decode` (W [N, K]), e.g. the qN kernels' own weights
// (tests/gpu/qn_reference.h).
void reference_products(const RowDecoder& decode, int64_t N, int64_t K, const std::vector<double>& x, int64_t M,
                        std::vector<double>* ref, std::vector<double>* s);

}  // namespace gemlite
