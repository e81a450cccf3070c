// The GGUF import's block decoders (models/ggml_blocks.cpp) on random blocks, against a
// second reading of each layout written here the other way round: where the decoder maps
// an element to its bits, this walks the block in storage order and emits weights in
// sequence, and vice versa. Codes and packed scales are random bytes; the fp16 scales are
// random normal values (random bytes could be NaN). No llama.cpp-made K-quant file was
// available to test against; the layouts follow ggml's block structs (sizes checked here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "models/ggml_blocks.h"
#include "runtime/dtype.h"

namespace gemlite {
namespace {

using Block = std::vector<uint8_t>;

float half_at(const Block& b, size_t at) {
  uint16_t bits;
  std::memcpy(&bits, &b[at], 2);
  return half_to_float(bits);
}

// Random bytes, with the fp16 fields at `half_offsets` set to N(0, 0.05) values.
Block random_block(int bytes, const std::vector<size_t>& half_offsets, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  Block b(static_cast<size_t>(bytes));
  for (uint8_t& v : b) v = uint8_t(byte(rng));
  for (size_t at : half_offsets) {
    const uint16_t bits = float_to_half(normal(rng));
    std::memcpy(&b[at], &bits, 2);
  }
  return b;
}

// ---- the layouts walked in storage order ----------------------------------------------

// Blocks of 32: byte j of the nibbles holds weights j (low) and j + 16 (high); a fifth bit
// for weight i is bit i of the little-endian 32-bit qh.
std::vector<float> walk_q4_0(const Block& b) {
  std::vector<float> w(32);
  const float d = half_at(b, 0);
  for (int j = 0; j < 16; ++j) {
    w[size_t(j)] = d * float((b[2 + size_t(j)] & 15) - 8);
    w[size_t(j) + 16] = d * float((b[2 + size_t(j)] >> 4) - 8);
  }
  return w;
}
std::vector<float> walk_q8_0(const Block& b) {
  std::vector<float> w(32);
  for (int j = 0; j < 32; ++j) w[size_t(j)] = half_at(b, 0) * float(int8_t(b[2 + size_t(j)]));
  return w;
}
std::vector<float> walk_q4_1(const Block& b) {
  std::vector<float> w(32);
  const float d = half_at(b, 0), m = half_at(b, 2);
  for (int j = 0; j < 16; ++j) {
    w[size_t(j)] = float(b[4 + size_t(j)] & 15) * d + m;
    w[size_t(j) + 16] = float(b[4 + size_t(j)] >> 4) * d + m;
  }
  return w;
}
std::vector<float> walk_q5(const Block& b, bool with_min) {
  std::vector<float> w(32);
  const float d = half_at(b, 0), m = with_min ? half_at(b, 2) : 0.0f;
  const size_t qh_at = with_min ? 4 : 2, qs_at = qh_at + 4;
  const uint32_t qh = uint32_t(b[qh_at]) | uint32_t(b[qh_at + 1]) << 8 | uint32_t(b[qh_at + 2]) << 16 |
                      uint32_t(b[qh_at + 3]) << 24;
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[qs_at + size_t(j)] & 15) + ((qh >> j & 1u) ? 16 : 0);
    const int hi = (b[qs_at + size_t(j)] >> 4) + ((qh >> (j + 16) & 1u) ? 16 : 0);
    w[size_t(j)] = with_min ? float(lo) * d + m : float(lo - 16) * d;
    w[size_t(j) + 16] = with_min ? float(hi) * d + m : float(hi - 16) * d;
  }
  return w;
}

