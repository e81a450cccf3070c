#include "runtime/fused_linear.h"

namespace gemlite {

FusedLinear::FusedLinear(const std::vector<const PackedWeight*>& weights, Backend& backend, int max_rows)
    : backend_(backend) {
  for (const PackedWeight* w : weights) out_features_ += w->rows;
  stacked_ = backend.make_stacked_linear(weights);
  if (stacked_) return;
  for (const PackedWeight* w : weights) {
    separate_.push_back(backend.make_linear(*w));
    scratch_.push_back(backend.alloc(max_rows, w->rows));
  }
}

void FusedLinear::forward(const Tensor& x, Tensor& y) const {
  if (stacked_) {
    stacked_->forward(x, y);
    return;
  }
  int64_t col = 0;
  for (size_t i = 0; i < separate_.size(); ++i) {
    Tensor part = scratch_[i].slice_rows(0, x.rows);  // [M, N_i]
    separate_[i]->forward(x, part);
    backend_.copy_columns(part, y, col);
    col += part.cols;
  }
}

}  // namespace gemlite
