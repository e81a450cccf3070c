#include "tests/gpu/qn_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/group_quant.h"
#include "tests/gpu/gpu_test_helpers.h"
#include "tests/gpu/qn_reference.h"
#include "tests/gpu/reference_products.h"

namespace gemlite {

namespace {

// y [M, N] against ref + the weight's bias within qn_tolerance (magnitude [M, N] = S).
CheckResult compare_outputs(const PackedWeight& packed, DType act, const std::vector<uint16_t>& y,
                            const std::vector<double>& ref, const std::vector<double>& magnitude) {
  const int64_t N = packed.rows, K = packed.cols;
  const auto found = packed.parts.find("bias");
  const float* bias = found == packed.parts.end() ? nullptr : found->second.as<float>();  // [N] or null
  CheckResult result;
  for (size_t i = 0; i < y.size(); ++i) {
    const double got = act == DType::BF16 ? bf16_to_float(y[i]) : half_to_float(y[i]);
    const double want = ref[i] + (bias ? bias[int64_t(i) % N] : 0.0f);
    const double tol = qn_tolerance(act, K, want, magnitude[i]);
    const double ratio = std::isfinite(got) ? std::abs(got - want) / tol : INFINITY;
    result.worst_ratio = std::max(result.worst_ratio, ratio);
    if (!(ratio <= 1) && result.failures++ == 0)
      result.first_failure = "y[" + std::to_string(int64_t(i) / N) + ", " + std::to_string(int64_t(i) % N) +
                             "] = " + std::to_string(got) + ", reference " + std::to_string(want) + ", |error| " +
                             std::to_string(std::abs(got - want)) + " > tolerance " + std::to_string(tol);
  }
  return result;
}

// One launch on poisoned output (0xFF bytes: NaN), x placed x_offset_elements past an
// aligned allocation; y [M, N] back.
std::vector<uint16_t> run_launch(const PackedWeight& packed, const Activations& x, int64_t M, cudaStream_t stream,
                                 const QnLaunch& launch, int x_offset_elements) {
  const int64_t N = packed.rows, K = packed.cols;
  DeviceBuffer dx((size_t(M * K) + size_t(x_offset_elements)) * 2), dy(size_t(M * N) * 2);
  uint16_t* x_dev = static_cast<uint16_t*>(dx.ptr) + x_offset_elements;
  CUDA_CHECK(cudaMemcpyAsync(x_dev, x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemsetAsync(dy.ptr, 0xFF, size_t(M * N) * 2, stream));
  launch(x_dev, dy.ptr);
  std::vector<uint16_t> y(size_t(M * N));
  CUDA_CHECK(cudaMemcpyAsync(y.data(), dy.ptr, y.size() * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return y;
}

}  // namespace

CheckResult compare_with_kernel_reference(const PackedWeight& packed, DType act, const std::vector<float>& x, int64_t M,
                                          const std::vector<uint16_t>& y) {
  std::vector<double> ref, magnitude;  // [M, N]
  reference_products(qn_kernel_row_decoder(packed, act), packed.rows, packed.cols,
                     std::vector<double>(x.begin(), x.end()), M, &ref, &magnitude);
  return compare_outputs(packed, act, y, ref, magnitude);
}

CheckResult launch_and_compare(const PackedWeight& packed, DType act, const Activations& x, int64_t M,
                               cudaStream_t stream, const QnLaunch& launch, int x_offset_elements) {
  return compare_with_kernel_reference(packed, act, x.values, M,
                                       run_launch(packed, x, M, stream, launch, x_offset_elements));
}

CheckResult launch_and_compare(const PackedWeight& packed, DType act, int64_t M, std::mt19937_64& rng,
                               cudaStream_t stream, const QnLaunch& launch, int x_offset_elements, bool positive_x) {
  Activations x;
  random_activations(M, packed.cols, act, rng, &x.bits, &x.values, positive_x);
  return launch_and_compare(packed, act, x, M, stream, launch, x_offset_elements);
}

CheckResult check_every_group(const PackedWeight& packed, DType act, int64_t M, std::mt19937_64& rng,
                              cudaStream_t stream, const QnLaunch& launch) {
  const int64_t N = packed.rows, K = packed.cols;
  const int64_t G = group_size(packed.format.group, K), n_groups = group_count(packed.format.group, K);
  // The kernel's weights decoded once [N, K]; each row of x then needs only its group's products.
  std::vector<float> w(size_t(N * K));
  const RowDecoder decode = qn_kernel_row_decoder(packed, act);
  for (int64_t n = 0; n < N; ++n) decode(n, &w[size_t(n * K)]);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  CheckResult all;
  for (int64_t first = 0; first < n_groups; first += M) {
    Activations x;
    x.bits.assign(size_t(M * K), 0);  // +0 in fp16 and bf16
    x.values.assign(size_t(M * K), 0.0f);
    std::vector<double> ref(size_t(M * N), 0.0), magnitude(size_t(M * N), 0.0);  // [M, N]
    for (int64_t m = 0; m < M; ++m) {
      const int64_t g = std::min(first + m, n_groups - 1), k0 = g * G, k1 = std::min((g + 1) * G, K);
      for (int64_t k = k0; k < k1; ++k) {
        const size_t i = size_t(m * K + k);
        x.bits[i] = act == DType::BF16 ? float_to_bf16(normal(rng)) : float_to_half(normal(rng));
        x.values[i] = act == DType::BF16 ? bf16_to_float(x.bits[i]) : half_to_float(x.bits[i]);
      }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = k0; k < k1; ++k) {
          const double p = double(x.values[size_t(m * K + k)]) * w[size_t(n * K + k)];
          ref[size_t(m * N + n)] += p;
          magnitude[size_t(m * N + n)] += std::abs(p);
        }
    }
    const CheckResult r = compare_outputs(packed, act, run_launch(packed, x, M, stream, launch, 0), ref, magnitude);
    all.worst_ratio = std::max(all.worst_ratio, r.worst_ratio);
    if (r.failures > 0 && all.failures == 0)
      all.first_failure = "groups " + std::to_string(first) + "..: " + r.first_failure;
    all.failures += r.failures;
  }
  return all;
}

}  // namespace gemlite
