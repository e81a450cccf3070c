#pragma once
// Asymmetric min/max quantization of one group of weights to `bits`-bit codes, shared by
// the qN and s7 formats: w ≈ (q - zero) * scale with q in [0, 2^bits - 1] and scale,
// zero stored as fp16.
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace gemlite {

struct GroupQuantParams {
  float scale;  // already rounded to fp16: what a reader of the checkpoint sees
  float zero;   // already rounded to fp16
};

// Fits scale and zero to a group whose values lie in [lo, hi]. Both are rounded to fp16
// before any code is computed, so that codes are chosen for the values that dequantize
// them and |w - dequant(w)| <= scale/2 plus fp16 rounding of the group's magnitude.
GroupQuantParams fit_group(float lo, float hi, int bits);

// The code of w under `params`: round(w / scale + zero), clamped to [0, 2^bits - 1].
// Inline so that a group's loop over it vectorises (it was an out-of-line call per weight).
inline int quantize_to_code(float w, GroupQuantParams params, int bits) {
  const float code = std::nearbyint(w / params.scale + params.zero);
  return int(std::clamp(code, 0.0f, float((1 << bits) - 1)));
}

// Groups along K: G = `group`, or the whole row when group == 0 (per output channel).
inline int64_t group_size(int group, int64_t K) { return group > 0 ? group : K; }
inline int64_t group_count(int group, int64_t K) {
  const int64_t size = group_size(group, K);
  return (K + size - 1) / size;
}

}  // namespace gemlite
