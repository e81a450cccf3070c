#pragma once
// What the kernel tests share: one random seed per test run (printed, and settable with
// GEMLITE_TEST_SEED to replay a failure), device buffers and a stream that clean up.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>

#include "kernels/cuda_check.h"

namespace gemlite {

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("GEMLITE_TEST_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::cout << "[gpu tests] GEMLITE_TEST_SEED=" << s << "\n";
    return s;
  }();
  return seed;
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct StreamGuard {
  cudaStream_t stream = nullptr;
  StreamGuard() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~StreamGuard() { cudaStreamDestroy(stream); }
};

}  // namespace gemlite
