#include "tests/gpu/qn_reference.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/group_quant.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

// v rounded to float toward zero, its last bit set when that was inexact ("round to odd"):
// rounding this float to fp16 / bf16 (13+ bits fewer) to nearest even gives v rounded to
// nearest even directly, without a double rounding's ties.
float round_to_odd_float(double v) {
  float f = static_cast<float>(v);
  if (static_cast<double>(f) == v) return f;
  if (std::abs(static_cast<double>(f)) > std::abs(v)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= 1u;
  std::memcpy(&f, &bits, 4);
  return f;
}

float to_activation(double v, DType act) {  // v rounded once, to nearest even
  const float f = round_to_odd_float(v);
  return act == DType::BF16 ? bf16_to_float(float_to_bf16(f)) : half_to_float(float_to_half(f));
}

}  // namespace

RowDecoder qn_kernel_row_decoder(const PackedWeight& w, DType act, QnFma fma) {
  if (w.format.kind != FormatKind::QN && w.format.kind != FormatKind::S7)
    throw Error("qn_kernel_row_decoder: " + w.format.name() + " is not a qN or s7 weight");
  const int64_t K = w.cols, G = group_size(w.format.group, K), n_groups = group_count(w.format.group, K);
  // The library's decoder on a copy with scale 1 and zero -1 returns q + 1 for every kept
  // element and 0 for a pruned one: the codes, read by the one reader of the layout.
  const auto codes = std::make_shared<PackedWeight>(w);
  const HostTensor& scales = w.part("scales");
  std::vector<uint16_t> ones(size_t(scales.numel()), float_to_half(1.0f)),
      minus_ones(size_t(scales.numel()), float_to_half(-1.0f));
  codes->parts["scales"] = HostTensor::copy_of(DType::F16, scales.shape, ones.data());
  codes->parts["zeros"] = HostTensor::copy_of(DType::F16, scales.shape, minus_ones.data());
  const RowDecoder decode_codes = make_row_decoder(*codes);
  // {s, b} per group in the activation type, as upload_qn_weight stores them. The tensors
  // are held by value (their storage is shared), so the decoder may outlive w.
  const HostTensor scales16 = w.part("scales"), zeros16 = w.part("zeros");  // [N, n_groups] F16
  return [=](int64_t n, float* out) {
    (void)codes;  // owns the scales and zeros decode_codes reads
    const uint16_t* s16 = scales16.as<uint16_t>();
    const uint16_t* z16 = zeros16.as<uint16_t>();
    decode_codes(n, out);
    for (int64_t k = 0; k < K; ++k) {
      if (out[k] == 0.0f) continue;  // pruned: +0
      const int64_t g = n * n_groups + k / G;
      const float s = half_to_float(s16[g]), z = half_to_float(z16[g]);
      const double scale = to_activation(s, act), bias = to_activation(-double(z) * s, act);
      const double exact = double(out[k] - 1.0f) * scale + bias;  // exact in float64
      // dequant_qn's fmaf rounds the exact value to float first (static_cast: to nearest).
      out[k] = to_activation(fma == QnFma::ActivationType ? exact : double(static_cast<float>(exact)), act);
    }
  };
}

double qn_tolerance(DType act, int64_t K, double ref, double magnitude) {
  const double u = act == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  return u * (1 + std::ldexp(1.0, -10)) * std::abs(ref) +
         (1 + u) * 2 * double(K / 16 + 32) * std::ldexp(magnitude, -23) + std::ldexp(1.0, -24);
}

}  // namespace gemlite
