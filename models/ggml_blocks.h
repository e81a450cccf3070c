#pragma once
// The ggml tensor types a GGUF import reads: plain F32/F16/BF16, and the two simplest
// block-quantized ones, which llama.cpp users often hold their models in:
//   Q8_0: blocks of 32 weights = fp16 scale d, 32 int8 q;        w = d * q
//   Q4_0: blocks of 32 weights = fp16 scale d, 16 bytes of nibbles; weight j < 16 is the
//         low nibble of byte j, weight 16 + j its high nibble;      w = d * (q - 8)
// A quantized GGUF is dequantized to F32 on import and quantized again by gemlite-quantize:
// from Q8_0 to q8 that loses little (README's KL table); from Q4_0 it compounds two
// roundings, so convert the f16 source where there is one.
#include <cstdint>
#include <string>

namespace gemlite {

struct GgmlType {
  const char* name;
  int block_elements;  // weights per block along the innermost dimension
  int block_bytes;
  bool plain;          // F32/F16/BF16: read as they are; else dequantize_block
  void (*dequantize_block)(const uint8_t* block, float* out);  // out [block_elements]
};

// The type with ggml id `id`, or nullptr when the import cannot read it.
const GgmlType* ggml_type(uint32_t id);
// "Q4_K", "IQ2_XS", ... or "type N": for the error about a type it cannot read.
std::string ggml_type_name(uint32_t id);

}  // namespace gemlite
