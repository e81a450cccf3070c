// s7 / s7gG: 1:2 pair selection, position bit, exact zeros and the error on kept
// elements, checked against the layout as documented (tests/cpu/weight_layout_oracle.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/packed_weight.h"
#include "kernels/s7/s7_format.h"
#include "tests/cpu/weight_layout_oracle.h"

namespace gemlite {
namespace {

TEST(S7Layout, WordsPerRow) {
  EXPECT_EQ(s7_words_per_row(1), 32);
  EXPECT_EQ(s7_words_per_row(256), 32);  // 32 words * 4 pairs * 2 elements
  EXPECT_EQ(s7_words_per_row(257), 64);
  EXPECT_EQ(s7_words_per_row(4096), 512);
}

TEST(S7Layout, HandMadePairsLandInTheDocumentedBytes) {
  // K = 256, one tile. Pair (k, k + 32) for k = 0..31 is byte 0 (top) of word k, pair
  // (64 + k, 96 + k) is byte 1, and so on. Give word 5 a distinct story per byte.
  std::vector<float> w(256, 0.0f);
  w[5] = 1.0f, w[37] = 0.5f;      // byte 0: first kept
  w[69] = 0.25f, w[101] = -1.0f;  // byte 1: second kept (larger magnitude, negative)
  w[133] = -0.75f, w[165] = 0.75f;  // byte 2: a tie keeps the first
  w[197] = 0.0f, w[229] = 0.0f;   // byte 3: both zero, the first is kept
  const PackedWeight packed = quantize_weight(w.data(), 1, 256, WeightFormat::parse("s7g64"));
  const uint32_t word = uint32_t(packed.part("qweight").as<int32_t>()[5]);
  EXPECT_EQ(word >> 31 & 1, 1u);
  EXPECT_EQ(word >> 23 & 1, 0u);
  EXPECT_EQ(word >> 15 & 1, 1u);
  EXPECT_EQ(word >> 7 & 1, 1u);

  std::vector<float> row(256);
  dequantize_row(packed, 0, row.data());
  EXPECT_EQ(row[37], 0.0f);
  EXPECT_EQ(row[69], 0.0f);
  EXPECT_EQ(row[165], 0.0f);
  EXPECT_EQ(row[229], 0.0f);
  // Half a code step of each group's range over its kept elements ([0, 1], [-1, 0], [-0.75,
  // 0]: scale range / 127), plus fp16's rounding of scale and zero: a code one off fails.
  EXPECT_NEAR(row[5], 1.0f, 0.5 / 127 + 1e-4);
  EXPECT_NEAR(row[101], -1.0f, 0.5 / 127 + 1e-4);
  EXPECT_NEAR(row[133], -0.75f, 0.75 * 0.5 / 127 + 1e-4);
}

TEST(S7Quantize, KeepsTheLargerOfEachPairAndZeroesTheOther) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (const char* name : {"s7", "s7g64"}) {
    const WeightFormat format = WeightFormat::parse(name);
    for (int64_t K : {1, 31, 33, 100, 257, 1000, 4100}) {
      for (int64_t N : {1, 3}) {
        SCOPED_TRACE(std::string(name) + " N " + std::to_string(N) + " K " + std::to_string(K));
        std::vector<float> w(N * K);
        for (int64_t i = 0; i < N * K; ++i) w[i] = uniform(rng) + (i / K == 1 ? 5.0f : 0.0f);  // row 1 all positive: a large zero
        for (int64_t i = 0; i + 32 < K; i += 97) w[i + 32] = -w[i];  // some exact ties in row 0
        const PackedWeight packed = quantize_weight(w.data(), N, K, format);
        const int64_t Kw = (K + 255) / 256 * 32, G = format.group, n_groups = (K + G - 1) / G;
        ASSERT_EQ(packed.part("qweight").shape, (std::vector<int64_t>{N, Kw}));
        ASSERT_EQ(packed.part("scales").shape, (std::vector<int64_t>{N, n_groups}));
        ASSERT_EQ(packed.part("zeros").shape, (std::vector<int64_t>{N, n_groups}));

        const std::vector<double> dequantized = oracle::dequantize(packed);
        const uint16_t* scales = packed.part("scales").as<uint16_t>();  // [N, n_groups]
        std::vector<float> row(K);
        for (int64_t n = 0; n < N; ++n) {
          const float* w_row = w.data() + n * K;
          const int32_t* row_words = packed.part("qweight").as<int32_t>() + n * Kw;
          dequantize_row(packed, n, row.data());
          // The first element of each pair is k0 with k0 % 64 < 32; k0 + 32 may be padding.
          std::vector<double> kept_absmax(n_groups, 0.0);
          for (int64_t k0 = 0; k0 < K; ++k0) {
            if (k0 % 64 >= 32) continue;
            const float a = w_row[k0], b = k0 + 32 < K ? w_row[k0 + 32] : 0.0f;
            const float kept = std::abs(a) >= std::abs(b) ? a : b;
            kept_absmax[k0 / G] = std::max(kept_absmax[k0 / G], double(std::abs(kept)));
          }
          for (int64_t k0 = 0; k0 < K; ++k0) {
            if (k0 % 64 >= 32) continue;
            const int64_t k1 = k0 + 32;
            const float a = w_row[k0], b = k1 < K ? w_row[k1] : 0.0f;
            const bool first_kept = std::abs(a) >= std::abs(b);
            ASSERT_EQ(oracle::s7_slot(row_words, k0).byte >> 7, uint32_t(first_kept)) << n << ", " << k0;
            const int64_t kept_k = first_kept ? k0 : k1, dropped_k = first_kept ? k1 : k0;
            if (dropped_k < K) {
              ASSERT_EQ(row[dropped_k], 0.0f) << n << ", " << dropped_k;
              ASSERT_EQ(dequantized[n * K + dropped_k], 0.0) << n << ", " << dropped_k;
            }
            const double scale = half_to_float(scales[n * n_groups + k0 / G]);
            const double v = dequantized[n * K + kept_k];
            // Half a step, plus the fp16 rounding of scale and zero (see test_qn).
            ASSERT_LE(std::abs(w_row[kept_k] - v), scale / 2 + kept_absmax[k0 / G] * std::ldexp(1.0, -9))
                << n << ", " << kept_k;
            // Away from the clamped ends, the nearest code for the stored fp16 scale and zero.
            const uint32_t value7 = oracle::s7_slot(row_words, k0).byte & 0x7f;
            if (value7 > 0 && value7 < 127) {
              ASSERT_LE(std::abs(w_row[kept_k] - v), scale * (0.5 + 1e-4)) << n << ", " << kept_k;
            }
            ASSERT_NEAR(row[kept_k], v, 1e-6 * std::abs(v) + 1e-12) << n << ", " << kept_k;
          }
          for (int64_t k = K; k < Kw * 8; ++k) {  // pairs that start beyond K are zero bytes
            if (k % 64 < 32) {
              ASSERT_EQ(oracle::s7_slot(row_words, k).byte, 0u) << "padding " << k;
            }
          }
        }
      }
    }
  }
}

TEST(S7Quantize, GroupRangeComesFromKeptElementsOnly) {
  // K = 64, one group of 32 pairs: kept values spread over [1, 2]; the dropped partners
  // are -0.5, outside that range, and must not widen it.
  std::vector<float> w(64);
  for (int k = 0; k < 32; ++k) w[k] = 1.0f + float(k) / 31, w[k + 32] = -0.5f;
  const PackedWeight packed = quantize_weight(w.data(), 1, 64, WeightFormat::parse("s7g64"));
  const float scale = half_to_float(packed.part("scales").as<uint16_t>()[0]);
  const float zero = half_to_float(packed.part("zeros").as<uint16_t>()[0]);
  EXPECT_EQ(scale, round_to_half(1.0f / 127));
  EXPECT_EQ(zero, round_to_half(-1.0f / scale));
}

TEST(S7Quantize, ConstantRowDequantizesWithinFp16Rounding) {
  const std::vector<float> w(300, -0.3f);
  const PackedWeight packed = quantize_weight(w.data(), 1, 300, WeightFormat::parse("s7"));
  std::vector<float> row(300);
  dequantize_row(packed, 0, row.data());
  for (int64_t k = 0; k < 300; ++k) {
    if (k % 64 < 32) {
      EXPECT_NEAR(row[k], -0.3, 0.3 * std::ldexp(1.0, -11)) << k;  // ties keep the first
    } else {
      EXPECT_EQ(row[k], 0.0f) << k;
    }
  }
}

}  // namespace
}  // namespace gemlite
