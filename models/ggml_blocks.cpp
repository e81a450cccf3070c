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

// ---- affine blocks: w = scale * q + offset per group of 32, unsigned codes q -----------
// Each fills codes [elements] and scale, offset [elements / 32]. The products and sums are
// exact in fp32 up to ggml's one rounding (d (q - 8) = d q - 8 d exactly for 4-bit codes
// and an 11-bit d), so the decoded floats equal ggml's, except that a zero weight of a
// negative d comes out +0 where ggml's d (q - 8) gives -0.

// Blocks of 32 hold nibble codes in 16 bytes: weight j < 16 is the low nibble of byte j,
// weight 16 + j its high nibble. Q5_0/Q5_1 add a fifth bit: bit j of the 32-bit qh.
void nibble_codes(const uint8_t* nibbles, uint8_t* codes) {
  for (int j = 0; j < 16; ++j) {
    codes[j] = nibbles[j] & 0x0F;
    codes[16 + j] = nibbles[j] >> 4;
  }
}
void add_fifth_bits(const uint8_t* qh, uint8_t* codes) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  for (int j = 0; j < 32; ++j) codes[j] |= uint8_t((bits >> j & 1u) << 4);
}

void groups_q4_0(const uint8_t* block, uint8_t* codes, float* scale, float* offset) {  // d, nibbles[16]
  nibble_codes(block + 2, codes);
  scale[0] = half_at(block);
  offset[0] = -8 * scale[0];  // w = d (q - 8)
}
void groups_q4_1(const uint8_t* block, uint8_t* codes, float* scale, float* offset) {  // d, m, nibbles[16]
  nibble_codes(block + 4, codes);
  scale[0] = half_at(block);
  offset[0] = half_at(block + 2);  // w = d q + m
}
void groups_q5_0(const uint8_t* block, uint8_t* codes, float* scale, float* offset) {  // d, qh[4], nibbles[16]
  nibble_codes(block + 6, codes);
  add_fifth_bits(block + 2, codes);
  scale[0] = half_at(block);
  offset[0] = -16 * scale[0];  // w = d (q - 16)
}
void groups_q5_1(const uint8_t* block, uint8_t* codes, float* scale, float* offset) {  // d, m, qh[4], nibbles[16]
  nibble_codes(block + 8, codes);
  add_fifth_bits(block + 4, codes);
  scale[0] = half_at(block);
  offset[0] = half_at(block + 2);
}
void groups_q8_0(const uint8_t* block, uint8_t* codes, float* scale, float* offset) {  // d, int8 q[32]
  for (int j = 0; j < 32; ++j) codes[j] = uint8_t(int(int8_t(block[2 + j])) + 128);
  scale[0] = half_at(block);
  offset[0] = -128 * scale[0];  // w = d (q + 128 - 128)
}

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
void groups_k4_k5(const uint8_t* block, const uint8_t* qh, const uint8_t* qs, uint8_t* codes, float* scale,
                  float* offset) {
  const float d = half_at(block), dmin = half_at(block + 2);
  for (int s = 0; s < 8; ++s) {
    int sub_scale, sub_min;
    k4_scale_min(block + 4, s, &sub_scale, &sub_min);
    scale[s] = d * float(sub_scale);
    offset[s] = -(dmin * float(sub_min));
    const uint8_t* bytes = qs + 32 * (s / 2);
    for (int l = 0; l < 32; ++l)
      codes[32 * s + l] = uint8_t((s % 2 ? bytes[l] >> 4 : bytes[l] & 0x0F) | (qh ? (qh[l] >> s & 1) << 4 : 0));
  }
}
void groups_q4_k(const uint8_t* block, uint8_t* codes, float* scale, float* offset) {
  groups_k4_k5(block, nullptr, block + 16, codes, scale, offset);
}
void groups_q5_k(const uint8_t* block, uint8_t* codes, float* scale, float* offset) {
  groups_k4_k5(block, block + 16, block + 48, codes, scale, offset);
}

template <AffineGroups Groups, int kElements>
void dequantize_affine(const uint8_t* block, float* out) {
  uint8_t codes[kElements];
  float scale[kElements / 32], offset[kElements / 32];
  Groups(block, codes, scale, offset);
  for (int e = 0; e < kElements; ++e) out[e] = scale[e / 32] * float(codes[e]) + offset[e / 32];
}

// ---- K-quants with sub-blocks of 16 (no qNg32 counterpart) -----------------------------

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
      {2, {"Q4_0", 32, 18, false, dequantize_affine<groups_q4_0, 32>, 4, groups_q4_0}},
      {3, {"Q4_1", 32, 20, false, dequantize_affine<groups_q4_1, 32>, 4, groups_q4_1}},
      {6, {"Q5_0", 32, 22, false, dequantize_affine<groups_q5_0, 32>, 5, groups_q5_0}},
      {7, {"Q5_1", 32, 24, false, dequantize_affine<groups_q5_1, 32>, 5, groups_q5_1}},
      {8, {"Q8_0", 32, 34, false, dequantize_affine<groups_q8_0, 32>, 8, groups_q8_0}},
      {10, {"Q2_K", 256, 84, false, dequantize_q2_k, 2}},
      {11, {"Q3_K", 256, 110, false, dequantize_q3_k, 3}},
      {12, {"Q4_K", 256, 144, false, dequantize_affine<groups_q4_k, 256>, 4, groups_q4_k}},
      {13, {"Q5_K", 256, 176, false, dequantize_affine<groups_q5_k, 256>, 5, groups_q5_k}},
      {14, {"Q6_K", 256, 210, false, dequantize_q6_k, 6}},
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
