#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace gemlite {
namespace {

SamplerParams greedy() {
  SamplerParams params;
  params.temperature = 0.0f;
  return params;
}

// Only temperature shapes the distribution: no truncation, no penalty.
SamplerParams plain(float temperature, uint64_t seed) {
  SamplerParams params;
  params.temperature = temperature;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.seed = seed;
  return params;
}

std::vector<int> draws(SamplerParams params, const std::vector<float>& logits, int count) {
  Sampler sampler(params);
  std::vector<int> ids;
  for (int i = 0; i < count; ++i) ids.push_back(sampler.sample(logits.data(), logits.size(), {}));
  return ids;
}

std::vector<int> histogram(const std::vector<int>& ids, int vocab) {
  std::vector<int> counts(vocab, 0);
  for (int id : ids) ++counts[id];
  return counts;
}

std::vector<float> log_probabilities(const std::vector<float>& probabilities) {
  std::vector<float> logits;
  for (float probability : probabilities) logits.push_back(std::log(probability));
  return logits;
}

TEST(Sampler, GreedyPicksArgmax) {
  const std::vector<float> logits = {0.1f, -2.0f, 3.5f, 3.4f, 1.0f};
  EXPECT_EQ(Sampler(greedy()).sample(logits.data(), logits.size(), {}), 2);
}

TEST(Sampler, GreedyBreaksTiesTowardsLowestId) {
  const std::vector<float> logits = {1.0f, 7.0f, 3.0f, 7.0f};
  EXPECT_EQ(Sampler(greedy()).sample(logits.data(), logits.size(), {}), 1);
}

// NaN ranks below everything (as the GPU argmax skips it): greedy and top-k pass over it.
TEST(Sampler, NanLogitsAreNeverChosen) {
  const std::vector<float> logits = {std::nanf(""), 2.0f, std::nanf(""), 1.0f};
  EXPECT_EQ(Sampler(greedy()).sample(logits.data(), logits.size(), {}), 1);
  SamplerParams top2;
  top2.top_k = 2;
  top2.min_p = 0.0f;
  top2.top_p = 1.0f;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    top2.seed = seed;
    const int id = Sampler(top2).sample(logits.data(), logits.size(), {});
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(Sampler, TopKOfOneIsGreedyAtAnyTemperature) {
  const std::vector<float> logits = {0.5f, 0.6f, 0.55f, -1.0f};
  for (float temperature : {0.5f, 1.0f, 5.0f}) {
    SamplerParams params = plain(temperature, 7);
    params.top_k = 1;
    for (int id : draws(params, logits, 200)) EXPECT_EQ(id, 1) << "temperature " << temperature;
  }
}

TEST(Sampler, SameSeedGivesSameSequenceAndOtherSeedDiffers) {
  const std::vector<float> flat(100, 0.0f);
  const std::vector<int> first = draws(plain(1.0f, 42), flat, 100);
  EXPECT_EQ(draws(plain(1.0f, 42), flat, 100), first);
  // 100 draws over 100 equally likely ids: two seeds agree everywhere with chance 1e-200.
  EXPECT_NE(draws(plain(1.0f, 43), flat, 100), first);
}

TEST(Sampler, RepetitionPenaltyTurnsTheChoice) {
  SamplerParams params = greedy();
  params.repeat_penalty = 1.1f;
  // Positive logits are divided: 2.0 / 1.1 = 1.82 < 1.9.
  const std::vector<float> positive = {2.0f, 1.9f};
  EXPECT_EQ(Sampler(params).sample(positive.data(), 2, {0}), 1);
  // Negative logits are multiplied: -1.0 * 1.1 = -1.1 < -1.05.
  const std::vector<float> negative = {-1.0f, -1.05f};
  EXPECT_EQ(Sampler(params).sample(negative.data(), 2, {0}), 1);
  // Only the last repeat_last_n tokens are penalized: with {0, 2, 2} and a window of 2,
  // token 0 keeps its 2.0 and wins; a sampler penalizing every recent token would take 0
  // down to 1.82 and return 1.
  const std::vector<float> three = {2.0f, 1.9f, -5.0f};
  params.repeat_last_n = 2;
  EXPECT_EQ(Sampler(params).sample(three.data(), 3, {0, 2, 2}), 0);
  params.repeat_last_n = 3;
  EXPECT_EQ(Sampler(params).sample(three.data(), 3, {0, 2, 2}), 1);
}

// p / p_max for id 2 is 0.04 / 0.5 = 0.08 and for id 3 it is 0.02 / 0.5 = 0.04 < 0.05.
TEST(Sampler, MinPExcludesTokensFarLessLikelyThanTheBest) {
  const std::vector<float> logits = log_probabilities({0.5f, 0.44f, 0.04f, 0.02f});
  SamplerParams params = plain(1.0f, 1);
  params.min_p = 0.05f;
  const std::vector<int> counts = histogram(draws(params, logits, 20000), 4);
  EXPECT_EQ(counts[3], 0);
  // The kept tokens in proportion to their renormalized probabilities, 0.5 / 0.44 / 0.04
  // over 0.98; 20000 draws give a frequency's standard deviation under 0.0036, and 0.02 is
  // over 5 sigma (a sampler drawing uniformly among the kept ones would give 1/3 each).
  const double kept = 0.98;
  EXPECT_NEAR(counts[0] / 20000.0, 0.5 / kept, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.44 / kept, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.04 / kept, 0.01);
}

// Cumulative probability reaches 0.9 >= 0.85 with ids 0 and 1, so id 2 never appears.
TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  const std::vector<float> logits = log_probabilities({0.6f, 0.3f, 0.1f});
  SamplerParams params = plain(1.0f, 2);
  params.top_p = 0.85f;
  const std::vector<int> counts = histogram(draws(params, logits, 20000), 3);
  EXPECT_EQ(counts[2], 0);
  // Ids 0 and 1 renormalized: 2/3 and 1/3 (0.02 is over 5 sigma at 20000 draws).
  EXPECT_NEAR(counts[0] / 20000.0, 2.0 / 3.0, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 1.0 / 3.0, 0.02);
}

// llama.cpp's order: top-p (and min-p) choose the tokens from the probabilities at
// temperature 1, then the temperature reshapes the kept ones. At temperature 0.5, {0.6,
// 0.3, 0.1} with top_p 0.65 keeps ids 0 and 1 (0.6 < 0.65 <= 0.9) and draws them as 0.6^2 :
// 0.3^2, 0.8 / 0.2; a sampler that applied the temperature first would keep id 0 alone
// (its sharpened probability 0.78 already reaches 0.65) and never draw id 1.
TEST(Sampler, TopPChoosesBeforeTheTemperatureReshapes) {
  const std::vector<float> logits = log_probabilities({0.6f, 0.3f, 0.1f});
  SamplerParams params = plain(0.5f, 3);
  params.top_p = 0.65f;
  const std::vector<int> counts = histogram(draws(params, logits, 20000), 3);
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / 20000.0, 0.8, 0.02);  // 0.02: over 5 sigma at 20000 draws
  EXPECT_NEAR(counts[1] / 20000.0, 0.2, 0.02);
}

