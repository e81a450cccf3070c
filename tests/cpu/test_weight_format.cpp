// WeightFormat: the names users type, and what each format costs per weight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/weight_format.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

std::vector<std::string> all_canonical_names() {
  std::vector<std::string> names;
  for (int bits = 1; bits <= 8; ++bits) {
    names.push_back("q" + std::to_string(bits));
    for (int group : {32, 64, 128}) names.push_back("q" + std::to_string(bits) + "g" + std::to_string(group));
  }
  for (const char* name : {"s7", "s7g64", "fp6", "fp5", "f32", "f16", "bf16"}) names.push_back(name);
  return names;
}

TEST(WeightFormat, EveryValidNameRoundTrips) {
  for (const std::string& name : all_canonical_names()) EXPECT_EQ(WeightFormat::parse(name).name(), name);
}

TEST(WeightFormat, ParsesFields) {
  const WeightFormat q4g64 = WeightFormat::parse("q4g64");
  EXPECT_EQ(q4g64.kind, FormatKind::QN);
  EXPECT_EQ(q4g64.bits, 4);
  EXPECT_EQ(q4g64.group, 64);

  const WeightFormat q3 = WeightFormat::parse("q3");
  EXPECT_EQ(q3.kind, FormatKind::QN);
  EXPECT_EQ(q3.bits, 3);
  EXPECT_EQ(q3.group, 0);  // per output channel

  const WeightFormat s7 = WeightFormat::parse("s7");
  EXPECT_EQ(s7.kind, FormatKind::S7);
  EXPECT_EQ(s7.bits, 7);
  EXPECT_EQ(s7.group, 128);
  EXPECT_EQ(WeightFormat::parse("s7g64").group, 64);
  EXPECT_EQ(WeightFormat::parse("s7g128").name(), "s7");  // the default group is not spelled

  const WeightFormat fp6 = WeightFormat::parse("fp6");
  EXPECT_EQ(fp6.kind, FormatKind::FPX);
  EXPECT_EQ(fp6.ebits, 3);
  EXPECT_EQ(fp6.mbits, 2);
  EXPECT_EQ(fp6.bits, 6);
  const WeightFormat fp5 = WeightFormat::parse("fp5");
  EXPECT_EQ(fp5.ebits, 2);
  EXPECT_EQ(fp5.mbits, 2);
  EXPECT_EQ(fp5.bits, 5);

  EXPECT_EQ(WeightFormat::parse("f32").dense_dtype, DType::F32);
  EXPECT_EQ(WeightFormat::parse("f16").dense_dtype, DType::F16);
  EXPECT_EQ(WeightFormat::parse("bf16").kind, FormatKind::Dense);
  EXPECT_EQ(WeightFormat::parse("bf16").dense_dtype, DType::BF16);
}

TEST(WeightFormat, RejectsInvalidNamesListingTheValidForms) {
  for (const char* bad : {"q9", "q4g48", "fp7x", "", "q0", "q4g", "q", "Q4", "q4g64x", " q4", "q04",
                          "s7g32", "s8", "fp4", "f8", "int4", "q4g256"}) {
    try {
      WeightFormat::parse(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'" + std::string(bad) + "'"), std::string::npos) << message;
      EXPECT_NE(message.find("qNgG"), std::string::npos) << message;
      EXPECT_NE(message.find("fp6"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST(WeightFormat, EqualityIsByName) {
  EXPECT_TRUE(WeightFormat::parse("s7g128") == WeightFormat::parse("s7"));
  EXPECT_FALSE(WeightFormat::parse("q4") == WeightFormat::parse("q4g128"));
}

TEST(WeightFormat, BitsPerWeightCountsPaddingScalesAndZeros) {
  // q4g128, K = 4096: 512 words per row + 32 groups of fp16 scale and zero.
  EXPECT_DOUBLE_EQ(WeightFormat::parse("q4g128").bits_per_weight(4096), (512 * 32 + 32 * 32) / 4096.0);
  // q3, K = 4096: 10 codes per word, tiles of 320 elements, 13 tiles of 32 words, 1 group.
  EXPECT_DOUBLE_EQ(WeightFormat::parse("q3").bits_per_weight(4096), (13 * 32 * 32 + 32) / 4096.0);
  // q8g32, K = 100: one tile of 128 elements, 4 groups.
  EXPECT_DOUBLE_EQ(WeightFormat::parse("q8g32").bits_per_weight(100), (32 * 32 + 4 * 32) / 100.0);
  // s7 (g128), K = 4096: a byte per pair = 4 bits per weight, + 32 groups.
  EXPECT_DOUBLE_EQ(WeightFormat::parse("s7").bits_per_weight(4096), 4.25);
  // fp6 is pre-packed at 6 bits per weight in format v2, plus one fp16 scale per row.
  EXPECT_DOUBLE_EQ(WeightFormat::parse("fp6").bits_per_weight(4096), 6 + 16 / 4096.0);
  EXPECT_DOUBLE_EQ(WeightFormat::parse("f16").bits_per_weight(4096), 16);
  EXPECT_DOUBLE_EQ(WeightFormat::parse("bf16").bits_per_weight(11008), 16);
  EXPECT_DOUBLE_EQ(WeightFormat::parse("f32").bits_per_weight(7), 32);
}

}  // namespace
}  // namespace gemlite
