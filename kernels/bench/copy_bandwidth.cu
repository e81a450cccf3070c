// The copy-bandwidth ceiling every "% of copy" in gemlite refers to (copy_bandwidth.h).
#include "kernels/bench/copy_bandwidth.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/bench/bench_util.h"
#include "kernels/cuda_check.h"

namespace gemlite {

namespace {

// dst [n] = src [n], 16 bytes per thread and step: the copy-bandwidth ceiling.
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// Device-to-device copy of 1 GiB, bytes read + written per second: the better of
// cudaMemcpyAsync and a plain 16-byte copy kernel (a memcpy node inside a graph measured
// only ~2.44 TB/s on the H100, below what cuBLAS streams).
double copy_bandwidth_gbs(cudaStream_t stream, FILE* out) {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  fill_words(static_cast<uint32_t*>(a), int64_t(bytes / 4), 1, stream);
  cudaDeviceProp prop;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const double kernel_us = time_graph_us(stream, 4, 10, [&](int i) {
    copy_kernel<<<prop.multiProcessorCount * 8, 512, 0, stream>>>(static_cast<const uint4*>(i % 2 ? b : a),
                                                                 static_cast<uint4*>(i % 2 ? a : b), int64_t(bytes / 16));
    CHECK_LAST_LAUNCH("copy_kernel");
  });
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int r = 0; r < 12; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    CUDA_CHECK(cudaMemcpyAsync(r % 2 ? a : b, r % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r >= 2) times.push_back(ms * 1000.0f);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  const double memcpy_us = times[times.size() / 2];
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  const double kernel_gbs = 2.0 * double(bytes) / (kernel_us * 1e3), memcpy_gbs = 2.0 * double(bytes) / (memcpy_us * 1e3);
  const double gbs = std::max(kernel_gbs, memcpy_gbs);
  std::fprintf(out, "copy: %.1f GB/s (%zu MiB device-to-device, bytes read + written; copy kernel %.1f, cudaMemcpyAsync %.1f)\n",
               gbs, bytes >> 20, kernel_gbs, memcpy_gbs);
  std::fflush(out);
  return gbs;
}

}  // namespace

double device_copy_bandwidth_gbs(FILE* log) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const double gbs = copy_bandwidth_gbs(stream, log);
  CUDA_CHECK(cudaStreamDestroy(stream));
  return gbs;
}

}  // namespace gemlite
