// gemv_s7 (the qN kernel on 1:2-sparse 7-bit pair bytes) against the CPU reference of its
// own weights (tests/gpu/qn_reference.h) on fresh random inputs: groups {64, 128} x {fp16, bf16} x M {1, 3, 8, 13, 16},
// on shapes that are multiples of nothing (K = 33, 100, 4100: pairs whose second element
// lies past K, a last tile of one block), thin (N = 7, 64), long (K = 57344) and square.
//
// Reference and tolerance as the qN GEMV's (tests/gpu/qn_reference.h): x times the
// weights exactly as the kernel forms them (a kept one value7 * s + (-z s) in one fma of
// the activation type, a pruned one +0), in float64; per output |y - ref| <= u |ref| +
// 2 (K / 16 + 32) 2^-23 S, S = sum_k |x_k w_k|. A wrong pair half or byte throughout errs
// by ~sqrt(K) |x w|, far above it; a group's error at long K is tested apart
// (GemvS7Edges.EveryGroupHasItsOwnScale, as the qN GEMV's). Outputs are poisoned (0xFF:
// NaN) before each launch.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_check.h"
#include "tests/gpu/gpu_test_helpers.h"
#include "kernels/packed_weight.h"
#include "kernels/qn/gemm_qn.h"
#include "kernels/s7/gemv_s7.h"
#include "kernels/weight_format.h"
#include "runtime/dtype.h"
#include "tests/gpu/qn_check.h"

