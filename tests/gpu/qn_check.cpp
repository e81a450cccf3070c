#include "tests/gpu/qn_check.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/qn/qn_format.h"
#include "tests/gpu/gpu_test_helpers.h"
#include "tests/gpu/qn_error_scales.h"

namespace gemlite {

CheckResult launch_and_compare(const PackedWeight& packed, DType act, int64_t M, std::mt19937_64& rng,
                               cudaStream_t stream, const QnLaunch& launch, int x_offset_elements,
                               bool positive_x) {
  const int64_t N = packed.rows, K = packed.cols;
  std::vector<uint16_t> x_bits;
  std::vector<float> x;
  random_activations(M, K, act, rng, &x_bits, &x, positive_x);
  std::vector<float> ref(size_t(M * N));
  linear_reference(packed, x.data(), M, ref.data());
  const ErrorScales scales = error_scales(packed, x, M);

  DeviceBuffer dx((size_t(M * K) + size_t(x_offset_elements)) * 2), dy(size_t(M * N) * 2);
  uint16_t* x_dev = static_cast<uint16_t*>(dx.ptr) + x_offset_elements;
  CUDA_CHECK(cudaMemcpyAsync(x_dev, x_bits.data(), x_bits.size() * 2, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemsetAsync(dy.ptr, 0xFF, size_t(M * N) * 2, stream));
  launch(x_dev, dy.ptr);
  std::vector<uint16_t> y_bits(size_t(M * N));
  CUDA_CHECK(cudaMemcpyAsync(y_bits.data(), dy.ptr, y_bits.size() * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const double tol = act == DType::BF16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -9);
  CheckResult result;
  for (int64_t i = 0; i < M * N; ++i) {
    const float y = act == DType::BF16 ? bf16_to_float(y_bits[size_t(i)]) : half_to_float(y_bits[size_t(i)]);
    const double err = std::abs(double(y) - double(ref[size_t(i)]));
    const double s = std::max(double(scales.dequant[size_t(i)]), 1e-30);
    const double ratio = std::isfinite(y) ? err / s : INFINITY;
    result.worst_ratio = std::max(result.worst_ratio, ratio);
    result.worst_plain_ratio = std::max(result.worst_plain_ratio, err / std::max(double(scales.plain[size_t(i)]), 1e-30));
    if (!(ratio <= tol)) {
      if (result.failures++ == 0)
        result.first_failure = "y[" + std::to_string(i / N) + ", " + std::to_string(i % N) + "] = " +
                               std::to_string(y) + ", reference " + std::to_string(ref[size_t(i)]) +
                               ", |error| / S2 = " + std::to_string(ratio) + " > " + std::to_string(tol);
    }
  }
  return result;
}

}  // namespace gemlite
