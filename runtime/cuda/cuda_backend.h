#pragma once
// The CUDA backend: fp16 or bf16 activations on one stream; each projection through the
// project's kernels or cuBLAS by format and rows (CudaLinear::forward in cuda_linear.cu
// has the dispatch rule). Checked against
// the CPU backend by tests/gpu/test_cuda_backend.cu.
#include <memory>
#include <string>

#include "runtime/backend.h"

namespace gemlite {

// "" when a CUDA device can be used, else one line saying why not.
std::string cuda_unavailable_reason();
// Throws Error("--device cuda: <reason>; use --device cpu") when cuda_unavailable_reason says one.
void require_cuda_device();

// Throws Error when no device can be used, or for activations other than F16/BF16.
// Graphs are off when options.graphs is false or the environment has GEMLITE_NO_GRAPH=1.
std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options = {});

}  // namespace gemlite
