#include "models/ggml_blocks.h"

#include <cstring>
#include <map>

#include "runtime/dtype.h"

namespace gemlite {
namespace {

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return half_to_float(bits);
}

// ---- blocks of 32: an fp16 scale d (and offset m), then the codes ---------------------

void dequantize_q8_0(const uint8_t* block, float* out) {  // d, int8 q[32]
  const float d = half_at(block);
  for (int j = 0; j < 32; ++j) out[j] = d * float(int8_t(block[2 + j]));
}

// Nibble codes of 32 weights in 16 bytes: weight j < 16 is the low nibble of byte j,
// weight 16 + j its high nibble. Q5_0/Q5_1 add a fifth bit: bit j of the 32-bit qh.
int low_nibble_code(const uint8_t* nibbles, int j) { return j < 16 ? nibbles[j] & 0x0F : nibbles[j - 16] >> 4; }
int fifth_bit(const uint8_t* qh, int j) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return int(bits >> j & 1u) << 4;
}

void dequantize_q4_0(const uint8_t* block, float* out) {  // d, nibbles[16]; w = d (q - 8)
  const float d = half_at(block);
  for (int j = 0; j < 32; ++j) out[j] = d * float(low_nibble_code(block + 2, j) - 8);
}
void dequantize_q4_1(const uint8_t* block, float* out) {  // d, m, nibbles[16]; w = d q + m
  const float d = half_at(block), m = half_at(block + 2);
  for (int j = 0; j < 32; ++j) out[j] = d * float(low_nibble_code(block + 4, j)) + m;
}
void dequantize_q5_0(const uint8_t* block, float* out) {  // d, qh[4], nibbles[16]; w = d (q - 16)
  const float d = half_at(block);
  for (int j = 0; j < 32; ++j) out[j] = d * float((low_nibble_code(block + 6, j) | fifth_bit(block + 2, j)) - 16);
}
void dequantize_q5_1(const uint8_t* block, float* out) {  // d, m, qh[4], nibbles[16]; w = d q + m
  const float d = half_at(block), m = half_at(block + 2);
  for (int j = 0; j < 32; ++j) out[j] = d * float(low_nibble_code(block + 8, j) | fifth_bit(block + 4, j)) + m;
}

// ---- K-quants: super-blocks of 256 weights in sub-blocks with their own scales ---------

// Q4_K / Q5_K: 8 sub-blocks of 32 with a 6-bit scale and a 6-bit min each, packed in 12
// bytes: for s < 4 the low 6 bits of bytes s (scale) and s + 4 (min); for s >= 4 the
// nibbles of byte s + 4 (scale low, min high) topped by the two high bits of bytes s - 4
// (scale) and s (min).
void k4_scale_min(const uint8_t* packed, int s, int* scale, int* min) {
  if (s < 4) {
    *scale = packed[s] & 63;
    *min = packed[s + 4] & 63;
  } else {
    *scale = (packed[s + 4] & 0x0F) | (packed[s - 4] >> 6) << 4;
    *min = (packed[s + 4] >> 4) | (packed[s] >> 6) << 4;
  }
}

// Q4_K: d, dmin (fp16), scales[12], qs[128]. Sub-blocks 2p and 2p + 1 share the 32 bytes
// qs[32p ..]: low nibbles, then high. w = d scale q - dmin min.
// Q5_K: d, dmin, scales[12], qh[32], qs[128]: Q4_K's nibbles plus a fifth bit, bit s of
// qh[l] for weight l of sub-block s.
void dequantize_k4_k5(const uint8_t* block, const uint8_t* qh, const uint8_t* qs, float* out) {
  const float d = half_at(block), dmin = half_at(block + 2);
  const uint8_t* scales = block + 4;
  for (int s = 0; s < 8; ++s) {
    int scale, min;
    k4_scale_min(scales, s, &scale, &min);
    const float step = d * float(scale), offset = dmin * float(min);
    const uint8_t* bytes = qs + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      const int q = (s % 2 ? bytes[l] >> 4 : bytes[l] & 0x0F) | (qh ? (qh[l] >> s & 1) << 4 : 0);
      out[32 * s + l] = step * float(q) - offset;
    }
  }
}
void dequantize_q4_k(const uint8_t* block, float* out) { dequantize_k4_k5(block, nullptr, block + 16, out); }
void dequantize_q5_k(const uint8_t* block, float* out) { dequantize_k4_k5(block, block + 16, block + 48, out); }

// Q6_K: ql[128], qh[64], int8 scales[16], d. Two halves of 128 weights; in half h, weight
// 32 i + l (i = 0..3, l = 0..31) takes the low 4 bits from ql[64 h + l + 32 (i % 2)]
// (low nibble for i < 2, high for i >= 2) and the high 2 bits from bits 2i, 2i + 1 of
// qh[32 h + l]; its scale is scales[8 h + 2 i + l / 16]. w = d scale (q - 32).
void dequantize_q6_k(const uint8_t* block, float* out) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = half_at(block + 208);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 4; ++i)
      for (int l = 0; l < 32; ++l) {
        const uint8_t low = ql[64 * h + l + 32 * (i % 2)];
        const int q = (i < 2 ? low & 0x0F : low >> 4) | (qh[32 * h + l] >> (2 * i) & 3) << 4;
        out[128 * h + 32 * i + l] = d * float(scales[8 * h + 2 * i + l / 16]) * float(q - 32);
      }
}

