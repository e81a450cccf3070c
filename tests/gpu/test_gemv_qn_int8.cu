// gemv_qn with int8 activations (GemvQnConfig::int8_activations) against its CPU
// reference, linear_qn_device_reference (kernels/qn/int8_activations.h), on fresh
// random inputs: every bit width 1..8 x group {32, 64, 128, per-channel} x {fp16, bf16} x
// M {1, 3, 8}, on the shapes of the fp16 test (K = 33 and 4100 take the scalar x path).
//
// Tolerance, per output. The reference quantizes x by the kernel's rule and sums the
// exact integers, so what is left is the kernel's fp32 arithmetic and the output's
// rounding: each of the <= 4 ceil(K / 32) + 20 fp32 roundings on an output's path (two
// fmas per group flush, a flush per group and per tile, the warps' sum, the scale) is at
// most 2^-24 of the magnitude M = Σ |terms| (the reference's), and the output adds u |y|
// (u = 2^-11 fp16, 2^-8 bf16) plus fp16's subnormal spacing:
//   |y - ref| <= u |ref| + (4 ceil(K / 32) + 20) 2^-24 M (1 + u) + 2^-24.
// One wrong code, group, scale or x byte moves an output by about |s q xq| scale, far
// above that at the shapes here (M / K per term against 2^-17 M or less).
// Outputs are poisoned with 0xFF bytes (NaN) before every launch.
//
// Accuracy (the variant's cost, recorded): the int8 output against the same product with x
// not quantized (linear_qn_device_reference without int8: the device's rounded s and b,
// so only x's quantization differs), as a relative rms error pooled over a format's
// outputs at K >= 4096; for N(0, 1) activations per-token int8 gives ~1 % (x's step is
// max|x| / 127 ~ 4 / 127, an rms error of 0.009 per activation); the test requires < 2 %.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/packed_weight.h"
#include "kernels/qn/gemv_qn.h"
#include "kernels/qn/int8_activations.h"
#include "kernels/weight_format.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/gpu/gpu_test_helpers.h"