// The same for min-p: {0.5, 0.3, 0.2} with min_p 0.35 keeps all three at temperature 1
// (0.2 / 0.5 = 0.4 >= 0.35), and the draw at 0.5 follows 0.25 : 0.09 : 0.04 over 0.38; a
// sampler that applied the temperature first would drop id 2 (0.04 / 0.25 = 0.16 < 0.35).
TEST(Sampler, MinPChoosesBeforeTheTemperatureReshapes) {
  const std::vector<float> logits = log_probabilities({0.5f, 0.3f, 0.2f});
  SamplerParams params = plain(0.5f, 4);
  params.min_p = 0.35f;
  const std::vector<int> counts = histogram(draws(params, logits, 20000), 3);
  EXPECT_GT(counts[2], 0) << "id 2 dropped: min-p applied after the temperature";
  EXPECT_NEAR(counts[0] / 20000.0, 0.25 / 0.38, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.09 / 0.38, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.04 / 0.38, 0.01);
}

// With n = 100000 draws the standard deviation of a frequency is at most
// sqrt(0.25 / n) = 0.0016, so a tolerance of 0.01 is over 6 sigma: a correct sampler fails
// with probability below 1e-9 (and never for a fixed seed), a wrong distribution shows.
TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<float> probabilities = {0.5f, 0.3f, 0.2f};
  const int n = 100000;
  const std::vector<int> counts =
      histogram(draws(plain(1.0f, 3), log_probabilities(probabilities), n), 3);
  for (int id = 0; id < 3; ++id) {
    EXPECT_NEAR(double(counts[id]) / n, probabilities[id], 0.01) << "id " << id;
  }
}

