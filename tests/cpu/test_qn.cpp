// qN / qNgG: warp-strided packing, quantization and its error bound, checked against the
// layout as documented (tests/cpu/weight_layout_oracle.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/packed_weight.h"
#include "kernels/qn/qn_format.h"
#include "tests/cpu/weight_layout_oracle.h"

namespace gemlite {
namespace {

const int64_t kAwkwardK[] = {1, 31, 33, 100, 257, 1000, 4100};
const int64_t kAwkwardN[] = {1, 3, 17};
const int kGroups[] = {0, 32, 64, 128};  // 0 = per output channel

WeightFormat qn(int bits, int group) {
  return WeightFormat::parse("q" + std::to_string(bits) + (group ? "g" + std::to_string(group) : ""));
}

TEST(QnLayout, CodesPerWordAndWordsPerRow) {
  const int expected_codes[] = {0, 32, 16, 10, 8, 6, 5, 4, 4};
  for (int bits = 1; bits <= 8; ++bits) EXPECT_EQ(qn_codes_per_word(bits), expected_codes[bits]) << bits;
  EXPECT_EQ(qn_words_per_row(1, 4), 32);
  EXPECT_EQ(qn_words_per_row(256, 4), 32);   // one tile of 32 words * 8 codes
  EXPECT_EQ(qn_words_per_row(257, 4), 64);
  EXPECT_EQ(qn_words_per_row(320, 3), 32);   // 10 codes per word
  EXPECT_EQ(qn_words_per_row(321, 3), 64);
  EXPECT_EQ(qn_words_per_row(4096, 1), 128);
}

TEST(QnLayout, RowPackingRoundTripsAndPutsEachCodeWhereTheLayoutSays) {
  std::mt19937 rng(1);
  for (int bits = 1; bits <= 8; ++bits) {
    const int codes_per_word = 32 / bits;
    for (int64_t K : kAwkwardK) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " K " + std::to_string(K));
      std::vector<uint8_t> codes(K);
      for (auto& c : codes) c = uint8_t(rng() % (1u << bits));
      const int64_t Kw = (K + 32 * codes_per_word - 1) / (32 * codes_per_word) * 32;
      ASSERT_EQ(qn_words_per_row(K, bits), Kw);
      std::vector<int32_t> words(Kw, -1);  // the packer must overwrite every word
      qn_pack_row(codes.data(), K, bits, words.data());

      std::vector<uint8_t> unpacked(K);
      qn_unpack_row(words.data(), K, bits, unpacked.data());
      EXPECT_EQ(unpacked, codes);
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(oracle::qn_code(words.data(), bits, k), codes[k]) << k;
      for (int64_t k = K; k < Kw * codes_per_word; ++k)
        ASSERT_EQ(oracle::qn_code(words.data(), bits, k), 0u) << "padding code " << k;
      const uint32_t unused_low_bits = (1u << (32 - codes_per_word * bits)) - 1;  // 0 when bits divide 32
      for (int32_t word : words) ASSERT_EQ(uint32_t(word) & unused_low_bits, 0u);
    }
  }
}

TEST(QnLayout, FirstCodeSitsInTheTopBits) {
  // Hand-made: 4-bit codes 1, 2, 3 at k = 0, 32, 64 all land in word 0 as 0x123_____.
  std::vector<uint8_t> codes(100, 0);
  codes[0] = 1, codes[32] = 2, codes[64] = 3, codes[1] = 0xf;
  std::vector<int32_t> words(qn_words_per_row(100, 4));
  qn_pack_row(codes.data(), 100, 4, words.data());
  EXPECT_EQ(uint32_t(words[0]), 0x12300000u);
  EXPECT_EQ(uint32_t(words[1]), 0xf0000000u);
}

