// gemm_qn (the tiled qN matmul of prompt chunks) against the CPU reference of its own
// weights on fresh random inputs, with the GEMV's reference and tolerance for the same reasons
// (tests/gpu/qn_reference.h: the kernel dequantizes each weight into the activation type
// exactly as the GEMV does and sums in fp32 on the tensor cores): every
// width it serves (2..8 bits) x group {32, 64, 128, per-channel} x {fp16, bf16}, at M that
// fill no chunk of its x rows evenly (17, 100, 257), on shapes whose K ends inside a tile
// and whose N leaves a block's row blocks partly empty; every cluster size; a SwiGLU pair's
// layout; and the inputs it refuses. The kernel runs on a compute capability 9.0 device
// with the sm_90a build only (wgmma, bulk copies): elsewhere these tests skip, saying so.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/group_quant.h"
#include "kernels/packed_weight.h"
#include "kernels/qn/gemm_qn.h"
#include "kernels/qn/gemv_qn.h"
#include "kernels/weight_format.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/gpu/gpu_test_helpers.h"
#include "tests/gpu/qn_check.h"

namespace gemlite {
namespace {

// gemm_qn on launch_and_compare's launch, with a scratch of exactly the bytes it asks for.
CheckResult run_gemm_and_compare(const PackedWeight& packed, const QnDeviceWeight& dw, DType act, int64_t M,
                                 std::mt19937_64& rng, cudaStream_t stream, const GemmQnConfig& config = {}) {
  const size_t scratch_bytes = gemm_qn_scratch_bytes(dw, int(M));
  DeviceBuffer scratch(scratch_bytes);
  return launch_and_compare(packed, act, M, rng, stream, [&](const void* x, void* y) {
    gemm_qn(dw, x, y, int(M), act, stream, scratch.ptr, scratch_bytes, config);
  });
}

// Whether this device and build run gemm_qn (asked of a small q4g64 weight).
bool gemm_qn_available() {
  std::mt19937_64 rng(1);
  const std::vector<float> w = random_weight(16, 64, rng);
  QnDeviceWeight dw = upload_qn_weight(quantize_weight(w.data(), 16, 64, qn_format(4, 64)), DType::F16);
  const bool runs = gemm_qn_runs(dw);
  free_qn_weight(&dw);
  return runs;
}

#define SKIP_UNLESS_GEMM_QN_RUNS()                                                                     \
  if (!gemm_qn_available()) GTEST_SKIP() << "gemm_qn runs on a compute capability 9.0 device (sm_90a code)"

class GemmQnTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GemmQnTest, MatchesCpuReference) {
  SKIP_UNLESS_GEMM_QN_RUNS();
  const auto [bits, group] = GetParam();
  const WeightFormat format = qn_format(bits, group);
  std::mt19937_64 rng(test_seed() * 1000003 + uint64_t(bits * 1000 + group) + 7);
  StreamGuard stream;
  struct Shape {
    int64_t K, N;
  };
  // K = 1032: past a whole number of tiles at every width; N = 200: 13 row blocks, a second
  // block of 8 with 5; K = 2112 with N = 136 (9 row blocks, one past the first block).
  std::vector<Shape> shapes = {{1032, 200}, {2112, 136}};
  if (group == 64) shapes.push_back({4096, 256});  // many tiles a block, clusters of several blocks
  double worst[2] = {0, 0};
  for (const Shape& shape : shapes) {
    const std::vector<float> w = random_weight(shape.N, shape.K, rng);
    const PackedWeight packed = quantize_weight(w.data(), shape.N, shape.K, format);
    for (DType act : {DType::F16, DType::BF16}) {
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      ASSERT_TRUE(gemm_qn_runs(dw));
      for (int64_t M : {17, 100, 257}) {
        if (shape.K == 4096 && M != 100) continue;
        SCOPED_TRACE(format.name() + " " + dtype_name(act) + " K=" + std::to_string(shape.K) +
                     " N=" + std::to_string(shape.N) + " M=" + std::to_string(M) +
                     " seed=" + std::to_string(test_seed()));
        const CheckResult r = run_gemm_and_compare(packed, dw, act, M, rng, stream.stream);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
        worst[act == DType::BF16] = std::max(worst[act == DType::BF16], r.worst_ratio);
      }
      free_qn_weight(&dw);
    }
  }
  std::cout << "[gemm_qn] " << format.name() << ": worst |error| / tolerance fp16 " << worst[0] << ", bf16 "
            << worst[1] << "\n";
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  const auto [bits, group] = info.param;
  return "Bits" + std::to_string(bits) + (group ? "Group" + std::to_string(group) : "PerChannel");
}

INSTANTIATE_TEST_SUITE_P(ServedWidths, GemmQnTest,
                         ::testing::Combine(::testing::Range(2, 9), ::testing::Values(32, 64, 128, 0)), param_name);

// Each block shape at each cluster size: a missing or doubled part of K would be an error
// of order |y| / splits. 2 bits (8 warps, 32 x rows), 3 bits (8 and 16 warps with 32, 8
// with 128 in 2 stages), 4 bits (8 and 16 warps with 64, 8 with 128 in 2 stages), 5 and 6
// bits (8 with 128 in 3 stages), 8 bits (8 warps with 128 x rows, 16 with 64).
TEST(GemmQnEdges, EveryBlockShapeAndClusterSize) {
  SKIP_UNLESS_GEMM_QN_RUNS();
  std::mt19937_64 rng(test_seed() + 11);
  StreamGuard stream;
  const int64_t K = 4096, N = 272;  // 17 row blocks: a block of 16 and one of 1
  const std::vector<float> w = random_weight(N, K, rng);
  struct Shape {
    int warps, rows_x;
  };
  const std::vector<std::pair<int, std::vector<Shape>>> widths = {
      {2, {{8, 32}}},           {3, {{8, 32}, {16, 32}, {8, 128}}}, {4, {{8, 64}, {16, 64}, {8, 128}}},
      {5, {{8, 128}}},          {6, {{8, 128}}},                    {8, {{8, 128}, {16, 64}}}};
  for (const auto& [bits, shapes] : widths) {
    const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(bits, 64));
    for (DType act : {DType::F16, DType::BF16}) {
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      for (const Shape& shape : shapes)
        for (int splits : {1, 2, 4, 8}) {
          SCOPED_TRACE("q" + std::to_string(bits) + "g64 " + dtype_name(act) + " warps=" + std::to_string(shape.warps) +
                       " rows_x=" + std::to_string(shape.rows_x) + " splits=" + std::to_string(splits));
          GemmQnConfig config;
          config.warps = shape.warps;
          config.rows_x = shape.rows_x;
          config.splits = splits;
          const CheckResult r = run_gemm_and_compare(packed, dw, act, 70, rng, stream.stream, config);
          EXPECT_EQ(r.failures, 0) << r.first_failure;
        }
      free_qn_weight(&dw);
    }
  }
}