// Q4_K / Q5_K's eight 6-bit scales and mins, read byte by byte by role: bytes 0-3 give
// scales 0-3 (low 6 bits) and the top bits of scales 4-7; bytes 4-7 the same for mins;
// bytes 8-11 the low 4 bits of scale 4 + i (low nibble) and min 4 + i (high nibble).
void k4_scales_mins(const Block& b, size_t at, int (&scale)[8], int (&min)[8]) {
  for (int i = 0; i < 4; ++i) {
    const uint8_t s_byte = b[at + size_t(i)], m_byte = b[at + 4 + size_t(i)], low = b[at + 8 + size_t(i)];
    scale[i] = s_byte & 0x3F;
    min[i] = m_byte & 0x3F;
    scale[4 + i] = (low & 0x0F) | (s_byte >> 6) << 4;
    min[4 + i] = (low >> 4) | (m_byte >> 6) << 4;
  }
}
int bits_of(const Block& b, size_t byte, int first, int count) { return b[byte] >> first & ((1 << count) - 1); }
// Element e of the super-block: sub-block s = e / 32; byte 32 (s / 2) + e % 32 of qs,
// its low nibble for even s; Q5_K's fifth bit is bit s of qh[e % 32].
std::vector<float> element_q45_k(const Block& b, bool five) {
  std::vector<float> w(256);
  const float d = half_at(b, 0), dmin = half_at(b, 2);
  const size_t qs_at = five ? 48 : 16;
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    int scales[8], mins[8];
    k4_scales_mins(b, 4, scales, mins);
    const int scale = scales[s], min = mins[s];
    const uint8_t byte = b[qs_at + size_t(32 * (s / 2) + e % 32)];
    int q = s % 2 == 0 ? byte & 15 : byte >> 4;
    if (five) q += 16 * bits_of(b, 16 + size_t(e % 32), s, 1);
    w[size_t(e)] = d * float(scale) * float(q) - dmin * float(min);
  }
  return w;
}

// Q6_K in storage order: for each half (ql 64 bytes, qh 32, 8 scales), byte l of ql's
// first 32 gives weights l (low nibble) and l + 64 (high), of its second 32 weights
// l + 32 and l + 96; qh[l] bits 0-1, 2-3, 4-5, 6-7 top weights l, l + 32, l + 64, l + 96.
std::vector<float> walk_q6_k(const Block& b) {
  std::vector<float> w(256);
  const float d = half_at(b, 208);
  for (int half = 0; half < 2; ++half) {
    const size_t ql = size_t(64 * half), qh = 128 + size_t(32 * half), sc = 192 + size_t(8 * half);
    for (int l = 0; l < 32; ++l) {
      const int top = b[qh + size_t(l)];
      const int q[4] = {(b[ql + size_t(l)] & 15) | (top & 3) << 4, (b[ql + 32 + size_t(l)] & 15) | (top >> 2 & 3) << 4,
                        (b[ql + size_t(l)] >> 4) | (top >> 4 & 3) << 4, (b[ql + 32 + size_t(l)] >> 4) | (top >> 6 & 3) << 4};
      for (int i = 0; i < 4; ++i) {
        const int8_t scale = int8_t(b[sc + size_t(2 * i + l / 16)]);
        w[size_t(128 * half + 32 * i + l)] = d * float(scale) * float(q[i] - 32);
      }
    }
  }
  return w;
}

// Q2_K / Q3_K in storage order: for each half of qs (32 bytes), shift 0, 2, 4, 6 gives
// 32 weights: 16 from bytes 0-15 then 16 from bytes 16-31, each run of 16 with the next
// scale in sequence.
std::vector<float> walk_q2_k(const Block& b) {
  std::vector<float> w;
  const float d = half_at(b, 80), dmin = half_at(b, 82);
  int scale_index = 0;
  for (int half = 0; half < 2; ++half)
    for (int shift = 0; shift < 8; shift += 2)
      for (int run = 0; run < 2; ++run) {
        const uint8_t sc = b[size_t(scale_index++)];
        for (int l = 0; l < 16; ++l) {
          const int code = b[16 + size_t(32 * half + 16 * run + l)] >> shift & 3;
          w.push_back(d * float(sc & 15) * float(code) - dmin * float(sc >> 4));
        }
      }
  return w;
}
// Q3_K's 16 scales read as ggml stores them: three little-endian 32-bit words A, B, C (the
// 12 bytes); scales 0-3 are the low nibbles of A's bytes, 4-7 of B's, 8-11 A's high
// nibbles, 12-15 B's; each gets two high bits from C: bits 0-1 of C's bytes for scales
// 0-3, bits 2-3 for 4-7, 4-5 for 8-11, 6-7 for 12-15. Minus 32.
std::vector<int> q3_k_scales(const Block& b) {
  uint32_t word[3];
  std::memcpy(word, &b[96], 12);
  const uint32_t nibbles = 0x0F0F0F0Fu, pairs = 0x03030303u;
  const uint32_t unpacked[4] = {(word[0] & nibbles) | (word[2] & pairs) << 4,
                                (word[1] & nibbles) | (word[2] >> 2 & pairs) << 4,
                                (word[0] >> 4 & nibbles) | (word[2] >> 4 & pairs) << 4,
                                (word[1] >> 4 & nibbles) | (word[2] >> 6 & pairs) << 4};
  std::vector<int> scales(16);
  for (int s = 0; s < 16; ++s) scales[size_t(s)] = int(unpacked[s / 4] >> (8 * (s % 4)) & 0xFF) - 32;
  return scales;
}
std::vector<float> walk_q3_k(const Block& b) {
  std::vector<float> w;
  const float d = half_at(b, 108);
  const std::vector<int> scales = q3_k_scales(b);
  int scale_index = 0, mask_bit = 0;
  for (int half = 0; half < 2; ++half)
    for (int shift = 0; shift < 8; shift += 2, ++mask_bit)
      for (int run = 0; run < 2; ++run) {
        const int scale = scales[size_t(scale_index++)];
        for (int l = 0; l < 16; ++l) {
          const int i = 16 * run + l;
          const int code = b[32 + size_t(32 * half + i)] >> shift & 3;
          const bool high = b[size_t(i)] >> mask_bit & 1;
          w.push_back(d * float(scale) * float(code - (high ? 0 : 4)));
        }
      }
  return w;
}

