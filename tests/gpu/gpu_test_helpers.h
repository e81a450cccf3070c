#pragma once
// What the kernel tests share: one random seed per test run (printed, and settable with
// GEMLITE_TEST_SEED to replay a failure), random weights and activations, device buffers
// and a stream that clean up.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/packed_weight.h"
#include "runtime/dtype.h"

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

// W [N, K]: rows of different magnitude with an outlier per 97 columns (so row and group
// scales differ, and small codes are common); with offsets, every fifth row is shifted
// away from zero, so that zero points leave the middle of the code range.
inline std::vector<float> random_weight(int64_t N, int64_t K, std::mt19937_64& rng, bool offsets = true) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.25f, 2.0f);
  std::vector<float> w(size_t(N * K));
  for (int64_t n = 0; n < N; ++n) {
    const float scale = uniform(rng), offset = offsets && n % 5 == 0 ? 2.0f * normal(rng) : 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      float v = offset + scale * normal(rng);
      if (k % 97 == n % 97) v *= 6.0f;
      w[size_t(n * K + k)] = v;
    }
  }
  return w;
}

// A bias [N] drawn from N(0, 1), stored as the weight's "bias" part (F32); its values.
inline std::vector<float> add_random_bias(PackedWeight* w, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> bias(static_cast<size_t>(w->rows));
  for (float& b : bias) b = normal(rng);
  w->parts["bias"] = HostTensor::copy_of(DType::F32, {w->rows}, bias.data());
  return bias;
}

// x [M, K] drawn from N(0, 1), or with `positive` uniform in [0.5, 1] (a sum of positive
// products, whose error bound is a small share of it: the long-K tests), rounded to the
// activation type (F16 or BF16): the bits and their floats.
inline void random_activations(int64_t M, int64_t K, DType act, std::mt19937_64& rng, std::vector<uint16_t>* bits,
                               std::vector<float>* values, bool positive = false) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.5f, 1.0f);
  bits->resize(size_t(M * K));
  values->resize(size_t(M * K));
  for (size_t i = 0; i < bits->size(); ++i) {
    const float v = positive ? uniform(rng) : normal(rng);
    (*bits)[i] = act == DType::BF16 ? float_to_bf16(v) : float_to_half(v);
    (*values)[i] = act == DType::BF16 ? bf16_to_float((*bits)[i]) : half_to_float((*bits)[i]);
  }
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
