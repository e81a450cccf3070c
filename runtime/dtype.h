#pragma once
// Element types of stored tensors and the scalar conversions every part of the project
// shares (fp16 and bf16 are stored as raw uint16 bits on the host).
#include <cstdint>
#include <cstring>
#include <string>

namespace gemlite {

enum class DType { F32, F16, BF16, I32, I8, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);          // safetensors spelling: "F32", "F16", ...
bool dtype_from_name(const std::string& name, DType* out);

// IEEE binary16 <-> float, round to nearest even; inf/NaN preserved.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
// The largest finite fp16 value: larger magnitudes round to infinity (writers refuse them).
constexpr float kHalfMax = 65504.0f;

// bfloat16 <-> float, round to nearest even; NaN stays NaN.
inline float bf16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// Rounds a float through fp16 and back: what a value becomes once stored.
inline float round_to_half(float f) { return half_to_float(float_to_half(f)); }

}  // namespace gemlite
