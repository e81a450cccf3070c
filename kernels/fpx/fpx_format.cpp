#include "kernels/fpx/fpx_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "kernels/parallel.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

int exponent_bias(int ebits) { return (1 << (ebits - 1)) - 1; }
uint32_t magnitude_mask(int ebits, int mbits) { return (1u << (ebits + mbits)) - 1; }
// 2^e for a normal float exponent (-126 <= e <= 127), without ldexp's library call.
float power_of_two(int e) {
  const uint32_t bits = uint32_t(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

float fpx_decode(uint8_t code, int ebits, int mbits) {
  const uint32_t mantissa = code & ((1u << mbits) - 1);
  const int exponent = int(code >> mbits & ((1u << ebits) - 1));
  const bool negative = code >> (ebits + mbits) & 1;
  // A subnormal has no implicit leading one but the binade of exponent 1.
  const uint32_t significand = exponent == 0 ? mantissa : mantissa | 1u << mbits;
  const float magnitude =
      std::ldexp(float(significand), std::max(exponent, 1) - exponent_bias(ebits) - mbits);
  return negative ? -magnitude : magnitude;
}

float fpx_max_finite(int ebits, int mbits) {
  return fpx_decode(uint8_t(magnitude_mask(ebits, mbits)), ebits, mbits);
}

uint8_t fpx_encode(float x, int ebits, int mbits) {
  const float magnitude = std::abs(x);
  if (!(magnitude > 0)) return 0;
  // Round to nearest, ties to the even code, saturating: subnormals are the multiples of
  // 2^(1 - bias - mbits) below 2^(1 - bias), where nearbyint (ties to even) rounds (up to
  // 2^mbits, the first normal code); above, fp32's significand rounded to mbits bits the
  // same way, whose carry moves into the exponent, is the code once fp32's exponent bias is
  // swapped for ours. Its even fp32 exponent is an even code: 127 - bias is even for
  // every ebits >= 2, and at ebits 1 the normal range holds one exponent. The same code as
  // the midpoint search it replaced for every one of the 2^32 floats in e3m2 and e2m2, and
  // on a stride through them plus the floats around every value and midpoint of ten more
  // formats (a one-off harness); that search was 39 % of a synthetic fp6 build's samples
  // (perf), and the build's CPU time fell by 30 % (tinyllama-1.1b, 2 threads).
  const int bias = exponent_bias(ebits);
  const uint32_t max_code = magnitude_mask(ebits, mbits);
  uint32_t code;
  if (magnitude < power_of_two(1 - bias)) {
    code = uint32_t(std::nearbyint(magnitude * power_of_two(bias + mbits - 1)));  // exact product
  } else {
    uint32_t bits;
    std::memcpy(&bits, &magnitude, 4);
    const int drop = 23 - mbits;
    bits += ((1u << drop >> 1) - 1) + (bits >> drop & 1);  // + half, less one unless odd: ties to even
    const int64_t rounded = int64_t(bits >> drop) - (int64_t(127 - bias) << mbits);
    code = uint32_t(std::min<int64_t>(rounded, max_code));
  }
  return code == 0 ? 0 : uint8_t(uint32_t(std::signbit(x)) << (ebits + mbits) | code);
}

std::vector<int> fpx_plane_widths(int bits) {
  std::vector<int> widths;
  for (int w = 4; bits > 0; w /= 2)
    while (bits >= w) widths.push_back(w), bits -= w;
  return widths;
}

int64_t fpx_k_tiles(int64_t K) { return (K + kFpxTileK - 1) / kFpxTileK; }
int64_t fpx_row_blocks(int64_t N) { return (N + kFpxTileRows - 1) / kFpxTileRows; }
int64_t fpx_tile_bytes(int bits) { return int64_t(kFpxTileRows) * kFpxTileK * bits / 8; }

namespace {

// Where the top bit of plane `plane`'s field for (r, kk) of a tile lies: the 32-bit word
// (byte offset in the tile) and the bit in it. See the layout in fpx_format.h.
struct FieldSlot {
  int64_t word_offset;
  int top_bit;
};
FieldSlot field_slot(int r, int kk, int width, int offset_bits) {
  const int s = kk / 16, tig = kk % 16 / 4, e = kk % 4, gid = r % 8;
  const int lane = 4 * gid + tig, h = e / 2, byte = 2 * (e % 2) + (r < 8 ? 1 : 0);
  const int steps_per_word = 4 / width;
  const int wi = s / steps_per_word, u = (s % steps_per_word) * 2 + h;
  const int chunk = std::min(16, 8 * width), words_per_chunk = chunk / 4;
  const int64_t plane = int64_t(256) * offset_bits;
  const int64_t word = plane + int64_t(wi / words_per_chunk) * 32 * chunk + lane * chunk + (wi % words_per_chunk) * 4;
  return {word, 8 * byte + 7 - u * width};
}

// Where each plane's field of each code lies in a tile, for every row r of a 16-row block:
// entry (r, kk, p) is the byte holding the field of plane p (most significant first) of
// (r, kk) and the shift that brings it down (a field never straddles a byte: field_slot).
// Built once per weight, so decoding a row costs one byte load, shift and mask per plane
// and weight (bit by bit it cost `bits` loads of two maps: for_each_code_of has numbers).
struct FpxFieldMap {
  int bits = 0;
  std::vector<int> widths;         // [planes]
  std::vector<uint16_t> byte_of;   // [16, 128, planes]
  std::vector<uint8_t> shift_of;   // [16, 128, planes]
};

FpxFieldMap make_field_map(int bits) {
  FpxFieldMap map;
  map.bits = bits;
  map.widths = fpx_plane_widths(bits);
  const size_t planes = map.widths.size();
  map.byte_of.resize(size_t(kFpxTileRows * kFpxTileK) * planes);
  map.shift_of.resize(map.byte_of.size());
  int offset = 0;
  for (size_t p = 0; p < planes; ++p) {
    const int width = map.widths[p];
    for (int r = 0; r < kFpxTileRows; ++r)
      for (int kk = 0; kk < kFpxTileK; ++kk) {
        const FieldSlot slot = field_slot(r, kk, width, offset);
        const int low_bit = slot.top_bit - (width - 1);  // the field: bits low_bit .. top_bit of one byte
        const size_t i = size_t(r * kFpxTileK + kk) * planes + p;
        map.byte_of[i] = uint16_t(slot.word_offset + low_bit / 8);
        map.shift_of[i] = uint8_t(low_bit % 8);
      }
    offset += width;
  }
  return map;
}

// Calls emit(k, code) for k = 0..K-1 of row n; PLANES > 0: the map's plane count, known
// at compile time (fp6 and fp5 have 2). The CPU backend on stories15m fp6, 2 cores
// (gemlite-bench --device cpu --synthetic stories15m -f fp6 -p 128 -n 32): bit by bit
// 1991 / 27 tok/s (pp128 / tg32), by fields 2426 / 45, by fields with 2 planes unrolled
// 3330 / 120. Packing each entry's byte and shift into one uint16_t lost (tg32 95).
template <int PLANES, typename Emit>
void for_each_code_of(const FpxFieldMap& map, const uint8_t* packed, int64_t n, int64_t K, Emit emit) {
  const int planes = PLANES > 0 ? PLANES : int(map.widths.size());
  const int64_t KT = fpx_k_tiles(K), tile_bytes = fpx_tile_bytes(map.bits);
  const int64_t rb = n / kFpxTileRows;
  const size_t row = size_t(n % kFpxTileRows) * kFpxTileK * planes;
  const uint16_t* byte_of = map.byte_of.data() + row;
  const uint8_t* shift_of = map.shift_of.data() + row;
  uint32_t masks[8];
  int widths[8];
  for (int p = 0; p < planes; ++p) widths[p] = map.widths[size_t(p)], masks[p] = (1u << widths[p]) - 1;
  for (int64_t t = 0; t < KT; ++t) {
    const uint8_t* tile = packed + (rb * KT + t) * tile_bytes;
    const int64_t end = std::min<int64_t>(kFpxTileK, K - t * kFpxTileK);
    for (int64_t kk = 0; kk < end; ++kk) {
      uint32_t code = 0;
      for (int p = 0; p < planes; ++p) {
        const size_t i = size_t(kk * planes + p);
        code = code << widths[p] | (uint32_t(tile[byte_of[i]]) >> shift_of[i] & masks[p]);
      }
      emit(t * kFpxTileK + kk, code);
    }
  }
}

template <typename Emit>
void for_each_code(const FpxFieldMap& map, const uint8_t* packed, int64_t n, int64_t K, Emit emit) {
  if (map.widths.size() == 2) return for_each_code_of<2>(map, packed, n, K, emit);
  for_each_code_of<0>(map, packed, n, K, emit);
}

}  // namespace

void fpx_pack_codes(const uint8_t* codes, int64_t N, int64_t K, int bits, uint8_t* packed) {
  const int64_t KT = fpx_k_tiles(K), tile_bytes = fpx_tile_bytes(bits), blocks = fpx_row_blocks(N);
  // By the decoder's map, a byte OR a field: bit by bit (field_slot per bit) it took 36 % of
  // building a synthetic stories110m fp6 (perf, one thread), more than drawing the weights.
  const FpxFieldMap map = make_field_map(bits);
  const int planes = int(map.widths.size());
#pragma omp parallel for schedule(static) if (N * K >= kMinParallelWork)
  for (int64_t rb = 0; rb < blocks; ++rb) {
    std::memset(packed + rb * KT * tile_bytes, 0, size_t(KT * tile_bytes));  // row block rb's tiles
    for (int r = 0; r < kFpxTileRows && rb * kFpxTileRows + r < N; ++r) {  // padding rows: code 0
      const uint8_t* row_codes = codes + (rb * kFpxTileRows + r) * K;
      const size_t row = size_t(r) * kFpxTileK * planes;
      for (int64_t t = 0; t < KT; ++t) {
        uint8_t* tile = packed + (rb * KT + t) * tile_bytes;
        const int64_t end = std::min<int64_t>(kFpxTileK, K - t * kFpxTileK);  // padding k: code 0
        for (int64_t kk = 0; kk < end; ++kk) {
          const uint32_t code = row_codes[t * kFpxTileK + kk];
          int below = bits;  // bits of the code under plane p's field
          for (int p = 0; p < planes; ++p) {
            const int width = map.widths[size_t(p)];
            below -= width;
            const size_t i = row + size_t(kk * planes + p);
            tile[map.byte_of[i]] |= uint8_t((code >> below & ((1u << width) - 1)) << map.shift_of[i]);
          }
        }
      }
    }
  }
}

void fpx_unpack_row(const uint8_t* packed, int64_t n, int64_t K, int bits, uint8_t* out) {
  for_each_code(make_field_map(bits), packed, n, K, [&](int64_t k, uint32_t code) { out[k] = uint8_t(code); });
}

std::vector<PartSpec> fpx_parts(const WeightFormat& format, int64_t N, int64_t K) {
  if (format.ebits < 1 || format.mbits < 0 || format.bits != 1 + format.ebits + format.mbits ||
      format.bits > 8)
    throw Error("format " + format.name() + ": fpx needs ebits >= 1 and 1 + ebits + mbits <= 8 bits");
  return {{"packed", DType::U8, {fpx_row_blocks(N), fpx_k_tiles(K) * fpx_tile_bytes(format.bits)}},
          {"scales", DType::F16, {N}}};
}

void fpx_quantize(const float* w, PackedWeight* out) {
  const int ebits = out->format.ebits, mbits = out->format.mbits;
  const int64_t N = out->rows, K = out->cols;
  const float max_finite = fpx_max_finite(ebits, mbits);
  // [N, K], every element written below: not zero-filled first (a serial pass over N K bytes).
  const std::unique_ptr<uint8_t[]> codes(new uint8_t[size_t(N * K)]);
  uint16_t* scales = out->parts.at("scales").mutable_as<uint16_t>();  // [N]
#pragma omp parallel for schedule(static) if (N * K >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = w + n * K;
    float absmax = 0;
    for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::abs(row[k]));
    // Rounded to fp16 before encoding, so codes are chosen for the scale a reader sees.
    // A row too small for an fp16 scale (or all zero) keeps scale 1 and encodes to ~0.
    float scale = round_to_half(absmax / max_finite);
    if (scale == 0) scale = 1;
    scales[n] = float_to_half(scale);
    for (int64_t k = 0; k < K; ++k) codes[size_t(n * K + k)] = fpx_encode(row[k] / scale, ebits, mbits);
  }
  fpx_pack_codes(codes.get(), N, K, out->format.bits, out->parts.at("packed").mutable_as<uint8_t>());
}

RowDecoder fpx_row_decoder(const PackedWeight& w) {
  const int ebits = w.format.ebits, mbits = w.format.mbits;
  const int64_t K = w.cols;
  const uint8_t* packed = w.part("packed").as<uint8_t>();    // [ceil(N/16), KT * 256 * bits]
  const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N]
  std::vector<float> values(256);
  for (int code = 0; code < 256; ++code) values[code] = fpx_decode(uint8_t(code), ebits, mbits);
  // Shared by the decoder's copies (the CPU backend calls it per row, per token).
  const auto map = std::make_shared<const FpxFieldMap>(make_field_map(w.format.bits));
  return [=](int64_t n, float* out) {
    const float scale = half_to_float(scales[n]);
    for_each_code(*map, packed, n, K, [&](int64_t k, uint32_t code) { out[k] = values[code] * scale; });
  };
}

}  // namespace gemlite
