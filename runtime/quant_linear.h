#pragma once
// QuantLinear: y [M, N] = x [M, K] · Wᵀ (+ bias) with W in any weight format. Every
// projection of the model goes through this one interface; each backend decides, in one
// place (Backend::make_linear), which kernel serves which format and batch size.
#include <memory>

#include "kernels/packed_weight.h"
#include "runtime/tensor.h"

namespace gemlite {

// What a stacked projection's output feeds (Backend::make_stacked_linear).
enum class StackedUse {
  Concat,  // read as it is: y [M, N_0 + N_1 + ...]
  SwiGLU,  // [gate; up], equal halves, read only as silu(gate) * up (QuantLinear::forward_swiglu)
};

class QuantLinear {
 public:
  explicit QuantLinear(const PackedWeight& weight)
      : format_(weight.format), out_features_(weight.rows), in_features_(weight.cols),
        nbytes_(weight.nbytes()) {}
  virtual ~QuantLinear() = default;

  // x [M, K] -> y [M, N]; both on the owning backend in its activation dtype.
  virtual void forward(const Tensor& x, Tensor& y) const = 0;

  // For a weight stacked with StackedUse::SwiGLU: y [M, N/2] = silu(gate) * up, gate and up
  // the two halves of x · Wᵀ, in one pass. False (nothing written) where this linear has
  // no such pass at this M: the caller then runs forward and the backend's silu_mul.
  virtual bool forward_swiglu(const Tensor& /*x*/, Tensor& /*y*/) const { return false; }

  const WeightFormat& format() const { return format_; }
  int64_t out_features() const { return out_features_; }  // N
  int64_t in_features() const { return in_features_; }    // K
  size_t nbytes() const { return nbytes_; }                // weight bytes read per call

 private:
  WeightFormat format_;
  int64_t out_features_, in_features_;
  size_t nbytes_;
};

}  // namespace gemlite
