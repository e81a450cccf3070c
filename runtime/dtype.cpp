#include "runtime/dtype.h"

namespace gemlite {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I8: case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  static const struct { const char* name; DType type; } kTypes[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
      {"I32", DType::I32}, {"I8", DType::I8},   {"U8", DType::U8}};
  for (const auto& t : kTypes)
    if (name == t.name) { *out = t.type; return true; }
  return false;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400) == 0) { mantissa <<= 1; --exponent; }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;                 // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00;                // overflows to inf
  if (abs < 0x38800000u) {                                     // fp16 subnormal or zero
    if (abs < 0x33000000u) return sign;                        // below half the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exponent;                     // 14..24
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return sign | uint16_t(half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);        // round to nearest even
  return sign | uint16_t((rounded - 0x38000000u) >> 13);
}

}  // namespace gemlite
