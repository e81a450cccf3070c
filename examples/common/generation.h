#pragma once
// A running sequence on a model: the tokens in its KV cache and the logits of the last
// one. Prompts are fed in chunks (prefill); generation samples and feeds one token at a
// time (decode). gemlite-chat and gemlite-bench share it, so their timings agree.
#include <vector>

#include "models/llama_model.h"
#include "runtime/sampler.h"

namespace gemlite {

class Generation {
 public:
  // Prompts are fed in chunks of at most `prefill_chunk` tokens to bound activation memory.
  explicit Generation(LlamaModel& model, int prefill_chunk = 512)
      : model_(model), prefill_chunk_(prefill_chunk) {}

  // Appends ids to the cache. Throws Error when they do not fit in the context.
  void feed(const std::vector<int>& ids);
  // Draws the next token from the last logits (feed() must have run).
  int sample(Sampler& sampler) const;
  // Forgets everything: the next feed() starts at position 0.
  void reset() { tokens_.clear(); }

  int position() const { return int(tokens_.size()); }
  int room() const { return model_.context() - position(); }  // positions still free
  const std::vector<int>& tokens() const { return tokens_; }

 private:
  LlamaModel& model_;
  int prefill_chunk_;
  std::vector<int> tokens_;   // [position] every token in the KV cache
  std::vector<float> logits_; // [vocab] after the last token fed
};

}  // namespace gemlite
