#include "examples/common/generation.h"

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
  host_logits_.resize(size_t(logits_.numel()));
  backend.copy_to_host(logits_, host_logits_.data());
  return sampler.sample(host_logits_.data(), int(host_logits_.size()), tokens_);
}

}  // namespace gemlite