// Temperature 2 takes the square root of each probability before renormalizing:
// sqrt(0.64), sqrt(0.36) -> 0.8 / 1.4 and 0.6 / 1.4.
TEST(Sampler, TemperatureFlattensTheDistribution) {
  const int n = 100000;
  const std::vector<int> counts =
      histogram(draws(plain(2.0f, 4), log_probabilities({0.64f, 0.36f}), n), 2);
  EXPECT_NEAR(double(counts[0]) / n, 0.8 / 1.4, 0.01);
}

// sample_top over the candidates_needed largest logits draws exactly what sample draws
// over all of them, with penalties pushing tokens out of the top k, ties (logits on a
// grid of 0.25) and every truncation, over sequences of draws from the same seed.
TEST(Sampler, SampleTopOfTheLargestLogitsEqualsSampleOverAll) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int vocab = std::vector<int>{5, 50, 1000}[trial % 3];
    SamplerParams params;
    params.temperature = std::vector<float>{0.0f, 0.7f, 1.5f}[(trial / 3) % 3];
    params.top_k = std::vector<int>{1, 5, 40}[(trial / 9) % 3];
    params.top_p = trial % 2 ? 0.9f : 1.0f;
    params.min_p = trial % 5 ? 0.05f : 0.0f;
    params.repeat_penalty = (trial / 27) % 2 ? 1.3f : 1.0f;
    params.repeat_last_n = std::vector<int>{8, -1, 0}[(trial / 54) % 3];
    params.seed = uint64_t(trial);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& v : logits) v = std::round(normal(rng) * 4) / 4;
    std::vector<int> recent;
    for (int i = 0; i < 12; ++i) recent.push_back(int(rng() % uint32_t(std::min(vocab, 20))));
    Sampler all(params), top(params);
    const int needed = top.candidates_needed(recent);
    ASSERT_GT(needed, 0);
    const int count = std::min(needed, vocab);
    std::vector<int> order(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) order[size_t(i)] = i;
    std::partial_sort(order.begin(), order.begin() + count, order.end(), [&](int a, int b) {
      return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
    });
    std::vector<float> values;
    for (int i = 0; i < count; ++i) values.push_back(logits[size_t(order[size_t(i)])]);
    for (int draw = 0; draw < 5; ++draw) {
      const int want = all.sample(logits.data(), vocab, recent);
      ASSERT_EQ(top.sample_top(order.data(), values.data(), count, recent), want)
          << "trial " << trial << " draw " << draw;
      recent.push_back(want);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2000);
  SamplerParams unlimited;
  unlimited.top_k = 0;  // every logit may matter at a temperature
  EXPECT_EQ(Sampler(unlimited).candidates_needed({}), 0);
}

// A penalty below 1 raises a recent token's positive logit (llama.cpp's rule: divided by
// the penalty), so a token outside the k + |penalized| largest may win: every logit
// matters then. Greedy, k = 1: token 9 ranks fourth (0.9), is recent, and becomes 3.6.
TEST(Sampler, PenaltyBelowOneNeedsEveryLogit) {
  SamplerParams params;
  params.temperature = 0.0f;
  params.repeat_penalty = 0.25f;
  const std::vector<float> logits = {1.0f, 0.95f, 0.92f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.9f};
  Sampler sampler(params);
  EXPECT_EQ(sampler.candidates_needed({9}), 0);
  EXPECT_EQ(sampler.sample(logits.data(), int(logits.size()), {9}), 9);
  EXPECT_EQ(sampler.candidates_needed({}), 1);  // nothing recent: nothing raised
  params.repeat_penalty = 1.3f;
  params.temperature = 1.0f;
  params.top_k = std::numeric_limits<int>::max();  // k + |penalized| saturates instead of wrapping
  EXPECT_EQ(Sampler(params).candidates_needed({1, 2}), std::numeric_limits<int>::max());
}

}  // namespace
}  // namespace gemlite
