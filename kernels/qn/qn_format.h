#pragma once
// qN / qNgG: N-bit (1..8) asymmetric codes packed into warp-strided int32 words, the
// Gemlite layout (seed 000). Packed-checkpoint format v1.
//
// "qweight" [N, Kw] I32, one row per output feature:
//   E = floor(32 / bits) codes per word (bits 3 -> 10, 5 -> 6, 6 -> 5, 7 -> 4); the low
//   32 - E*bits bits of a word are zero. A tile is 32 consecutive words covering 32*E
//   consecutive K elements. Word `lane` (0..31) of tile t holds, for j = 0..E-1,
//       the code of k = t*32*E + j*32 + lane   at bit shift 32 - bits*(j+1)
//   (first code in the top bits). A warp's 32 lanes thus load 32 consecutive words
//   (coalesced), and lane reads x at lane + 32*j within the tile.
//   Kw = ceil(K / (32*E)) * 32; codes for k >= K are 0 and readers ignore them.
// "scales", "zeros" [N, n_groups] F16, n_groups = ceil(K / G) (G = K for per-channel qN):
//   w[n, k] = (q[n, k] - zeros[n, k / G]) * scales[n, k / G].
// G is a multiple of 32, so the 32 codes at one shift of one tile share a group.
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"

namespace gemlite {

constexpr int kWarpLanes = 32;  // words per tile: one per lane of a warp

int qn_codes_per_word(int bits);                 // E
int64_t qn_words_per_row(int64_t K, int bits);   // Kw

// Packs one row of codes (each < 2^bits) into its words; padding codes are 0.
void qn_pack_row(const uint8_t* codes,  // [K]
                 int64_t K, int bits,
                 int32_t* words);       // [Kw]
void qn_unpack_row(const int32_t* words,  // [Kw]
                   int64_t K, int bits,
                   uint8_t* codes);       // [K]

// "qweight" [N, Kw] I32 + "scales"/"zeros" [N, n_groups] F16: the parts of qN and s7.
std::vector<PartSpec> grouped_int32_parts(int64_t N, int64_t words_per_row, int64_t n_groups);

std::vector<PartSpec> qn_parts(const WeightFormat& format, int64_t N, int64_t K);
// Fills the parts of `out` (allocated from qn_parts) from w.
void qn_quantize(const float* w,  // [N, K]
                 PackedWeight* out);
RowDecoder qn_row_decoder(const PackedWeight& w);

}  // namespace gemlite
