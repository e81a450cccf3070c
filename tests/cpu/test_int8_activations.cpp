// The int8 activation rule (kernels/qn/int8_activations.h) on rows whose results are worked
// out by hand, and its round-trip bound on a random row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/qn/int8_activations.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

TEST(Int8Activations, HandWorkedRows) {
  // max 4: inv = 127 / 4 = 31.75 (exact in fp16); -2 * 31.75 = -63.5 ties to even (-64).
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 4.0f};
  const Int8ActivationRow r = quantize_activation_row(x.data(), 4, DType::F16);
  EXPECT_EQ(r.inv, 31.75f);
  EXPECT_EQ(r.scale, 1.0f / 31.75f);
  EXPECT_EQ(r.q, (std::vector<int8_t>{32, -64, 16, 127}));

  const std::vector<float> zeros(5, 0.0f);  // no scale at all: everything zero
  const Int8ActivationRow z = quantize_activation_row(zeros.data(), 5, DType::BF16);
  EXPECT_EQ(z.inv, 0.0f);
  EXPECT_EQ(z.scale, 0.0f);
  EXPECT_EQ(z.q, std::vector<int8_t>(5, 0));

  // max 2^-10: 127 * 2^10 = 130048 exceeds fp16, so fp16 caps inv at 65504 (2^-10 * 65504
  // = 63.97 -> 64) while bf16 keeps the fp32 130048 (-> 127).
  const std::vector<float> tiny = {std::ldexp(1.0f, -10), -std::ldexp(1.0f, -11)};
  const Int8ActivationRow t16 = quantize_activation_row(tiny.data(), 2, DType::F16);
  EXPECT_EQ(t16.inv, 65504.0f);
  EXPECT_EQ(t16.q, (std::vector<int8_t>{64, -32}));
  const Int8ActivationRow tb = quantize_activation_row(tiny.data(), 2, DType::BF16);
  EXPECT_EQ(tb.inv, 130048.0f);
  EXPECT_EQ(tb.q, (std::vector<int8_t>{127, -64}));  // -63.5 -> -64 (even)

  EXPECT_THROW(quantize_activation_row(x.data(), 4, DType::F32), Error);
}

TEST(Int8Activations, RandomRowRoundTrip) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (DType act : {DType::F16, DType::BF16}) {
    std::vector<float> x(4096);
    for (float& v : x) v = act == DType::BF16 ? round_to_bf16(normal(rng)) : round_to_half(normal(rng));
    const Int8ActivationRow r = quantize_activation_row(x.data(), int64_t(x.size()), act);
    int top = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      top = std::max(top, std::abs(int(r.q[k])));
      // x * inv rounds to q: |x inv - q| <= 1/2, i.e. |x - q / inv| <= 1 / (2 inv)
      EXPECT_LE(std::abs(double(x[k]) * r.inv - r.q[k]), 0.5) << k;
    }
    EXPECT_EQ(top, 127);  // the largest |x| lands on the end of the range
  }
}

}  // namespace
}  // namespace gemlite