// Weights built as (q - z) / 16 with every group holding codes 0 and 2^bits - 1, so min/max
// quantization must find scale 1/16 and zero z exactly and give back the same codes.
TEST(QnQuantize, RecoversRepresentableWeightsExactlyForEveryShape) {
  std::mt19937 rng(2);
  for (int bits = 1; bits <= 8; ++bits) {
    const int max_code = (1 << bits) - 1;
    for (int group : kGroups) {
      for (int64_t K : kAwkwardK) {
        for (int64_t N : kAwkwardN) {
          SCOPED_TRACE(qn(bits, group).name() + " N " + std::to_string(N) + " K " + std::to_string(K));
          const int64_t G = group ? group : K, n_groups = (K + G - 1) / G;
          std::vector<int> codes(N * K);
          std::vector<float> w(N * K);
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t g = 0; g < n_groups; ++g) {
              const int64_t begin = g * G, end = std::min(K, begin + G);
              const int zero = int(rng() % (max_code + 1));
              for (int64_t k = begin; k < end; ++k) codes[n * K + k] = int(rng() % (max_code + 1));
              if (end - begin >= 2) codes[n * K + begin] = 0, codes[n * K + end - 1] = max_code;
              for (int64_t k = begin; k < end; ++k) w[n * K + k] = float(codes[n * K + k] - zero) / 16;
            }
          }
          const PackedWeight packed = quantize_weight(w.data(), N, K, qn(bits, group));
          const int64_t Kw = (K + 32 * (32 / bits) - 1) / (32 * (32 / bits)) * 32;
          ASSERT_EQ(packed.part("qweight").shape, (std::vector<int64_t>{N, Kw}));
          ASSERT_EQ(packed.part("scales").shape, (std::vector<int64_t>{N, n_groups}));
          ASSERT_EQ(packed.part("zeros").shape, (std::vector<int64_t>{N, n_groups}));

          const std::vector<double> dequantized = oracle::dequantize(packed);
          for (int64_t i = 0; i < N * K; ++i) ASSERT_EQ(dequantized[i], w[i]) << "element " << i;
          for (int64_t n = 0; n < N; ++n) {
            const int32_t* row_words = packed.part("qweight").as<int32_t>() + n * Kw;
            for (int64_t k = 0; k < K; ++k) {
              const int64_t group_begin = k / G * G;
              if (std::min(K, group_begin + G) - group_begin < 2) continue;  // a 1-element group is a constant
              ASSERT_EQ(int(oracle::qn_code(row_words, bits, k)), codes[n * K + k]) << n << ", " << k;
            }
          }
        }
      }
    }
  }
}

// Rows of different magnitudes and offsets (all-positive rows make large zero points).
std::vector<float> varied_rows(int64_t N, int64_t K, std::mt19937& rng) {
  const float offsets[] = {0, 0, 0, 5, -2};
  const float amplitudes[] = {0.05f, 1, 30, 1, 0.1f};
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> w(N * K);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w[n * K + k] = offsets[n % 5] + amplitudes[n % 5] * uniform(rng);
  return w;
}

TEST(QnQuantize, ErrorIsAtMostHalfAStepPlusFp16Rounding) {
  std::mt19937 rng(3);
  const int64_t N = 10;
  for (int bits = 1; bits <= 8; ++bits) {
    for (int group : kGroups) {
      for (int64_t K : {33, 1000, 4100}) {
        SCOPED_TRACE(qn(bits, group).name() + " K " + std::to_string(K));
        const std::vector<float> w = varied_rows(N, K, rng);
        const PackedWeight packed = quantize_weight(w.data(), N, K, qn(bits, group));
        const std::vector<double> dequantized = oracle::dequantize(packed);
        const int64_t G = group ? group : K, n_groups = (K + G - 1) / G;
        const uint16_t* scales = packed.part("scales").as<uint16_t>();  // [N, n_groups]
        const int64_t Kw = packed.part("qweight").shape[1];
        std::vector<float> row(K);
        for (int64_t n = 0; n < N; ++n) {
          std::vector<double> group_absmax(n_groups, 0.0);
          for (int64_t k = 0; k < K; ++k)
            group_absmax[k / G] = std::max(group_absmax[k / G], std::abs(double(w[n * K + k])));
          dequantize_row(packed, n, row.data());
          for (int64_t k = 0; k < K; ++k) {
            const double scale = half_to_float(scales[n * n_groups + k / G]);
            // fp16 scale and zero each carry a relative error of 2^-11, which moves a
            // dequantized value by at most ~3 * 2^-11 of the group's magnitude.
            const double bound = scale / 2 + group_absmax[k / G] * std::ldexp(1.0, -9);
            const double v = dequantized[n * K + k];
            ASSERT_LE(std::abs(w[n * K + k] - v), bound) << n << ", " << k;
            // Away from the clamped ends the code is the nearest one for the stored fp16
            // scale and zero: codes were chosen after rounding them.
            const uint32_t code = oracle::qn_code(packed.part("qweight").as<int32_t>() + n * Kw, bits, k);
            if (code > 0 && code < (1u << bits) - 1) {
              ASSERT_LE(std::abs(w[n * K + k] - v), scale * (0.5 + 1e-4)) << n << ", " << k;
            }
            // The library's own decoder agrees with the documented layout.
            ASSERT_NEAR(row[k], v, 1e-6 * std::abs(v) + 1e-12) << n << ", " << k;
          }
        }
      }
    }
  }
}

