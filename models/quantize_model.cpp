#include "models/quantize_model.h"

#include <cmath>
#include <optional>

#include "models/llama_weights.h"
#include "models/pack_ggml_codes.h"
#include "runtime/error.h"

namespace gemlite {
namespace {

// F32 values of `t`: its own (no copy) when it holds F32, else converted into `storage`.
const float* as_floats(const HostTensor& t, std::vector<float>& storage) {
  if (t.dtype == DType::F32) return t.as<float>();
  storage = t.to_float();
  return storage.data();
}

// `name` (the source tensor) names a value that is not finite or, for F16, beyond its range.
HostTensor to_dense(const HostTensor& source, DType dtype, const std::string& name) {
  std::vector<float> storage;
  const float* values = as_floats(source, storage);
  HostTensor out = HostTensor::zeros(dtype, source.shape);
  const float limit = dtype == DType::F16 ? kHalfMax : INFINITY;
  for (int64_t i = 0; i < source.numel(); ++i) {
    if (!(std::abs(values[i]) <= limit))
      throw Error("tensor '" + name + "': value " + std::to_string(values[i]) + " at " + std::to_string(i) +
                  (std::isfinite(values[i]) ? " does not fit " + std::string(dtype_name(dtype)) : " is not finite"));
    switch (dtype) {
      case DType::F32: out.mutable_as<float>()[i] = values[i]; break;
      case DType::F16: out.mutable_as<uint16_t>()[i] = float_to_half(values[i]); break;
      case DType::BF16: out.mutable_as<uint16_t>()[i] = float_to_bf16(values[i]); break;
      default: throw Error("embedding type must be F32, F16 or BF16");
    }
  }
  return out;
}

}  // namespace

std::pair<std::string, WeightFormat> parse_override(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error("--override '" + text + "': expected PATTERN=FORMAT, e.g. lm_head=q8");
  return {text.substr(0, eq), WeightFormat::parse(text.substr(eq + 1))};
}

namespace {

// "mlp.down_proj" matches "model.layers.3.mlp.down_proj": whole dotted parts only.
bool pattern_matches(const std::string& pattern, const std::string& module) {
  return ("." + module + ".").find("." + pattern + ".") != std::string::npos;
}

}  // namespace

WeightFormat format_for_module(const QuantizeSpec& spec, const std::string& module) {
  WeightFormat format = spec.format;
  for (const auto& [pattern, override_format] : spec.overrides)
    if (pattern_matches(pattern, module)) format = override_format;
  return format;
}

void check_overrides_match(const QuantizeSpec& spec, const ModelConfig& config) {
  const std::vector<std::string> modules = linear_module_names(config.n_layers);
  for (const auto& [pattern, format] : spec.overrides) {  // a typo must not pass silently
    bool matched = false;
    for (const auto& module : modules) matched |= pattern_matches(pattern, module);
    if (!matched) throw Error("--override '" + pattern + "=" + format.name() + "' matches no module of this model");
  }
}

PackedCheckpoint quantize_model(const SourceModel& source, const QuantizeSpec& spec,
                                const QuantizeProgress& progress) {
  const ModelConfig& c = source.config;
  check_source_tensors(source, "source model");
  check_overrides_match(spec, c);
  const std::vector<std::string> modules = linear_module_names(c.n_layers);
  PackedCheckpoint ckpt;
  ckpt.config = c;
  ckpt.default_format = spec.format.name();
  ckpt.chat_template = spec.chat_template;
  ckpt.tokenizer_path = source.tokenizer_path;
  ckpt.rstrip_token_ids = source.rstrip_token_ids;
  ckpt.embedding = to_dense(source.tensor(kEmbeddingName), embedding_dtype_for(spec.format), kEmbeddingName);
  ckpt.final_norm = to_dense(source.tensor(kFinalNormName), DType::F32, kFinalNormName);

  int done = 0;
  auto quantize = [&](const std::string& module) {
    const std::string name = source_weight_name(module, c.tied_embeddings);
    const WeightFormat format = format_for_module(spec, module);
    // A GGUF's affine blocks become a qNg32 weight code for code (models/pack_ggml_codes.h).
    const auto blocks = source.block_sources.find(name);
    std::optional<PackedWeight> from_codes =
        blocks == source.block_sources.end() ? std::nullopt : pack_qn_from_ggml_codes(blocks->second, format);
    const PackedFrom how = from_codes ? PackedFrom::SourceCodes : PackedFrom::Floats;
    PackedWeight w;
    if (from_codes) {
      w = std::move(*from_codes);
    } else {
      const HostTensor matrix = source.tensor(name);  // a GGUF's blocks decoded here, one at a time
      std::vector<float> storage;
      try {
        w = quantize_weight(as_floats(matrix, storage), matrix.shape[0], matrix.shape[1], format);  // [N, K]
      } catch (const Error& e) {  // e.g. a NaN weight: say which tensor
        throw Error("tensor '" + name + "': " + e.what());
      }
    }
    if (source.has(module + ".bias"))
      w.parts["bias"] = to_dense(source.tensor(module + ".bias"), DType::F32, module + ".bias");
    if (progress) progress(++done, int(modules.size()), module, how);
    return w;
  };

  for (int i = 0; i < c.n_layers; ++i) {
    const LayerTensorNames names = layer_tensor_names(i);
    PackedLayer layer;
    layer.attn_norm = to_dense(source.tensor(names.attn_norm), DType::F32, names.attn_norm);
    layer.ffn_norm = to_dense(source.tensor(names.ffn_norm), DType::F32, names.ffn_norm);
    const std::vector<std::string> modules_of_layer = names.linears();
    const std::vector<PackedWeight*> slots = layer.linear_slots();
    for (size_t j = 0; j < slots.size(); ++j) *slots[j] = quantize(modules_of_layer[j]);
    ckpt.layers.push_back(std::move(layer));
  }

  // A tied classifier whose format is the embedding's own type is stored once.
  const WeightFormat head_format = format_for_module(spec, kLmHeadModule);
  if (c.tied_embeddings && head_format.kind == FormatKind::Dense &&
      head_format.dense_dtype == ckpt.embedding.dtype) {
    ckpt.lm_head_tied = true;
    ckpt.lm_head = tied_lm_head(ckpt.embedding);
    if (progress) progress(++done, int(modules.size()), kLmHeadModule, PackedFrom::Tied);
  } else {
    ckpt.lm_head = quantize(kLmHeadModule);
  }
  return ckpt;
}

}  // namespace gemlite
