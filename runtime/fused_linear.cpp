#include "runtime/fused_linear.h"

#include <string>

#include "runtime/error.h"

namespace gemlite {

FusedLinear::FusedLinear(const std::vector<const PackedWeight*>& weights, Backend& backend, int max_rows,
                         StackedUse use)
    : backend_(backend), max_rows_(max_rows), use_(use) {
  for (const PackedWeight* w : weights) out_features_ += w->rows;
  if (use == StackedUse::SwiGLU && (weights.size() != 2 || weights[0]->rows != weights[1]->rows))
    throw Error("fused linear: a SwiGLU pair needs two weights of equal rows (gate, up)");
  stacked_ = backend.make_stacked_linear(weights, use);
  if (stacked_) return;
  for (const PackedWeight* w : weights) {
    separate_.push_back(backend.make_linear(*w));
    scratch_.push_back(backend.alloc(max_rows, w->rows));
  }
}

void FusedLinear::forward(const Tensor& x, Tensor& y, const PendingNorm* norm) const {
  if (y.cols != out_features_ || y.rows != x.rows || (!stacked_ && x.rows > max_rows_))
    throw Error("fused linear: x [" + std::to_string(x.rows) + ", " + std::to_string(x.cols) + "] -> y [" +
                std::to_string(y.rows) + ", " + std::to_string(y.cols) + "] (expected " +
                std::to_string(out_features_) + " columns, at most " + std::to_string(max_rows_) + " rows)");
  if (norm) {
    if (!fuses_rmsnorm(x.rows)) throw Error("fused linear: a pending RMSNorm for a linear that cannot finish it");
    stacked_->forward_normed(x, *norm, y);
    return;
  }
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

void FusedLinear::forward_swiglu(const Tensor& x, Tensor& gate_up, Tensor& y, const PendingNorm* norm) const {
  if (use_ != StackedUse::SwiGLU) throw Error("fused linear: forward_swiglu of a linear not made for SwiGLU");
  if (stacked_ && stacked_->forward_swiglu(x, y, norm)) return;
  forward(x, gate_up, norm);
  backend_.silu_mul(gate_up, y);
}

}  // namespace gemlite