namespace gemlite {
namespace {

WeightFormat s7_format(int group) {
  WeightFormat f;
  f.kind = FormatKind::S7;
  f.bits = 7;
  f.group = group;
  return f;
}

// gemv_s7 on launch_and_compare's launch (x N(0, 1), or uniform in [0.5, 1] with positive_x).
CheckResult run_and_compare(const PackedWeight& packed, const S7DeviceWeight& dw, DType act, int64_t M,
                            std::mt19937_64& rng, cudaStream_t stream, bool positive_x = false) {
  return launch_and_compare(packed, act, M, rng, stream,
                            [&](const void* x, void* y) { gemv_s7(dw, x, y, int(M), act, stream); }, 0, positive_x);
}

struct Shape {
  int64_t K, N;
};

class GemvS7Test : public ::testing::TestWithParam<int> {};

TEST_P(GemvS7Test, MatchesCpuReference) {
  const int group = GetParam();
  const WeightFormat format = s7_format(group);
  std::mt19937_64 rng(test_seed() * 1000003 + uint64_t(group));
  StreamGuard stream;
  double worst[2] = {0, 0};
  for (const Shape shape : {Shape{33, 7}, Shape{100, 20}, Shape{4100, 1000}, Shape{11008, 64}, Shape{57344, 32},
                            Shape{4096, 4096}}) {
    const std::vector<float> w = random_weight(shape.N, shape.K, rng);
    const PackedWeight packed = quantize_weight(w.data(), shape.N, shape.K, format);
    for (DType act : {DType::F16, DType::BF16}) {
      S7DeviceWeight dw = upload_s7_weight(packed, act);
      for (int64_t M : {1, 3, 8, 13, 16}) {
        SCOPED_TRACE(format.name() + " " + dtype_name(act) + " K=" + std::to_string(shape.K) +
                     " N=" + std::to_string(shape.N) + " M=" + std::to_string(M) +
                     " seed=" + std::to_string(test_seed()));
        const CheckResult r = run_and_compare(packed, dw, act, M, rng, stream.stream);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
        worst[act == DType::BF16] = std::max(worst[act == DType::BF16], r.worst_ratio);
      }
      free_qn_weight(&dw);
    }
  }
  std::cout << "[gemv_s7] " << format.name() << ": worst |error| / tolerance fp16 " << worst[0] << ", bf16 "
            << worst[1] << "\n";
}

INSTANTIATE_TEST_SUITE_P(Groups, GemvS7Test, ::testing::Values(64, 128),
                         [](const ::testing::TestParamInfo<int>& info) { return "Group" + std::to_string(info.param); });

// gemm_qn (prompt chunks past 16 rows on an H100) on s7 weights, each of its three block
// shapes, at the same tolerance: its decoding is the GEMV's (tests/gpu/test_gemm_qn.cu has
// the qN widths).
TEST(GemmQnS7, MatchesCpuReference) {
  std::mt19937_64 rng(test_seed() * 1000003 + 77);
  StreamGuard stream;
  for (int group : {64, 128}) {
    const WeightFormat format = s7_format(group);
    const int64_t K = 2112, N = 200;
    const std::vector<float> w = random_weight(N, K, rng);
    const PackedWeight packed = quantize_weight(w.data(), N, K, format);
    for (DType act : {DType::F16, DType::BF16}) {
      S7DeviceWeight dw = upload_s7_weight(packed, act);
      if (!gemm_qn_runs(dw)) {
        free_qn_weight(&dw);
        GTEST_SKIP() << "gemm_qn runs on a compute capability 9.0 device (sm_90a code)";
      }
      for (const auto& [warps, rows_x] : {std::pair{8, 64}, std::pair{16, 64}, std::pair{8, 128}})
        for (int64_t M : {17, 100}) {
          SCOPED_TRACE(format.name() + " " + dtype_name(act) + " warps=" + std::to_string(warps) +
                       " rows_x=" + std::to_string(rows_x) + " M=" + std::to_string(M) +
                       " seed=" + std::to_string(test_seed()));
          GemmQnConfig config;
          config.warps = warps;
          config.rows_x = rows_x;
          const size_t scratch_bytes = gemm_qn_scratch_bytes(dw, int(M));
          DeviceBuffer scratch(scratch_bytes);
          const CheckResult r = launch_and_compare(packed, act, M, rng, stream.stream, [&](const void* x, void* y) {
            gemm_qn(dw, x, y, int(M), act, stream.stream, scratch.ptr, scratch_bytes, config);
          });
          EXPECT_EQ(r.failures, 0) << r.first_failure;
        }
      free_qn_weight(&dw);
    }
  }
}

// As GemvQnEdges.EveryPartOfALongKIsSummed: with x and W positive nothing cancels (S =
// |y|), a bound of u |y| + 8.6e-4 |y| at K = 57344 against the 1/8 of y that its last K/8
// holds.
TEST(GemvS7Edges, EveryPartOfALongKIsSummed) {
  std::mt19937_64 rng(test_seed() + 31);
  StreamGuard stream;
  const int64_t K = 57344, N = 48;
  std::uniform_real_distribution<float> positive(0.5f, 1.0f);
  std::vector<float> w(size_t(N * K));  // [N, K]
  for (float& v : w) v = positive(rng);
  const PackedWeight packed = quantize_weight(w.data(), N, K, s7_format(128));
  for (DType act : {DType::F16, DType::BF16}) {
    S7DeviceWeight dw = upload_s7_weight(packed, act);
    for (int64_t M : {1, 16}) {
      const CheckResult r = run_and_compare(packed, dw, act, M, rng, stream.stream, /*positive_x=*/true);
      EXPECT_EQ(r.failures, 0) << dtype_name(act) << " M=" << M << ": " << r.first_failure;
    }
    free_qn_weight(&dw);
  }
}

// Each group of a long K with its own scale, as GemvQnEdges.EveryGroupHasItsOwnScale
// (check_every_group), in both kernels.
TEST(GemvS7Edges, EveryGroupHasItsOwnScale) {
  std::mt19937_64 rng(test_seed() + 37);
  StreamGuard stream;
  const int64_t K = 57344, N = 40;
  const std::vector<float> w = random_weight(N, K, rng);
  struct Case {
    int group;
    DType act;
  };
  for (const Case c : {Case{64, DType::F16}, Case{128, DType::BF16}}) {
    const DType act = c.act;
    const PackedWeight packed = quantize_weight(w.data(), N, K, s7_format(c.group));
    S7DeviceWeight dw = upload_s7_weight(packed, act);
    for (int64_t M : {8, 16}) {
      const CheckResult r = check_every_group(packed, act, M, rng, stream.stream, [&](const void* x, void* y) {
        gemv_s7(dw, x, y, int(M), act, stream.stream);
      });
      EXPECT_EQ(r.failures, 0) << packed.format.name() << " " << dtype_name(act) << " M=" << M << ": "
                               << r.first_failure;
    }
    free_qn_weight(&dw);
  }
}

TEST(GemvS7Edges, RejectsOtherFormats) {
  std::mt19937_64 rng(test_seed() + 5);
  const std::vector<float> w = random_weight(16, 128, rng);
  WeightFormat q4;
  q4.kind = FormatKind::QN;
  q4.bits = 4;
  q4.group = 64;
  const PackedWeight packed = quantize_weight(w.data(), 16, 128, q4);
  EXPECT_THROW(upload_s7_weight(packed, DType::F16), Error);
  QnDeviceWeight dw = upload_qn_weight(packed, DType::F16);
  DeviceBuffer dx(128 * 2), dy(16 * 2);
  EXPECT_THROW(gemv_s7(dw, dx.ptr, dy.ptr, 1, DType::F16, nullptr), Error);
  free_qn_weight(&dw);
}

}  // namespace
}  // namespace gemlite
