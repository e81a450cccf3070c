#pragma once
// An independent reading of packed-checkpoint format v2 for the format tests, written
// from the layout comments of kernels/qn/qn_format.h, kernels/s7/s7_format.h and
// kernels/fpx/fpx_format.h, not from the library's code: the tests hold the library to
// it. Values are computed in double.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/packed_weight.h"
#include "runtime/dtype.h"

namespace gemlite::oracle {

// qN: code k of a row sits in word (k / (32*E)) * 32 + k % 32 at shift
// 32 - bits * (j + 1), where j = (k % (32*E)) / 32 and E = floor(32 / bits).
inline uint32_t qn_code(const int32_t* row_words, int bits, int64_t k) {
  const int64_t codes_per_word = 32 / bits;
  const int64_t tile = k / (32 * codes_per_word);
  const int64_t j = k % (32 * codes_per_word) / 32;
  const int64_t lane = k % 32;
  const uint32_t word = uint32_t(row_words[tile * 32 + lane]);
  return word >> (32 - bits * (j + 1)) & ((1u << bits) - 1);
}

// s7: a tile of 32 words covers 256 elements as 8 runs of 32; runs 2j and 2j+1 are the
// first and second elements of the pairs in byte j (shift 24 - 8j) of the words.
struct S7Slot {
  uint32_t byte;      // value7 | first_kept << 7
  bool is_first;      // k is the pair's first element (k0)
};
inline S7Slot s7_slot(const int32_t* row_words, int64_t k) {
  const int64_t tile = k / 256, run = k % 256 / 32, lane = k % 32;
  const uint32_t word = uint32_t(row_words[tile * 32 + lane]);
  return {word >> (24 - 8 * (run / 2)) & 0xff, run % 2 == 0};
}

// fp6/fp5 "packed": the code of (n, k), read bit by bit as the layout comment of
// kernels/fpx/fpx_format.h describes it (tiles of 16 rows x 128 k, planes of 4/2/1 bits).
inline uint32_t fpx_code(const uint8_t* packed, int64_t K, int bits, int64_t n, int64_t k) {
  std::vector<int> widths;
  for (int left = bits, w = 4; left > 0; w /= 2)
    while (left >= w) widths.push_back(w), left -= w;
  const int64_t KT = (K + 127) / 128;
  const uint8_t* tile = packed + ((n / 16) * KT + k / 128) * 256 * bits;
  const int r = int(n % 16), kk = int(k % 128);
  const int s = kk / 16, tig = kk % 16 / 4, e = kk % 4, gid = r % 8;
  const int lane = 4 * gid + tig, h = e / 2, byte = 2 * (e % 2) + (r < 8 ? 1 : 0);
  uint32_t code = 0;
  int off = 0;
  for (int w : widths) {
    const int chunk = w >= 2 ? 16 : 8;
    const int wi = s / (4 / w), u = (s % (4 / w)) * 2 + h;
    const int chunk_index = wi * 4 / chunk, word_in_chunk = wi % (chunk / 4);
    const uint8_t* word = tile + 256 * off + chunk_index * 32 * chunk + lane * chunk + word_in_chunk * 4;
    const uint32_t value = uint32_t(word[0]) | uint32_t(word[1]) << 8 | uint32_t(word[2]) << 16 | uint32_t(word[3]) << 24;
    const int top = 8 * byte + 7 - u * w;
    code = code << w | (value >> (top - w + 1) & ((1u << w) - 1));
    off += w;
  }
  return code;
}

// The non-negative values of e3m2 (bias 3) and e2m2 (bias 1), by code, written out by hand.
inline const std::vector<double>& e3m2_values() {
  static const std::vector<double> values = {
      0, 0.0625, 0.125, 0.1875,      // subnormal: m/4 * 2^-2
      0.25, 0.3125, 0.375, 0.4375,   // 2^-2
      0.5, 0.625, 0.75, 0.875,       // 2^-1
      1, 1.25, 1.5, 1.75,            // 2^0
      2, 2.5, 3, 3.5,                // 2^1
      4, 5, 6, 7,                    // 2^2
      8, 10, 12, 14,                 // 2^3
      16, 20, 24, 28};               // 2^4, no inf/NaN
  return values;
}
inline const std::vector<double>& e2m2_values() {
  static const std::vector<double> values = {
      0, 0.25, 0.5, 0.75,  // subnormal: m/4 * 2^0
      1, 1.25, 1.5, 1.75,  // 2^0
      2, 2.5, 3, 3.5,      // 2^1
      4, 5, 6, 7};         // 2^2
  return values;
}
inline double fpx_value(uint32_t code, int ebits, int mbits) {
  const std::vector<double>* table = nullptr;
  if (ebits == 3 && mbits == 2) table = &e3m2_values();
  if (ebits == 2 && mbits == 2) table = &e2m2_values();
  if (!table) throw std::logic_error("oracle knows only e3m2 and e2m2");
  const uint32_t magnitude_bits = uint32_t(ebits + mbits);
  const double magnitude = (*table)[code & ((1u << magnitude_bits) - 1)];
  return code >> magnitude_bits & 1 ? -magnitude : magnitude;
}

// The whole weight [N, K], row-major, dequantized as the layout comments say.
inline std::vector<double> dequantize(const PackedWeight& w) {
  const int64_t N = w.rows, K = w.cols;
  std::vector<double> out(size_t(N * K));
  const WeightFormat& f = w.format;
  if (f.kind == FormatKind::Dense) {
    const std::vector<float> values = w.part("weight").to_float();
    for (size_t i = 0; i < out.size(); ++i) out[i] = values[i];
  } else if (f.kind == FormatKind::FPX) {
    const uint8_t* packed = w.part("packed").as<uint8_t>();
    const uint16_t* scales = w.part("scales").as<uint16_t>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        out[n * K + k] = fpx_value(fpx_code(packed, K, f.bits, n, k), f.ebits, f.mbits) * half_to_float(scales[n]);
  } else {  // qN and s7: words plus an fp16 scale and zero per group
    const HostTensor& qweight = w.part("qweight");
    const int64_t words_per_row = qweight.shape[1];
    const int64_t n_groups = w.part("scales").shape[1];
    const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N, n_groups]
    const uint16_t* zeros = w.part("zeros").as<uint16_t>();    // [N, n_groups]
    const int64_t G = f.group > 0 ? f.group : K;
    for (int64_t n = 0; n < N; ++n) {
      const int32_t* row_words = qweight.as<int32_t>() + n * words_per_row;
      for (int64_t k = 0; k < K; ++k) {
        const double scale = half_to_float(scales[n * n_groups + k / G]);
        const double zero = half_to_float(zeros[n * n_groups + k / G]);
        if (f.kind == FormatKind::QN) {
          out[n * K + k] = (qn_code(row_words, f.bits, k) - zero) * scale;
        } else {
          const S7Slot slot = s7_slot(row_words, k);
          const bool kept = bool(slot.byte >> 7) == slot.is_first;
          out[n * K + k] = kept ? (double(slot.byte & 0x7f) - zero) * scale : 0.0;
        }
      }
    }
  }
  return out;
}

}  // namespace gemlite::oracle