TEST(QnQuantize, ConstantRowsAndGroupsDequantizeWithinFp16Rounding) {
  const int64_t K = 200;
  for (int bits : {1, 2, 4, 8}) {
    for (int group : kGroups) {
      SCOPED_TRACE(qn(bits, group).name());
      // Rows: all zero, all 0.3, all -7.25, all 1e-3, one whose first 128 elements are 1.5
      // (whole constant groups for every group size) followed by a ramp, and a nearly
      // constant one, 1 + 1e-6 k: a spread so small against its magnitude that -lo / scale
      // overflows fp16 (fit_group's second fallback; without it the zero is inf).
      std::vector<float> w(6 * K);
      for (int64_t k = 0; k < K; ++k) {
        w[0 * K + k] = 0;
        w[1 * K + k] = 0.3f;
        w[2 * K + k] = -7.25f;
        w[3 * K + k] = 1e-3f;
        w[4 * K + k] = k < 128 ? 1.5f : float(k) / K;
        w[5 * K + k] = 1.0f + 1e-6f * float(k);
      }
      const PackedWeight packed = quantize_weight(w.data(), 6, K, qn(bits, group));
      const std::vector<double> dequantized = oracle::dequantize(packed);
      for (int64_t k = 0; k < K; ++k) {
        EXPECT_EQ(dequantized[0 * K + k], 0.0);
        EXPECT_NEAR(dequantized[1 * K + k], 0.3, 0.3 * std::ldexp(1.0, -11));
        EXPECT_EQ(dequantized[2 * K + k], -7.25);  // representable in fp16
        EXPECT_NEAR(dequantized[3 * K + k], 1e-3, 1e-3 * std::ldexp(1.0, -11));
        if (group && k < 128) {
          EXPECT_EQ(dequantized[4 * K + k], 1.5);
        }
        // Within half the row's spread (2e-4) and fp16's rounding of ~1 (2^-11) of the input.
        EXPECT_NEAR(dequantized[5 * K + k], w[5 * K + k], 1e-4 + std::ldexp(1.0, -11)) << k;
      }
      const uint16_t* zeros = packed.part("zeros").as<uint16_t>();  // [6, n_groups]
      const int64_t n_groups = packed.part("zeros").shape[1];
      for (int64_t g = 0; g < n_groups; ++g)
        EXPECT_TRUE(std::isfinite(half_to_float(zeros[5 * n_groups + g]))) << "zero of group " << g;
    }
  }
}

TEST(QnQuantize, PerChannelHasOneGroup) {
  std::mt19937 rng(4);
  const std::vector<float> w = varied_rows(3, 4100, rng);
  const PackedWeight packed = quantize_weight(w.data(), 3, 4100, qn(4, 0));
  EXPECT_EQ(packed.part("scales").shape, (std::vector<int64_t>{3, 1}));
  // The one group spans the row: scale = (max - min) / 15, rounded to fp16.
  for (int64_t n = 0; n < 3; ++n) {
    const auto [lo, hi] = std::minmax_element(w.begin() + n * 4100, w.begin() + (n + 1) * 4100);
    EXPECT_EQ(half_to_float(packed.part("scales").as<uint16_t>()[n]), round_to_half((*hi - *lo) / 15));
  }
}

}  // namespace
}  // namespace gemlite
