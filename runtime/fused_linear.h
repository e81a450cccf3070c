#pragma once
// Projections of one input whose outputs sit side by side:
//   y [M, N_0 + N_1 + ...] = x [M, K] · [W_0; W_1; ...]ᵀ
// The model's q, k, v read the same normed input, and so do gate and up. Run as one
// QuantLinear over the stacked weights (concat_rows), they are one launch instead of three
// (two), and the larger N fills the GPU better: a batch-1 GEMV of N = 4096 takes ~10.7 us of
// which ~2.9 us move its bytes (H100, Llama-2-7B q4g64, ncu). Where the weights cannot be
// stacked (different formats from gemlite-quantize overrides, or an fp6/fp5 part before the
// last whose rows do not fill its 16-row blocks), each runs on its own into a scratch
// tensor [max_rows, N_i] (per FusedLinear: per layer) that is then copied into its columns.
#include <memory>
#include <vector>

#include "runtime/backend.h"

namespace gemlite {

class FusedLinear {
 public:
  // `max_rows`: the largest M forward will see (sizes the scratch tensors, if any).
  FusedLinear(const std::vector<const PackedWeight*>& weights, Backend& backend, int max_rows,
              StackedUse use = StackedUse::Concat);

  // x [M, K] -> y [M, out_features()], M <= max_rows. With `norm`, x is a `scaled` of
  // QuantLinear::forward_residual (only where fuses_rmsnorm(M)).
  void forward(const Tensor& x, Tensor& y, const PendingNorm* norm = nullptr) const;

  // y [M, out_features() / 2] = silu(gate) * up of a [gate; up] pair made with
  // StackedUse::SwiGLU: one pass where the stacked linear has one (QuantLinear::forward_swiglu,
  // the CUDA qN GEMV at decode), else forward into gate_up [M, out_features()] and the
  // backend's silu_mul.
  void forward_swiglu(const Tensor& x, Tensor& gate_up, Tensor& y, const PendingNorm* norm = nullptr) const;

  // Whether forward and forward_swiglu take a PendingNorm at M rows (stacked only).
  bool fuses_rmsnorm(int64_t M) const { return stacked_ && stacked_->fuses_rmsnorm(M); }

  int64_t out_features() const { return out_features_; }
  bool stacked() const { return stacked_ != nullptr; }  // one QuantLinear for all

 private:
  Backend& backend_;
  int max_rows_;
  StackedUse use_;
  int64_t out_features_ = 0;
  std::unique_ptr<QuantLinear> stacked_;
  std::vector<std::unique_ptr<QuantLinear>> separate_;  // when not stacked
  std::vector<Tensor> scratch_;                         // [max_rows, N_i] per separate_[i]
};

}  // namespace gemlite
