#include "models/pack_ggml_codes.h"

#include <cmath>
#include <vector>

#include "kernels/qn/qn_format.h"
#include "models/ggml_blocks.h"
#include "models/llama_weights.h"
#include "runtime/dtype.h"

namespace gemlite {

std::optional<PackedWeight> pack_qn_from_ggml_codes(const BlockSource& source, const WeightFormat& format) {
  const GgmlType* type = ggml_type(source.type_id);
  if (!type || !type->affine_groups || format.kind != FormatKind::QN || format.group != 32 ||
      format.bits != type->code_bits || source.blocks.shape.size() != 2)
    return std::nullopt;
  const int64_t N = source.blocks.shape[0], row_bytes = source.blocks.shape[1];
  const int64_t blocks_per_row = row_bytes / type->block_bytes, K = blocks_per_row * type->block_elements;
  const int64_t n_groups = K / 32, Kw = qn_words_per_row(K, format.bits);
  PackedWeight packed = allocate_packed_weight(format, N, K);
  int32_t* qweight = packed.parts.at("qweight").mutable_as<int32_t>();  // [N, Kw]
  uint16_t* scales = packed.parts.at("scales").mutable_as<uint16_t>();  // [N, n_groups]
  uint16_t* zeros = packed.parts.at("zeros").mutable_as<uint16_t>();    // [N, n_groups]
  std::vector<uint8_t> codes(static_cast<size_t>(K));                    // one row's
  std::vector<float> scale(static_cast<size_t>(n_groups)), offset(static_cast<size_t>(n_groups));
  const int groups_per_block = type->block_elements / 32;
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* row = source.blocks.data + n * row_bytes;
    for (int64_t b = 0; b < blocks_per_row; ++b)
      type->affine_groups(row + b * type->block_bytes, &codes[size_t(b * type->block_elements)],
                          &scale[size_t(b * groups_per_block)], &offset[size_t(b * groups_per_block)]);
    for (int64_t g = 0; g < n_groups; ++g) {
      uint16_t s = float_to_half(scale[size_t(g)]);
      if (half_to_float(s) == 0.0f) {  // every weight of the group is `offset`
        s = float_to_half(1.0f);
        for (int i = 0; i < 32; ++i) codes[size_t(g * 32 + i)] = 0;
      }
      const uint16_t z = float_to_half(-offset[size_t(g)] / half_to_float(s));
      if (!std::isfinite(half_to_float(s)) || !std::isfinite(half_to_float(z))) return std::nullopt;
      scales[n * n_groups + g] = s;
      zeros[n * n_groups + g] = z;
    }
    qn_pack_row(codes.data(), K, format.bits, qweight + n * Kw);
  }
  return packed;
}

std::vector<std::pair<std::string, WeightFormat>> formats_nearest_ggml_blocks(const SourceModel& source) {
  std::vector<std::pair<std::string, WeightFormat>> formats;
  for (const std::string& module : linear_module_names(source.config.n_layers)) {
    const std::string name = source_weight_name(module, source.config.tied_embeddings);
    const auto blocks = source.block_sources.find(name);
    if (blocks == source.block_sources.end()) continue;
    const int bits = ggml_type(blocks->second.type_id)->code_bits;
    formats.emplace_back(module, WeightFormat::parse("q" + std::to_string(bits) + "g32"));
  }
  return formats;
}

}  // namespace gemlite
