#include "kernels/qn/int8_activations.h"

#include <algorithm>
#include <cmath>

#include "kernels/group_quant.h"
#include "kernels/qn/qn_format.h"
#include "runtime/error.h"

namespace gemlite {

Int8ActivationRow quantize_activation_row(const float* x, int64_t K, DType act) {
  if (act != DType::F16 && act != DType::BF16) throw Error("quantize_activation_row: activations must be F16 or BF16");
  float amax = 0;
  for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(x[k]));
  Int8ActivationRow row;
  float inv = amax > 0 ? 127.0f / amax : 0.0f;
  inv = act == DType::BF16 ? std::min(inv, 1e38f) : round_to_half(std::min(inv, 65504.0f));
  row.inv = inv;
  row.scale = inv > 0 ? 1.0f / inv : 0.0f;
  row.q.resize(size_t(K));
  // x (<= 11 significant bits) times inv (<= 24) is exact in double.
  for (int64_t k = 0; k < K; ++k) row.q[size_t(k)] = int8_t(std::nearbyint(double(x[k]) * double(inv)));
  return row;
}

void linear_qn_device_reference(const PackedWeight& w, DType act, bool int8_activations, const float* x, int64_t M,
                                double* y, double* magnitude) {
  if (w.format.kind != FormatKind::QN) throw Error("linear_qn_device_reference: not a qN weight");
  const int64_t N = w.rows, K = w.cols, Kw = qn_words_per_row(K, w.format.bits);
  const int64_t G = group_size(w.format.group, K), n_groups = group_count(w.format.group, K);
  const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N, n_groups]
  const uint16_t* zeros = w.part("zeros").as<uint16_t>();
  const auto bias = w.parts.find("bias");
  const float* bias_values = bias == w.parts.end() ? nullptr : bias->second.as<float>();
  const auto to_act = [&](float v) { return act == DType::BF16 ? round_to_bf16(v) : round_to_half(v); };

  // x as the kernel multiplies it: scale_m * xq (int8) or x itself (scale 1).
  std::vector<double> xs(size_t(M * K)), row_scale(size_t(M), 1.0);
  for (int64_t m = 0; m < M; ++m) {
    if (!int8_activations) {
      for (int64_t k = 0; k < K; ++k) xs[size_t(m * K + k)] = x[m * K + k];
      continue;
    }
    const Int8ActivationRow row = quantize_activation_row(x + m * K, K, act);
    row_scale[size_t(m)] = row.scale;
    for (int64_t k = 0; k < K; ++k) xs[size_t(m * K + k)] = row.q[size_t(k)];
  }
  std::vector<uint8_t> codes(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    qn_unpack_row(w.part("qweight").as<int32_t>() + n * Kw, K, w.format.bits, codes.data());
    for (int64_t m = 0; m < M; ++m) {
      const double* xm = &xs[size_t(m * K)];
      double sum = 0, abs_sum = 0;
      for (int64_t g = 0; g < n_groups; ++g) {
        const float s = half_to_float(scales[n * n_groups + g]), z = half_to_float(zeros[n * n_groups + g]);
        const double s_act = to_act(s), b_act = to_act(-z * s);  // z * s is exact in fp32
        double dot = 0, sum_x = 0, abs_dot = 0, abs_x = 0;  // integers when int8: exact
        for (int64_t k = g * G; k < std::min(K, (g + 1) * G); ++k) {
          const double q = codes[size_t(k)];
          dot += q * xm[k];
          sum_x += xm[k];
          abs_dot += q * std::abs(xm[k]);
          abs_x += std::abs(xm[k]);
        }
        sum += s_act * dot + b_act * sum_x;
        abs_sum += std::abs(s_act) * abs_dot + std::abs(b_act) * abs_x;
      }
      const double scale = row_scale[size_t(m)];
      y[m * N + n] = scale * sum + (bias_values ? bias_values[n] : 0.0);
      if (magnitude) magnitude[m * N + n] = scale * abs_sum + (bias_values ? std::abs(bias_values[n]) : 0.0);
    }
  }
}

}  // namespace gemlite
