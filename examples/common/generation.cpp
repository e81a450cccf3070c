#include "examples/common/generation.h"

#include <algorithm>

#include "runtime/error.h"

namespace gemlite {

void Generation::feed(const std::vector<int>& ids) {
  if (int(ids.size()) > room())
    throw Error("context is full: " + std::to_string(ids.size()) + " tokens do not fit in the " +
                std::to_string(room()) + " positions left (raise -c/--ctx-size)");
  for (size_t start = 0; start < ids.size(); start += prefill_chunk_) {
    const size_t end = std::min(ids.size(), start + size_t(prefill_chunk_));
    const std::vector<int> chunk(ids.begin() + start, ids.begin() + end);
    model_.forward(chunk, position(), /*all_logits=*/false, logits_);
    tokens_.insert(tokens_.end(), chunk.begin(), chunk.end());
  }
}

int Generation::sample(Sampler& sampler) const {
  if (logits_.empty()) throw Error("sample() before any token was fed");
  return sampler.sample(logits_.data(), int(logits_.size()), tokens_);
}

}  // namespace gemlite
