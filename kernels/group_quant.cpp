#include "kernels/group_quant.h"

#include <algorithm>
#include <cmath>

#include "runtime/dtype.h"

namespace gemlite {

GroupQuantParams fit_group(float lo, float hi, int bits) {
  const float max_code = float((1 << bits) - 1);
  const float scale = round_to_half((hi - lo) / max_code);
  if (scale > 0) {
    const float zero = -lo / scale;
    if (std::abs(zero) <= kHalfMax) return {scale, round_to_half(zero)};
  }
  // The group's spread is below what an fp16 scale and zero can resolve next to its
  // magnitude (all values equal, or zero would overflow fp16): store it as the constant
  // c = midpoint with scale |c| and code 1 (zero 0) or code 0 (zero 1), which dequantizes
  // to c within fp16 rounding. A zero constant keeps scale 1 so w / scale stays finite.
  const float constant = lo + (hi - lo) / 2;
  const float magnitude = round_to_half(std::abs(constant));
  if (magnitude == 0) return {1.0f, 0.0f};
  return {magnitude, constant < 0 ? 1.0f : 0.0f};
}

}  // namespace gemlite
