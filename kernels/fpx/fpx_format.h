#pragma once
// fp6 (e3m2) and fp5 (e2m2): the floating-point codes of Quant-LLM (seed 003), one fp16
// scale per output row. Packed-checkpoint format v2 (v1 stored one code per byte).
//
// A code has 1 + ebits + mbits bits: sign (top bit) | exponent | mantissa. bias =
// 2^(ebits-1) - 1. There is no inf or NaN: every exponent code is finite, so e3m2 reaches
// 28 and e2m2 reaches 7. An exponent field of 0 is subnormal:
//   E > 0: (1 + M / 2^mbits) * 2^(E - bias)      E = 0: (M / 2^mbits) * 2^(1 - bias)
//
// "scales" [N] F16 = absmax(row) / max_finite (a zero row gets scale 1 and codes 0):
//   w[n, k] = decode(code[n, k]) * scales[n].
// "packed" [ceil(N / 16), KT * 256 * bits] U8, KT = ceil(K / 128): the codes pre-packed
//   into the order the gemm_fpx kernels read them (bits / 8 bytes per weight).
//   Row block rb holds rows 16 rb .. 16 rb + 15, as KT tiles of 128 k (t = 0 .. KT-1),
//   each 256 * bits bytes; rows >= N and k >= K are code 0.
//   Inside a tile, the code of row r (0..15) and column kk (0..127):
//     s = kk / 16 (the mma k-step), tig = kk % 16 / 4, e = kk % 4, gid = r % 8,
//     lane = 4 gid + tig, h = e / 2, byte = 2 (e % 2) + (r < 8 ? 1 : 0).
//   The code's bits are cut, from the top, into planes of 4, 2 and 1 bits (greedy:
//   fp6 = 4 + 2, fp5 = 4 + 1, 8 bits = 4 + 4, 3 bits = 2 + 1). Plane j (width w, the
//   bits below the first `off` bits of the code) fills tile bytes [256 off, 256 (off + w)):
//   lane's 8 w bytes sit in chunks of c = min(16, 8 w) bytes, chunk i of the lane at
//   plane + i * 32 c + lane * c; as 32-bit little-endian words, word wi = s / (4 / w)
//   holds the field at u = (s % (4 / w)) * 2 + h with its top bit at 8 byte + 7 - u w
//   (most significant bit first).
//   So one lane's 16-byte loads give exactly the A fragments of its mma k-steps: per
//   k-step s the 4-bit plane word has its 8 codes (rows gid and gid + 8, k = 16 s + 4 tig +
//   0..3) as the top nibbles of bytes 3 2 1 0 (word) and, shifted by 4, the other four.
#include <cstdint>
#include <vector>

#include "kernels/packed_weight.h"

namespace gemlite {

constexpr int kFpxTileRows = 16;  // the m of the mma: rows of W per row block
constexpr int kFpxTileK = 128;    // columns of W per tile: 8 mma k-steps

// Any ebits >= 1, mbits >= 0 with 1 + ebits + mbits <= 8.
float fpx_decode(uint8_t code, int ebits, int mbits);
// The nearest representable value's code; ties go to the even code, magnitudes beyond
// the largest finite value saturate, and everything that rounds to zero gives code 0
// (never the negative zero).
uint8_t fpx_encode(float x, int ebits, int mbits);
float fpx_max_finite(int ebits, int mbits);

// The plane widths of a `bits`-bit code, from the top bits down (fp6: {4, 2}).
std::vector<int> fpx_plane_widths(int bits);
int64_t fpx_k_tiles(int64_t K);            // KT = ceil(K / 128)
int64_t fpx_row_blocks(int64_t N);         // ceil(N / 16)
int64_t fpx_tile_bytes(int bits);          // 256 * bits

// codes [N, K] (one code per byte, low bits) -> packed [ceil(N/16), KT * 256 * bits],
// and the inverse for one row (out [K]).
void fpx_pack_codes(const uint8_t* codes, int64_t N, int64_t K, int bits, uint8_t* packed);
void fpx_unpack_row(const uint8_t* packed, int64_t n, int64_t K, int bits, uint8_t* out);

std::vector<PartSpec> fpx_parts(const WeightFormat& format, int64_t N, int64_t K);
// Fills the parts of `out` (allocated from fpx_parts) from w.
void fpx_quantize(const float* w,  // [N, K]
                  PackedWeight* out);
RowDecoder fpx_row_decoder(const PackedWeight& w);

}  // namespace gemlite
