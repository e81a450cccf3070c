#include "models/ggml_blocks.h"

#include <cstring>
#include <map>

#include "runtime/dtype.h"

namespace gemlite {
namespace {

float block_scale(const uint8_t* block) {
  uint16_t bits;
  std::memcpy(&bits, block, 2);
  return half_to_float(bits);
}

void dequantize_q8_0(const uint8_t* block, float* out) {
  const float d = block_scale(block);
  for (int j = 0; j < 32; ++j) out[j] = d * float(int8_t(block[2 + j]));
}

void dequantize_q4_0(const uint8_t* block, float* out) {
  const float d = block_scale(block);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * float(int(block[2 + j] & 0x0F) - 8);
    out[16 + j] = d * float(int(block[2 + j] >> 4) - 8);
  }
}

}  // namespace

const GgmlType* ggml_type(uint32_t id) {
  static const std::map<uint32_t, GgmlType> types = {
      {0, {"F32", 1, 4, true, nullptr}},
      {1, {"F16", 1, 2, true, nullptr}},
      {30, {"BF16", 1, 2, true, nullptr}},
      {2, {"Q4_0", 32, 18, false, dequantize_q4_0}},
      {8, {"Q8_0", 32, 34, false, dequantize_q8_0}},
  };
  const auto found = types.find(id);
  return found == types.end() ? nullptr : &found->second;
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
