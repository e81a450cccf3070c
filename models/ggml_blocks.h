#pragma once
// The ggml tensor types a GGUF import reads: plain F32/F16/BF16, the blocks of 32 (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0: an fp16 scale, maybe an fp16 offset, then 4-, 5- or 8-bit codes)
// and the K-quants (Q2_K .. Q6_K: super-blocks of 256 weights in sub-blocks of 16 or 32
// with their own quantized scales, as llama.cpp's Q4_K_M and friends are made of). The
// layouts are described beside each decoder in ggml_blocks.cpp. A quantized GGUF's blocks
// stay in the mapped file (BlockSource) and are decoded to F32 one matrix at a time; unless
// its codes can be packed as they are (AffineGroups below, models/pack_ggml_codes.h),
// gemlite-quantize quantizes them again, which compounds two roundings: convert the f16
// source where there is one. IQ types (codebooks) are not read.
#include <cstdint>
#include <string>

namespace gemlite {

// Blocks whose weights are w = scale * q + offset per group of 32 consecutive weights,
// with unsigned codes q: codes [block_elements], scale and offset [block_elements / 32].
// That is what a qNg32 weight stores, so the quantizer packs such tensors from the file's
// own codes instead of quantizing twice (models/quantize_model.cpp).
using AffineGroups = void (*)(const uint8_t* block, uint8_t* codes, float* scale, float* offset);

struct GgmlType {
  const char* name;
  int block_elements;  // weights per block along the innermost dimension
  int block_bytes;
  bool plain;          // F32/F16/BF16: read as they are; else dequantize_block
  void (*dequantize_block)(const uint8_t* block, float* out);  // out [block_elements]
  int code_bits = 0;                     // bits of a block type's codes (0 for F32/F16/BF16)
  AffineGroups affine_groups = nullptr;  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K
};

// The type with ggml id `id`, or nullptr when the import cannot read it.
const GgmlType* ggml_type(uint32_t id);
// "Q4_K", "IQ2_XS", ... or "type N": for the error about a type it cannot read.
std::string ggml_type_name(uint32_t id);
// "F32, F16, Q4_0, ...": the types ggml_type knows, for that error.
std::string ggml_readable_type_names();

}  // namespace gemlite