// A SwiGLU pair's weight lies in block-row order on the device (gate rows 8b.., then up
// rows half + 8b..); gemm_qn writes y in stored order, [gate; up], as the reference has it.
TEST(GemmQnEdges, SwigluPairWritesStoredOrder) {
  SKIP_UNLESS_GEMM_QN_RUNS();
  std::mt19937_64 rng(test_seed() + 13);
  StreamGuard stream;
  const int64_t K = 1032, half = 72;
  const std::vector<float> w = random_weight(2 * half, K, rng);
  const PackedWeight packed = quantize_weight(w.data(), 2 * half, K, qn_format(4, 64));
  for (DType act : {DType::F16, DType::BF16}) {
    QnDeviceWeight dw = upload_qn_weight(packed, act, half);
    SCOPED_TRACE(dtype_name(act));
    const CheckResult r = run_gemm_and_compare(packed, dw, act, 65, rng, stream.stream);
    EXPECT_EQ(r.failures, 0) << r.first_failure;
    free_qn_weight(&dw);
  }
}

// Each group with its own scale (check_every_group, as the GEMV's test), 32 x rows a
// launch, K = 8200 (a last group of 8).
TEST(GemmQnEdges, EveryGroupHasItsOwnScale) {
  SKIP_UNLESS_GEMM_QN_RUNS();
  std::mt19937_64 rng(test_seed() + 23);
  StreamGuard stream;
  const int64_t K = 8200, N = 300, M = 32;
  const std::vector<float> w = random_weight(N, K, rng);
  for (DType act : {DType::F16, DType::BF16}) {
    const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(4, 64));
    QnDeviceWeight dw = upload_qn_weight(packed, act);
    const size_t scratch_bytes = gemm_qn_scratch_bytes(dw, int(M));
    DeviceBuffer scratch(scratch_bytes);
    const CheckResult r = check_every_group(packed, act, M, rng, stream.stream, [&](const void* x, void* y) {
      gemm_qn(dw, x, y, int(M), act, stream.stream, scratch.ptr, scratch_bytes);
    });
    EXPECT_EQ(r.failures, 0) << dtype_name(act) << ": " << r.first_failure;
    free_qn_weight(&dw);
  }
}

