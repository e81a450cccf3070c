#pragma once
// qNg32 weights packed from a GGUF's own codes. Q4_0/Q4_1/Q4_K, Q5_0/Q5_1/Q5_K and Q8_0
// store w = scale * q + offset per group of 32 consecutive weights with unsigned codes
// (ggml_blocks.h), which is a qN weight with group 32: codes q, scale s = scale, zero
// z = -offset / s. Packing those codes keeps the file's quantization instead of rounding
// its already-rounded weights a second time onto gemlite's own grid; what changes is only
// the fp16 rounding of s and z (a group whose scale is 0 holds one value: codes 0, s = 1,
// z = -offset).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/packed_weight.h"
#include "models/source_model.h"

namespace gemlite {

// The qNg32 weight of `source`'s codes, or nullopt when `format` is not qN with group 32
// and the blocks' bits, or when a scale or zero does not fit fp16 (the caller then
// quantizes the decoded floats as for any source).
std::optional<PackedWeight> pack_qn_from_ggml_codes(const BlockSource& source, const WeightFormat& format);

// For each linear module of `source` stored in ggml blocks, the gemlite format nearest its
// type, as (module, format) overrides (gemlite-quantize's FORMAT `gguf`): Q4_0/Q4_1/Q4_K ->
// q4g32, Q5_0/Q5_1/Q5_K -> q5g32, Q8_0 -> q8g32 (the file's codes, packed as they are);
// Q2_K / Q3_K / Q6_K -> q2g32 / q3g32 / q6g32 (sub-blocks of 16: quantized again at the
// same bits). A Q4_K_M file thus keeps its mix of 4- and 6-bit tensors.
std::vector<std::pair<std::string, WeightFormat>> formats_nearest_ggml_blocks(const SourceModel& source);

}  // namespace gemlite
