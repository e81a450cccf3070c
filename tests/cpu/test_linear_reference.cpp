// linear_reference for every format against an independent float64 dequantize-then-matmul
// (tests/cpu/weight_layout_oracle.h), and validate_packed_weight's messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/packed_weight.h"
#include "runtime/error.h"
#include "tests/cpu/io_test_helpers.h"
#include "tests/cpu/weight_layout_oracle.h"

namespace gemlite {
namespace {

const char* const kFormats[] = {"q1",  "q2g32", "q3g32", "q4g64", "q4",  "q5g128", "q6", "q7g64",
                                "q8g128", "s7", "s7g64", "fp6",   "fp5", "f32",    "f16", "bf16"};

struct Shape {
  int64_t N, K;
};
const Shape kShapes[] = {{1, 1}, {3, 33}, {17, 257}, {5, 1000}, {4, 4100}};

std::vector<float> uniform_values(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> v(count);
  for (float& x : v) x = uniform(rng);
  return v;
}

// Checks y [M, N] against x [M, K] · Wᵀ + bias computed in double from the oracle's W.
//
// Tolerance 1e-5 of Σ_k |x·w| (+ |bias|), not of |y| (which can cancel to ~0): the
// reference differs from float64 only by fp32 rounding, ~2^-23 relative per dequantized
// weight and, for sums of random-signed terms, a few 2^-24 of Σ|x·w| in the accumulation
// (the worst case K·2^-24 needs every rounding to line up). One weight read from a wrong
// place moves y by ~Σ|x·w| / K, at least 2.4e-4 of it for K <= 4100: well above 1e-5.
void expect_matches_oracle(const PackedWeight& w, const std::vector<float>& x, int64_t M,
                           const std::vector<float>& y, const float* bias) {
  const int64_t N = w.rows, K = w.cols;
  const std::vector<double> W = oracle::dequantize(w);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double expected = bias ? bias[n] : 0.0, magnitude = bias ? std::abs(bias[n]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        expected += double(x[m * K + k]) * W[n * K + k];
        magnitude += std::abs(double(x[m * K + k]) * W[n * K + k]);
      }
      ASSERT_NEAR(y[m * N + n], expected, 1e-5 * magnitude + 1e-30) << "y[" << m << ", " << n << "]";
    }
  }
}

TEST(LinearReference, EveryFormatMatchesFloat64DequantizeThenMatmul) {
  std::mt19937 rng(8);
  for (const char* name : kFormats) {
    for (const Shape& s : kShapes) {
      const std::vector<float> w = uniform_values(size_t(s.N * s.K), rng);
      const PackedWeight packed = quantize_weight(w.data(), s.N, s.K, WeightFormat::parse(name));
      for (int64_t M : {1, 3, 8}) {
        SCOPED_TRACE(std::string(name) + " M " + std::to_string(M) + " N " + std::to_string(s.N) +
                     " K " + std::to_string(s.K));
        const std::vector<float> x = uniform_values(size_t(M * s.K), rng);
        std::vector<float> y(size_t(M * s.N), NAN);
        linear_reference(packed, x.data(), M, y.data());
        expect_matches_oracle(packed, x, M, y, nullptr);
      }
    }
  }
}

TEST(LinearReference, AddsTheBiasWhenPresent) {
  std::mt19937 rng(9);
  for (const char* name : kFormats) {
    SCOPED_TRACE(name);
    const int64_t N = 17, K = 257, M = 3;
    const std::vector<float> w = uniform_values(size_t(N * K), rng);
    PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse(name));
    ASSERT_EQ(packed.parts.count("bias"), 0u);  // the caller adds it
    const std::vector<float> bias = uniform_values(size_t(N), rng);
    packed.parts["bias"] = HostTensor::copy_of(DType::F32, {N}, bias.data());
    const std::vector<float> x = uniform_values(size_t(M * K), rng);
    std::vector<float> y(size_t(M * N), NAN);
    linear_reference(packed, x.data(), M, y.data());
    expect_matches_oracle(packed, x, M, y, bias.data());
  }
}

TEST(LinearReference, DequantizedRowsMatchTheDocumentedLayout) {
  std::mt19937 rng(10);
  for (const char* name : kFormats) {
    SCOPED_TRACE(name);
    const int64_t N = 5, K = 1000;
    const std::vector<float> w = uniform_values(size_t(N * K), rng);
    const PackedWeight packed = quantize_weight(w.data(), N, K, WeightFormat::parse(name));
    const std::vector<double> W = oracle::dequantize(packed);
    std::vector<float> row(K);
    for (int64_t n = 0; n < N; ++n) {
      dequantize_row(packed, n, row.data());
      for (int64_t k = 0; k < K; ++k)  // a couple of fp32 roundings of the value at most
        ASSERT_NEAR(row[k], W[n * K + k], 1e-6 * std::abs(W[n * K + k]) + 1e-12) << n << ", " << k;
    }
  }
}

