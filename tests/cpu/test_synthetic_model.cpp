// The random weights of gemlite-bench --synthetic: spread like a freshly initialised model
// (~N(0, 0.02²), bounded by the four-uniform sum at 2 sqrt(3) sigma), different in every
// matrix, the same for the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "models/synthetic_model.h"

namespace gemlite {
namespace {

std::vector<float> f32_values(const PackedWeight& w) {
  const HostTensor& t = w.part("weight");  // a dense f32 weight: [rows, cols]
  return std::vector<float>(t.as<float>(), t.as<float>() + w.rows * w.cols);
}

TEST(SyntheticModel, WeightsSpreadLikeAFreshModelAndDifferPerMatrix) {
  const ModelConfig config = synthetic_config("stories260k");
  const PackedCheckpoint ckpt = make_synthetic_checkpoint(config, WeightFormat::parse("f32"), 5);
  std::vector<float> all;
  for (const PackedLayer& layer : ckpt.layers)
    for (const PackedWeight* w : layer.linear_slots()) {
      const std::vector<float> v = f32_values(*w);
      all.insert(all.end(), v.begin(), v.end());
    }
  ASSERT_GT(all.size(), 100000u);
  double sum = 0, squares = 0, largest = 0;
  for (float v : all) sum += v, squares += double(v) * v, largest = std::max(largest, double(std::abs(v)));
  const double mean = sum / double(all.size()), sigma = std::sqrt(squares / double(all.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02 * 0.01);
  EXPECT_NEAR(sigma, 0.02, 0.02 * 0.01);
  EXPECT_LE(largest, 0.02 * 2 * std::sqrt(3.0));
  EXPECT_GT(largest, 0.02 * 3);  // the tails are there
  size_t within_one_sigma = 0;  // a normal puts 68.3 % there, the four-uniform sum 66.6 %
  for (float v : all) within_one_sigma += std::abs(v) <= 0.02f;
  EXPECT_NEAR(double(within_one_sigma) / double(all.size()), 0.675, 0.02);

  const std::vector<float> q0 = f32_values(ckpt.layers[0].q), k0 = f32_values(ckpt.layers[0].k);
  const std::vector<float> q1 = f32_values(ckpt.layers[1].q);
  ASSERT_EQ(q0.size(), q1.size());
  size_t same = 0;
  for (size_t i = 0; i < q0.size(); ++i) same += q0[i] == q1[i] || q0[i] == k0[i % k0.size()];
  EXPECT_LT(same, q0.size() / 100) << "matrices repeat each other";

  const PackedCheckpoint again = make_synthetic_checkpoint(config, WeightFormat::parse("f32"), 5);
  EXPECT_EQ(f32_values(again.layers[1].q), q1);
  const PackedCheckpoint other_seed = make_synthetic_checkpoint(config, WeightFormat::parse("f32"), 6);
  const std::vector<float> q1_other = f32_values(other_seed.layers[1].q);
  for (size_t shift : {0, 1}) {  // not the same weights, nor shifted by one
    size_t equal = 0;
    for (size_t i = 0; i + shift < q1.size(); ++i) equal += q1_other[i] == q1[i + shift] || q1[i] == q1_other[i + shift];
    EXPECT_LT(equal, q1.size() / 100) << "seeds 5 and 6, shift " << shift;
  }
}

}  // namespace
}  // namespace gemlite
