#pragma once
// QuantLinear: y [M, N] = x [M, K] · Wᵀ (+ bias) with W in any weight format. Every
// projection of the model goes through this one interface; each backend decides, in one
// place (Backend::make_linear), which kernel serves which format and batch size.
#include <memory>

#include "kernels/packed_weight.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace gemlite {

// What a stacked projection's output feeds (Backend::make_stacked_linear).
enum class StackedUse {
  Concat,  // read as it is: y [M, N_0 + N_1 + ...]
  SwiGLU,  // [gate; up], equal halves, read only as silu(gate) * up (QuantLinear::forward_swiglu)
};

// The RMSNorm between two blocks left half done (QuantLinear::forward_residual): the
// tensor handed on holds residual ∘ norm_weight, and rsqrt(Σ_p sum_squares[m, p] / K + eps)
// is still to be applied, which the next projection does to its outputs.
struct PendingNorm {
  Tensor sum_squares;  // [M, parts] F32 partial sums of the residual's squares
  float eps = 0;
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
  // With `norm`, x is the `scaled` of a forward_residual and the pending norm is applied
  // (only where fuses_rmsnorm(M)).
  virtual bool forward_swiglu(const Tensor& /*x*/, Tensor& /*y*/, const PendingNorm* /*norm*/ = nullptr) const {
    return false;
  }

  // The RMSNorm between blocks fused into the projections on either side (the CUDA qN
  // GEMV at M <= 8; LlamaModel takes it where both sides have it). Whether this linear
  // takes a PendingNorm at M rows (forward_normed, forward_swiglu) and, unless it is a
  // SwiGLU pair, runs forward_residual:
  virtual bool fuses_rmsnorm(int64_t /*M*/) const { return false; }
  // The projection that ends a block: residual [M, N] += x · Wᵀ, scaled [M, N] = residual ∘
  // norm_weight [1, N] (F32), and the returned PendingNorm (whose sum_squares this linear
  // owns: valid until its next call) finishes the norm in the next projection.
  virtual PendingNorm forward_residual(const Tensor& /*x*/, Tensor& /*residual*/, const Tensor& /*norm_weight*/,
                                       float /*eps*/, Tensor& /*scaled*/) const {
    throw Error("linear " + format_.name() + ": no fused residual + RMSNorm pass");
  }
  // y [M, N] = rmsnorm(residual) ∘ norm_weight · Wᵀ (+ bias), given forward_residual's
  // `scaled` [M, K] and its PendingNorm.
  virtual void forward_normed(const Tensor& /*scaled*/, const PendingNorm& /*norm*/, Tensor& /*y*/) const {
    throw Error("linear " + format_.name() + ": no pass that finishes a pending RMSNorm");
  }

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
