#pragma once
// fp6 (e3m2) and fp5 (e2m2): the floating-point codes of Quant-LLM (seed 003), one fp16
// scale per output row. Packed-checkpoint format v1.
//
// A code has 1 + ebits + mbits bits: sign (top bit) | exponent | mantissa. bias =
// 2^(ebits-1) - 1. There is no inf or NaN: every exponent code is finite, so e3m2 reaches
// 28 and e2m2 reaches 7. An exponent field of 0 is subnormal:
//   E > 0: (1 + M / 2^mbits) * 2^(E - bias)      E = 0: (M / 2^mbits) * 2^(1 - bias)
//
// "codes"  [N, K] U8, one logical code per byte in the low bits. The GPU's pre-packed
//          bit segments will come with the GPU kernel, as a new format version.
// "scales" [N] F16 = absmax(row) / max_finite (a zero row gets scale 1 and codes 0):
//   w[n, k] = decode(codes[n, k]) * scales[n].
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"

namespace gemlite {

// Any ebits >= 1, mbits >= 0 with 1 + ebits + mbits <= 8.
float fpx_decode(uint8_t code, int ebits, int mbits);
// The nearest representable value's code; ties go to the even code, magnitudes beyond
// the largest finite value saturate, and everything that rounds to zero gives code 0
// (never the negative zero).
uint8_t fpx_encode(float x, int ebits, int mbits);
float fpx_max_finite(int ebits, int mbits);

std::vector<PartSpec> fpx_parts(const WeightFormat& format, int64_t N, int64_t K);
// Fills the parts of `out` (allocated from fpx_parts) from w.
void fpx_quantize(const float* w,  // [N, K]
                  PackedWeight* out);
RowDecoder fpx_row_decoder(const PackedWeight& w);

}  // namespace gemlite
