#include "kernels/fpx/fpx_format.h"

#include <algorithm>
#include <cmath>

#include "kernels/parallel.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

int exponent_bias(int ebits) { return (1 << (ebits - 1)) - 1; }
uint32_t magnitude_mask(int ebits, int mbits) { return (1u << (ebits + mbits)) - 1; }

}  // namespace

float fpx_decode(uint8_t code, int ebits, int mbits) {
  const uint32_t mantissa = code & ((1u << mbits) - 1);
  const int exponent = int(code >> mbits & ((1u << ebits) - 1));
  const bool negative = code >> (ebits + mbits) & 1;
  // A subnormal has no implicit leading one but the binade of exponent 1.
  const uint32_t significand = exponent == 0 ? mantissa : mantissa | 1u << mbits;
  const float magnitude =
      std::ldexp(float(significand), std::max(exponent, 1) - exponent_bias(ebits) - mbits);
  return negative ? -magnitude : magnitude;
}

float fpx_max_finite(int ebits, int mbits) {
  return fpx_decode(uint8_t(magnitude_mask(ebits, mbits)), ebits, mbits);
}

uint8_t fpx_encode(float x, int ebits, int mbits) {
  const uint32_t max_code = magnitude_mask(ebits, mbits);
  const uint8_t sign = uint8_t(std::signbit(x)) << (ebits + mbits);
  const float magnitude = std::abs(x);
  if (!(magnitude > 0)) return 0;
  if (magnitude >= fpx_max_finite(ebits, mbits)) return uint8_t(sign | max_code);
  // Count in steps of the spacing of magnitude's binade (subnormals share the spacing of
  // exponent 1); the scaling by a power of two is exact.
  int binade;
  std::frexp(magnitude, &binade);  // magnitude in [2^(binade-1), 2^binade)
  const int exponent = std::max(binade - 1 + exponent_bias(ebits), 1);
  const float steps = std::ldexp(magnitude, mbits - (exponent - exponent_bias(ebits)));
  // Within the binade steps is 2^mbits + M (normal) or M (subnormal), so the code is
  // (exponent - 1) * 2^mbits + steps; a carry out of the mantissa moves up one binade.
  uint32_t code = uint32_t(exponent - 1) << mbits;
  const float whole_steps = std::floor(steps), fraction = steps - whole_steps;
  code += uint32_t(whole_steps);
  if (fraction > 0.5f || (fraction == 0.5f && (code & 1))) ++code;
  code = std::min(code, max_code);
  return code == 0 ? 0 : uint8_t(sign | code);
}

std::vector<PartSpec> fpx_parts(const WeightFormat& format, int64_t N, int64_t K) {
  if (format.ebits < 1 || format.mbits < 0 || format.bits != 1 + format.ebits + format.mbits ||
      format.bits > 8)
    throw Error("format " + format.name() + ": fpx needs ebits >= 1 and 1 + ebits + mbits <= 8 bits");
  return {{"codes", DType::U8, {N, K}}, {"scales", DType::F16, {N}}};
}

void fpx_quantize(const float* w, PackedWeight* out) {
  const int ebits = out->format.ebits, mbits = out->format.mbits;
  const int64_t N = out->rows, K = out->cols;
  const float max_finite = fpx_max_finite(ebits, mbits);
  uint8_t* codes = out->parts.at("codes").mutable_as<uint8_t>();      // [N, K]
  uint16_t* scales = out->parts.at("scales").mutable_as<uint16_t>();  // [N]
#pragma omp parallel for schedule(static) if (N * K >= kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = w + n * K;
    float absmax = 0;
    for (int64_t k = 0; k < K; ++k) absmax = std::max(absmax, std::abs(row[k]));
    // Rounded to fp16 before encoding, so codes are chosen for the scale a reader sees.
    // A row too small for an fp16 scale (or all zero) keeps scale 1 and encodes to ~0.
    float scale = round_to_half(absmax / max_finite);
    if (scale == 0) scale = 1;
    scales[n] = float_to_half(scale);
    for (int64_t k = 0; k < K; ++k) codes[n * K + k] = fpx_encode(row[k] / scale, ebits, mbits);
  }
}

RowDecoder fpx_row_decoder(const PackedWeight& w) {
  const int ebits = w.format.ebits, mbits = w.format.mbits;
  const int64_t K = w.cols;
  const uint8_t* codes = w.part("codes").as<uint8_t>();      // [N, K]
  const uint16_t* scales = w.part("scales").as<uint16_t>();  // [N]
  // decode(code) for every byte: bits above the code are ignored, as the decoder does,
  // so a corrupt checkpoint cannot index out of the table.
  std::vector<float> values(256);
  for (int code = 0; code < 256; ++code) values[code] = fpx_decode(uint8_t(code), ebits, mbits);
  return [=](int64_t n, float* out) {
    const float scale = half_to_float(scales[n]);
    const uint8_t* row = codes + n * K;
    for (int64_t k = 0; k < K; ++k) out[k] = values[row[k]] * scale;
  };
}

}  // namespace gemlite
