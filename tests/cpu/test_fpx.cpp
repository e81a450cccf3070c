// fp6 (e3m2) / fp5 (e2m2) codes: decode against hand-written value tables, encode as
// round-to-nearest with ties to the even code, and the per-row scaled quantizer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/fpx/fpx_format.h"
#include "kernels/packed_weight.h"
#include "tests/cpu/weight_layout_oracle.h"

namespace gemlite {
namespace {

struct Codes {
  int ebits, mbits;
  const std::vector<double>& positive_values;  // by code, from the oracle's hand table
};
std::vector<Codes> fp6_and_fp5() { return {{3, 2, oracle::e3m2_values()}, {2, 2, oracle::e2m2_values()}}; }

TEST(FpxCodes, EveryCodeDecodesToTheHandWrittenValue) {
  for (const Codes& c : fp6_and_fp5()) {
    const uint32_t n_magnitudes = 1u << (c.ebits + c.mbits);
    ASSERT_EQ(c.positive_values.size(), n_magnitudes);
    for (uint32_t code = 0; code < 2 * n_magnitudes; ++code) {
      const double magnitude = c.positive_values[code % n_magnitudes];
      const double expected = code >= n_magnitudes ? -magnitude : magnitude;  // sign is the top bit
      EXPECT_EQ(fpx_decode(uint8_t(code), c.ebits, c.mbits), expected) << "e" << c.ebits << " code " << code;
    }
  }
  EXPECT_EQ(fpx_max_finite(3, 2), 28.0f);
  EXPECT_EQ(fpx_max_finite(2, 2), 7.0f);
}

TEST(FpxCodes, EncodeInvertsDecodeExceptNegativeZero) {
  for (const Codes& c : fp6_and_fp5()) {
    const uint32_t negative_zero = 1u << (c.ebits + c.mbits);
    for (uint32_t code = 0; code < 2 * negative_zero; ++code) {
      const uint8_t expected = code == negative_zero ? 0 : uint8_t(code);
      EXPECT_EQ(fpx_encode(fpx_decode(uint8_t(code), c.ebits, c.mbits), c.ebits, c.mbits), expected) << code;
    }
  }
}

TEST(FpxCodes, EncodePicksTheNearestValueAndSaturates) {
  std::mt19937 rng(6);
  for (const Codes& c : fp6_and_fp5()) {
    const double max_value = c.positive_values.back();
    std::uniform_real_distribution<float> uniform(float(-1.3 * max_value), float(1.3 * max_value));
    for (int i = 0; i < 20000; ++i) {
      const float x = i % 2 ? uniform(rng) : uniform(rng) / 64;  // half of them near the subnormals
      double nearest_distance = std::numeric_limits<double>::infinity();
      for (double v : c.positive_values) nearest_distance = std::min(nearest_distance, std::abs(std::abs(x) - v));
      const double decoded = oracle::fpx_value(fpx_encode(x, c.ebits, c.mbits), c.ebits, c.mbits);
      ASSERT_EQ(std::abs(double(x) - decoded), nearest_distance) << "x = " << x;
      if (decoded != 0) {
        ASSERT_EQ(decoded < 0, x < 0) << "x = " << x;
      }
    }
    EXPECT_EQ(oracle::fpx_value(fpx_encode(1e6f, c.ebits, c.mbits), c.ebits, c.mbits), max_value);
    EXPECT_EQ(oracle::fpx_value(fpx_encode(-1e6f, c.ebits, c.mbits), c.ebits, c.mbits), -max_value);
  }
}

TEST(FpxCodes, TiesGoToTheEvenCode) {
  for (const Codes& c : fp6_and_fp5()) {
    for (size_t code = 0; code + 1 < c.positive_values.size(); ++code) {
      const double midpoint = (c.positive_values[code] + c.positive_values[code + 1]) / 2;
      const uint32_t even = code % 2 == 0 ? uint32_t(code) : uint32_t(code + 1);
      EXPECT_EQ(fpx_encode(float(midpoint), c.ebits, c.mbits), even) << "midpoint " << midpoint;
      const uint32_t sign = 1u << (c.ebits + c.mbits);
      EXPECT_EQ(fpx_encode(float(-midpoint), c.ebits, c.mbits), even == 0 ? 0 : (sign | even));
    }
  }
}

TEST(FpxCodes, AnyExponentAndMantissaWidthRoundTrips) {
  // e4m3 without NaN tops out at 1.875 * 2^8 = 480 and its smallest subnormal is 2^-9;
  // e5m2 tops out at 1.75 * 2^16.
  EXPECT_EQ(fpx_max_finite(4, 3), 480.0f);
  EXPECT_EQ(fpx_decode(1, 4, 3), std::ldexp(1.0f, -9));
  EXPECT_EQ(fpx_max_finite(5, 2), 1.75f * 65536);
  for (int ebits = 1; ebits <= 7; ++ebits) {
    for (int mbits = 0; 1 + ebits + mbits <= 8; ++mbits) {
      const uint32_t n_magnitudes = 1u << (ebits + mbits);
      for (uint32_t code = 1; code < n_magnitudes; ++code) {
        ASSERT_LT(fpx_decode(uint8_t(code - 1), ebits, mbits), fpx_decode(uint8_t(code), ebits, mbits))
            << "e" << ebits << "m" << mbits << " code " << code;  // increasing: no inf/NaN codes
        ASSERT_EQ(fpx_encode(fpx_decode(uint8_t(code), ebits, mbits), ebits, mbits), code);
        ASSERT_EQ(fpx_encode(fpx_decode(uint8_t(code | n_magnitudes), ebits, mbits), ebits, mbits),
                  code | n_magnitudes);
      }
    }
  }
}

TEST(FpxQuantize, ScalesEachRowToItsLargestMagnitude) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (const char* name : {"fp6", "fp5"}) {
    const WeightFormat format = WeightFormat::parse(name);
    const double max_value = format.ebits == 3 ? 28 : 7;
    const int64_t N = 4, K = 1000;
    std::vector<float> w(N * K);
    for (int64_t i = 0; i < N * K; ++i) w[i] = uniform(rng) * (i / K == 1 ? 0.02f : 1.0f);
    for (int64_t k = 0; k < K; ++k) w[2 * K + k] = 0;  // a zero row
    w[3 * K + 17] = -3.0f;                             // row 3's absmax, negative
    const PackedWeight packed = quantize_weight(w.data(), N, K, format);
    ASSERT_EQ(packed.part("packed").shape, (std::vector<int64_t>{1, 8 * 256 * format.bits}));  // K = 1000: 8 tiles
    ASSERT_EQ(packed.part("scales").shape, (std::vector<int64_t>{N}));
    const std::vector<double> dequantized = oracle::dequantize(packed);
    for (int64_t n = 0; n < N; ++n) {
      double absmax = 0;
      for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::abs(double(w[n * K + k])));
      const double scale = half_to_float(packed.part("scales").as<uint16_t>()[n]);
      ASSERT_TRUE(std::isfinite(scale));
      if (absmax > 0) {
        EXPECT_EQ(scale, round_to_half(float(absmax / max_value))) << name << " row " << n;
      }
      for (int64_t k = 0; k < K; ++k) {
        const double x = w[n * K + k], v = dequantized[n * K + k];
        // Half a mantissa step relative to |x| (normal range), or half the subnormal step,
        // plus the fp16 rounding of the scale.
        const double subnormal_step = scale * (format.ebits == 3 ? 0.0625 : 0.25);
        ASSERT_LE(std::abs(x - v), std::abs(x) / 8 + subnormal_step / 2 + absmax * std::ldexp(1.0, -10))
            << name << " [" << n << ", " << k << "]";
      }
    }
    // The largest magnitude takes the largest code: max_value * scale, off by fp16 rounding.
    const uint8_t* bytes = packed.part("packed").as<uint8_t>();
    EXPECT_EQ(oracle::fpx_code(bytes, K, format.bits, 3, 17), (2u << (format.ebits + format.mbits)) - 1);
    EXPECT_NEAR(dequantized[3 * K + 17], -3.0, 3.0 * std::ldexp(1.0, -11));
    for (int64_t k = 0; k < K; ++k) EXPECT_EQ(oracle::fpx_code(bytes, K, format.bits, 2, k), 0u);
  }
}