// Q2_K / Q3_K: 16 sub-blocks of 16 weights; 2-bit codes in qs[64], 4 per byte: in half h
// (128 weights), weight 32 i + l takes bits 2i, 2i + 1 of qs[32 h + l].
int k2_code(const uint8_t* qs, int e) {
  const int h = e / 128, i = e % 128 / 32, l = e % 32;
  return qs[32 * h + l] >> (2 * i) & 3;
}

// Q2_K: scales[16] (4-bit scale low, 4-bit min high), qs[64], d, dmin.
// w = d scale q - dmin min.
void dequantize_q2_k(const uint8_t* block, float* out) {
  const uint8_t* scales = block;
  const uint8_t* qs = block + 16;
  const float d = half_at(block + 80), dmin = half_at(block + 82);
  for (int e = 0; e < 256; ++e) {
    const uint8_t sc = scales[e / 16];
    out[e] = d * float(sc & 0x0F) * float(k2_code(qs, e)) - dmin * float(sc >> 4);
  }
}

// Q3_K: hmask[32], qs[64], scales[12], d. A third bit, bit e / 32 of hmask[e % 32], SET
// means no offset: q = code - (bit ? 0 : 4). 6-bit scales biased by 32, packed: scale s
// has its low nibble in byte s % 8 (low nibble for s < 8, high for s >= 8) and its high
// two bits in byte 8 + s % 4 at bits 2 (s / 4), 2 (s / 4) + 1. w = d (scale - 32) q.
void dequantize_q3_k(const uint8_t* block, float* out) {
  const uint8_t* hmask = block;
  const uint8_t* qs = block + 32;
  const uint8_t* packed = block + 96;
  const float d = half_at(block + 108);
  int scales[16];
  for (int s = 0; s < 16; ++s) {
    const int low = s < 8 ? packed[s] & 0x0F : packed[s - 8] >> 4;
    const int high = packed[8 + s % 4] >> (2 * (s / 4)) & 3;
    scales[s] = (low | high << 4) - 32;
  }
  for (int e = 0; e < 256; ++e) {
    const int q = k2_code(qs, e) - (hmask[e % 32] >> (e / 32) & 1 ? 0 : 4);
    out[e] = d * float(scales[e / 16]) * float(q);
  }
}

const std::map<uint32_t, GgmlType>& readable_types() {
  static const std::map<uint32_t, GgmlType> types = {
      {0, {"F32", 1, 4, true, nullptr}},
      {1, {"F16", 1, 2, true, nullptr}},
      {30, {"BF16", 1, 2, true, nullptr}},
      {2, {"Q4_0", 32, 18, false, dequantize_q4_0}},
      {3, {"Q4_1", 32, 20, false, dequantize_q4_1}},
      {6, {"Q5_0", 32, 22, false, dequantize_q5_0}},
      {7, {"Q5_1", 32, 24, false, dequantize_q5_1}},
      {8, {"Q8_0", 32, 34, false, dequantize_q8_0}},
      {10, {"Q2_K", 256, 84, false, dequantize_q2_k}},
      {11, {"Q3_K", 256, 110, false, dequantize_q3_k}},
      {12, {"Q4_K", 256, 144, false, dequantize_q4_k}},
      {13, {"Q5_K", 256, 176, false, dequantize_q5_k}},
      {14, {"Q6_K", 256, 210, false, dequantize_q6_k}},
  };
  return types;
}

}  // namespace

const GgmlType* ggml_type(uint32_t id) {
  const auto found = readable_types().find(id);
  return found == readable_types().end() ? nullptr : &found->second;
}

std::string ggml_readable_type_names() {
  std::string names;
  for (const auto& [id, type] : readable_types()) names += (names.empty() ? "" : ", ") + std::string(type.name);
  return names;
}

std::string ggml_type_name(uint32_t id) {
  static const std::map<uint32_t, const char*> names = {
      {0, "F32"}, {1, "F16"}, {2, "Q4_0"}, {3, "Q4_1"}, {6, "Q5_0"}, {7, "Q5_1"}, {8, "Q8_0"}, {9, "Q8_1"},
      {10, "Q2_K"}, {11, "Q3_K"}, {12, "Q4_K"}, {13, "Q5_K"}, {14, "Q6_K"}, {15, "Q8_K"}, {16, "IQ2_XXS"},
      {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"}, {22, "IQ2_S"},
      {23, "IQ4_XS"}, {24, "I8"}, {25, "I16"}, {26, "I32"}, {27, "I64"}, {28, "F64"}, {29, "IQ1_M"},
      {30, "BF16"}, {34, "TQ1_0"}, {35, "TQ2_0"}};
  const auto found = names.find(id);
  return found != names.end() ? found->second : "type " + std::to_string(id);
}

}  // namespace gemlite
