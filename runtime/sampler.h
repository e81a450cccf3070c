#pragma once
// Picks the next token from the logits, with llama-cli's default settings and in
// llama.cpp's order: repetition penalty, then top-k, top-p, min-p, temperature, and a
// draw from the softmax of what is left.
#include <cstdint>
#include <random>
#include <vector>

namespace gemlite {

// A token and its logit (after any repetition penalty).
struct TokenCandidate {
  int id;
  float logit;
};

// The order every choice follows, so each is reproducible: higher logits first, equal
// logits by lower id, NaN below everything (a strict weak order even with NaNs).
bool more_likely(const TokenCandidate& a, const TokenCandidate& b);

struct SamplerParams {
  float temperature = 0.8f;    // <= 0: greedy, the argmax after the repetition penalty
  int top_k = 40;              // <= 0: no limit
  float top_p = 0.95f;         // >= 1: no limit
  float min_p = 0.05f;         // keep tokens at least min_p times as likely as the best; <= 0: off
  float repeat_penalty = 1.0f; // 1: off
  int repeat_last_n = 64;      // how many recent tokens are penalized; < 0: all of them
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  // `recent_tokens` is the context so far, oldest first; only its tail is penalized.
  // The same seed and inputs give the same tokens on every platform.
  int sample(const float* logits, int vocab, const std::vector<int>& recent_tokens);

  // How many of the largest logits decide the draw: top_k (1 when greedy) plus the distinct
  // recent tokens a repetition penalty may push out of them; 0 when all of them may matter
  // (top_k <= 0 at a temperature, or a penalty below 1 on any recent token). A penalty
  // above 1 only lowers logits, so the k best after it are among the k + |penalized| best
  // before it.
  int candidates_needed(const std::vector<int>& recent_tokens) const;
  // sample() from only those: ids / logits [count] the count = min(candidates_needed, vocab)
  // largest logits, largest first and equal ones by lower id (Backend::top_k). The same
  // token as sample() on all the logits, for the same seed and draws so far.
  int sample_top(const int* ids, const float* logits, int count, const std::vector<int>& recent_tokens);

  // True when sample() is the plain argmax of the logits (greedy, no repetition penalty):
  // then the caller may take the argmax where the logits are (on the GPU) instead.
  bool is_plain_argmax() const {
    return params_.temperature <= 0.0f && (params_.repeat_penalty == 1.0f || params_.repeat_last_n == 0);
  }

 private:
  // The token from the penalized candidates (any order): greedy, or top-k, top-p, min-p
  // and a draw at the temperature.
  int choose(std::vector<TokenCandidate>& candidates);

  SamplerParams params_;
  std::mt19937_64 rng_;
};

}  // namespace gemlite
