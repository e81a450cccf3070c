#pragma once
// The CUDA backend's QuantLinear for every weight format; the dispatch rule (which kernel
// serves which format and batch size) is in CudaLinear::forward, cuda_linear.cu.
#include <memory>
#include <vector>

#include "kernels/packed_weight.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/quant_linear.h"

namespace gemlite {

// Uploads `weight` (synchronously) for activations of type `act` (F16 or BF16).
std::unique_ptr<QuantLinear> make_cuda_linear(const PackedWeight& weight, std::shared_ptr<CudaContext> ctx,
                                              DType act);
// One linear over `weights` stacked along N (Backend::make_stacked_linear), keeping no
// stacked copy in host memory; null when they cannot be stacked. StackedUse::SwiGLU of qN /
// s7 halves of a multiple of 8 rows gets gemv_qn's paired layout (forward_swiglu where gemv_qn
// runs: up to gemv_sliced_max_m() rows, in slices of kGemvQnMaxRows).
std::unique_ptr<QuantLinear> make_stacked_cuda_linear(const std::vector<const PackedWeight*>& weights,
                                                      std::shared_ptr<CudaContext> ctx, DType act,
                                                      StackedUse use = StackedUse::Concat);

}  // namespace gemlite
