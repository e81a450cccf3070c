#pragma once
// Int8 activations for the qN GEMV (GemvQnConfig::int8_activations): the quantization
// rule the kernel applies to each activation row, and the CPU reference of the product.
//
// Rule (dynamic, per activation row = token): inv = 127 / max|x| computed in fp32 (IEEE
// division), then for fp16 activations capped at 65504 and rounded to fp16 (the kernel
// multiplies in fp16), for bf16 kept in fp32 (capped at 1e38); xq = round(x * inv) with
// ties to even, in [-127, 127]; the row's scale is 1 / inv (fp32), and 0 for a row of
// zeros (inv = 0, every xq = 0).
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"
#include "runtime/dtype.h"

namespace gemlite {

struct Int8ActivationRow {
  float inv = 0;    // what x is multiplied by
  float scale = 0;  // 1 / inv: x ≈ scale * xq
  std::vector<int8_t> q;  // [K]
};

// x [K] holds values of the activation type `act` (F16 or BF16).
Int8ActivationRow quantize_activation_row(const float* x, int64_t K, DType act);

// What gemv_qn computes, in float64, with s and b = -z s rounded to `act` as the GPU stores
// them (upload_qn_weight): y [M, N] = Σ_g (s Σ_{k in g} q x + b Σ_{k in g} x) (+ bias).
// With int8_activations x is first quantized by the rule above, x = scale_m xq, and the
// sums over a group are the kernel's exact integers; magnitude [M, N] (may be null) = the
// same with every term's absolute value: the scale of the kernel's fp32 rounding. Without,
// it is the product the int8 variant approximates (the fp16 kernel also rounds each
// weight). W must be a qN weight.
void linear_qn_device_reference(const PackedWeight& w, DType act, bool int8_activations, const float* x, int64_t M,
                                double* y, double* magnitude);

}  // namespace gemlite