struct Case {
  uint32_t id;
  const char* name;
  int elements, bytes;
  std::vector<size_t> halves;
  std::vector<float> (*reference)(const Block&);
};

TEST(GgmlBlocks, EveryReadableTypeDecodesAsItsLayout) {
  std::mt19937 rng(31);
  const Case cases[] = {
      {8, "Q8_0", 32, 34, {0}, walk_q8_0},
      {2, "Q4_0", 32, 18, {0}, walk_q4_0},
      {3, "Q4_1", 32, 20, {0, 2}, walk_q4_1},
      {6, "Q5_0", 32, 22, {0}, [](const Block& b) { return walk_q5(b, false); }},
      {7, "Q5_1", 32, 24, {0, 2}, [](const Block& b) { return walk_q5(b, true); }},
      {10, "Q2_K", 256, 84, {80, 82}, walk_q2_k},
      {11, "Q3_K", 256, 110, {108}, walk_q3_k},
      {12, "Q4_K", 256, 144, {0, 2}, [](const Block& b) { return element_q45_k(b, false); }},
      {13, "Q5_K", 256, 176, {0, 2}, [](const Block& b) { return element_q45_k(b, true); }},
      {14, "Q6_K", 256, 210, {208}, walk_q6_k},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const GgmlType* type = ggml_type(c.id);
    ASSERT_NE(type, nullptr);
    EXPECT_EQ(std::string(type->name), c.name);
    EXPECT_EQ(type->block_elements, c.elements);
    EXPECT_EQ(type->block_bytes, c.bytes);
    ASSERT_FALSE(type->plain);
    for (int trial = 0; trial < 50; ++trial) {
      const Block block = random_block(c.bytes, c.halves, rng);
      const std::vector<float> want = c.reference(block);
      ASSERT_EQ(want.size(), size_t(c.elements));
      std::vector<float> got(static_cast<size_t>(c.elements), NAN);
      type->dequantize_block(block.data(), got.data());
      // Equal (== also takes -0 for +0, which a negative d's zero weights give ggml): both
      // compute ggml's products and sums, exact in fp32 up to the same final rounding.
      for (int e = 0; e < c.elements; ++e)
        ASSERT_EQ(got[size_t(e)], want[size_t(e)]) << "element " << e << " of trial " << trial;
    }
  }
}

TEST(GgmlBlocks, CodebookTypesAreNotReadAndAreNamed) {
  for (uint32_t id : {16u, 17u, 23u, 9u, 15u}) EXPECT_EQ(ggml_type(id), nullptr) << ggml_type_name(id);
  EXPECT_EQ(ggml_type_name(17), "IQ2_XS");
  EXPECT_EQ(ggml_type_name(99), "type 99");
  EXPECT_NE(ggml_readable_type_names().find("Q6_K"), std::string::npos);
}

}  // namespace
}  // namespace gemlite
