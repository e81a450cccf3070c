#pragma once
// What the device weight uploaders (upload_qn_weight, upload_fpx_weight) share: where their
// buffers come from, and copying a packed weight's optional parts to the GPU.
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda_check.h"
#include "kernels/packed_weight.h"

namespace gemlite {

// Device memory for a weight's buffers, usable on every stream once this returns: from the
// device's default memory pool (cudaMallocAsync), which packs allocations, where cudaMalloc
// gives each one whole 2 MiB pages. On the H100 a probe allocating the buffers of 32
// Llama-2-7B-shaped q4g64 layers (codes, scale/bias pairs, norm weights; 3475 MiB asked)
// lost 3618 MiB of the device through cudaMalloc (+4.1 %) and 3488 MiB from the pool
// (+0.4 %); gemlite-bench's memory line for llama2-7b q4g64 went from +5.2 % to +1.9 %
// over weights + KV cache.
inline void* device_weight_alloc(size_t bytes) {
  void* device = nullptr;
  const cudaError_t allocated = cudaMallocAsync(&device, bytes, cudaStreamLegacy);
  if (allocated != cudaSuccess) {
    cudaGetLastError();  // cleared: the next launch check would report it as its own
    CUDA_CHECK(allocated);
  }
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
  return device;
}

// Returns a device_weight_alloc buffer (null: nothing) to the pool once the device is idle,
// as cudaFree would.
inline void device_weight_free(const void* device) {
  if (!device) return;
  cudaDeviceSynchronize();
  // Errors ignored, as cudaFree's were (this runs in destructors), and cleared, so that a
  // later launch check does not report them as its own.
  if (cudaFreeAsync(const_cast<void*>(device), cudaStreamLegacy) != cudaSuccess) cudaGetLastError();
}

// The weight's "bias" part ([rows] fp32) in a new device_weight_alloc buffer (the caller
// frees it with device_weight_free), or null when the weight has none. Synchronous.
inline const float* upload_bias(const PackedWeight& w) {
  const auto bias = w.parts.find("bias");
  if (bias == w.parts.end()) return nullptr;
  float* device = static_cast<float*>(device_weight_alloc(size_t(w.rows) * 4));
  const cudaError_t copied = cudaMemcpy(device, bias->second.data, size_t(w.rows) * 4, cudaMemcpyHostToDevice);
  if (copied != cudaSuccess) {
    device_weight_free(device);
    throw_cuda_error(copied, "cudaMemcpy(bias)", __FILE__, __LINE__);
  }
  return device;
}

}  // namespace gemlite