TEST(FpxLayout, PlanesAreFoursThenTwoThenOne) {
  EXPECT_EQ(fpx_plane_widths(6), (std::vector<int>{4, 2}));
  EXPECT_EQ(fpx_plane_widths(5), (std::vector<int>{4, 1}));
  EXPECT_EQ(fpx_plane_widths(7), (std::vector<int>{4, 2, 1}));
  EXPECT_EQ(fpx_plane_widths(8), (std::vector<int>{4, 4}));
  EXPECT_EQ(fpx_plane_widths(3), (std::vector<int>{2, 1}));
  EXPECT_EQ(fpx_plane_widths(1), (std::vector<int>{1}));
}

// Hand-placed: the fp6 code 0b101101 of row 0, k = 1 (s 0, tig 0, e 1 -> lane 0, h 0,
// byte 3) has its top four bits 1011 at bits 31..28 of the tile's first word, and its low
// two bits 01 at bits 31..30 of the 2-bit plane's first word (tile byte 1024).
TEST(FpxLayout, OneCodeLandsWhereTheCommentSays) {
  std::vector<uint8_t> codes(16 * 128, 0);
  codes[1] = 0x2D;
  std::vector<uint8_t> packed(size_t(fpx_tile_bytes(6)), 0xAA);
  fpx_pack_codes(codes.data(), 16, 128, 6, packed.data());
  for (size_t i = 0; i < packed.size(); ++i) {
    const uint8_t expected = i == 3 ? 0xB0 : i == 1024 + 3 ? 0x40 : 0;
    ASSERT_EQ(packed[i], expected) << "byte " << i;
  }
}