namespace gemlite {
namespace {

WeightFormat qn_format(int bits, int group) {
  WeightFormat f;
  f.kind = FormatKind::QN;
  f.bits = bits;
  f.group = group;
  return f;
}

struct Int8Check {
  int64_t failures = 0;
  std::string first_failure;
  double worst_ratio = 0;  // max |y - ref| / (the bound's fp32 part), for the record
  double err2 = 0, ref2 = 0;  // Σ (y - y with x unquantized)², Σ (y with x unquantized)²
};

// Runs gemv_qn (int8 activations) on x [M, K] and compares with the reference.
Int8Check run_int8(const PackedWeight& packed, const QnDeviceWeight& dw, DType act, int64_t M,
                   const std::vector<uint16_t>& x_bits, const std::vector<float>& x, cudaStream_t stream) {
  const int64_t N = packed.rows, K = packed.cols;
  std::vector<double> ref(size_t(M * N)), magnitude(size_t(M * N)), unquantized(size_t(M * N));
  linear_qn_device_reference(packed, act, true, x.data(), M, ref.data(), magnitude.data());
  linear_qn_device_reference(packed, act, false, x.data(), M, unquantized.data(), nullptr);

  DeviceBuffer dx(size_t(M * K) * 2), dy(size_t(M * N) * 2);
  CUDA_CHECK(cudaMemcpyAsync(dx.ptr, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemsetAsync(dy.ptr, 0xFF, size_t(M * N) * 2, stream));
  GemvQnConfig config;
  config.int8_activations = true;
  gemv_qn(dw, dx.ptr, dy.ptr, int(M), act, stream, config);
  std::vector<uint16_t> y_bits(size_t(M * N));
  CUDA_CHECK(cudaMemcpyAsync(y_bits.data(), dy.ptr, y_bits.size() * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const double u = act == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double roundings = 4.0 * double((K + 31) / 32) + 20;
  Int8Check result;
  for (int64_t i = 0; i < M * N; ++i) {
    const double y = act == DType::BF16 ? bf16_to_float(y_bits[size_t(i)]) : half_to_float(y_bits[size_t(i)]);
    const double fp32_part = roundings * std::ldexp(1.0, -24) * magnitude[size_t(i)] * (1 + u) + std::ldexp(1.0, -24);
    const double err = std::abs(y - ref[size_t(i)]);
    const double tol = u * std::abs(ref[size_t(i)]) + fp32_part;
    result.worst_ratio = std::max(result.worst_ratio, std::isfinite(y) ? std::max(0.0, err - u * std::abs(ref[size_t(i)])) / fp32_part : INFINITY);
    if (!(err <= tol) && result.failures++ == 0)
      result.first_failure = "y[" + std::to_string(i / N) + ", " + std::to_string(i % N) + "] = " + std::to_string(y) +
                             ", reference " + std::to_string(ref[size_t(i)]) + ", |error| " + std::to_string(err) +
                             " > " + std::to_string(tol);
    result.err2 += (y - unquantized[size_t(i)]) * (y - unquantized[size_t(i)]);
    result.ref2 += unquantized[size_t(i)] * unquantized[size_t(i)];
  }
  return result;
}

struct Shape {
  int64_t K, N;
};

class GemvQnInt8Test : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GemvQnInt8Test, MatchesCpuReference) {
  const auto [bits, group] = GetParam();
  const WeightFormat format = qn_format(bits, group);
  std::mt19937_64 rng(test_seed() * 1000033 + uint64_t(bits * 1000 + group));
  StreamGuard stream;
  std::vector<Shape> shapes = {{33, 7}, {4100, 1000}, {11008, 64}, {57344, 32}};
  if (bits == 4 || group == 64) shapes.push_back({4096, 4096});
  double worst = 0, err2[2] = {0, 0}, ref2[2] = {0, 0};
  for (const Shape& shape : shapes) {
    const std::vector<float> w = random_weight(shape.N, shape.K, rng);
    const PackedWeight packed = quantize_weight(w.data(), shape.N, shape.K, format);
    for (DType act : {DType::F16, DType::BF16}) {
      QnDeviceWeight dw = upload_qn_weight(packed, act);
      for (int64_t M : {1, 3, 8}) {
        SCOPED_TRACE(format.name() + " " + dtype_name(act) + " K=" + std::to_string(shape.K) + " N=" +
                     std::to_string(shape.N) + " M=" + std::to_string(M) + " seed=" + std::to_string(test_seed()));
        std::vector<uint16_t> x_bits;
        std::vector<float> x;
        random_activations(M, shape.K, act, rng, &x_bits, &x);
        const Int8Check r = run_int8(packed, dw, act, M, x_bits, x, stream.stream);
        EXPECT_EQ(r.failures, 0) << r.first_failure;
        worst = std::max(worst, r.worst_ratio);
        if (shape.K >= 4096) {
          err2[act == DType::BF16] += r.err2;
          ref2[act == DType::BF16] += r.ref2;
        }
      }
      free_qn_weight(&dw);
    }
  }
  const double rms[2] = {std::sqrt(err2[0] / ref2[0]), std::sqrt(err2[1] / ref2[1])};
  EXPECT_LT(rms[0], 0.02) << "fp16: int8 activations far from the unquantized product";
  EXPECT_LT(rms[1], 0.02) << "bf16: int8 activations far from the unquantized product";
  std::cout << "[gemv_qn int8] " << format.name() << ": worst fp32 error / its bound " << worst
            << "; relative rms error from quantizing x (K >= 4096): fp16 " << rms[0] << ", bf16 " << rms[1] << "\n";
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  const auto [bits, group] = info.param;
  return "Bits" + std::to_string(bits) + (group ? "Group" + std::to_string(group) : "PerChannel");
}

INSTANTIATE_TEST_SUITE_P(AllFormats, GemvQnInt8Test,
                         ::testing::Combine(::testing::Range(1, 9), ::testing::Values(32, 64, 128, 0)),
                         param_name);

// Rows that stress the quantization: a row of zeros (scale 0: y = bias), a row whose
// max|x| is tiny (fp16's inv caps at 65504), one with a single large outlier (everything
// else rounds to few levels), an odd x offset (the scalar path at K % 8 == 0), and a bias.
TEST(GemvQnInt8Edges, SpecialRowsMisalignedXAndBias) {
  std::mt19937_64 rng(test_seed() + 53);
  StreamGuard stream;
  const int64_t K = 4096, N = 300, M = 4;
  const std::vector<float> w = random_weight(N, K, rng);
  PackedWeight packed = quantize_weight(w.data(), N, K, qn_format(4, 64));
  std::vector<float> bias(static_cast<size_t>(N));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& b : bias) b = normal(rng);
  packed.parts["bias"] = HostTensor::copy_of(DType::F32, {N}, bias.data());
  for (DType act : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> x_bits;
    std::vector<float> x;
    random_activations(M, K, act, rng, &x_bits, &x);
    const auto set = [&](int64_t m, int64_t k, float v) {
      x_bits[size_t(m * K + k)] = act == DType::BF16 ? float_to_bf16(v) : float_to_half(v);
      x[size_t(m * K + k)] = act == DType::BF16 ? bf16_to_float(x_bits[size_t(m * K + k)]) : half_to_float(x_bits[size_t(m * K + k)]);
    };
    for (int64_t k = 0; k < K; ++k) {
      set(0, k, 0.0f);                      // zeros
      set(1, k, x[size_t(K + k)] * 1e-4f);  // max|x| ~ 4e-4: inv capped (fp16)
    }
    set(2, 7, 300.0f);  // one outlier
    QnDeviceWeight dw = upload_qn_weight(packed, act);
    for (int offset : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " x offset " + std::to_string(offset) + " seed=" + std::to_string(test_seed()));
      std::vector<uint16_t> shifted(size_t(offset), 0);
      shifted.insert(shifted.end(), x_bits.begin(), x_bits.end());
      DeviceBuffer dx(shifted.size() * 2), dy(size_t(M * N) * 2);
      CUDA_CHECK(cudaMemcpyAsync(dx.ptr, shifted.data(), shifted.size() * 2, cudaMemcpyHostToDevice, stream.stream));
      CUDA_CHECK(cudaMemsetAsync(dy.ptr, 0xFF, size_t(M * N) * 2, stream.stream));
      GemvQnConfig config;
      config.int8_activations = true;
      gemv_qn(dw, static_cast<uint16_t*>(dx.ptr) + offset, dy.ptr, int(M), act, stream.stream, config);
      std::vector<uint16_t> y_bits(size_t(M * N));
      CUDA_CHECK(cudaMemcpyAsync(y_bits.data(), dy.ptr, y_bits.size() * 2, cudaMemcpyDeviceToHost, stream.stream));
      CUDA_CHECK(cudaStreamSynchronize(stream.stream));
      std::vector<double> ref(size_t(M * N)), magnitude(size_t(M * N));
      linear_qn_device_reference(packed, act, true, x.data(), M, ref.data(), magnitude.data());
      const double u = act == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      int64_t failures = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        const double y = act == DType::BF16 ? bf16_to_float(y_bits[size_t(i)]) : half_to_float(y_bits[size_t(i)]);
        const double tol = u * std::abs(ref[size_t(i)]) + (4.0 * K / 32 + 20) * std::ldexp(1.0, -24) * magnitude[size_t(i)] * (1 + u) +
                           std::ldexp(1.0, -24);
        if (!(std::abs(y - ref[size_t(i)]) <= tol) && failures++ == 0)
          ADD_FAILURE() << "y[" << i / N << ", " << i % N << "] = " << y << ", reference " << ref[size_t(i)];
      }
      EXPECT_EQ(failures, 0);
      for (int64_t n = 0; n < N; ++n)  // the row of zeros is the bias, rounded
        EXPECT_EQ(y_bits[size_t(n)], act == DType::BF16 ? float_to_bf16(bias[size_t(n)]) : float_to_half(bias[size_t(n)]));
    }
    free_qn_weight(&dw);
  }
}

TEST(GemvQnInt8Edges, RejectsS7) {
  std::mt19937_64 rng(test_seed() + 59);
  const std::vector<float> w = random_weight(16, 256, rng);
  const PackedWeight packed = quantize_weight(w.data(), 16, 256, WeightFormat::parse("s7"));
  QnDeviceWeight dw = upload_qn_weight(packed, DType::F16);
  DeviceBuffer dx(256 * 2), dy(16 * 2);
  GemvQnConfig config;
  config.int8_activations = true;
  EXPECT_THROW(gemv_qn(dw, dx.ptr, dy.ptr, 1, DType::F16, nullptr, config), Error);
  free_qn_weight(&dw);
}

}  // namespace
}  // namespace gemlite
