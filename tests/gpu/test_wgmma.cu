// kernels/wgmma.cuh on the GPU: one warpgroup multiplies a one-hot A (row r selects k =
// r % 16, given in registers as mma.sync A fragments) by a B of distinct integers staged
// in the K-major core-matrix layout wgmma_desc describes, so every output names the B
// element it read: D[r][n] must equal B[r % 16][n] exactly (integers below 2048 are exact
// in fp16, the products are 1 x B and the sums add zeros). Catches a wrong descriptor
// (strides swapped), a wrong A or accumulator fragment order, or a missing proxy fence.
#include <gtest/gtest.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/wgmma.cuh"
#include "tests/gpu/gpu_test_helpers.h"

namespace gemlite {
namespace {

// b [16][N] row-major (k, n) fp16 bits -> d [64][N] fp32.
template <int N>
__global__ void wgmma_one_hot_kernel(const uint16_t* b, float* d) {
  __shared__ __align__(128) uint16_t staged[16 * N];
  // Core matrix (k / 8, n / 8) at ((k / 8) (N / 8) + n / 8) * 128 bytes, row n % 8 at + 16 (n % 8).
  for (int i = threadIdx.x; i < 16 * N; i += blockDim.x) {
    const int k = i / N, n = i % N;
    staged[(((k / 8) * (N / 8) + n / 8) * 128 + (n % 8) * 16) / 2 + k % 8] = b[i];
  }
  fence_async_shared();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tig = lane % 4;
  const auto one_hot = [&](int row, int k) -> uint32_t { return k == row % 16 ? 0x3C00u : 0u; };  // fp16 1.0
  const auto pair = [&](int row, int k) { return one_hot(row, k) | one_hot(row, k + 1) << 16; };
  const int row = 16 * warp + gid;
  const uint32_t a[4] = {pair(row, 2 * tig), pair(row + 8, 2 * tig), pair(row, 2 * tig + 8), pair(row + 8, 2 * tig + 8)};
  float acc[N / 8][4] = {};
  wgmma_fence();
  wgmma_rs<N, false>(acc, a, wgmma_desc(staged, (N / 8) * 128, 128));
  wgmma_commit();
  wgmma_wait<0>();
  for (int j = 0; j < N / 8; ++j)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) d[(row + 8 * h) * N + 8 * j + 2 * tig + e] = acc[j][2 * h + e];
}

template <int N>
void check_one_hot() {
  int major = 0, minor = 0, device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) GTEST_SKIP() << "wgmma needs compute capability 9.0";
  std::vector<uint16_t> b(16 * N);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < N; ++n) b[size_t(k * N + n)] = __half_as_ushort(__float2half(float(k * 100 + n)));
  DeviceBuffer db(b.size() * 2), dd(size_t(64 * N) * 4);
  CUDA_CHECK(cudaMemcpy(db.ptr, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(dd.ptr, 0xFF, size_t(64 * N) * 4));
  wgmma_one_hot_kernel<N><<<1, 128>>>(static_cast<const uint16_t*>(db.ptr), static_cast<float*>(dd.ptr));
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> d(size_t(64 * N));
  CUDA_CHECK(cudaMemcpy(d.data(), dd.ptr, d.size() * 4, cudaMemcpyDeviceToHost));
  int failures = 0;
  std::string first;
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < N; ++n) {
      const float want = float((r % 16) * 100 + n), got = d[size_t(r * N + n)];
      if (got != want && failures++ == 0)
        first = "D[" + std::to_string(r) + "][" + std::to_string(n) + "] = " + std::to_string(got) + ", expected " +
                std::to_string(want);
    }
  EXPECT_EQ(failures, 0) << first << "; row 0: " << d[0] << " " << d[1] << " " << d[8] << " " << d[9]
                         << "; row 1: " << d[N] << " " << d[N + 1] << " " << d[N + 8];
}

TEST(Wgmma, OneHotRowsReadTheirBRowN32) { check_one_hot<32>(); }
TEST(Wgmma, OneHotRowsReadTheirBRowN64) { check_one_hot<64>(); }

}  // namespace
}  // namespace gemlite
