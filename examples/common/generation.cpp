#include "examples/common/generation.h"

#include <algorithm>

#include "runtime/error.h"

namespace gemlite {

void Generation::feed(const std::vector<int>& ids) {
  if (ids.empty()) return;
  if (int(ids.size()) > room())
    throw Error("context is full: " + std::to_string(ids.size()) + " tokens do not fit in the " +
                std::to_string(room()) + " positions left (raise -c/--ctx-size)");
  has_logits_ = false;  // a forward that throws leaves logits_ pointing at overwritten rows
  logits_ = model_.forward_last(ids, position());
  has_logits_ = true;
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
}

int Generation::sample(Sampler& sampler) {
  if (!has_logits_) throw Error("sample() before any token was fed");
  Backend& backend = model_.backend();
  if (sampler.is_plain_argmax()) return backend.argmax(logits_);
  // Only the logits that can matter cross to the host where the sampler can say which
  // (top-k): the CUDA backend selects them on the device.
  const int needed = sampler.candidates_needed(tokens_);
  const int count = int(std::min<int64_t>(needed, logits_.numel()));
  if (needed > 0 && count <= backend.max_top_k()) {
    top_ids_.resize(size_t(count));
    top_logits_.resize(size_t(count));
    backend.top_k(logits_, count, top_ids_.data(), top_logits_.data());
    return sampler.sample_top(top_ids_.data(), top_logits_.data(), count, tokens_);
  }
  host_logits_.resize(size_t(logits_.numel()));
  backend.copy_to_host(logits_, host_logits_.data());
  return sampler.sample(host_logits_.data(), int(host_logits_.size()), tokens_);
}

}  // namespace gemlite
