#pragma once
// A running sequence on a model: the tokens in its KV cache and the logits of the last
// one. Prompts are fed at once (the model runs them in chunks: prefill); generation
// samples and feeds one token at a time (decode). gemlite-chat and gemlite-bench share
// it, so their timings agree.
#include <vector>

#include "models/llama_model.h"
#include "runtime/sampler.h"

namespace gemlite {

class Generation {
 public:
  explicit Generation(LlamaModel& model) : model_(model) {}

  // Appends ids to the cache. Throws Error when they do not fit in the context.
  void feed(const std::vector<int>& ids);
  // Draws the next token from the last logits (feed() must have run). A plain-argmax
  // sampler takes the argmax on the backend, so only the id crosses to the host; a top-k
  // sampler gets the few largest logits from the backend (Backend::top_k); others copy the
  // logits [vocab] to the host first.
  int sample(Sampler& sampler);
  // Waits until the backend has finished the work fed so far (for timing).
  void wait() { model_.backend().synchronize(); }
  // Forgets everything: the next feed() starts at position 0.
  void reset() {
    tokens_.clear();
    has_logits_ = false;
  }

  int position() const { return int(tokens_.size()); }
  int room() const { return model_.context() - position(); }  // positions still free
  const std::vector<int>& tokens() const { return tokens_; }

 private:
  LlamaModel& model_;
  std::vector<int> tokens_;         // [position] every token in the KV cache
  Tensor logits_;                   // [1, vocab] on the backend, after the last token fed
  bool has_logits_ = false;
  std::vector<float> host_logits_;  // [vocab] for samplers that need them all
  std::vector<int> top_ids_;        // [count] the largest logits' ids (Backend::top_k)
  std::vector<float> top_logits_;   // [count] and values
};

}  // namespace gemlite
