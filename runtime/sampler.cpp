#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_set>

namespace gemlite {

bool more_likely(const TokenCandidate& a, const TokenCandidate& b) {
  const bool a_nan = std::isnan(a.logit), b_nan = std::isnan(b.logit);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

namespace {

// As llama.cpp: each distinct recent token is penalized once, however often it occurred.
std::unordered_set<int> penalized_ids(const std::vector<int>& recent_tokens, const SamplerParams& params) {
  if (params.repeat_penalty == 1.0f || params.repeat_last_n == 0) return {};
  const size_t window = params.repeat_last_n < 0
                            ? recent_tokens.size()
                            : std::min(recent_tokens.size(), size_t(params.repeat_last_n));
  return std::unordered_set<int>(recent_tokens.end() - window, recent_tokens.end());
}

// Dividing a positive logit and multiplying a negative one both make the token less likely.
float penalized(float logit, const SamplerParams& params) {
  return logit > 0 ? logit / params.repeat_penalty : logit * params.repeat_penalty;
}

std::vector<TokenCandidate> penalized_candidates(const float* logits, int vocab,
                                            const std::vector<int>& recent_tokens,
                                            const SamplerParams& params) {
  std::vector<TokenCandidate> candidates(vocab);
  for (int id = 0; id < vocab; ++id) candidates[id] = {id, logits[id]};
  for (int id : penalized_ids(recent_tokens, params)) {
    if (id < 0 || id >= vocab) continue;
    candidates[id].logit = penalized(candidates[id].logit, params);
  }
  return candidates;
}

// Sorts the candidates, most likely first, keeping the k best (all when k <= 0).
void sort_and_keep_top_k(std::vector<TokenCandidate>& candidates, int k) {
  if (k > 0 && size_t(k) < candidates.size()) {
    std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), more_likely);
    candidates.resize(k);
  } else {
    std::sort(candidates.begin(), candidates.end(), more_likely);
  }
}

// Probabilities of sorted candidates at the given temperature.
std::vector<double> softmax(const std::vector<TokenCandidate>& sorted, float temperature) {
  std::vector<double> probabilities(sorted.size());
  double sum = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    // Subtracting the maximum keeps exp() from overflowing.
    probabilities[i] = std::exp(double(sorted[i].logit - sorted[0].logit) / temperature);
    sum += probabilities[i];
  }
  for (double& probability : probabilities) probability /= sum;
  return probabilities;
}

// Keeps the fewest most likely candidates whose probabilities add up to at least p.
void keep_top_p(std::vector<TokenCandidate>& sorted, float p) {
  if (p >= 1.0f) return;
  const std::vector<double> probabilities = softmax(sorted, 1.0f);
  double cumulative = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    cumulative += probabilities[i];
    if (cumulative >= p) {
      sorted.resize(i + 1);
      return;
    }
  }
}

// Keeps the candidates at least min_p times as likely as the best one. In logits that is
// logit >= best - log(1 / min_p), which needs no softmax.
void keep_min_p(std::vector<TokenCandidate>& sorted, float min_p) {
  if (min_p <= 0.0f) return;
  const float threshold = sorted[0].logit + std::log(min_p);
  const auto first_dropped =
      std::find_if(sorted.begin() + 1, sorted.end(),
                   [&](const TokenCandidate& candidate) { return candidate.logit < threshold; });
  sorted.erase(first_dropped, sorted.end());
}

// A uniform double in [0, 1) from the engine's raw 64 bits: std::uniform_real_distribution
// is implemented differently by each standard library, the engine's output is not.
double uniform_unit(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

int draw(const std::vector<TokenCandidate>& sorted, float temperature, std::mt19937_64& rng) {
  const std::vector<double> probabilities = softmax(sorted, temperature);
  double remaining = uniform_unit(rng);
  for (size_t i = 0; i < sorted.size(); ++i) {
    remaining -= probabilities[i];
    if (remaining < 0) return sorted[i].id;
  }
  return sorted.back().id;  // rounding left a sliver of probability unassigned
}

}  // namespace

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {}

int Sampler::candidates_needed(const std::vector<int>& recent_tokens) const {
  const int k = params_.temperature <= 0.0f ? 1 : params_.top_k;
  if (k <= 0) return 0;
  const size_t penalized = penalized_ids(recent_tokens, params_).size();
  // A penalty below 1 raises the logits of recent tokens: any of them may join the top k.
  if (params_.repeat_penalty < 1.0f && penalized > 0) return 0;
  return int(std::min<int64_t>(int64_t(k) + int64_t(penalized), std::numeric_limits<int>::max()));
}

int Sampler::sample_top(const int* ids, const float* logits, int count, const std::vector<int>& recent_tokens) {
  const std::unordered_set<int> penalize = penalized_ids(recent_tokens, params_);
  std::vector<TokenCandidate> candidates(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i)
    candidates[size_t(i)] = {ids[i], penalize.count(ids[i]) ? penalized(logits[i], params_) : logits[i]};
  return choose(candidates);
}

int Sampler::sample(const float* logits, int vocab, const std::vector<int>& recent_tokens) {
  std::vector<TokenCandidate> candidates = penalized_candidates(logits, vocab, recent_tokens, params_);
  return choose(candidates);
}

int Sampler::choose(std::vector<TokenCandidate>& candidates) {
  if (params_.temperature <= 0.0f) {
    return std::min_element(candidates.begin(), candidates.end(), more_likely)->id;
  }
  sort_and_keep_top_k(candidates, params_.top_k);
  keep_top_p(candidates, params_.top_p);
  keep_min_p(candidates, params_.min_p);
  return draw(candidates, params_.temperature, rng_);
}

}  // namespace gemlite