// Runs validate_packed_weight and returns its message ("" when it accepts the weight).
std::string validation_error(const PackedWeight& w) {
  try {
    validate_packed_weight(w, "model.safetensors: layers.0.q_proj");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

PackedWeight small_weight(const char* format) {
  std::mt19937 rng(11);
  const std::vector<float> w = uniform_values(3 * 33, rng);
  return quantize_weight(w.data(), 3, 33, WeightFormat::parse(format));
}

TEST(ValidatePackedWeight, AcceptsWhatTheQuantizerMakesWithOrWithoutBias) {
  for (const char* name : kFormats) {
    PackedWeight w = small_weight(name);
    EXPECT_EQ(validation_error(w), "") << name;
    w.parts["bias"] = HostTensor::zeros(DType::F32, {3});
    EXPECT_EQ(validation_error(w), "") << name;
  }
}

TEST(ValidatePackedWeight, NamesTheTensorWithAWrongShape) {
  PackedWeight w = small_weight("q4g32");
  w.parts["qweight"] = HostTensor::zeros(DType::I32, {3, 64});
  EXPECT_EQ(validation_error(w),
            "model.safetensors: layers.0.q_proj: tensor 'qweight' has shape [3, 64], expected [3, 32] "
            "(format q4g32)");

  w = small_weight("fp6");
  w.parts["scales"] = HostTensor::zeros(DType::F16, {3, 1});
  EXPECT_NE(validation_error(w).find("tensor 'scales' has shape [3, 1], expected [3]"), std::string::npos)
      << validation_error(w);

  w = small_weight("s7");
  w.parts["zeros"] = HostTensor::zeros(DType::F16, {3, 2});
  EXPECT_NE(validation_error(w).find("tensor 'zeros' has shape [3, 2], expected [3, 1]"), std::string::npos)
      << validation_error(w);

  w = small_weight("f16");
  w.parts["bias"] = HostTensor::zeros(DType::F32, {4});
  EXPECT_NE(validation_error(w).find("tensor 'bias' has shape [4], expected [3]"), std::string::npos)
      << validation_error(w);
}

TEST(ValidatePackedWeight, NamesTheTensorWithAWrongType) {
  PackedWeight w = small_weight("q4");
  w.parts["scales"] = HostTensor::zeros(DType::F32, {3, 1});
  EXPECT_EQ(validation_error(w),
            "model.safetensors: layers.0.q_proj: tensor 'scales' has type F32, expected F16 (format q4)");

  w = small_weight("f16");
  w.parts["weight"] = HostTensor::zeros(DType::BF16, {3, 33});
  EXPECT_NE(validation_error(w).find("tensor 'weight' has type BF16, expected F16"), std::string::npos)
      << validation_error(w);

  w = small_weight("q8");
  w.parts["bias"] = HostTensor::zeros(DType::F16, {3});
  EXPECT_NE(validation_error(w).find("tensor 'bias' has type F16, expected F32"), std::string::npos)
      << validation_error(w);
}

TEST(ValidatePackedWeight, NamesMissingAndUnexpectedTensors) {
  PackedWeight w = small_weight("s7g64");
  w.parts.erase("zeros");
  EXPECT_NE(validation_error(w).find("tensor 'zeros' is missing"), std::string::npos) << validation_error(w);

  w = small_weight("fp5");
  w.parts["g_idx"] = HostTensor::zeros(DType::I32, {33});
  EXPECT_NE(validation_error(w).find("unexpected tensor 'g_idx'"), std::string::npos) << validation_error(w);
}

TEST(PackedWeight, PartThrowsForAMissingTensorAndNbytesSumsParts) {
  const PackedWeight w = small_weight("q4g32");
  EXPECT_THROW(w.part("weight"), Error);
  // qweight [3, 32] I32 + scales and zeros [3, 2] F16.
  EXPECT_EQ(w.nbytes(), size_t(3 * 32 * 4 + 2 * 3 * 2 * 2));
}

TEST(QuantizeWeight, RejectsNonFiniteWeights) {
  std::vector<float> w(10, 1.0f);
  w[7] = NAN;
  try {
    quantize_weight(w.data(), 2, 5, WeightFormat::parse("q4"));
    ADD_FAILURE() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 2]"), std::string::npos) << e.what();
  }
}

// Large enough for the check's parallel scan (kMinParallelWork): the message still names
// the first bad weight in row-major order, not whichever thread saw one first.
TEST(QuantizeWeight, NamesTheFirstBadWeightOfALargeMatrix) {
  const int64_t N = 512, K = 512;  // 2^18 weights
  std::vector<float> w(size_t(N * K), 0.5f);
  w[size_t(400 * K + 3)] = INFINITY;  // in a later thread's rows
  w[size_t(100 * K + 7)] = NAN;
  try {
    quantize_weight(w.data(), N, K, WeightFormat::parse("q4g64"));
    ADD_FAILURE() << "NaN and inf accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[100, 7]"), std::string::npos) << e.what();
  }
}

