#pragma once
// What the device weight uploaders (upload_qn_weight, upload_fpx_weight) share: copying a
// packed weight's optional parts to the GPU.
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda_check.h"
#include "kernels/packed_weight.h"

namespace gemlite {

// The weight's "bias" part ([rows] fp32) in a new device buffer (the caller cudaFrees it),
// or null when the weight has none. Synchronous.
inline const float* upload_bias(const PackedWeight& w) {
  const auto bias = w.parts.find("bias");
  if (bias == w.parts.end()) return nullptr;
  float* device = nullptr;
  CUDA_CHECK(cudaMalloc(&device, size_t(w.rows) * 4));
  const cudaError_t copied = cudaMemcpy(device, bias->second.data, size_t(w.rows) * 4, cudaMemcpyHostToDevice);
  if (copied != cudaSuccess) {
    cudaFree(device);
    throw_cuda_error(copied, "cudaMemcpy(bias)", __FILE__, __LINE__);
  }
  return device;
}

}  // namespace gemlite
