#pragma once
// s7 / s7gG: 1:2 structured sparsity with 7-bit codes, the case study of seed 000.
// Packed-checkpoint format v1.
//
// K is split into pairs 32 apart: pair p covers k0 = 64*(p / 32) + p % 32 and k1 = k0 + 32.
// Of each pair the element of larger magnitude is kept (ties keep k0); the other one
// dequantizes to exactly 0. Pair p is one byte: value7 | first_kept << 7, where value7 is
// the kept element's 7-bit asymmetric code and bit 7 set means k0 is the kept one.
//
// "qweight" [N, Kw] I32: the pair bytes packed exactly as q8 codes (kernels/qn), so
//   word `lane` of tile t holds byte j (j = 0..3, shift 24 - 8j) of the pair with
//       k0 = t*256 + 2j*32 + lane,   k1 = k0 + 32
//   and a warp's 32 lanes read 32 consecutive words covering 256 consecutive K elements.
//   Kw = ceil(K / 256) * 32; bytes of pairs with k0 >= K are 0 (readers ignore k >= K).
// "scales", "zeros" [N, n_groups] F16, n_groups = ceil(K / G), G = 64 or 128 (s7 = s7g128):
//   kept w[n, k] = (value7 - zeros[n, k / G]) * scales[n, k / G], min/max taken over the
//   kept elements of the group. G is a multiple of 64 so both elements of a pair share it.
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"

namespace gemlite {

int64_t s7_words_per_row(int64_t K);  // Kw

std::vector<PartSpec> s7_parts(const WeightFormat& format, int64_t N, int64_t K);
// Fills the parts of `out` (allocated from s7_parts) from w.
void s7_quantize(const float* w,  // [N, K]
                 PackedWeight* out);
RowDecoder s7_row_decoder(const PackedWeight& w);

}  // namespace gemlite