// Every width 1..8, shapes that are multiples of nothing: pack -> unpack gives the codes
// back, the oracle reads the same codes, and the padding is code 0.
TEST(FpxLayout, PackUnpackRoundTripsAtOddShapes) {
  std::mt19937 rng(9);
  for (int bits = 1; bits <= 8; ++bits) {
    for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 33}, {16, 128}, {17, 129}, {40, 300}}) {
      std::vector<uint8_t> codes(size_t(N * K));
      for (auto& c : codes) c = uint8_t(rng() & ((1u << bits) - 1));
      const int64_t KT = fpx_k_tiles(K), blocks = fpx_row_blocks(N);
      std::vector<uint8_t> packed(size_t(blocks * KT * fpx_tile_bytes(bits)));
      fpx_pack_codes(codes.data(), N, K, bits, packed.data());
      std::vector<uint8_t> row(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        fpx_unpack_row(packed.data(), n, K, bits, row.data());
        for (int64_t k = 0; k < K; ++k) {
          ASSERT_EQ(row[size_t(k)], codes[size_t(n * K + k)]) << bits << " bits [" << n << ", " << k << "]";
          ASSERT_EQ(oracle::fpx_code(packed.data(), KT * 128, bits, n, k), codes[size_t(n * K + k)]);
        }
      }
      for (int64_t n = 0; n < blocks * 16; ++n)
        for (int64_t k = 0; k < KT * 128; ++k)
          if (n >= N || k >= K) ASSERT_EQ(oracle::fpx_code(packed.data(), KT * 128, bits, n, k), 0u) << "padding";
    }
  }
}

TEST(FpxQuantize, RowDecoderMatchesTheOracleAtOddShapes) {
  std::mt19937 rng(10);
  std::normal_distribution<float> normal(0, 1);
  for (const char* name : {"fp6", "fp5"}) {
    const WeightFormat format = WeightFormat::parse(name);
    for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {17, 200}, {33, 257}}) {
      std::vector<float> w(size_t(N * K));
      for (auto& v : w) v = normal(rng);
      const PackedWeight packed = quantize_weight(w.data(), N, K, format);
      const std::vector<double> expected = oracle::dequantize(packed);
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        dequantize_row(packed, n, row.data());
        for (int64_t k = 0; k < K; ++k) ASSERT_EQ(double(row[size_t(k)]), expected[size_t(n * K + k)]);
      }
    }
  }
}

}  // namespace
}  // namespace gemlite