// An odd N (the last output of a row stored alone, the others in pairs of 2-byte stores)
// into a y that is not 4-byte aligned, with guard elements after it that must stay.
TEST(GemmQnEdges, OddNUnalignedOutputAndNothingPastIt) {
  SKIP_UNLESS_GEMM_QN_RUNS();
  std::mt19937_64 rng(test_seed() + 19);
  StreamGuard stream;
  const int64_t K = 1032, N = 203, M = 40, kGuard = 64;
  const std::vector<float> w = random_weight(N, K, rng);
  const PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(4, 64));
  std::vector<float> x(size_t(M * K));
  std::vector<uint16_t> x_bits;
  random_activations(M, K, DType::F16, rng, &x_bits, &x);
  QnDeviceWeight dw = upload_qn_weight(packed, DType::F16);
  const size_t scratch_bytes = gemm_qn_scratch_bytes(dw, int(M));
  DeviceBuffer dx(size_t(M * K) * 2), dy((size_t(M * N) + 1 + kGuard) * 2), scratch(scratch_bytes);
  uint16_t* y = static_cast<uint16_t*>(dy.ptr) + 1;  // 2-byte aligned only
  CUDA_CHECK(cudaMemcpyAsync(dx.ptr, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice, stream.stream));
  CUDA_CHECK(cudaMemsetAsync(dy.ptr, 0xFF, (size_t(M * N) + 1 + kGuard) * 2, stream.stream));
  gemm_qn(dw, dx.ptr, y, int(M), DType::F16, stream.stream, scratch.ptr, scratch_bytes);
  std::vector<uint16_t> out(size_t(M * N) + 1 + kGuard);
  CUDA_CHECK(cudaMemcpyAsync(out.data(), dy.ptr, out.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
  CUDA_CHECK(cudaStreamSynchronize(stream.stream));
  EXPECT_EQ(out[0], 0xFFFF) << "the element before y was written";
  for (int64_t i = 0; i < kGuard; ++i) EXPECT_EQ(out[size_t(1 + M * N + i)], 0xFFFF) << "guard element " << i;
  const CheckResult r =
      compare_with_kernel_reference(packed, DType::F16, x, M, std::vector<uint16_t>(out.begin() + 1, out.end() - kGuard));
  EXPECT_EQ(r.failures, 0) << r.first_failure;
  free_qn_weight(&dw);
}

TEST(GemmQnEdges, RejectsWhatItCannotRun) {
  SKIP_UNLESS_GEMM_QN_RUNS();
  std::mt19937_64 rng(test_seed() + 17);
  const std::vector<float> w = random_weight(32, 1024, rng);
  // 1-bit codes (1024-k tiles) keep the dense path; so does a K that is not a multiple of 8.
  QnDeviceWeight q1 = upload_qn_weight(quantize_weight(w.data(), 32, 1024, qn_format(1, 64)), DType::F16);
  EXPECT_FALSE(gemm_qn_runs(q1));
  EXPECT_EQ(gemm_qn_scratch_bytes(q1, 64), 0u);
  free_qn_weight(&q1);
  const std::vector<float> odd = random_weight(32, 1020, rng);
  QnDeviceWeight k1020 = upload_qn_weight(quantize_weight(odd.data(), 32, 1020, qn_format(4, 0)), DType::F16);
  EXPECT_FALSE(gemm_qn_runs(k1020));
  free_qn_weight(&k1020);

  QnDeviceWeight dw = upload_qn_weight(quantize_weight(w.data(), 32, 1024, qn_format(4, 64)), DType::F16);
  const size_t need = gemm_qn_scratch_bytes(dw, 64);
  EXPECT_EQ(need, size_t(128) * 1024 * 2);  // up to 128 x rows a chunk at 4 bits, K a whole number of tiles
  DeviceBuffer x(64 * 1024 * 2 + 16), y(64 * 32 * 2), scratch(need);
  EXPECT_THROW(gemm_qn(dw, x.ptr, y.ptr, 0, DType::F16, nullptr, scratch.ptr, need), Error);
  EXPECT_THROW(gemm_qn(dw, x.ptr, y.ptr, 64, DType::BF16, nullptr, scratch.ptr, need), Error);
  EXPECT_THROW(gemm_qn(dw, x.ptr, y.ptr, 64, DType::F16, nullptr, scratch.ptr, need - 16), Error);
  EXPECT_THROW(gemm_qn(dw, x.ptr, y.ptr, 64, DType::F16, nullptr, nullptr, need), Error);
  EXPECT_THROW(gemm_qn(dw, static_cast<char*>(x.ptr) + 2, y.ptr, 64, DType::F16, nullptr, scratch.ptr, need), Error);
  GemmQnConfig three;
  three.splits = 3;
  EXPECT_THROW(gemm_qn(dw, x.ptr, y.ptr, 64, DType::F16, nullptr, scratch.ptr, need, three), Error);
  GemmQnConfig warps12;
  warps12.warps = 12;
  EXPECT_THROW(gemm_qn(dw, x.ptr, y.ptr, 64, DType::F16, nullptr, scratch.ptr, need, warps12), Error);
  GemmQnConfig tall_and_wide;  // 16 warps take 64 x rows at most
  tall_and_wide.warps = 16;
  tall_and_wide.rows_x = 128;
  EXPECT_THROW(gemm_qn(dw, x.ptr, y.ptr, 64, DType::F16, nullptr, scratch.ptr, need, tall_and_wide), Error);
  const std::vector<float> w2 = random_weight(32, 1024, rng);
  QnDeviceWeight q2 = upload_qn_weight(quantize_weight(w2.data(), 32, 1024, qn_format(2, 64)), DType::F16);
  GemmQnConfig sixteen;  // at 2 bits three stages of 16 row blocks do not fit
  sixteen.warps = 16;
  EXPECT_THROW(gemm_qn(q2, x.ptr, y.ptr, 64, DType::F16, nullptr, scratch.ptr, need, sixteen), Error);
  free_qn_weight(&q2);
  free_qn_weight(&dw);
}

}  // namespace
}  // namespace gemlite