// A finite weight beyond fp16's range would be stored as infinity in f16 (the audit's model
// then printed only <unk>); bf16 and the quantized formats hold it.
TEST(QuantizeWeight, RejectsWeightsBeyondFp16InF16) {
  std::vector<float> w(10, 1.0f);
  w[3] = 99840.0f;
  try {
    quantize_weight(w.data(), 2, 5, WeightFormat::parse("f16"));
    ADD_FAILURE() << "99840 accepted as f16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit fp16"), std::string::npos) << e.what();
  }
  // Held, and read back near 99840 (bf16 keeps 8 significant bits, q8 255 steps a row).
  for (const auto& [format, tolerance] : {std::pair{"bf16", 99840.0f / 256}, std::pair{"f32", 0.0f},
                                          std::pair{"q8", 99840.0f / 254}}) {
    const PackedWeight packed = quantize_weight(w.data(), 2, 5, WeightFormat::parse(format));
    std::vector<float> row(5);
    dequantize_row(packed, 0, row.data());
    EXPECT_NEAR(row[3], 99840.0f, tolerance) << format;
  }
}

// A weight so large that its group's fp16 scale overflows (q4: (2e6 - lo) / 15 > 65504) had
// been stored as a scale of inf, silently (the audit's model printed only <unk>). Each
// format's limit is its range over fp16's: 15, 127 (s7), 255 (q8) steps or the largest
// fp6/fp5 value (28, 7) times 65504. The error names the row and group; a value within
// the limit is held.
TEST(QuantizeWeight, RejectsScalesBeyondFp16AndNamesRowAndGroup) {
  struct Case {
    const char* format;
    float value;        // put at row 2, column 130
    const char* group;  // of column 130: 130 / 64, 130 / 128, or the whole row
  };
  for (const Case& c : {Case{"q4g64", 2e6f, "row 2, group 2:"}, Case{"s7", 1e7f, "row 2, group 1:"},
                        Case{"q8", 2e7f, "row 2, group 0:"}, Case{"fp6", 2e6f, "row 2, group 0:"},
                        Case{"fp5", 5e5f, "row 2, group 0:"}}) {
    std::mt19937 rng(7);
    std::vector<float> w = uniform_values(3 * 256, rng);  // [3, 256]
    w[2 * 256 + 130] = c.value;
    expect_error_mentions([&] { quantize_weight(w.data(), 3, 256, WeightFormat::parse(c.format)); },
                          {"(" + std::string(c.format) + ")", c.group, "scale", "does not fit fp16"});
  }
  // A constant group of 1e5 (fit_group's fallback: scale = the constant) overflows too.
  std::vector<float> w(3 * 256, 0.5f);
  std::fill(w.begin() + 192, w.begin() + 256, 1e5f);  // row 0, group 3 of 64
  expect_error_mentions([&] { quantize_weight(w.data(), 3, 256, WeightFormat::parse("q4g64")); },
                        {"row 0, group 3:", "does not fit fp16"});
  // Within each limit the weight is stored and read back near its value.
  for (const auto& [format, value, tolerance] : {std::tuple{"q8", 1e7f, 1e7f / 254}, std::tuple{"s7", 5e6f, 5e6f / 126},
                                                 std::tuple{"fp6", 1.5e6f, 1.5e6f / 8}}) {
    std::mt19937 rng(7);
    std::vector<float> held = uniform_values(3 * 256, rng);
    held[2 * 256 + 130] = value;
    const PackedWeight packed = quantize_weight(held.data(), 3, 256, WeightFormat::parse(format));
    std::vector<float> row(256);
    dequantize_row(packed, 2, row.data());
    EXPECT_NEAR(row[130], value, tolerance) << format;
  }
}

}  // namespace
}  // namespace gemlite
